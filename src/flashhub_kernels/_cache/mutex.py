"""Mutexes between processes on parts of the cache, on ``filelock.FileLock``.

"Mutex" in the code, where "lock" names a lock file (``flashhub.lock``) that pins
kernels. The names users see keep the older word: a mutex's file is
``.locks/<name>.lock`` in the cache (so that clients of every version exclude each
other), and ``FLASHHUB_LOCK_TIMEOUT`` bounds the wait for one.

While one process downloads an entry (or fetches a version's ``variants.json``), the
others wait, then find the work done. ``filelock`` uses ``flock`` where the file system
supports it, so the kernel frees the mutex of a process that dies, and falls back to a
file of its own where ``flock`` is missing (``ENOSYS``: Lustre mounted without
``flock``), saying so with a warning; where the file system refuses locks (``ENOLCK``:
NFS without lockd) a load fails with a :class:`CacheError`. Each :func:`hold` opens the
mutex anew, so two threads of one process exclude each other as well.

Only the cold path takes a mutex: a warm load trusts a committed entry's receipt and
never imports ``filelock``.
"""

from __future__ import annotations

import errno
import hashlib
import math
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .._utils.ctrl_c import stop_after_ctrl_c
from .._utils.logs import logger
from ..errors import CacheError
from .directories import private_dir
from .layout import LOCKS_DIR, Cache

if TYPE_CHECKING:
    from filelock import FileLock

    from .._models.names import RepoInfo


WAIT_NOTICE_SECONDS = 2.0  # a wait this long is reported once: it is another download
# How often a wait looks whether Ctrl-C has ended the program's main thread, which then
# waits for the thread that waits here (see stop_after_ctrl_c).
STOP_CHECK_SECONDS = 0.25
_UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP}
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT}  # no space or inode left, over quota


@contextmanager
def hold(
    path: Path,
    *,
    what: str,
    timeout: float | None,
    mode: int = 0o600,
    remake: Callable[[], object] | None = None,
) -> Iterator[None]:
    """Hold the mutex ``path`` (created with ``mode``: see :func:`mutex_mode`)
    for the ``with`` block.

    ``what`` names what the mutex protects, for the messages. After
    :data:`WAIT_NOTICE_SECONDS` of waiting, one warning on the ``flashhub_kernels``
    logger says who waits for what. ``timeout`` (seconds, ``None`` for no limit) bounds
    each wait. ``remake`` creates the mutex's directory again where the process this one
    waited for removed it (``flashhub cache clear`` removes a version's directory,
    mutexes and all, while it holds them); then this one waits again.

    Raises:
        CacheError: the wait timed out, or the mutex could not be created or taken.
    """
    while True:
        try:
            lock = _acquired(path, what=what, timeout=timeout, mode=mode)
            break
        except FileNotFoundError as exc:  # filelock does not create it again mid-wait
            if remake is None:
                raise _mutex_error(path, exc) from exc
            remake()
    try:
        yield
    finally:
        lock.release()


def _acquired(path: Path, *, what: str, timeout: float | None, mode: int) -> FileLock:
    """The mutex ``path``, acquired as :func:`hold` says.

    Raises:
        FileNotFoundError: the mutex's directory was removed while this waited.
        CacheError: as :func:`hold`.
    """
    lock = _file_lock(path, mode)
    first_wait = WAIT_NOTICE_SECONDS if timeout is None else min(timeout, WAIT_NOTICE_SECONDS)
    try:
        acquired = _waited_for(lock, first_wait, what)
        if not acquired and (timeout is None or timeout > first_wait):
            logger.warning(
                "waiting for another process or thread to finish %s (lock: %s)", what, path
            )
            rest = math.inf if timeout is None else timeout - first_wait
            acquired = _waited_for(lock, rest, what)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _mutex_error(path, exc) from exc
    if not acquired:
        raise CacheError(
            f"gave up after {timeout:g} s waiting for another process or thread to finish {what} "
            f"(lock: {path})",
            hint="let the other process or thread finish, or raise or unset FLASHHUB_LOCK_TIMEOUT",
        )
    return lock


def _waited_for(lock: FileLock, timeout: float, what: str) -> bool:
    """Whether ``lock.acquire(timeout=timeout)`` took it, asked a slice of
    :data:`STOP_CHECK_SECONDS` at a time, stopping between slices as
    :func:`~.._utils.ctrl_c.stop_after_ctrl_c` says (naming ``what`` the other process
    was doing). No exception is being handled as it waits: Ctrl-C meanwhile shows its
    own traceback, not one chained to a slice's ``Timeout``."""
    from filelock import Timeout

    deadline = time.monotonic() + timeout
    while True:
        stop_after_ctrl_c(f"waiting for another process or thread to finish {what}")
        left = deadline - time.monotonic()
        try:
            lock.acquire(timeout=max(0.0, min(left, STOP_CHECK_SECONDS)))
            return True
        except Timeout:
            if left <= STOP_CHECK_SECONDS:
                return False


