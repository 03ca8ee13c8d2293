"""The library's logger, whose records never fail the work they tell of."""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    _Adapter = logging.LoggerAdapter[logging.Logger]
else:  # not subscriptable at run time before Python 3.11
    _Adapter = logging.LoggerAdapter


class _NeverRaising(_Adapter):
    """The ``flashhub_kernels`` logger, as whoever configures logging set it up, except
    that a handler or filter that raises loses the record, not the load it is about."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if not self.isEnabledFor(level):
            return
        # One frame more than the logger expects between the record and its caller: the
        # record names the library's line that logged, not this one.
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        # A handler should deal with its own errors (logging's own do, through
        # Handler.handleError); one that does not would otherwise end a download, an
        # import or a kernelize call midway.
        with contextlib.suppress(Exception):
            self.logger.log(level, msg, *args, **kwargs)


logger = _NeverRaising(logging.getLogger("flashhub_kernels"))
