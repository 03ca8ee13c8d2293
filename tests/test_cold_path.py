"""What the cold path does to be fast, and that each keeps its guarantee: the cyclic
garbage collector paused for the load and resumed after it (what the load kept moved to
the oldest generation, unless the program froze objects of its own), the files queued
largest first, each Python file compiled by the download thread that fetched it (none
left for the commit), the manifests a load most often takes asked for beside
variants.json (used only where it lists their build; one that failed is no answer), the
disk space of a large file reserved before its bytes arrive (and a cache without room for
it refused before it is fetched), the cache's own records renamed into place without an
fsync (a record that a power cut damages fails its check when read), every other atomic
write synced."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import types
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

import flashhub_kernels as fk
from conftest import python_after_mount, run_python
from flashhub_kernels._cache import staging
from flashhub_kernels._network import deferred_gc, download
from flashhub_kernels._network.deferred_gc import collection_paused
from flashhub_kernels._network.hashing import HashingWriter
from flashhub_kernels._network.transport import MAX_PARALLEL_FILES
from flashhub_kernels._network.variant_index import PROBES_AT_ONCE
from flashhub_kernels._utils.filesystem import write_atomic
from flashhub_kernels._utils.reserve import MIN_RESERVED_BYTES
from flashhub_kernels._variants.probing import build_variant_name, candidate_names
from flashhub_kernels._variants.system import this_system
from support.cdn_server import CdnHandler, CdnServer, delayed, held, status
from support.trees import kernel_files, write_blob_kernel, write_kernel, write_variant

REPO = "acme/tensor-tricks"
VARIANT = "torch-universal"
BASE = f"kernels/{REPO}/v1/build/{VARIANT}"


def publish(cdn: CdnServer, files: dict[str, bytes]) -> None:
    write_variant(cdn.root, REPO, 1, VARIANT, files, with_sizes=True)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')


@pytest.fixture
def collector_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The collector on for the test, and as it was after it; a pause no slower machine
    ends early."""
    monkeypatch.setattr(deferred_gc, "LONGEST_PAUSE", 60.0)
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


# -- the garbage collector -------------------------------------------------------------------


@pytest.mark.usefixtures("collector_on")
def test_a_cold_load_runs_with_the_collector_paused_and_resumes_it(cdn: CdnServer) -> None:
    files = kernel_files("tensor_tricks", "paused")
    publish(cdn, files)
    seen: list[bool] = []

    def record(handler: CdnHandler, body: bytes) -> None:
        seen.append(gc.isenabled())  # the server runs in this process: the same collector
        handler.send_file(body)

    cdn.inject(f"{BASE}/tensor_tricks/__init__.py", record)
    assert fk.get_kernel(REPO, version=1).marker() == "paused"
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_on")
def test_nested_and_concurrent_pauses_resume_the_collector_once_all_end() -> None:
    inside, release = threading.Event(), threading.Event()

    def other_load() -> None:
        with collection_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_load)
    thread.start()
    inside.wait(10)
    with collection_paused():
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's load is still running
    release.set()
    thread.join()
    assert gc.isenabled()


# A thread of the child loads a kernel whose big.bin the server holds back; the rest of
# the child runs once that download has begun, the collector paused.
WHILE_A_LOAD_WAITS = """
import gc, os, pathlib, threading, time
import flashhub_kernels as fk
args, kwargs = ("acme/tensor-tricks",), {"version": 1}
threading.Thread(target=fk.get_kernel, args=args, kwargs=kwargs, daemon=True).start()
while not any(pathlib.Path(os.environ["FLASHHUB_CACHE_DIR"]).rglob("big.bin")):
    time.sleep(0.05)
"""

# However long the load takes to reach big.bin, the fork falls inside its pause.
PAUSES_FOR_AN_HOUR = """
from flashhub_kernels._network import deferred_gc
deferred_gc.LONGEST_PAUSE = 3600.0
"""

FORKS = """
pid = os.fork()
if pid == 0:
    fk.get_kernel("acme/other", version=1)
    print(gc.isenabled(), flush=True)
    os._exit(0)
assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0  # else its error is on stderr
"""

