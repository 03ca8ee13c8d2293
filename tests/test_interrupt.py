"""Processes that are interrupted or kept waiting: Ctrl-C in the middle of a download, and
a second process waiting for the download mutex another one holds."""

from __future__ import annotations

import fcntl
import hashlib
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import MakeProject, run_python
from flashhub_kernels._variants.named_system import target_system
from flashhub_kernels._variants.probing import build_variant_name, candidate_names
from flashhub_kernels._variants.system import this_system
from support.cdn_server import CdnServer, held, slowly, stall, stalled, status
from support.cli_runner import PYTHON_M_FLASHHUB, flashhub
from support.preloaded import Child, appears, run_code, start_code, stderr_into, written
from support.projects import write_project
from support.trees import write_blob_kernel, write_kernel

REPO = "acme/tensor-tricks"
VARIANT = "torch-universal"
BIG = bytes(range(256)) * (32 * 1024)  # 8 MiB
BIG_PATH = f"kernels/{REPO}/v1/build/{VARIANT}/tensor_tricks/big.bin"
LOAD = "import flashhub_kernels as fk; fk.get_kernel('acme/tensor-tricks', version=1)"


@pytest.fixture
def big_kernel(cdn: CdnServer) -> CdnServer:
    write_blob_kernel(cdn.root, BIG, name="big")
    return cdn


def interruptible(argv: list[str], **env: str) -> subprocess.Popen[str]:
    """Start ``argv`` as a terminal starts a program: Ctrl-C (SIGINT) at its default.

    A suite run as a background job (``cmd &`` in a script, ``nohup``) has SIGINT
    ignored, and a child inherits that: Python then installs no KeyboardInterrupt
    handler, and the signal the test sends would do nothing.
    """
    return subprocess.Popen(
        argv,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


# Asks a child that has not ended in time where each of its threads is.
STACKS_SIGNAL = signal.SIGUSR1

# What a program run from a terminal has: Ctrl-C raises KeyboardInterrupt (a suite run in
# the background starts its processes with SIGINT ignored). torch's warnings are not the
# point here.
AS_FROM_A_TERMINAL = (
    "import faulthandler, signal, warnings\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "warnings.simplefilter('ignore')\n"
    f"faulthandler.register(signal.{STACKS_SIGNAL.name}, all_threads=True)\n"
)


def child(code: str = LOAD, *args: str, **env: str) -> Child:
    """``python -c code args`` in a fresh process with torch imported (see
    ``support.preloaded``), as run from a terminal, with ``env`` added to this one's."""
    return start_code(AS_FROM_A_TERMINAL + code, *args, env={**os.environ, **env})


def ctrl_c(
    process: Child, *, once: Callable[[], object], timeout: float = 15
) -> tuple[str, str, float]:
    """Press Ctrl-C in ``process`` once ``once()`` has returned; its stdout, its stderr,
    and how long it took to end after. It is killed if the test fails before."""
    return signalled(process, signal.SIGINT, once=once, timeout=timeout)


def signalled(
    process: Child,
    signum: signal.Signals,
    *,
    once: Callable[[], object],
    timeout: float = 15,
) -> tuple[str, str, float]:
    """Send ``signum`` to ``process`` once ``once()`` has returned, as :func:`ctrl_c` does."""
    try:
        once()
        process.send_signal(signum)
        start = time.monotonic()
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {timeout} s after {signum.name}:\n{stacks_of(process)}")
        return out, err, time.monotonic() - start
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def stacks_of(process: Child) -> str:
    """What a child that has not ended wrote to its stderr, ending with the stack of each
    of its threads (a child started by :func:`child` prints them on ``STACKS_SIGNAL``)."""
    process.send_signal(STACKS_SIGNAL)
    time.sleep(1)  # for the stacks to be written
    process.kill()
    return process.communicate()[1]


def partial_size(cache_dir: Path, name: str) -> int:
    """The size of the largest file named like ``name`` in the cache (0 if none)."""
    sizes = [p.stat().st_size for p in cache_dir.rglob(f"*{name}*") if p.is_file()]
    return max(sizes, default=0)


def test_ctrl_c_mid_download_exits_at_once_and_keeps_the_partial_file(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    reached = threading.Event()
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20, started=reached))
    # The carets and the spans of lines that each Python from 3.11 on draws under a
    # traceback's lines differently are not the point: a new interpreter without them.
    process = child(PYTHONNODEBUGRANGES="1")

    def once_bytes_are_on_disk() -> None:
        assert reached.wait(60), "the child never reached the fault"
        deadline = time.monotonic() + 10  # until the first MiB is on disk
        while partial_size(cache_dir, "big.bin") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    _out, err, took = ctrl_c(process, once=once_bytes_are_on_disk)
    assert took < 5, f"Ctrl-C took {took:.1f} s"
    assert process.returncode != 0
    assert "concurrent.futures" not in err and "Exception in thread" not in err, err
    assert err.count("Traceback") <= 1, err  # one traceback at most, none from threads
    # The import machinery, the loader and the store's frames, and the message: one screen.
    assert len(err.splitlines()) <= 36, err
    assert not (cache_dir / f"kernels/acme/tensor-tricks/v1/{VARIANT}").exists()

    big_kernel.faults.clear()
    big_kernel.clear_log()
    k = fk.get_kernel(REPO, version=1)
    assert (Path(k.__file__).parent / "big.bin").read_bytes() == BIG
    first = next(r for r in big_kernel.requests if r.path.endswith("big.bin"))
    match = re.fullmatch(r"bytes=(\d+)-", first.range or "")
    assert match and 0 < int(match.group(1)) <= 1 << 20, first.range


