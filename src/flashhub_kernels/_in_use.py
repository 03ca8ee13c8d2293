"""Which cache entries running processes use, so that ``flashhub cache clear`` and
``prune`` leave them alone.

A process that imports a kernel from the cache holds a shared ``flock`` on the entry's
directory until it exits (the kernel drops it however the process ends; a forked child
shares it). The directory is opened read-only, so this works on a read-only cache, and
costs one ``open`` and one ``flock``. Before removing an entry, clear and prune try an
exclusive lock on it without waiting; while any process holds a shared one, they leave
the entry alone, unless told to force it.

Advisory and best effort: where ``fcntl`` is missing (Windows) or the file system
refuses ``flock`` on a directory, nothing is held and nothing is protected.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # Windows: no flock
    fcntl = None  # type: ignore[assignment]

TYPE_CHECKING = False  # not typing's: this module is on the warm import path
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

_held: dict[str, int] = {}  # entry directory -> the descriptor holding its shared lock


def mark_in_use(entry: Path) -> bool:
    """Hold a shared lock on ``entry`` for the rest of this process.

    ``False`` when the entry was moved away before the lock was taken (``flashhub cache
    clear`` was removing it): look it up again. An entry that cannot be locked is
    ``True``: it loads, unprotected.
    """
    if fcntl is None:
        return True
    key = str(entry)
    held = _held.get(key)
    if held is not None:
        if _is_at(held, entry):
            return True
        os.close(_held.pop(key))  # removed and cached again since: lock the new one
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while clear or prune moves it aside
    except OSError:
        os.close(fd)
        return True
    if not _is_at(fd, entry):
        os.close(fd)
        return False
    _held[key] = fd
    return True


@contextmanager
def unused(entry: Path) -> Iterator[bool]:
    """Hold ``entry`` exclusively for the block if no process uses it (this one
    included); yield whether it could. An entry that is gone, or that this file system
    cannot lock, counts as unused: no process could have marked it either."""
    if fcntl is None:
        yield True
        return
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield True
        return
    try:
        free = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            free = False
        except OSError:
            pass
        yield free
    finally:
        os.close(fd)


def _is_at(fd: int, entry: Path) -> bool:
    """Whether the directory open as ``fd`` is still the one at ``entry``."""
    try:
        current = os.stat(entry)
    except OSError:
        return False
    held = os.fstat(fd)
    return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)
