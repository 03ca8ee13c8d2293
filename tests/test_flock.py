"""FileLock (``_flock``): exclusion between threads and processes, and a dead holder's lock
freed by the kernel; with real threads and child processes."""

from __future__ import annotations

import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from flashhub_kernels._flock import FileLock

HOLDER = """
import sys
from pathlib import Path
from flashhub_kernels._flock import FileLock
with FileLock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "entry.lock"


@pytest.fixture
def holder(lock_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A child process that holds the lock until it reads a line (or is killed)."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "held\n"
        yield child
    finally:
        child.kill()
        child.wait(10)


def acquire_in_thread(path: Path) -> tuple[threading.Thread, threading.Event]:
    """A thread that takes ``FileLock(path)``, sets the event, and lets go."""
    acquired = threading.Event()

    def take() -> None:
        with FileLock(path):
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
        with FileLock(lock_path):
            note("enter 1")
            first_in.set()
            let_first_go.wait(10)
            note("exit 1")

    def second() -> None:
        second_started.set()
        with FileLock(lock_path):
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
            with FileLock(lock_path):
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


def test_entering_the_same_lock_twice_raises(lock_path: Path) -> None:
    lock = FileLock(lock_path)
    with lock, pytest.raises(RuntimeError, match="already held"), lock:
        pass
    with lock:  # the failed attempt did not break it
        assert lock_path.exists()


def test_the_lock_file_is_private(lock_path: Path) -> None:
    with FileLock(lock_path):
        pass
    assert stat.S_IMODE(lock_path.stat().st_mode) == 0o600


def test_a_symlink_at_the_lock_path_is_refused(tmp_path: Path, lock_path: Path) -> None:
    target = tmp_path / "elsewhere"
    lock_path.symlink_to(target)
    with pytest.raises(OSError), FileLock(lock_path):
        pass
    assert not target.exists()