GOES_ON_AFTER_CTRL_C = """
import threading, time
import flashhub_kernels as fk
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except KeyboardInterrupt:
    print("interrupted")
# A program that goes on (a notebook, a server): until the download's threads have ended.
# Not join(): on Python 3.11 it returns at once for a thread whose join Ctrl-C interrupted.
while threading.active_count() > 1:
    time.sleep(0.05)
"""


def test_after_ctrl_c_a_download_waiting_on_the_cdn_asks_no_more_and_keeps_its_file(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """The download of big.bin waits for bytes when Ctrl-C stops the load, and the program
    goes on. When its read times out, it must not ask again: an answer ignoring Range
    would start the file over, emptying the part the interrupted load kept."""
    reached = threading.Event()
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20, started=reached), stall(30, after=1 << 20))
    process = child(GOES_ON_AFTER_CTRL_C, FLASHHUB_READ_TIMEOUT="2")
    asked_before: list[int] = []

    def once_the_first_mib_is_on_disk() -> None:
        assert reached.wait(60), "the child never reached the fault"
        deadline = time.monotonic() + 10
        while partial_size(cache_dir, "big.bin") < 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        # On a loaded machine a read may time out, and be asked again, before the press.
        asked_before.append(len(big_kernel.gets("big.bin")))

    out, err, _took = ctrl_c(process, once=once_the_first_mib_is_on_disk, timeout=60)
    assert process.returncode == 0 and out == "interrupted\n", err
    assert len(big_kernel.gets("big.bin")) == asked_before[0]
    kept = cache_dir / f"kernels/{REPO}/v1/.partial-{VARIANT}/{hashlib.sha256(BIG).hexdigest()}"
    assert kept.read_bytes() == BIG[: 1 << 20]


def test_after_ctrl_c_a_download_waiting_out_a_retry_after_asks_no_more(
    big_kernel: CdnServer,
) -> None:
    """The CDN answers big.bin with 429 and a Retry-After of 20 s, and Ctrl-C stops the
    load during that wait: urllib3 waits and retries within its own call, and the
    download's thread must not ask again for the load that is over."""
    big_kernel.inject(BIG_PATH, *[status(429, retry_after=20)] * 4)
    process = child(GOES_ON_AFTER_CTRL_C)

    def once_big_bin_was_asked_for() -> None:
        deadline = time.monotonic() + 60
        while not big_kernel.gets("big.bin") and time.monotonic() < deadline:
            time.sleep(0.05)

    out, err, _took = ctrl_c(process, once=once_big_bin_was_asked_for, timeout=15)
    assert process.returncode == 0 and out == "interrupted\n", err
    assert len(big_kernel.gets("big.bin")) == 1


# A service's way with SIGTERM (`docker stop`, Kubernetes ending a pod): exit at once.
EXITS_ON_SIGTERM = """
import signal, sys
import flashhub_kernels as fk
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
fk.get_kernel("acme/tensor-tricks", version=1)
"""


def test_sys_exit_from_a_sigterm_handler_mid_download_keeps_what_arrived(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """The SystemExit a SIGTERM handler raises ends the load as Ctrl-C does: the bytes
    that arrived are kept, and the next load continues them (it fetched every file again
    from its first byte)."""
    reached = threading.Event()
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20, started=reached))
    process = child(EXITS_ON_SIGTERM)

    def once_the_first_mib_is_on_disk() -> None:
        assert reached.wait(60), "the child never reached the fault"
        deadline = time.monotonic() + 10
        while partial_size(cache_dir, "big.bin") < 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)

    _out, err, _took = signalled(process, signal.SIGTERM, once=once_the_first_mib_is_on_disk)
    assert process.returncode == 143, err
    kept = cache_dir / f"kernels/{REPO}/v1/.partial-{VARIANT}/{hashlib.sha256(BIG).hexdigest()}"
    assert kept.read_bytes() == BIG[: 1 << 20]

    big_kernel.clear_log()
    k = fk.get_kernel(REPO, version=1)
    assert (Path(k.__file__).parent / "big.bin").read_bytes() == BIG
    assert [r.range for r in big_kernel.requests if r.path.endswith("big.bin")] == [
        f"bytes={1 << 20}-"
    ]