# The collector's states from before the load starts, each change as a thread saw it: the
# pause is seen however long the load takes to reach big.bin.
WATCHES_THE_COLLECTOR = """
import gc, threading, time
seen = [gc.isenabled()]
def watch():
    while True:
        if gc.isenabled() != seen[-1]:
            seen.append(gc.isenabled())
        time.sleep(0.001)
threading.Thread(target=watch, daemon=True).start()
"""

WAITS_LONG = """
deadline = time.monotonic() + 30  # before the server gives up holding big.bin (60 s)
while len(seen) < 3 and time.monotonic() < deadline:
    time.sleep(0.05)
print(seen, flush=True)
"""


def run_while_a_load_waits(cdn: CdnServer, code: str, *, first: str = "") -> str:
    """The output of ``code``, run in a child while its load of ``acme/tensor-tricks``
    waits on the CDN for big.bin (``first`` runs before the load starts)."""
    write_blob_kernel(cdn.root, b"big" * 1000, name="big")
    started, release = threading.Event(), threading.Event()
    cdn.inject(f"{BASE}/tensor_tricks/big.bin", held(started, release))
    try:
        return run_python(first + WHILE_A_LOAD_WAITS + code)
    finally:
        release.set()


def test_a_load_waiting_long_on_the_cdn_lets_the_program_collect_garbage(
    cdn: CdnServer,
) -> None:
    """A server's request threads make cyclic garbage while one of its threads waits on a
    stalled CDN: the pause ends before the load does (big.bin is held until the child
    has exited)."""
    output = run_while_a_load_waits(cdn, WAITS_LONG, first=WATCHES_THE_COLLECTOR)
    assert output == "[True, False, True]\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_during_a_load_collects_garbage(cdn: CdnServer) -> None:
    """A process forks (a server's workers, a DataLoader's) while one of its threads
    downloads a kernel: the child, where that thread does not exist, runs with the
    collector on, after a cold load of its own too."""
    write_kernel(cdn.root, "acme/other", 1)
    assert run_while_a_load_waits(cdn, FORKS, first=PAUSES_FOR_AN_HOUR) == "True\n"


