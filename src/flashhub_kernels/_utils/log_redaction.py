"""urllib3's log lines about this library's requests, with the query values they quote
hidden.

A signed URL, which a CDN's redirect may lead to, carries its credential in its query,
and urllib3 quotes a request's path and query on its loggers: at ``WARNING`` when it
retries a broken connection (``Retrying (...) after connection broken by ...:
/obj?X-Amz-Signature=...``), which a program's ``logging.basicConfig()`` shows. The
lines of the program's own requests, sent from other code, are left as they are.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from .urls import redact_queries, redact_text

# The loggers of urllib3 that quote a request's URL. Each gets the filter itself: a
# record logged to a logger goes through that logger's filters, not its parents'.
_LOGGERS = ("urllib3.connectionpool", "urllib3.poolmanager", "urllib3.util.retry")

# True in the thread (or task) that sends one of this library's requests, while it does.
sending_request: ContextVar[bool] = ContextVar("flashhub_sending_request", default=False)


class _HideQueries(logging.Filter):
    """Hides the query values and credentials a line about this library's request quotes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if sending_request.get():
            record.msg = redact_queries(redact_text(record.getMessage()))
            record.args = ()
        return True


_FILTER = _HideQueries()


def hide_queries_in_urllib3_logs() -> None:
    """Add the filter to urllib3's loggers, once per process."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
