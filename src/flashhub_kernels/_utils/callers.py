"""The user's code that called into the library: for warnings and for finding its lock.

A warning raised deep in the library should point at the line that caused it (a
``get_kernel(...)`` call, an ``import flashhub...`` statement), and a locked layer
declared in a package should find that package's lock file. Both walk the stack out
of the library and the standard library (the import machinery, a thread pool's worker).
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

# Frames of these packages lie between the library's code and the user's line: the
# library itself, and the standard library (the import system and its frozen bootstrap,
# the context managers the library works in, and the thread or pool worker that calls a
# function handed to it).
_LIBRARY_PACKAGES = frozenset({"flashhub", "flashhub_kernels"})
_NOT_USERS = _LIBRARY_PACKAGES | sys.stdlib_module_names


def caller_frame() -> FrameType | None:
    """The innermost frame of the user's code: outside this library and the standard
    library, if any."""
    return _innermost_outside(_NOT_USERS, sys._getframe(1))


def caller_module() -> str | None:
    """The module of the nearest caller outside the library and the standard library:
    ``"__main__"`` for a script, ``None`` when no such code is on the stack (the library
    was handed to a thread or a pool as the function to run).
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
    # Where only the standard library called (a thread's target, a pool's task), its
    # line: the library's own would say less.
    caller = caller_frame() or _innermost_outside(_LIBRARY_PACKAGES, sys._getframe(1))
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


def _innermost_outside(packages: frozenset[str], frame: FrameType | None) -> FrameType | None:
    """The innermost frame from ``frame`` out whose module is in none of ``packages``."""
    while frame is not None and _top_package(frame) in packages:
        frame = frame.f_back
    return frame


def _top_package(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", "")).partition(".")[0]
