"""``flashhub -v``: the library's log on stderr, written around the progress bars."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TextIO

from .._network.progress import write_beside_bars
from .._utils.urls import redact_queries, redact_text

if TYPE_CHECKING:
    _StreamHandler = logging.StreamHandler[TextIO]
else:  # a generic class at run time only from Python 3.11 on
    _StreamHandler = logging.StreamHandler


class _BesideBars(_StreamHandler):
    """A stream handler whose lines start on a line of their own, below any bar, with
    the credentials of the URLs they quote hidden."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # urllib3's lines at -vv quote the path and query of each request.
            line = redact_queries(redact_text(self.format(record)))
            write_beside_bars(line, self.stream)
        except Exception:
            self.handleError(record)


@contextmanager
def logging_to_stderr(verbosity: int) -> Iterator[None]:
    """Show the library's log (silent by default) on stderr for ``-v`` / ``-vv``, and
    only there: a program that runs the command in its own process gets its loggers'
    levels back, and its own handlers see none of the command's lines."""
    handler = _BesideBars()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    loggers = [logging.getLogger("flashhub_kernels")]
    if verbosity > 1:
        loggers.append(logging.getLogger("urllib3"))  # connections, retries
    were = [(logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, (level, propagate) in zip(loggers, were, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate
