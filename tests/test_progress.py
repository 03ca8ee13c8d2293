"""Download progress: a bar with the total, the percentage and the time left, on a terminal
only, and not at all with FLASHHUB_DISABLE_PROGRESS_BARS=1."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

import flashhub_kernels as fk
from conftest import run_python
from flashhub_kernels.errors import TransportError
from support.cdn_server import CdnServer, drop_after, held, slowly
from support.trees import kernel_files, write_blob_kernel

REPO = "acme/tensor-tricks"
VARIANT = "torch-universal"
BLOB = bytes(range(256)) * (12 * 1024)  # 3 MiB
BLOB_PATH = f"kernels/{REPO}/v1/build/{VARIANT}/tensor_tricks/blob.bin"


class Terminal(io.StringIO):
    """Standard error as a terminal shows it: what was written, and isatty() true."""

    def isatty(self) -> bool:
        return True


def stderr_to(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    """Send standard error to ``stream``, bars enabled. Called in the test itself: pytest
    puts its own capture back on ``sys.stderr`` between a fixture and the test."""
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("FLASHHUB_DISABLE_PROGRESS_BARS", raising=False)


VARIANT_BYTES = len(BLOB) + sum(map(len, kernel_files("tensor_tricks", "blob").values()))


def publish_slow_blob(cdn: CdnServer, *, with_sizes: bool) -> None:
    write_blob_kernel(cdn.root, BLOB, with_sizes=with_sizes)
    cdn.inject(BLOB_PATH, slowly(1.6))  # past the second after which a bar appears


@pytest.mark.parametrize("with_sizes", [True, False], ids=["manifest-sizes", "content-length"])
def test_a_slow_download_shows_total_percentage_and_time_left(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, with_sizes: bool
) -> None:
    publish_slow_blob(cdn, with_sizes=with_sizes)
    screen = Terminal()
    stderr_to(screen, monkeypatch)
    fk.get_kernel(REPO, version=1)
    shown = screen.getvalue()
    assert f"/{VARIANT_BYTES / 2**20:.2f}M" in shown, shown  # the total: the variant's files
    assert re.search(r"\d+%\|", shown), shown  # the percentage
    assert re.search(r"<\d\d:\d\d", shown), shown  # the time left
    assert f"{REPO}@v1 {VARIANT}" in shown


def test_a_load_that_drew_a_bar_leaves_no_thread_running(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not tqdm's monitor thread either, which would run for the life of the process: a
    program that forks workers after a load would copy a process with a thread."""
    publish_slow_blob(cdn, with_sizes=True)
    screen = Terminal()
    stderr_to(screen, monkeypatch)
    before = set(threading.enumerate())
    fk.get_kernel(REPO, version=1)
    assert f"{REPO}@v1 {VARIANT}" in screen.getvalue()  # the bar was drawn

    def started_by_the_load() -> set[threading.Thread]:
        # Not the loopback CDN's, which serve the connections the session keeps alive.
        started = set(threading.enumerate()) - before
        return {thread for thread in started if "process_request_thread" not in thread.name}

    for thread in started_by_the_load():
        thread.join(5)  # the headers' watchdog ends as the run does, given a moment
    assert {thread.name for thread in started_by_the_load()} == set()


def test_a_download_that_stalls_from_its_first_byte_shows_its_bar_all_the_same(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tqdm draws a bar on an update, once its delay has passed: a CDN that sends nothing
    for a while (up to the read timeout, a minute by default) must not leave the terminal
    blank meanwhile, nor the bar's clock stopped."""
    write_blob_kernel(cdn.root, BLOB, with_sizes=True)
    started, release = threading.Event(), threading.Event()
    cdn.inject(BLOB_PATH, held(started, release))
    screen = Terminal()
    stderr_to(screen, monkeypatch)
    load = threading.Thread(target=fk.get_kernel, args=(REPO,), kwargs={"version": 1})
    load.start()
    try:
        assert started.wait(30)
        deadline = time.monotonic() + 20
        while len(clocks_shown(screen.getvalue())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        shown = screen.getvalue()
    finally:
        release.set()
        load.join(60)
    assert f"{REPO}@v1 {VARIANT}" in shown, shown
    assert f"/{VARIANT_BYTES / 2**20:.2f}M" in shown, shown
    assert len(clocks_shown(shown)) >= 2, shown  # drawn again as the wait goes on


def test_a_bar_follows_the_terminal_as_it_is_narrowed(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bar as wide as the terminal was when it appeared wraps once the window is
    narrower, leaving a line of it on the screen at every redraw."""
    write_blob_kernel(cdn.root, BLOB, with_sizes=True)
    started, release = threading.Event(), threading.Event()
    cdn.inject(BLOB_PATH, held(started, release))
    screen, window = Terminal(), pty.openpty()
    screen.fileno = lambda: window[1]  # type: ignore[method-assign]  # the size tqdm reads
    stderr_to(screen, monkeypatch)
    resize(window[0], columns=101)
    load = threading.Thread(target=fk.get_kernel, args=(REPO,), kwargs={"version": 1})
    load.start()
    try:
        assert started.wait(30)
        deadline = time.monotonic() + 20
        while not frames_shown(screen.getvalue()) and time.monotonic() < deadline:
            time.sleep(0.05)
        resize(window[0], columns=41)
        while len(frames_shown(screen.getvalue())[-1]) > 40 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        release.set()
        load.join(60)
        for fd in window:
            os.close(fd)
    widths = [len(frame) for frame in frames_shown(screen.getvalue())]
    assert widths[0] == 100 and widths[-1] <= 40, widths


def resize(master: int, *, columns: int) -> None:
    """Give the pty of ``master`` a window ``columns`` wide, as a terminal resized does."""
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))


def frames_shown(screen: str) -> list[str]:
    """The frames of a bar on ``screen``, in the order drawn."""
    return [frame for frame in re.split("[\r\n]", screen) if frame.startswith(REPO)]


# A program loads a kernel with a bar on its terminal, then picks how multiprocessing
# starts its workers, as torch programs do.
START_METHOD_AFTER_A_BAR = """
import io, multiprocessing, sys
import flashhub_kernels as fk

class Terminal(io.StringIO):
    def isatty(self):
        return True

print("before:", multiprocessing.get_start_method(allow_none=True))
sys.stderr = Terminal()
fk.get_kernel("acme/tensor-tricks", version=1)
sys.stderr = sys.__stderr__
print("after:", multiprocessing.get_start_method(allow_none=True))
multiprocessing.set_start_method("spawn")
"""


def test_a_bar_leaves_the_start_method_of_multiprocessing_to_the_program(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tqdm's lock is also a multiprocessing lock, whose making fixes the start method:
    set_start_method("spawn") then failed with "context has already been set"."""
    publish_slow_blob(cdn, with_sizes=True)
    monkeypatch.setenv("FLASHHUB_DISABLE_PROGRESS_BARS", "0")
    out = run_python(START_METHOD_AFTER_A_BAR)
    assert out.split() == ["before:", "None", "after:", "None"], out


def clocks_shown(screen: str) -> set[str]:
    """The elapsed times (``[00:03<``) the frames of a bar on ``screen`` showed."""
    return set(re.findall(r"\[(\d\d:\d\d)<", screen))


def test_a_bar_that_continues_a_kept_download_counts_the_kept_files_in_its_total(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest without sizes: the total is what the answers announce. The files an
    interrupted load kept whole are not asked for again, and were left out of the total:
    the bar ran past it, where tqdm shows neither the total nor the percentage."""
    write_blob_kernel(cdn.root, BLOB)
    cdn.inject(BLOB_PATH, *[drop_after(1 << 20)] * 12)  # each attempt gets nowhere
    with pytest.raises(TransportError):
        fk.get_kernel(REPO, version=1)  # keeps the small files whole, and 1 MiB of the blob
    cdn.faults.clear()
    cdn.inject(BLOB_PATH, slowly(1.6))  # the whole blob again, slowly enough for a bar
    screen = Terminal()
    stderr_to(screen, monkeypatch)
    fk.get_kernel(REPO, version=1)
    frames = frames_shown(screen.getvalue())
    assert frames, screen.getvalue()
    assert all(re.search(rf"\d+%\|.*/{VARIANT_BYTES / 2**20:.2f}M", f) for f in frames), frames


def test_no_bar_when_disabled(cdn: CdnServer, monkeypatch: pytest.MonkeyPatch) -> None:
    publish_slow_blob(cdn, with_sizes=True)
    screen = Terminal()
    stderr_to(screen, monkeypatch)
    monkeypatch.setenv("FLASHHUB_DISABLE_PROGRESS_BARS", "1")
    fk.get_kernel(REPO, version=1)
    assert screen.getvalue() == ""


def test_no_bar_when_stderr_is_not_a_terminal(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_slow_blob(cdn, with_sizes=True)
    not_a_terminal = io.StringIO()
    stderr_to(not_a_terminal, monkeypatch)
    fk.get_kernel(REPO, version=1)
    assert not_a_terminal.getvalue() == ""


def test_a_load_in_a_process_without_stderr_downloads_without_a_bar(cdn: CdnServer) -> None:
    # Started with stderr closed (`2>&-`, pythonw, some services): sys.stderr is None.
    write_blob_kernel(cdn.root, BLOB)
    env = {k: v for k, v in os.environ.items() if k != "FLASHHUB_DISABLE_PROGRESS_BARS"}
    load = f"import flashhub_kernels as fk; print(fk.get_kernel({REPO!r}, version=1).marker())"
    result = subprocess.run(
        [sys.executable, "-c", load],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(2),
    )
    assert (result.returncode, result.stdout) == (0, "blob\n")