IN_A_THREAD_OF_ITS_OWN = """
import threading, time
import flashhub_kernels as fk
load = lambda: fk.get_kernel("acme/tensor-tricks", version=1)
threading.Thread(target=load).start()  # not a daemon: the interpreter waits for it
time.sleep(600)
"""
UNTIL_BIG_BIN_IS_ON_ITS_WAY = (
    "import os, pathlib\n"
    'while not any(pathlib.Path(os.environ["FLASHHUB_CACHE_DIR"]).rglob("big.bin")):\n'
    "    time.sleep(0.05)\n"
)


def test_ctrl_c_ending_the_main_thread_stops_a_download_in_a_thread_of_the_programs_own(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """Ctrl-C ends the main thread, and the interpreter waits for the program's thread
    that loads the kernel: its download stops as after Ctrl-C, keeping what arrived,
    instead of keeping the process alive until the file is in (five minutes here)."""
    big_kernel.inject(BIG_PATH, slowly(300, pieces=600))
    process = child(IN_A_THREAD_OF_ITS_OWN, PYTHONWARNINGS="ignore")

    def once_bytes_are_on_disk() -> None:
        deadline = time.monotonic() + 60
        while partial_size(cache_dir, "big.bin") == 0 and time.monotonic() < deadline:
            time.sleep(0.05)

    _out, err, _took = ctrl_c(process, once=once_bytes_are_on_disk, timeout=60)
    assert "interrupted; what arrived is kept" in err, err
    kept = cache_dir / f"kernels/{REPO}/v1/.partial-{VARIANT}/{hashlib.sha256(BIG).hexdigest()}"
    assert 0 < kept.stat().st_size < len(BIG)
    assert kept.read_bytes() == BIG[: kept.stat().st_size]


FIRST_LOAD_AFTER_CTRL_C = """
import os, signal, sys, threading, time
import flashhub_kernels as fk

signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal

def load():
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    try:
        fk.get_kernel("acme/tensor-tricks", version=1)
    except KeyboardInterrupt as exc:
        print(exc, "| torch imported:", "torch" in sys.modules, flush=True)

threading.Thread(target=load).start()  # not a daemon: the interpreter waits for it
os.kill(os.getpid(), signal.SIGINT)
time.sleep(60)
"""


def test_a_first_load_in_a_programs_thread_after_ctrl_c_does_not_import_torch(
    cdn: CdnServer,
) -> None:
    """Once the main thread has ended, torch's import fails half way (it registers with
    threading, which refuses then), and threads that went on with it, or took the half
    made module, crashed the interpreter as it tore torch down."""
    write_kernel(cdn.root, REPO, 1)
    result = run_code(FIRST_LOAD_AFTER_CTRL_C, env=dict(os.environ), fresh=True)
    assert result.stdout == (
        "Ctrl-C ended the program; this thread stopped importing torch | torch imported: False\n"
    ), result.stderr
    assert "RuntimeError" not in result.stderr and cdn.requests == []


def test_a_main_thread_that_just_ends_leaves_the_programs_thread_to_finish_its_load(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    big_kernel.inject(BIG_PATH, slowly(5))
    # The main thread ends once big.bin is on its way.
    run_python(IN_A_THREAD_OF_ITS_OWN.replace("time.sleep(600)\n", UNTIL_BIG_BIN_IS_ON_ITS_WAY))
    assert (cache_dir / f"kernels/{REPO}/v1/{VARIANT}/tensor_tricks/big.bin").read_bytes() == BIG


def test_a_ctrl_c_the_interactive_interpreter_caught_leaves_the_programs_thread_to_finish(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """In `python -i`, a statement interrupted with Ctrl-C leaves its KeyboardInterrupt
    in sys.last_value, and the session goes on; its end (here, the end of its input) is
    no Ctrl-C, so the program's thread still finishes its load."""
    big_kernel.inject(BIG_PATH, slowly(3))
    started = IN_A_THREAD_OF_ITS_OWN.replace("time.sleep(600)\n", UNTIL_BIG_BIN_IS_ON_ITS_WAY)
    typed = "raise KeyboardInterrupt  # what Ctrl-C makes of a statement\nprint('on')\n"

    def session(code: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-i", "-c", code]
        return subprocess.run(argv, input=typed, capture_output=True, text=True, timeout=120)

    loading, plain = session(started), session("pass")
    # The session ends as Python's own does: with 0, or, from Python 3.14, by SIGINT.
    assert loading.returncode == plain.returncode, loading.stderr
    assert "on" in loading.stdout.split(), loading.stdout  # the session went on
    assert (cache_dir / f"kernels/{REPO}/v1/{VARIANT}/tensor_tricks/big.bin").read_bytes() == BIG


CTRL_C_AS_THE_SECOND_WORKER_STARTS = (
    """
import os, pathlib, threading, time

def big_bin_has_its_first_mib():
    for path in pathlib.Path(os.environ["FLASHHUB_CACHE_DIR"]).rglob("big.bin"):
        try:
            if path.stat().st_size >= 1 << 20:
                return True
        except FileNotFoundError:
            pass
    return False

start = threading.Thread.start
def start_unless_ctrl_c(thread):
    if thread.name == "flashhub-download-1":  # the first one fetches big.bin, largest first
        while not big_bin_has_its_first_mib():
            time.sleep(0.01)
        raise KeyboardInterrupt  # as Ctrl-C pressed while the thread starts
    start(thread)
threading.Thread.start = start_unless_ctrl_c
"""
    + GOES_ON_AFTER_CTRL_C
)


AT_EXIT = """
import atexit, flashhub_kernels as fk
atexit.register(lambda: print(fk.get_kernel("acme/tensor-tricks", version=1).__name__))
"""
# What an exiting interpreter answers a new thread (Python 3.12, from the end of the main
# thread and in an atexit handler), and a process at its limit of threads, everywhere.
NO_NEW_THREADS = """
import threading
def refused(thread):
    raise RuntimeError("can't create new thread at interpreter shutdown")
threading.Thread.start = refused
"""


@pytest.mark.parametrize(
    "code", [AT_EXIT, NO_NEW_THREADS + LOAD], ids=["in an atexit handler", "no new thread"]
)
def test_a_load_where_no_thread_can_start_does_the_work_in_its_own(
    code: str, big_kernel: CdnServer, cache_dir: Path
) -> None:
    """A cold load hands its downloads, its documents' requests, the hash of a large file
    and the headers' deadline to threads of its own. Where the interpreter starts none, it
    downloads and verifies in the thread that loads (it used to fail, a RuntimeError from
    one of them), one file after the other."""
    run_python(code, fresh=True)  # its own interpreter, which exits as interpreters do
    assert (cache_dir / f"kernels/{REPO}/v1/{VARIANT}/tensor_tricks/big.bin").read_bytes() == BIG


def test_ctrl_c_while_the_download_threads_start_stops_those_already_running(
    big_kernel: CdnServer,
) -> None:
    """On a busy machine the first download can be under way before the next thread has
    started: Ctrl-C then must stop it too, not leave it asking the CDN again."""
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20), stall(30, after=1 << 20))
    process = child(CTRL_C_AS_THE_SECOND_WORKER_STARTS, FLASHHUB_READ_TIMEOUT="2")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0 and out == "interrupted\n", err
    assert len(big_kernel.gets("big.bin")) == 1


TIMED_OUT = """
import os, pathlib, signal, threading, time
import flashhub_kernels as fk

class Timeout(BaseException):  # as pytest-timeout's, raised by a SIGALRM handler
    pass

def time_out(*_):
    raise Timeout

signal.signal(signal.SIGALRM, time_out)
def alarm_once_big_bin_downloads():
    while not any(pathlib.Path(os.environ["FLASHHUB_CACHE_DIR"]).rglob("big.bin")):
        time.sleep(0.05)
    signal.alarm(1)
threading.Thread(target=alarm_once_big_bin_downloads, daemon=True).start()
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except Timeout:
    print("timed out")
while threading.active_count() > 1:  # the program goes on: until the load's threads end
    time.sleep(0.05)
"""


def test_a_load_ended_by_another_exception_stops_its_downloads_too(
    big_kernel: CdnServer,
) -> None:
    """A signal handler ends the load with an exception of its own (a test's timeout, a
    server's deadline) while big.bin waits on a stalled CDN: its download must stop as
    after Ctrl-C, not go on fetching the file for a load that is over."""
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20))
    process = child(TIMED_OUT, FLASHHUB_READ_TIMEOUT="2")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0 and out == "timed out\n", err
    assert len(big_kernel.gets("big.bin")) == 1


