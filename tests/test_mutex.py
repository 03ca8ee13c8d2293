"""Cache locks (``_mutex.hold`` on filelock): exclusion between threads and
processes, a dead holder's lock freed by the kernel, the wait notice, the timeout, and
every failure a CacheError; with real threads and child processes."""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from conftest import python_after_mount
from flashhub_kernels import RepoInfo
from flashhub_kernels._cache.layout import Cache
from flashhub_kernels._cache.mutex import (
    hold,
    index_mutex,
    index_mutex_files,
    index_mutex_path,
    publish_mutex,
)
from flashhub_kernels.errors import CacheError


def locked(path: Path, timeout: float | None = None) -> AbstractContextManager[None]:
    return hold(path, what="testing", timeout=timeout)


HOLDER = """
import sys
from pathlib import Path
from flashhub_kernels._cache.mutex import hold
with hold(Path(sys.argv[1]), what="testing", timeout=None):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "entry.lock"


@pytest.fixture
def holder(lock_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that holds the lock until it reads a line (or is killed)."""
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:  # its pipes closed and the child waited for on exit
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "held\n"
            yield child
        finally:
            child.kill()


def acquire_in_thread(path: Path) -> tuple[threading.Thread, threading.Event]:
    """A thread that takes ``locked(path)``, sets the event, and lets go."""
    acquired = threading.Event()

    def take() -> None:
        with locked(path):
            acquired.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    return thread, acquired


def test_threads_with_their_own_locks_exclude_each_other(lock_path: Path) -> None:
    log: list[str] = []
    guard = threading.Lock()
    first_in, let_first_go, second_started = (threading.Event() for _ in range(3))

    def note(event: str) -> None:
        with guard:
            log.append(event)

    def first() -> None:
        with locked(lock_path):
            note("enter 1")
            first_in.set()
            let_first_go.wait(10)
            note("exit 1")

    def second() -> None:
        second_started.set()
        with locked(lock_path):
            note("enter 2")
            note("exit 2")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_in.wait(10)
    threads[1].start()
    assert second_started.wait(10)
    assert not let_first_go.wait(0.3)  # give the second thread time to (wrongly) get in
    assert log == ["enter 1"]
    let_first_go.set()
    for thread in threads:
        thread.join(10)
    assert log == ["enter 1", "exit 1", "enter 2", "exit 2"]


def test_many_threads_never_overlap(lock_path: Path) -> None:
    inside = 0
    most_inside = 0
    entries = 0

    def work() -> None:
        nonlocal inside, most_inside, entries
        for _ in range(25):
            with locked(lock_path):
                inside += 1  # only the lock guards these counters
                most_inside = max(most_inside, inside)
                entries += 1
                time.sleep(0.001)
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert (most_inside, entries) == (1, 100)