@pytest.mark.usefixtures("collector_on")
def test_a_pause_whose_deadline_cannot_start_still_pauses_and_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the process may start no more threads (a container's limit), the load goes
    on with an unbounded pause, and the collector comes back on after it."""

    def refused(timer: threading.Timer) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Timer, "start", refused)
    with collection_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


class LockTheDeadlineWaitsFor:
    """The pause's lock, which the deadline's thread takes only once told to: until then
    it has fired and waits to end the pause."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.deadline_waits, self.let_deadline_in = threading.Event(), threading.Event()

    def __enter__(self) -> None:
        if threading.current_thread().name == "flashhub-gc-pause":
            self.deadline_waits.set()
            self.let_deadline_in.wait(10)
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


@pytest.mark.usefixtures("collector_on")
def test_a_deadline_that_fired_as_its_pause_ended_does_not_end_the_next_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first pause's timer fires and waits for the lock; meanwhile that pause ends (its
    thread then waits for the timer's) and another thread's pause begins, which the timer,
    let in, must leave alone."""
    lock = LockTheDeadlineWaitsFor()
    monkeypatch.setattr(deferred_gc, "_lock", lock)
    monkeypatch.setattr(deferred_gc, "LONGEST_PAUSE", 0.0)
    collector_in_the_next_pause = []

    def next_pause(first_deadline: threading.Thread) -> None:
        while not gc.isenabled():  # until the first pause has ended
            time.sleep(0.001)
        with collection_paused():
            lock.let_deadline_in.set()
            first_deadline.join(10)
            collector_in_the_next_pause.append(gc.isenabled())

    with collection_paused():
        first_deadline = deferred_gc._deadline
        assert first_deadline is not None and lock.deadline_waits.wait(10)
        monkeypatch.setattr(deferred_gc, "LONGEST_PAUSE", 60.0)
        other = threading.Thread(target=next_pause, args=(first_deadline,))
        other.start()
    other.join(10)
    assert not first_deadline.is_alive()
    assert collector_in_the_next_pause == [False]
    assert gc.isenabled()


def test_a_pause_that_ends_leaves_no_thread_behind() -> None:
    # A program that checks for leaked threads right after a load (a test suite's
    # fixture, say) saw the pause's cancelled timer still running.
    left = []
    for _ in range(20):
        with collection_paused():
            assert "flashhub-gc-pause" in [thread.name for thread in threading.enumerate()]
        left += [
            thread.name for thread in threading.enumerate() if thread.name.startswith("flashhub")
        ]
    assert left == []


def test_a_collector_the_program_turned_off_stays_off() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        if was:
            gc.enable()


class Node:
    """A container the collector tracks."""

    link: Node | None = None


IMPORTED = "flashhub_test_imported_in_a_pause"


@pytest.mark.skipif(
    bool(sysconfig.get_config_var("Py_GIL_DISABLED")),
    reason="a free-threaded build keeps what a pause allocated where it is: its gc.freeze "
    "walks the whole heap",
)
@pytest.mark.usefixtures("collector_on")
def test_what_a_pause_kept_goes_to_the_oldest_generation() -> None:
    """So the first allocations after a cold load run no young collection over every
    module, class and function it imported."""
    if gc.get_freeze_count():
        pytest.skip(
            f"{gc.get_freeze_count()} objects are frozen already (CPython 3.12 starts so): "
            "the pause leaves the generations as they are, tested below"
        )
    with collection_paused():
        kept = [Node() for _ in range(2000)]
        sys.modules[IMPORTED] = types.ModuleType(IMPORTED)  # as the first cold load imports
    del sys.modules[IMPORTED]
    oldest = {id(thing) for thing in gc.get_objects(generation=2)}
    assert all(id(node) in oldest for node in kept) and id(kept) in oldest
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("collector_on")
def test_a_pause_that_imports_nothing_leaves_its_garbage_to_young_collections() -> None:
    """A later load (one that failed, say) leaves the young generations as they are: its
    garbage, and the program's, is freed by the next young collection, not kept until a
    full collection, which a program with torch imported may not run for hours."""
    with collection_paused():
        node = Node()
        node.link = node
        ref = weakref.ref(node)
        del node
    gc.collect(1)
    assert ref() is None


@pytest.mark.usefixtures("collector_on")
def test_objects_the_program_froze_stay_frozen() -> None:
    program = [Node() for _ in range(200)]
    gc.freeze()  # as a server does before it forks its workers
    try:
        with collection_paused():
            kept = [Node() for _ in range(2000)]
        # The frozen count alone would not do: frozen objects that other threads (or
        # this one) free meanwhile leave it.
        collected = {id(thing) for thing in gc.get_objects()}  # frozen ones are not listed
        assert not any(id(node) in collected for node in program)
        assert gc.get_freeze_count() >= len(program)
        assert len(kept) == 2000
    finally:
        gc.unfreeze()
    collected = {id(thing) for thing in gc.get_objects()}
    assert all(id(node) in collected for node in program)


@pytest.mark.usefixtures("collector_on")
def test_cyclic_garbage_made_during_a_pause_is_still_collected() -> None:
    with collection_paused():
        node = Node()
        node.link = node
        ref = weakref.ref(node)
        del node
    assert ref() is not None  # a cycle: only the collector frees it
    gc.collect()
    assert ref() is None


@pytest.mark.usefixtures("collector_on")
def test_a_failed_load_resumes_the_collector(cdn: CdnServer) -> None:
    with pytest.raises(fk.errors.KernelNotFoundError):
        fk.get_kernel(REPO, version=1)  # nothing published
    assert gc.isenabled()


# A program that falls back on its own code when a kernel fails to load, calling again
# and again: prints how many of the cycles it dropped before each failed load are still
# alive after a young collection. The program's objects are unfrozen, as in a program
# that is not a forked child of the tests' server.
CYCLES_AFTER_FAILED_LOADS = """
import gc, weakref, flashhub_kernels as fk
gc.unfreeze()
class Node:
    link = None
def failed_load():
    try:
        fk.get_kernel("acme/absent", version=1)
    except ImportError:
        pass
failed_load()  # the first imports the cold path
refs = []
for _ in range(100):
    node = Node()
    node.link = node
    refs.append(weakref.ref(node))
    del node
    failed_load()
gc.collect(1)
print(sum(ref() is not None for ref in refs))
"""


def test_failed_loads_one_after_another_keep_no_garbage_from_young_collections(
    cdn: CdnServer,
) -> None:
    assert run_python(CYCLES_AFTER_FAILED_LOADS).strip() == "0"


# -- the order of the files --------------------------------------------------------------------


def test_the_largest_file_is_fetched_first(cdn: CdnServer) -> None:
    files = kernel_files("tensor_tricks", "ordered")
    files.update({f"tensor_tricks/data/part{i:02d}.bin": bytes([i]) * 100 for i in range(16)})
    big = "tensor_tricks/zz_weights.bin"  # listed last in metadata.json, which is sorted
    files[big] = b"w" * (1 << 20)
    publish(cdn, files)
    assert fk.get_kernel(REPO, version=1).marker() == "ordered"
    gets = [path for path in cdn.gets() if "/build/" in path and not path.endswith(".json")]
    assert len(gets) == len(files)
    # However many threads the pool has, the biggest is among the first requests sent.
    assert f"/{BASE}/{big}" in gets[:MAX_PARALLEL_FILES]


def test_each_python_file_is_compiled_by_the_download_thread_that_fetched_it(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = kernel_files("tensor_tricks", "compiled")
    files["tensor_tricks/sub/extra.py"] = b"VALUE = 1\n"
    files.update({f"tensor_tricks/data/part{i:02d}.bin": bytes([i]) * 100 for i in range(4)})
    publish(cdn, files)
    calls: list[tuple[str, list[str]]] = []  # the thread and the sources of each compile

    def spying(compile_bytecode: Any) -> Any:
        def compiling(entry: Path, sources: Iterable[str]) -> Any:
            calls.append((threading.current_thread().name, list(sources)))
            return compile_bytecode(entry, calls[-1][1])

        return compiling

    monkeypatch.setattr(download, "compile_bytecode", spying(download.compile_bytecode))
    monkeypatch.setattr(staging, "compile_bytecode", spying(staging.compile_bytecode))
    assert fk.get_kernel(REPO, version=1).marker() == "compiled"
    fetched = [
        s for thread, sources in calls if thread.startswith("flashhub-download") for s in sources
    ]
    at_commit = [
        s
        for thread, sources in calls
        if not thread.startswith("flashhub-download")
        for s in sources
    ]
    assert sorted(fetched) == sorted(relpath for relpath in files if relpath.endswith(".py"))
    assert at_commit == []


# -- probing a version without variants.json -----------------------------------------------------


def manifest_of(name: str) -> str:
    return f"kernels/{REPO}/v1/build/{name}/metadata.json"


def test_a_probe_asks_for_a_wave_of_candidates_at_once(cdn: CdnServer) -> None:
    """Without variants.json, the candidates' metadata.json are asked for several at a
    time: the CDN holds its 404 for the best candidate until the request for the last
    of that wave has arrived, which a probe asking one after the other would never send
    first."""
    write_variant(cdn.root, REPO, 1, VARIANT, kernel_files("tensor_tricks", "probed"))
    wave = candidate_names(this_system())[:PROBES_AT_ONCE]
    assert VARIANT not in wave[:-1]  # the kernel's build comes later, or last
    last_asked = threading.Event()
    best_waited: list[bool] = []

    def best(handler: CdnHandler, body: bytes) -> None:
        best_waited.append(last_asked.wait(10))
        handler.send_simple(404, b"not found")

    def last(handler: CdnHandler, body: bytes) -> None:
        last_asked.set()
        if body:  # the kernel's own build, where it is the wave's last
            handler.send_file(body)
        else:
            handler.send_simple(404, b"not found")

    cdn.inject(manifest_of(wave[0]), best)
    cdn.inject(manifest_of(wave[-1]), last)

    assert fk.get_kernel(REPO, version=1).marker() == "probed"

    assert best_waited == [True]
    assert {f"/{manifest_of(name)}" for name in wave} <= set(cdn.gets())


# -- the manifests asked for beside variants.json ------------------------------------------------


@pytest.mark.parametrize("taken", ["own", VARIANT])
def test_the_manifest_of_the_build_taken_is_asked_for_beside_variants_json(
    cdn: CdnServer, taken: str
) -> None:
    """The CDN holds its answer to variants.json until the request for the metadata.json
    of the build taken has arrived: this system's own build, or the universal one. A
    load that asked for it only after reading variants.json would never send it first.
    Each is asked for once."""
    own = build_variant_name(this_system())
    taken = own if taken == "own" else taken
    write_variant(cdn.root, REPO, 1, taken, kernel_files("tensor_tricks", "taken"))
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([taken]))
    manifest_asked = threading.Event()
    index_waited: list[bool] = []

    def index(handler: CdnHandler, body: bytes) -> None:
        index_waited.append(manifest_asked.wait(10))
        handler.send_file(body)

    def manifest(handler: CdnHandler, body: bytes) -> None:
        manifest_asked.set()
        handler.send_file(body)

    cdn.inject(f"kernels/{REPO}/v1/variants.json", index)
    cdn.inject(manifest_of(taken), manifest)

    assert fk.get_kernel(REPO, version=1).marker() == "taken"

    assert index_waited == [True]
    assert cdn.gets("/metadata.json", missed_guesses=False) == [f"/{manifest_of(taken)}"]
    assert cdn.gets("/variants.json") == [f"/kernels/{REPO}/v1/variants.json"]


def test_a_guessed_manifest_that_variants_json_does_not_list_is_never_used(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """The CDN serves a kernel at the name of this system's own build, but variants.json
    lists only the universal build: that is the one loaded, and nothing of the other
    is fetched past its metadata.json or kept."""
    own = build_variant_name(this_system())
    write_variant(cdn.root, REPO, 1, own, kernel_files("tensor_tricks", "unlisted"))
    publish(cdn, kernel_files("tensor_tricks", "listed"))

    assert fk.get_kernel(REPO, version=1).marker() == "listed"

    fetched = [path for path in cdn.gets() if f"/build/{own}/" in path]
    assert fetched == [f"/{manifest_of(own)}"]
    assert not (cache_dir / f"kernels/{REPO}/v1/{own}").exists()
    assert (cache_dir / f"kernels/{REPO}/v1/{VARIANT}").is_dir()


def test_a_guessed_manifest_that_failed_is_asked_for_again_once_listed(
    cdn: CdnServer,
) -> None:
    """A guessed metadata.json the CDN did not serve (an edge not filled yet answers 404)
    is not the answer: the choice asks for it again, as variants.json lists it."""
    own = build_variant_name(this_system())
    write_variant(cdn.root, REPO, 1, own, kernel_files("tensor_tricks", "second answer"))
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([own]))
    cdn.inject(manifest_of(own), status(404))

    assert fk.get_kernel(REPO, version=1).marker() == "second answer"
    assert cdn.gets(f"/{own}/metadata.json") == [f"/{manifest_of(own)}"] * 2


def test_a_probe_asks_for_the_guessed_manifest_once(cdn: CdnServer) -> None:
    """Without variants.json, the probe uses the fetch of this system's own build
    already started, rather than asking for it a second time."""
    own = build_variant_name(this_system())
    write_variant(cdn.root, REPO, 1, own, kernel_files("tensor_tricks", "probed own"))

    assert fk.get_kernel(REPO, version=1).marker() == "probed own"
    assert cdn.gets(f"/{own}/metadata.json") == [f"/{manifest_of(own)}"]


def test_a_load_returns_once_the_guesses_it_did_not_take_are_answered(cdn: CdnServer) -> None:
    """The CDN answers the universal build's guessed metadata.json late: the load, which
    takes this system's own build, returns only once that request has ended, so that no
    request of a load reaches the CDN (or counts against it) after the load."""
    own = build_variant_name(this_system())
    write_variant(cdn.root, REPO, 1, own, kernel_files("tensor_tricks", "own"))
    write_variant(cdn.root, REPO, 1, VARIANT, kernel_files("tensor_tricks", "universal"))
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([own, VARIANT]))
    cdn.inject(manifest_of(VARIANT), delayed(0.5))  # logged when answered

    assert fk.get_kernel(REPO, version=1).marker() == "own"
    assert cdn.gets("/metadata.json") == [f"/{manifest_of(own)}", f"/{manifest_of(VARIANT)}"]


def hang_up(handler: CdnHandler, body: bytes) -> None:
    """Answer nothing: close the connection."""
    handler.close_connection = True


def test_a_probe_asks_again_for_a_guess_a_failing_mirror_answered(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """Mirror A hangs up on variants.json and has no builds (404); mirror B publishes
    this system's own build, without variants.json. The guess beside variants.json got
    A's 404 before A was moved to the back: that is no answer, and the probe asks B."""
    own = build_variant_name(this_system())
    write_variant(cdn.root, REPO, 1, own, kernel_files("tensor_tricks", "from B"))
    (tmp_path / "empty").mkdir()
    failing = CdnServer(tmp_path / "empty").start()
    try:
        failing.inject(f"kernels/{REPO}/v1/variants.json", *[hang_up] * 10)
        fk.configure(cdn_url=f"{failing.url},{cdn.url}")
        assert fk.get_kernel(REPO, version=1).marker() == "from B"
        assert f"/{manifest_of(own)}" in failing.gets()  # the guess went to A first
    finally:
        failing.stop()


# -- reserving disk space ------------------------------------------------------------------------

MIB = 1 << 20
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="fallocate(2) is Linux's")


