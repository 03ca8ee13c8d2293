"""Entries in use: the shared ``flock`` a process holds on each cache entry it imported.

A process that imports a kernel from the cache holds a shared ``flock`` on the entry's
directory until it exits (the kernel drops it however the process ends; a forked child
shares it). The directory is opened read-only, so this works on a read-only cache, and
costs one ``open`` and one ``flock``. Before removing an entry, ``flashhub cache clear``
and ``prune`` try an exclusive lock on it without waiting (see ``.admin``), and leave it
alone while any process holds a shared one, unless told to force it. Advisory and best
effort: where ``fcntl`` is missing (Windows) or the file system refuses ``flock`` on a
directory, nothing is held and nothing is protected.
"""

from __future__ import annotations

import os

try:
    import fcntl
except ImportError:  # Windows: no flock, so entries in use are not marked
    fcntl = None  # type: ignore[assignment]

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
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
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while clear or prune removes it
    except OSError:
        os.close(fd)
        return True
    if not _is_at(fd, entry):
        os.close(fd)
        return False
    _held[key] = fd
    return True


def _is_at(fd: int, entry: Path) -> bool:
    """Whether the directory open as ``fd`` is still the one at ``entry``."""
    try:
        current = os.stat(entry)
    except OSError:
        return False
    held = os.fstat(fd)
    return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)
