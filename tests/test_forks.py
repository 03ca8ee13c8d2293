"""The processes and threads a training job makes around loads: workers forked while a
load's own thread still runs (``os.fork``, a ``fork`` pool, a DataLoader's), workers
started by ``spawn`` and ``forkserver`` that unpickle a kernel's objects by name, and
threads importing versions of one cold kernel while another reloads it. The threads a
load starts import nothing, so that a fork while they run leaves no import half done; a
fork while the program's own thread imports the library's cold path leaves the child
to import it afresh."""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import run_python
from support.cdn_server import CdnServer, held
from support.preloaded import REAP_FORKED_CHILD
from support.trees import MIB_BLOB, kernel_files, local_variant, write_kernel, write_variant
from test_signing_load import key_pair, sign

REPO = "acme/tensor-tricks"
MODULE = "flashhub.acme.tensor_tricks.v1"
VERSIONS_JSON = f"/kernels/{REPO}/versions.json"
# The load returns with its read of versions.json still running (the CDN holds it), and
# the process forks workers (argv[1] says how). Each uses the kernel's op, imports the
# kernel afresh, and imports acme/other, cold: both workers at once.
FORKED_WHILE_THE_VERSIONS_READ_RUNS = """
import importlib, os, sys, threading
import multiprocessing as mp
import torch
import flashhub.acme.tensor_tricks.v1 as k

assert any(t.name == "flashhub-request" for t in threading.enumerate())  # still reading

def work(i):
    x = torch.tensor([float(i)])
    doubled = k.double(x)
    del sys.modules["flashhub.acme.tensor_tricks.v1"]
    again = importlib.import_module("flashhub.acme.tensor_tricks.v1")
    other = importlib.import_module("flashhub.acme.other.v1")
    return f"{doubled.item()} {again.marker()} {other.marker()}"

class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        return work(i)

if sys.argv[1] == "os.fork":
    for i in range(2):
        if os.fork() == 0:
            print(work(i), flush=True)
            os._exit(0)
    for _ in range(2):
        assert os.waitstatus_to_exitcode(os.wait()[1]) == 0
elif sys.argv[1] == "pool":
    with mp.get_context("fork").Pool(2) as pool:
        print("\\n".join(pool.map(work, range(2))))
else:
    # Forked as on Linux before Python 3.14, whose default start method is forkserver.
    loader = torch.utils.data.DataLoader(
        Data(), num_workers=2, batch_size=None, multiprocessing_context="fork"
    )
    print("\\n".join(loader))
"""


@pytest.mark.usefixtures("version_check_on")
@pytest.mark.parametrize("how", ["os.fork", "pool", "dataloader"])
def test_workers_forked_while_a_loads_own_thread_runs_use_the_kernel_and_load_another(
    cdn: CdnServer, how: str
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, "acme/other", 1)
    reading, release = threading.Event(), threading.Event()
    cdn.inject(VERSIONS_JSON, held(reading, release))
    try:
        printed = run_python(FORKED_WHILE_THE_VERSIONS_READ_RUNS.replace("sys.argv[1]", repr(how)))
    finally:
        release.set()
    other = f"acme/other@v1:{local_variant()}"
    assert sorted(printed.split("\n")[-3:]) == [
        "",
        f"0.0 {REPO}@v1:{local_variant()} {other}",
        f"2.0 {REPO}@v1:{local_variant()} {other}",
    ]
    fetched = [path for path in cdn.gets() if "/build/" in path]
    assert len(fetched) == len(set(fetched))  # each file once: the workers waited for each other


# A cold load, then the modules that the threads it started imported (each as
# "<thread>: <module>"), once they have all ended.
IMPORTS_OFF_THE_LOADING_THREAD = """
import sys, threading
imports = []

def seen(event, args):
    if event == "import" and threading.current_thread() is not threading.main_thread():
        imports.append(f"{threading.current_thread().name}: {args[0]}")

sys.addaudithook(seen)
import flashhub_kernels as fk
fk.get_kernel("acme/tensor-tricks", version=1)
for thread in threading.enumerate():
    if thread is not threading.main_thread():
        thread.join(30)
print(imports)
"""


def publish_to_probe(cdn: CdnServer) -> None:
    """acme/tensor-tricks v1 without variants.json (a load probes for its build): Python
    files, which the download threads compile, and 2 MiB of data, whose space they reserve."""
    files = {**kernel_files("tensor_tricks", "probed"), "tensor_tricks/blob.bin": MIB_BLOB * 2}
    write_variant(cdn.root, REPO, 1, local_variant(), files, with_sizes=True)
    (cdn.root / f"kernels/{REPO}/versions.json").write_text("[1]")


@pytest.mark.usefixtures("version_check_on")
def test_the_threads_of_a_load_import_nothing(cdn: CdnServer) -> None:
    """Every module the probes, downloads and version check run was imported by the
    loading thread. A thread that imports while the program forks leaves that module's
    import lock held in the child, and the child's next import of it waits forever."""
    publish_to_probe(cdn)
    assert run_python(IMPORTS_OFF_THE_LOADING_THREAD, torch_only=True) == "[]\n"