def allocated(path: Path) -> int:
    """Bytes of disk the file holds, its reserved blocks included."""
    return path.stat().st_blocks * 512


@linux_only
def test_a_large_file_of_known_size_has_its_space_reserved_and_its_length_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "weights.bin"
    writer = HashingWriter(path, expected_size=4 * MIB)
    assert path.stat().st_size == 0  # the length is what was written: resume reads it
    assert allocated(path) >= 4 * MIB
    writer.write(b"x" * (3 * MIB // 2))
    writer.close()
    assert path.stat().st_size == 3 * MIB // 2
    resumed = HashingWriter(path, expected_size=4 * MIB)  # continues the kept part
    assert resumed.size == 3 * MIB // 2
    resumed.reset()  # a mirror starts the file over: the space is reserved again
    assert path.stat().st_size == 0 and allocated(path) >= 4 * MIB
    resumed.close()


@linux_only
def test_small_files_and_files_of_unknown_size_reserve_nothing(tmp_path: Path) -> None:
    HashingWriter(tmp_path / "small.py", expected_size=MIN_RESERVED_BYTES - 1).close()
    HashingWriter(tmp_path / "unknown.bin", limit=64 * MIB).close()
    assert allocated(tmp_path / "small.py") == allocated(tmp_path / "unknown.bin") == 0


# The plainest load, an import statement, in a mount namespace of its own whose cache is
# a 2 MiB tmpfs.
NO_ROOM = """
import os, pathlib, sys
try:
    import flashhub.acme.tensor_tricks.v1
except ImportError as exc:
    print(type(exc).__name__, exc)
print("half-imported:", "flashhub.acme.tensor_tricks.v1" in sys.modules)
left = [p.name for p in pathlib.Path(os.environ["FLASHHUB_CACHE_DIR"]).rglob("*.bin")]
print("left in the cache:", left)
"""


@linux_only
def test_a_cache_without_room_for_a_file_is_refused_before_the_file_is_fetched(
    cdn: CdnServer, cache_dir: Path
) -> None:
    blob = bytes(range(256)) * (12 * 1024)  # 3 MiB, more than the 2 MiB the cache holds
    blob_path = write_blob_kernel(cdn.root, blob, with_sizes=True)
    cache_dir.mkdir(mode=0o700)
    mount = f"mount -t tmpfs -o size=2m,mode=0700 tmpfs {cache_dir}"
    result = python_after_mount(mount, NO_ROOM)
    assert result.stdout.startswith("CacheError cannot write "), result.stderr
    assert "No space left on device" in result.stdout and "free disk space" in result.stdout
    assert "half-imported: False" in result.stdout
    assert "left in the cache: []" in result.stdout  # no part of it, staged or kept
    assert cdn.gets("metadata.json")  # the load got as far as the manifest's sizes ...
    assert cdn.gets(blob_path) == []  # ... and asked for not one byte of the file


# ext4 allocates all the free space it has before fallocate answers ENOSPC: a size past
# the free space is refused without asking, so a manifest stating an absurd size cannot
# fill the disk, even for a moment. Run in a 32 MiB ext4 of the test's own.
ABSURD_SIZE = """
import os, sys
from flashhub_kernels._utils.reserve import reserve
fd = os.open(os.path.join(sys.argv[1], "weights.bin"), os.O_RDWR | os.O_CREAT, 0o644)
try:
    reserve(fd, 0, 1 << 40)
except OSError as exc:
    print(exc.strerror, os.fstat(fd).st_blocks)
"""


@linux_only
def test_a_size_past_the_free_space_is_refused_without_allocating_any(tmp_path: Path) -> None:
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("needs mkfs.ext4, to make a small ext4 filesystem")
    image, mounted = tmp_path / "ext4.img", tmp_path / "ext4"
    mounted.mkdir()
    with image.open("wb") as file:
        file.truncate(32 * MIB)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True, capture_output=True)
    result = python_after_mount(f"mount -o loop {image} {mounted}", ABSURD_SIZE, str(mounted))
    if result.returncode == 3:
        pytest.skip(f"this machine mounts no loop device: {result.stderr.strip()}")
    assert result.stdout.split() == ["No", "space", "left", "on", "device", "0"], result.stderr


# -- what is synced ----------------------------------------------------------------------------


class Syncs:
    """The files ``os.fsync`` was called on, by path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[Path] = []
        real = os.fsync

        def fsync(fd: int) -> None:
            self.paths.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
            real(fd)

        monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_write_atomic_syncs_unless_told_the_record_need_not_be_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs = Syncs(monkeypatch)
    write_atomic(tmp_path / "synced", b"a")
    write_atomic(tmp_path / "not-synced", b"b", durable=False)
    assert [path.name.split(".")[1] for path in syncs.paths] == ["synced"]  # .synced.<hex>.tmp
    assert (tmp_path / "synced").read_bytes() == b"a"
    assert (tmp_path / "not-synced").read_bytes() == b"b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["not-synced", "synced"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_a_cold_load_syncs_nothing_in_the_entry_and_the_warm_path_trusts_it(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    publish(cdn, kernel_files("tensor_tricks", "unsynced"))
    syncs = Syncs(monkeypatch)
    assert fk.get_kernel(REPO, version=1).marker() == "unsynced"
    assert not [path for path in syncs.paths if (cache_dir / "kernels") in path.parents]
    receipts = list((cache_dir / "kernels").rglob(".flashhub-receipt.json"))
    assert len(receipts) == 1
    cdn.clear_log()
    fk.get_kernel(REPO, version=1)
    assert cdn.gets() == []  # the unsynced receipt vouches for the entry: warm


def test_a_receipt_a_power_cut_emptied_is_no_receipt_and_the_entry_is_fetched_again(
    cdn: CdnServer, cache_dir: Path
) -> None:
    publish(cdn, kernel_files("tensor_tricks", "refetched"))
    fk.get_kernel(REPO, version=1)
    (receipt,) = (cache_dir / "kernels").rglob(".flashhub-receipt.json")
    receipt.write_bytes(b"")  # what a rename that reached the disk before its bytes leaves
    cdn.clear_log()
    out = run_python(
        f"import flashhub_kernels as fk; print(fk.get_kernel({REPO!r}, version=1).marker())"
    )
    assert out.strip() == "refetched"
    assert f"/{BASE}/tensor_tricks/__init__.py" in cdn.gets()
    assert receipt.read_bytes()  # written again, whole