INTERRUPTED_BY_ANOTHER_THREAD = """
import _thread, os, pathlib, threading, time
import flashhub_kernels as fk

def interrupt_once_big_bin_downloads():
    while not any(pathlib.Path(os.environ["FLASHHUB_CACHE_DIR"]).rglob("big.bin")):
        time.sleep(0.05)
    _thread.interrupt_main()  # as a watchdog, an IDE or a timer of the program's does
threading.Thread(target=interrupt_once_big_bin_downloads, daemon=True).start()
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except KeyboardInterrupt:
    print("interrupted")
"""


def test_interrupt_main_stops_a_download_waiting_on_a_stalled_cdn(
    big_kernel: CdnServer,
) -> None:
    """`_thread.interrupt_main()` sends no signal: it schedules the SIGINT handler, which
    runs once the main thread runs Python again. The load's wait for its download threads
    must let it run, not hold it until big.bin's stall ends (the read timeout is longer)."""
    big_kernel.inject(BIG_PATH, stall(120, after=1 << 20))
    process = child(INTERRUPTED_BY_ANOTHER_THREAD, FLASHHUB_READ_TIMEOUT="300")
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the interrupt went unheard:\n{stacks_of(process)}")
    assert process.returncode == 0 and out == "interrupted\n", err
    assert len(big_kernel.gets("big.bin")) == 1