@contextmanager
def hold_if_free(path: Path, mode: int = 0o600) -> Iterator[bool]:
    """Hold the mutex ``path`` for the ``with`` block if no process holds it,
    without waiting; yield whether it could.

    Raises:
        CacheError: the mutex cannot be taken: the cache cannot be written (read-only),
            or its file system has no file locks. That is not "busy", and is not told as such.
    """
    from filelock import Timeout

    lock = _file_lock(path, mode)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        yield False
        return
    except OSError as exc:
        raise _mutex_error(path, exc) from exc
    try:
        yield True
    finally:
        lock.release()


def mutex_mode(cache: Cache) -> int:
    """The mode of a mutex file of ``cache``: the group's members of a cache it shares
    wait for each other, so they must open it for writing too."""
    return 0o660 if cache.shared else 0o600


def _file_lock(path: Path, mode: int) -> FileLock:
    from filelock import FileLock

    if path.is_symlink():  # filelock refuses it too, with a bare ELOOP
        raise _mutex_error(path, OSError(errno.ELOOP, "the mutex file is a symlink"))
    return FileLock(path, mode=mode)


def _mutex_error(path: Path, exc: OSError) -> CacheError:
    refused = CacheError.cannot_write(exc, path)
    if refused.read_only:
        return refused
    reason = exc.strerror or str(exc)
    if exc.errno in _UNSUPPORTED:
        return CacheError(
            f"cannot lock {path}: {reason}; this file system does not support file locks",
            hint="point FLASHHUB_CACHE_DIR at a local disk (NFS without lockd has none)",
        )
    if exc.errno in _NO_ROOM:  # as for any other write to the cache: free disk space
        return CacheError(f"cannot lock {path}: {reason}", hint=refused.hint)
    return CacheError(
        f"cannot lock {path}: {reason}",
        hint="fix the permissions of the cache directory, remove what is in the way, "
        "or point FLASHHUB_CACHE_DIR elsewhere",
    )


def download_mutex(cache: Cache, info: RepoInfo, variant: str) -> AbstractContextManager[None]:
    """The mutex of one entry: one process downloads it, the others wait and reuse it."""
    locks = download_mutex_dir(cache.version_dir(info))
    path = private_dir(cache, locks) / f"{variant}.lock"
    what = f"downloading {info} {variant}"
    mode, remake = mutex_mode(cache), lambda: private_dir(cache, locks)
    return hold(path, what=what, timeout=cache.lock_timeout, mode=mode, remake=remake)


def download_mutex_dir(version_dir: Path) -> Path:
    """The directory of the download mutexes of a version directory's entries, each
    ``<variant>.lock``."""
    return version_dir / LOCKS_DIR


def index_mutex(cache: Cache, info: RepoInfo) -> AbstractContextManager[None]:
    """The mutex of a version's variant index: one process at a time chooses a variant,
    fetching what the index does not record (``variants.json``, the ``metadata.json`` of
    candidates), and records it for the others.

    Kept under ``<root>/.locks`` rather than in the version directory, so asking for a
    spelling of a name that does not exist leaves no directory of that name behind
    (``flashhub cache prune`` and ``clear`` remove such a version's mutex).
    """
    path = index_mutex_path(cache, info)
    private_dir(cache, path.parent)
    what = f"choosing the variant of {info}"
    mode, remake = mutex_mode(cache), lambda: private_dir(cache, path.parent)
    return hold(path, what=what, timeout=cache.lock_timeout, mode=mode, remake=remake)


def index_mutex_path(cache: Cache, info: RepoInfo) -> Path:
    """The file of :func:`index_mutex`: ``<root>/.locks/<org>/<pkg>/v<N>.lock``."""
    return cache.locks_dir / info.org / info.name / f"v{info.version}.lock"


def index_mutex_files(cache: Cache) -> list[tuple[Path, Path]]:
    """The index mutexes' files in the cache, each with the version directory it is for
    (which may not exist): :func:`index_mutex_path` read backwards."""
    return [
        (path, cache.kernels_dir / path.relative_to(cache.locks_dir).with_suffix(""))
        for path in sorted(cache.locks_dir.glob("*/*/v*.lock"))
    ]


def publish_mutex(cache: Cache, directory: Path) -> AbstractContextManager[None]:
    """The mutex of a kernel's directory in a CDN tree on disk: one publish into it at a
    time, so that two of two versions both end up in its ``versions.json``.

    Kept in the cache, named by the directory's real path, not in the tree, which is
    served and synced as it is: publishes on one machine exclude each other.
    """
    name = hashlib.sha256(os.fsencode(directory.resolve())).hexdigest()[:32]
    path = private_dir(cache, cache.locks_dir / "publish") / f"{name}.lock"
    what = f"publishing into {directory}"
    return hold(path, what=what, timeout=cache.lock_timeout, mode=mutex_mode(cache))