@pytest.mark.signing
@pytest.mark.usefixtures("version_check_on")
def test_the_threads_of_a_load_checking_signatures_import_nothing(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """The same with a key trusted: the probes' threads fetch and check signatures."""
    publish_to_probe(cdn)
    keyfile, key = key_pair(tmp_path, "acme")
    sign(cdn.root, keyfile)
    trusted = {"FLASHHUB_TRUSTED_KEYS": key.public_line}
    assert run_python(IMPORTS_OFF_THE_LOADING_THREAD, env=trusted, torch_only=True) == "[]\n"


# A thread of the program makes the process's first cold load, held in the import of
# the library's download module; the process forks; the child loads another kernel cold,
# which needs that module too.
FORKED_WHILE_THE_COLD_PATH_IMPORTS = (
    """
import importlib.machinery, os, sys, threading, time
from pathlib import Path

HELD = "flashhub_kernels._network.download"  # a test puts another in its place
started, go = Path("started"), Path("go")


class HoldsTheImport:
    def find_spec(self, name, path, target=None):
        if name != HELD or started.exists():
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module

        def exec_module(module):
            started.touch()
            while not go.exists():
                time.sleep(0.01)
            run(module)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, HoldsTheImport())
import flashhub_kernels as fk

threading.Thread(target=fk.get_kernel, args=("acme/tensor-tricks",), kwargs={"version": 1}).start()
while not started.exists():
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    print("child:", fk.get_kernel("acme/other", version=1).marker(), flush=True)
    os._exit(0)
go.touch()
"""
    + REAP_FORKED_CHILD
)


@pytest.mark.parametrize(
    "held", ["flashhub_kernels._network.download", "filelock", "requests", "urllib3"]
)
def test_a_child_forked_while_a_thread_imports_the_cold_path_loads_a_kernel(
    cdn: CdnServer, tmp_path: Path, held: str
) -> None:
    """The child does not wait for the module the fork left half imported, its import
    lock held by a thread the child does not have: it imports the module afresh. The
    library's own modules, and those of the packages its cold path imports."""
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, "acme/other", 1)
    default = 'HELD = "flashhub_kernels._network.download"'
    code = FORKED_WHILE_THE_COLD_PATH_IMPORTS.replace(default, f"HELD = {held!r}")
    printed = run_python(code, cwd=tmp_path, torch_only=True)
    assert printed == f"child: acme/other@v1:{local_variant()}\n"


@pytest.fixture
def version_check_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHHUB_NO_VERSION_CHECK")  # conftest turns it off for the rest


# Run as a script (spawn and forkserver import the main module by its path): loads the
# kernel, then a worker of argv[1]'s start method calls, by name, a function of the
# kernel's submodule and a method of an instance of its class.
UNPICKLED_BY_NAME = """
import multiprocessing as mp
import os, shutil, sys
import torch


def loaded_from():
    return sys.modules["flashhub.acme.tensor_tricks.v1"].__file__


if __name__ == "__main__":
    from flashhub.acme.tensor_tricks.v1 import Thing
    from flashhub.acme.tensor_tricks.v1.helpers import shout

    os.environ.update(dict(arg.split("=") for arg in sys.argv[2:]))  # the workers' settings
    with mp.get_context(sys.argv[1]).Pool(1) as pool:
        print(pool.apply(shout), pool.apply(getattr, (Thing(7), "value")), pool.apply(loaded_from))
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
@pytest.mark.parametrize("cache", ["warm", "cold"])
def test_spawned_workers_unpickle_a_kernels_objects_by_name(
    cdn: CdnServer, tmp_path: Path, cache_dir: Path, method: str, cache: str
) -> None:
    """The worker imports the kernel through the hook: from the cache its parent filled,
    offline, or downloaded into a cache of its own."""
    write_kernel(cdn.root, REPO, 1)
    script = tmp_path / "workers.py"
    script.write_text(UNPICKLED_BY_NAME)
    workers = cache_dir.with_name("workers") if cache == "cold" else cache_dir
    settings = [f"FLASHHUB_CACHE_DIR={workers}"]
    if cache == "warm":
        settings.append("FLASHHUB_OFFLINE=1")
    result = subprocess.run(
        [sys.executable, str(script), method, *settings],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    shouted, value, file = result.stdout.split()
    entry = workers / f"kernels/{REPO}/v1/{local_variant()}"
    assert (shouted, value, file) == (
        f"{REPO.upper()}@V1:{local_variant().upper()}",
        "7",
        str(entry / "tensor_tricks/__init__.py"),
    )


def test_threads_import_versions_of_one_cold_kernel_and_reload_it_at_once(
    cdn: CdnServer,
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    import flashhub_kernels as fk

    loads = [
        lambda: importlib.import_module(MODULE),
        lambda: importlib.import_module("flashhub.acme.tensor_tricks.v2"),
        lambda: fk.get_kernel(REPO, version=1),
        lambda: fk.get_kernel(REPO, version=2),
    ] * 3
    start = threading.Barrier(len(loads))
    modules: list[object] = [None] * len(loads)

    def load(i: int) -> None:
        start.wait()
        modules[i] = loads[i]()

    run_threads([lambda i=i: load(i) for i in range(len(loads))])
    v1, v2 = sys.modules[MODULE], sys.modules["flashhub.acme.tensor_tricks.v2"]
    assert modules == [v1, v2, v1, v2] * 3 and v1 is not v2
    fetched = [path for path in cdn.gets() if "/build/" in path]
    assert len(fetched) == len(set(fetched))

    def import_again() -> None:
        for _ in range(50):
            k = importlib.import_module(MODULE)
            assert importlib.import_module(f"{MODULE}.helpers").shout() == k.marker().upper()

    def reload() -> None:
        for _ in range(20):
            importlib.reload(importlib.reload(v1).helpers)

    run_threads([import_again, import_again, reload])
    assert sys.modules[MODULE] is v1


def run_threads(targets: list[Callable[[], object]]) -> None:
    """Run each of ``targets`` on a thread of its own; raise the first error any raised."""
    errors: list[BaseException] = []

    def run(target: Callable[[], object]) -> None:
        try:
            target()
        except BaseException as exc:  # raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(target,)) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]