def test_a_lock_held_by_another_process_is_waited_for(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    thread, acquired = acquire_in_thread(lock_path)
    assert not acquired.wait(0.3)
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert acquired.wait(10)
    thread.join(10)
    assert holder.wait(10) == 0


def test_a_killed_holder_does_not_leave_the_lock_held(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    thread, acquired = acquire_in_thread(lock_path)
    assert not acquired.wait(0.3)
    holder.kill()
    holder.wait(10)
    assert acquired.wait(10)
    thread.join(10)


def test_the_lock_file_is_private(lock_path: Path) -> None:
    with locked(lock_path):
        pass
    assert stat.S_IMODE(lock_path.stat().st_mode) == 0o600


def test_a_symlink_at_the_lock_path_is_refused(tmp_path: Path, lock_path: Path) -> None:
    target = tmp_path / "elsewhere"
    lock_path.symlink_to(target)
    with pytest.raises(CacheError, match="symlink"), locked(lock_path):
        pass
    assert not target.exists()


def test_a_long_wait_is_reported_once_with_the_lock_path(
    lock_path: Path, holder: subprocess.Popen[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flashhub_kernels")
    thread, acquired = acquire_in_thread(lock_path)
    assert not acquired.wait(3)  # past the 2 s after which a wait is reported
    assert holder.stdin is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert acquired.wait(10)
    thread.join(10)
    notices = [r.getMessage() for r in caplog.records if r.name == "flashhub_kernels"]
    assert len(notices) == 1
    assert "waiting" in notices[0] and str(lock_path) in notices[0]


def test_a_wait_past_the_timeout_is_a_cache_error(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    start = time.monotonic()
    with pytest.raises(CacheError, match=r"gave up after 0\.5 s") as info, locked(lock_path, 0.5):
        pass
    assert time.monotonic() - start < 5
    assert "FLASHHUB_LOCK_TIMEOUT" in str(info.value)


def _flock_failing(monkeypatch: pytest.MonkeyPatch, error: int) -> None:
    """Make flock() fail with ``error``, as on a mount that has no locks: none exists here."""

    def no_locks(_fd: int, _operation: int) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(fcntl, "flock", no_locks)


def test_a_file_system_without_locks_is_a_cache_error_naming_the_cache_setting(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _flock_failing(monkeypatch, errno.ENOLCK)  # as NFS without lockd answers
    with pytest.raises(CacheError, match="does not support file locks") as info, locked(lock_path):
        pass
    assert "FLASHHUB_CACHE_DIR" in str(info.value)


def test_a_file_system_without_flock_is_locked_with_a_file_of_filelocks_own(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _flock_failing(monkeypatch, errno.ENOSYS)
    with pytest.warns(UserWarning, match="SoftFileLock"), locked(lock_path):
        assert lock_path.exists()


def test_a_lock_that_cannot_be_created_is_a_cache_error(tmp_path: Path) -> None:
    in_the_way = tmp_path / "not-a-directory"
    in_the_way.write_text("a file where the lock directory should be")
    with pytest.raises(CacheError, match="cannot lock"), locked(in_the_way / "x.lock"):
        pass


# Takes a mutex in the directory argv[1], on a file system with no inode left: what it raises.
IN_A_FULL_CACHE = """
import sys
from pathlib import Path
from flashhub_kernels._cache.mutex import hold
from flashhub_kernels.errors import CacheError
try:
    with hold(Path(sys.argv[1]) / "x.lock", what="testing", timeout=None):
        print("held")
except CacheError as exc:
    print(exc)
"""


def test_a_lock_on_a_disk_without_inodes_hints_at_disk_space(tmp_path: Path) -> None:
    """A tmpfs with one inode, the mount's own, in a mount namespace of the test's own:
    the mutex's file cannot be created, ``ENOSPC``, which is no matter of permissions."""
    full = tmp_path / "full"
    full.mkdir()
    mount = f"mount -t tmpfs -o size=1m,nr_inodes=1,mode=0700 tmpfs {full}"
    result = python_after_mount(mount, IN_A_FULL_CACHE, str(full))
    message, hint = result.stdout.strip().splitlines()
    assert message == f"cannot lock {full / 'x.lock'}: No space left on device", result.stderr
    assert hint == "  hint: free disk space, or point FLASHHUB_CACHE_DIR at a disk with room"


def test_a_lock_over_the_disk_quota_hints_at_disk_space(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open

    def over_quota(path: Any, *args: Any, **kwargs: Any) -> int:
        if str(path).endswith(lock_path.name):  # filelock's open of the mutex's file
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", over_quota)
    with pytest.raises(CacheError, match="cannot lock") as info, locked(lock_path):
        pass
    assert info.value.hint == "free disk space, or point FLASHHUB_CACHE_DIR at a disk with room"


def test_cache_maintenance_finds_each_index_mutex_with_the_version_it_is_for(
    tmp_path: Path,
) -> None:
    """``flashhub cache clear`` and ``prune`` find index mutexes where index_mutex puts
    them, and no other mutex of the cache's for one."""
    cache = Cache(tmp_path / "cache")
    info = RepoInfo("acme/tensor-tricks", 3)
    with index_mutex(cache, info), publish_mutex(cache, tmp_path / "cdn"):
        pass
    assert index_mutex_path(cache, info).is_file()
    assert index_mutex_files(cache) == [(index_mutex_path(cache, info), cache.version_dir(info))]