# While a thread named "loader" calls {call}, once {until}: each thread of the process,
# its name and the signals it blocks (the hex mask Linux shows; "-" for a thread that
# ended meanwhile, or without /proc); then argv[1] appears.
THREADS_WHILE = """
import os, pathlib, sys, threading, time
import flashhub_kernels as fk
from flashhub_kernels._lockfiles.pinning import lock_project
loader = threading.Thread(target=lambda: {call}, name="loader")
loader.start()
while not ({until}):
    time.sleep(0.05)

def sampled(thread):
    status = pathlib.Path(f"/proc/self/task/{{thread.native_id}}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("SigBlk:"))
    return int(line.split()[1], 16)

def blocked(thread):
    # What it blocks throughout 20 samples: a program's thread that submits to a pool
    # blocks the signals for the instant a worker starts, so that it starts deaf.
    mask = -1
    try:
        for _ in range(20):
            mask &= sampled(thread)
            time.sleep(0.005)
    except OSError:
        return "-"
    return f"{{mask:016x}}"

print(*[f"{{t.name}} {{blocked(t)}}" for t in threading.enumerate()], sep="\\n", flush=True)
pathlib.Path(sys.argv[1]).touch()
loader.join()
"""


# While big.bin downloads: THREADS_WHILE's arguments.
OF_A_DOWNLOAD = {
    "call": "fk.get_kernel('acme/tensor-tricks', version=1)",
    "until": "any(pathlib.Path(os.environ['FLASHHUB_CACHE_DIR']).rglob('big.bin'))",
}


def threads_of_a_download(big_kernel: CdnServer) -> dict[str, str]:
    """Run :data:`THREADS_WHILE` for a download while the CDN holds big.bin."""
    return threads_while(big_kernel, BIG_PATH, **OF_A_DOWNLOAD)


def threads_while(cdn: CdnServer, path: str, *, call: str, until: str) -> dict[str, str]:
    """Run :data:`THREADS_WHILE` with ``call`` and ``until`` while the CDN holds ``path``:
    what it printed."""
    started, release = threading.Event(), threading.Event()
    cdn.inject(path, held(started, release))
    listed = cdn.root.parent / "listed"
    process = child(THREADS_WHILE.format(call=call, until=until), str(listed))
    try:
        assert appears(listed, process, timeout=60), "the child never listed its threads"
    finally:
        release.set()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return dict(line.split() for line in out.splitlines())


def test_the_threads_of_a_download_say_they_are_flashhubs(big_kernel: CdnServer) -> None:
    """In a thread dump of a program (py-spy, faulthandler), the threads a load started are
    told apart from the program's own by their names."""
    names = threads_of_a_download(big_kernel)
    ours = set(names) - {"MainThread", "loader"}
    assert any(name.startswith("flashhub-download") for name in ours), names
    assert all(name.startswith("flashhub-") for name in ours), names


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc/<pid>/task")
def test_the_threads_of_a_download_leave_the_signals_to_the_programs_threads(
    big_kernel: CdnServer,
) -> None:
    """Ctrl-C or a kill taken by a download's thread would not wake the main thread from a
    sleep or a wait: the program would not hear it until then. The load's threads block
    them; the program's threads, the one that loads included, block none."""
    assert_deaf(threads_of_a_download(big_kernel), "flashhub-download")


def assert_deaf(masks: dict[str, str], pool: str) -> None:
    """The library's threads in ``masks`` (of :func:`threads_while`), one named ``pool...``
    among them, block the signals sent to the process; the program's threads block none."""
    process_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGUSR1)
    assert any(n.startswith(pool) and m != "-" for n, m in masks.items()), masks
    for name, mask in masks.items():
        if mask == "-":
            continue
        blocked = {sig for sig in process_signals if int(mask, 16) >> (sig - 1) & 1}
        expected = set(process_signals) if name.startswith("flashhub-") else set()
        assert blocked == expected, (name, masks)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc/<pid>/task")
