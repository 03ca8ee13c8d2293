"""The user's code that called into the library: for warnings and for finding its lock.

A warning raised deep in the library should point at the line that caused it (a
``get_kernel(...)`` call, an ``import flashhub...`` statement), and a locked layer
declared in a package should find that package's lock file. Both walk the stack out
of the library and the import machinery.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

# Frames of these packages lie between the library's code and the user's line: the
# library itself, the import system (importlib and its frozen bootstrap), and the
# context managers the library works in.
_LIBRARY_PACKAGES = frozenset({"flashhub", "flashhub_kernels", "importlib", "contextlib"})


def caller_frame() -> FrameType | None:
    """The innermost frame outside this library and the import machinery, if any."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and _top_package(frame) in _LIBRARY_PACKAGES:
        frame = frame.f_back
    return frame


def caller_module() -> str | None:
    """The module of the nearest caller outside the library: ``"__main__"`` for a script
    (its lock is looked for in the working directory only).
    """
    frame = caller_frame()
    if frame is None:
        return None
    return str(frame.f_globals.get("__name__", "")) or "__main__"


def warn_at_caller(message: str | Warning, category: type[Warning] = UserWarning) -> None:
    """Warn, pointing at the line that called into the library, wherever in the library
    the warning is raised.

    ``message`` may be the warning itself (``category`` is then its class).

    Never raises: a warning must not fail the load it is about. When the warning filters
    turn it into an error (``python -W error``), or the warnings machinery fails, the
    message goes to the ``flashhub_kernels`` logger instead.
    """
    if isinstance(message, Warning):
        category = type(message)
    caller = caller_frame()
    try:
        if caller is None:
            warnings.warn(message, category, stacklevel=2)
            return
        # warn_explicit, not a stacklevel: the frames between here and the caller differ
        # by path (import hook, get_kernel, the CLI), and a stacklevel silently skips the
        # import system's bootstrap frames, so a count from this walk would land
        # elsewhere. No module_globals: for `python -c`, stdin and the REPL, __main__'s
        # loader is BuiltinImporter, which warn_explicit would ask for the source and
        # fail; linecache reads a real file's line by its name anyway.
        module_globals = caller.f_globals
        warnings.warn_explicit(
            message,
            category,
            caller.f_code.co_filename,
            caller.f_lineno,
            module=module_globals.get("__name__", "<string>"),
            registry=module_globals.setdefault("__warningregistry__", {}),
        )
    except Exception:
        from .logs import logger

        logger.warning("%s: %s", category.__name__, message)


def _top_package(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "")).partition(".")[0]
