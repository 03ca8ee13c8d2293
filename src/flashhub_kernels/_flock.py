"""Exclusive advisory locks on files, held for a ``with`` block, between processes.

The cache needs one thing from a lock: while one process (or thread) downloads an entry,
the others wait, then find it done. ``fcntl.flock`` gives exactly that, and the kernel
drops the lock when its holder dies, so a killed download never leaves a stale lock.
The ``filelock`` package wraps the same call, but importing it costs about 9 ms (it
imports asyncio), a tenth of a cold load of a kernel of 200 small files.

``flock`` locks belong to an open file description, not to a process: every
:class:`FileLock` opens the file anew, so two threads of one process exclude each other
too. On Windows the first byte of the file is locked with ``msvcrt.locking``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import TracebackType

if sys.platform == "win32":
    import msvcrt

    def _acquire(fd: int) -> None:
        while True:  # LK_LOCK gives up after 10 s; waiting for a download must not
            try:
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                return
            except OSError:
                time.sleep(0.05)

    def _release(fd: int) -> None:
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _acquire(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX)

    def _release(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


class FileLock:
    """An exclusive lock on ``path`` (created ``mode`` if missing) for a ``with`` block.

    Waits as long as another holder keeps it. Not reentrant: nest two different locks,
    never the same one.
    """

    def __init__(self, path: Path, mode: int = 0o600) -> None:
        self.path = path
        self.mode = mode
        self._fd: int | None = None

    def __enter__(self) -> FileLock:
        if self._fd is not None:
            raise RuntimeError(f"{self.path} is already held by this FileLock")
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path, flags, self.mode)
        try:
            _acquire(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                _release(fd)
            finally:
                os.close(fd)