def test_the_threads_that_probe_for_a_lock_leave_the_signals_to_the_programs_threads(
    cdn: CdnServer, make_project: MakeProject
) -> None:
    """``flashhub lock`` of a version without variants.json probes for every variant this
    system could load at once, on a pool of threads: they too leave Ctrl-C to the program."""
    write_kernel(cdn.root, REPO, 1, [VARIANT], with_variants_json=False)
    project = make_project({REPO: "==1"}, publish=False)
    first = candidate_names(target_system(None))[0]
    probes = "any(t.name.startswith('flashhub-probe') for t in threading.enumerate())"
    call = f"lock_project({str(project)!r})"
    masks = threads_while(
        cdn, f"kernels/{REPO}/v1/build/{first}/metadata.json", call=call, until=probes
    )
    assert_deaf(masks, "flashhub-probe")


def test_ctrl_c_while_a_load_waits_for_a_guess_it_did_not_take_exits_at_once(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """The CDN holds its answer to the guessed metadata.json of this system's own build
    (the load takes the universal one). A load waits for its requests to end before it
    returns, but Ctrl-C ends that wait at once: the kernel is in the cache by then."""
    own = build_variant_name(this_system())
    started, release = threading.Event(), threading.Event()
    big_kernel.inject(f"kernels/{REPO}/v1/build/{own}/metadata.json", held(started, release))
    process = child()
    entry = cache_dir / f"kernels/{REPO}/v1/{VARIANT}"

    def once_the_entry_is_committed() -> None:
        assert started.wait(60), "the child never asked for the guess"
        deadline = time.monotonic() + 30
        while not entry.is_dir() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert entry.is_dir(), "the load never committed its entry"

    try:
        _out, err, took = ctrl_c(process, once=once_the_entry_is_committed)
    finally:
        release.set()
    assert took < 5, f"Ctrl-C took {took:.1f} s"
    assert process.returncode != 0 and "KeyboardInterrupt" in err
    assert "Exception in thread" not in err, err


@contextmanager
def waiting_for_another(big_kernel: CdnServer, log: Path) -> Iterator[tuple[Child, Child]]:
    """A first child downloading the kernel, the CDN holding its big.bin, and a second one
    loading it, which has said (on stderr, into ``log``) that it waits for the first; the
    CDN lets the first go as the block ends."""
    started, release = threading.Event(), threading.Event()
    big_kernel.inject(BIG_PATH, held(started, release))
    first = child()
    try:
        assert started.wait(60), "the first child never reached the fault"
        second = child(stderr_into(log) + LOAD)
        written(log, "wait", second, timeout=30)  # said after about 2 s of waiting
        yield first, second
    finally:
        release.set()


def test_a_waiting_process_says_which_lock_it_waits_for(
    big_kernel: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    log = tmp_path / "second.log"
    with waiting_for_another(big_kernel, log) as (first, second):
        pass
    assert first.wait(60) == 0 and second.wait(60) == 0, second.communicate()
    message = log.read_text()
    assert "wait" in message.lower(), message
    assert REPO in message
    lock = re.search(r"(\S+\.lock)\b", message)
    assert lock, message
    assert message.count(lock.group(1)) == 1  # said once, not once a second
    assert len(big_kernel.gets("big.bin")) == 1  # the second found it done


def test_ctrl_c_while_waiting_for_another_process_shows_one_traceback(
    big_kernel: CdnServer, tmp_path: Path
) -> None:
    """The wait is made in slices, each of which ends in filelock's Timeout: Ctrl-C must
    not show as raised while handling one ("The file lock ... could not be acquired")."""
    log = tmp_path / "second.log"
    with waiting_for_another(big_kernel, log) as (first, second):
        ctrl_c(second, once=lambda: None)
    assert first.wait(60) == 0
    said = log.read_text()
    assert "KeyboardInterrupt" in said, said
    assert "During handling" not in said and "Timeout" not in said, said


def test_ctrl_c_ending_the_main_thread_stops_a_wait_for_another_process_in_a_thread_of_its_own(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """One process downloads the kernel (the CDN stalls in big.bin until the test lets
    it go); another loads it in a thread of the program's own, and so waits for the
    first one's download mutex. Ctrl-C ends the second one's main thread: its wait
    stops, and it exits while the first still downloads, which then completes the entry."""
    started, release = threading.Event(), threading.Event()
    big_kernel.inject(BIG_PATH, stalled(started, release))
    first = child(FLASHHUB_READ_TIMEOUT="600")
    second: subprocess.Popen[str] | None = None
    try:
        assert started.wait(60), "the first child never reached the fault"
        second = child(IN_A_THREAD_OF_ITS_OWN, PYTHONWARNINGS="ignore")
        assert second.stderr is not None
        waiting, lines = threading.Event(), []

        def read(stream: object = second.stderr) -> None:
            for line in stream:  # type: ignore[attr-defined]
                lines.append(line)
                if "waiting for another process or thread" in line:
                    waiting.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        assert waiting.wait(60), "the second child never waited for the first"
        second.send_signal(signal.SIGINT)
        second.wait(60)  # raises if it is still waiting for the first
        downloading = first.poll() is None
        reader.join(30)
    finally:
        release.set()
        if second is not None and second.poll() is None:
            second.kill()
    assert second.returncode != 0 and downloading
    said = "".join(lines)  # the thread's traceback says why it ended
    assert "this thread stopped waiting for another process or thread to finish" in said, said
    assert first.wait(60) == 0
    assert (cache_dir / f"kernels/{REPO}/v1/{VARIANT}/tensor_tricks/big.bin").read_bytes() == BIG
    assert len(big_kernel.gets("big.bin")) == 1


WITH_LOCK_TIMEOUT = """
import flashhub_kernels as fk
from flashhub_kernels.errors import CacheError
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except CacheError as exc:
    print("CacheError", isinstance(exc, ImportError))
    print(exc)
else:
    print("loaded")
"""


def test_a_lock_timeout_gives_up_with_a_cache_error(big_kernel: CdnServer, cache_dir: Path) -> None:
    started, release = threading.Event(), threading.Event()
    big_kernel.inject(BIG_PATH, held(started, release))
    first = child()
    try:
        assert started.wait(60), "the first child never reached the fault"
        start = time.monotonic()
        output = run_python(WITH_LOCK_TIMEOUT, env={"FLASHHUB_LOCK_TIMEOUT": "1"}, timeout=60)
        took = time.monotonic() - start
    finally:
        release.set()
    assert first.wait(60) == 0
    assert output.startswith("CacheError True\n"), output
    assert "lock" in output.lower()
    assert took < 30  # gave up, did not wait for the first child
    assert len(big_kernel.gets("big.bin")) == 1


def test_ctrl_c_in_flashhub_get_prints_the_message_only_and_exits_130(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    reached = threading.Event()
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20, started=reached))
    process = interruptible(
        [sys.executable, "-m", "flashhub_kernels", "get", REPO, "--version", "1"],
        PYTHONWARNINGS="ignore",
    )
    out, err, _took = ctrl_c(process, once=lambda: reached.wait(60))
    assert reached.is_set(), "the child never reached the fault"
    assert "Traceback" not in err, err
    assert "interrupted" in err and "kept" in err, err
    assert len(err.splitlines()) <= 2, err
    assert out == ""
    assert process.returncode == 130


def on_a_terminal(output: str) -> list[str]:
    """The lines a terminal shows once ``output`` is written to it: a carriage return
    goes back to the start of the line, whose characters the next ones overwrite."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for char in output:
        if char == "\n":
            lines.append("".join(line).rstrip())
            line, column = [], 0
        elif char == "\r":
            column = 0
        else:
            line[column : column + 1] = [char]
            column += 1
    return [*lines, "".join(line).rstrip()]


def test_ctrl_c_in_flashhub_get_on_a_terminal_leaves_one_line_and_the_next_run_completes(
    big_kernel: CdnServer, cache_dir: Path
) -> None:
    """At a terminal the download draws a progress bar; after Ctrl-C the screen shows the
    message alone on its line, no bar nor traceback, and the next run fetches the rest."""
    big_kernel.inject(BIG_PATH, slowly(60, pieces=120))  # a bar appears after a second
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "FLASHHUB_DISABLE_PROGRESS_BARS"}
    process = subprocess.Popen(
        [sys.executable, "-m", "flashhub_kernels", "get", REPO, "--version", "1"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env={**env, "PYTHONWARNINGS": "ignore"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    os.close(terminal)
    shown = b""
    try:
        while b"%|" not in shown and (chunk := _read(controller)):
            shown += chunk
        process.send_signal(signal.SIGINT)
        while chunk := _read(controller):
            shown += chunk
        assert process.wait(timeout=30) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
    *_, message, after = on_a_terminal(shown.decode())
    assert message == (
        f"the download of {REPO}@v1 {VARIANT} was interrupted; what arrived is kept, "
        "and the next load continues from there"
    ), shown
    assert after == "" and "Traceback" not in shown.decode()
    kept = partial_size(cache_dir, hashlib.sha256(BIG).hexdigest())
    assert 0 < kept < len(BIG)

    big_kernel.faults.clear()
    big_kernel.clear_log()
    again = flashhub("-v", "get", REPO, "--version", "1")
    assert again.returncode == 0, again.stderr
    assert (Path(again.stdout.strip()) / "tensor_tricks/big.bin").read_bytes() == BIG
    first = next(r for r in big_kernel.requests if r.path.endswith("big.bin"))
    assert first.range == f"bytes={kept}-"
    resumed = f"{REPO}/v1/build/{VARIANT}/tensor_tricks/big.bin: continuing from byte {kept}"
    assert resumed in again.stderr
    assert flashhub("cache", "verify").returncode == 0


SILENT_TERMINAL_SECONDS = 120  # far past the slow download: the program hangs


def _read(controller: int) -> bytes:
    """What the program wrote to the terminal since; ``b""`` once it has closed it, or
    has written nothing for :data:`SILENT_TERMINAL_SECONDS` (the test then fails on what
    it saw, rather than wait on the terminal for ever)."""
    ready, _, _ = select.select([controller], [], [], SILENT_TERMINAL_SECONDS)
    if not ready:
        return b""
    try:
        return os.read(controller, 1 << 16)
    except OSError:  # EIO: every end of the terminal closed
        return b""


def test_sigterm_in_flashhub_download_stops_it_as_ctrl_c_does_and_exits_143(
    big_kernel: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """``docker stop`` and Kubernetes stop a container with SIGTERM. Python's default ended
    the command at once and kept nothing of the download (and, as a container's PID 1,
    which the kernel sends no signal it has no handler for, did not end it at all)."""
    (big_kernel.root / f"kernels/{REPO}/versions.json").write_text("[1]")
    project = write_project(tmp_path / "project", {REPO: "==1"})
    assert flashhub("lock", project).returncode == 0
    reached = threading.Event()
    big_kernel.inject(BIG_PATH, stall(30, after=1 << 20, started=reached))
    process = child(PYTHON_M_FLASHHUB, "download", str(project))

    def once_the_first_mib_is_on_disk() -> None:
        assert reached.wait(60), "the child never reached the fault"
        deadline = time.monotonic() + 10
        while partial_size(cache_dir, "big.bin") < 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)

    out, err, _took = signalled(process, signal.SIGTERM, once=once_the_first_mib_is_on_disk)
    assert process.returncode == 143, err  # 128 + SIGTERM, as a shell reports it
    assert "Traceback" not in err and "kept" in err and len(err.splitlines()) == 1, err
    assert out == ""
    kept = cache_dir / f"kernels/{REPO}/v1/.partial-{VARIANT}/{hashlib.sha256(BIG).hexdigest()}"
    assert kept.read_bytes() == BIG[: 1 << 20]

    big_kernel.clear_log()
    assert flashhub("download", project).stdout.startswith(f"downloaded {REPO}@v1 {VARIANT} ")
    first = next(r for r in big_kernel.requests if r.path.endswith("big.bin"))
    assert first.range == f"bytes={1 << 20}-"
    assert flashhub("cache", "verify").returncode == 0


# flashhub download run in-process by a program that handles SIGTERM its own way (or
# ignores it): argv[3] appears once the signals that follow SIGTERM reached it, then it
# prints what the command returned and whether the program's handler ran.
DOWNLOAD_IN_A_PROGRAM = """
import signal, sys
from flashhub_kernels.cli import main
heard = []
own = {"handled": lambda *_: heard.append(1), "ignored": signal.SIG_IGN}[sys.argv[2]]
signal.signal(signal.SIGTERM, own)
signal.signal(signal.SIGWINCH, lambda *_: open(sys.argv[3], "w").close())
code = main(["download", sys.argv[1]])
print("returned", code, "heard" if heard else "unheard", flush=True)
"""


@pytest.mark.parametrize(("own", "expected"), [("handled", "heard"), ("ignored", "unheard")])
def test_sigterm_in_a_command_run_in_process_is_left_to_the_programs_handling(
    big_kernel: CdnServer, tmp_path: Path, own: str, expected: str
) -> None:
    """A program that calls ``cli.main`` keeps its own handling of SIGTERM (a server's
    graceful stop, or none): the command took the signal as an interruption before."""
    (big_kernel.root / f"kernels/{REPO}/versions.json").write_text("[1]")
    project = write_project(tmp_path / "project", {REPO: "==1"})
    assert flashhub("lock", project).returncode == 0
    started, release = threading.Event(), threading.Event()
    big_kernel.inject(BIG_PATH, held(started, release))
    winched = tmp_path / "winched"
    process = child(DOWNLOAD_IN_A_PROGRAM, str(project), own, str(winched))
    try:
        assert started.wait(60), "the child never asked for big.bin"
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGWINCH)  # handled after SIGTERM: a higher number
        appears(winched, process, timeout=60)
        release.set()
        out, err = process.communicate(timeout=60)
    finally:
        release.set()
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert out.splitlines()[-1:] == [f"returned 0 {expected}"], err
