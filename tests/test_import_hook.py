"""The import hook and the public API against a real loopback CDN."""

from __future__ import annotations

import importlib
import importlib.resources
import inspect
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import run_python
from flashhub_kernels.errors import (
    BackendUnavailableError,
    KernelImportError,
    KernelNotFoundError,
    NoCompatibleVariantError,
)
from support.builder import RAN_DIR_VAR, loaded_variant, write_builder_kernel
from support.cdn_server import CdnHandler, CdnServer, Fault, held
from support.machines import CPU_BUILD, CPU_ONLY_CHILD, CUDA_BUILD, CUDA_MACHINE, run_as
from support.preloaded import REAP_FORKED_CHILD, appears, run_code, start_code
from support.trees import cpu_variant, kernel_files, local_variant, write_kernel, write_variant

REPO = "acme/tensor-tricks"
PLAIN = "flashhub.acme.tensor_tricks.v1"
FORCED = f"{PLAIN}_cpu"  # the same variant on a machine with a CPU-only torch
# What importing the packages and reading the settings must not import.
HEAVY = ("torch", "requests", "urllib3", "http.client", "filelock", "asyncio")
# What a warm load must not import: the HTTP stack and the lock library.
WARM_LOAD_LIBRARIES = ("requests", "urllib3", "filelock")


def test_import_statement_loads_the_matching_variant_only(cdn: CdnServer) -> None:
    write_kernel(
        cdn.root, REPO, 1, ["torch-universal", local_variant(), "torch212-cxx11-cu126-x86_64-linux"]
    )
    import flashhub.acme.tensor_tricks.v1 as k

    assert k.marker() == f"{REPO}@v1:{local_variant()}"
    fetched = cdn.gets()
    universal = f"/kernels/{REPO}/v1/build/torch-universal/metadata.json"  # asked beside the index
    assert all("/torch-universal/" not in p and "cu126" not in p for p in fetched if p != universal)
    assert sum(p.endswith(".py") for p in fetched) == 3
    assert k.__spec__.origin == k.__file__ and Path(k.__file__).is_file()
    assert k.__path__ == [str(Path(k.__file__).parent)]


def test_two_versions_side_by_side(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    from flashhub.acme.tensor_tricks import v1, v2

    assert v1 is not v2
    assert "@v1:" in v1.marker() and "@v2:" in v2.marker()
    assert v1.Thing is not v2.Thing
    assert v1.helpers.shout() != v2.helpers.shout()


def test_get_kernel_returns_the_module_of_the_import_statement(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    by_function = fk.get_kernel(REPO, version=1)
    import flashhub.acme.tensor_tricks.v1 as by_statement

    assert by_function is by_statement
    assert fk.get_kernel(REPO, revision="v1") is by_statement
    assert fk.get_kernel(REPO, revision="1") is by_statement


def test_submodules_resources_source_and_reload(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    k = fk.get_kernel(REPO, version=1)
    helpers = importlib.import_module("flashhub.acme.tensor_tricks.v1.helpers")
    assert helpers is k.helpers and helpers.shout() == k.marker().upper()
    table = importlib.resources.files(k).joinpath("data/table.txt").read_text()
    assert table.startswith("table of acme/tensor-tricks@v1")
    assert "return x + 1" in inspect.getsource(k.some_function)
    cdn.clear_log()
    reloaded = importlib.reload(k)
    assert reloaded is k and k.some_function(1) == 2
    assert cdn.gets() == []


def test_pickle_round_trip_in_a_fresh_process(cdn: CdnServer, tmp_path: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    k = fk.get_kernel(REPO, version=1)
    blob = tmp_path / "thing.pkl"
    blob.write_bytes(pickle.dumps(k.Thing(41)))
    cdn.clear_log()
    code = f"import pickle; t = pickle.loads(open({str(blob)!r}, 'rb').read())"
    out = run_python(code + "; print(t.value + 1, type(t).__module__)")
    assert out.split() == ["42", "flashhub.acme.tensor_tricks.v1"]
    assert cdn.gets() == []  # the cache is warm: the child made no request


def test_fresh_interpreter_cold_then_warm_makes_zero_requests(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    code = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
    assert run_python(code).strip() == f"{REPO}@v1:{local_variant()}"
    assert len(cdn.gets(missed_guesses=False)) == 6  # variants.json, metadata.json, four files
    cdn.clear_log()
    assert run_python(code).strip() == f"{REPO}@v1:{local_variant()}"
    assert cdn.requests == []
    # A warm load imports neither the HTTP stack nor the lock library.
    libraries = f"import sys; print(sorted(set({WARM_LOAD_LIBRARIES!r}) & set(sys.modules)))"
    assert run_python(f"{code}\n{libraries}", torch_only=True).splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", ["get_kernel", "kernelize", "LayerRepository"])
def test_an_api_name_imported_from_flashhub_is_refused_naming_flashhub_kernels(
    name: str,
) -> None:
    # What `from kernels import get_kernel` becomes at a hasty switch: it gave an empty
    # org package, and the call failed with "'module' object is not callable".
    with pytest.raises(ImportError, match=f"{name} is the API's") as raised:
        exec(f"from flashhub import {name}", {})
    assert raised.value.hint == f"from flashhub_kernels import {name}"  # type: ignore[attr-defined]
    assert f"flashhub.{name}" not in sys.modules


@pytest.mark.parametrize("name", ["v0", "v01", "V1", "latest", "v1_cudaa"])
@pytest.mark.parametrize(
    "form", ["import flashhub.acme.tensor_tricks.{}", "from flashhub.acme.tensor_tricks import {}"]
)
def test_a_misspelt_version_is_refused_saying_how_versions_are_named(
    cdn: CdnServer, name: str, form: str
) -> None:
    # A ModuleNotFoundError would be a bare "No module named", or "cannot import name"
    # for the `from` form.
    with pytest.raises(KernelImportError, match=f"{name} is not a version of .*v<N>") as raised:
        exec(form.format(name), {})
    assert raised.value.name == f"flashhub.acme.tensor_tricks.{name}"
    assert cdn.requests == []


def test_a_local_kernels_missing_submodule_is_still_not_found(tmp_path: Path) -> None:
    # Its module is flashhub._local.<pkg>_<digest>: its submodules have four parts, like a
    # kernel version, and its code may try one (`except ModuleNotFoundError`).
    for relpath, data in kernel_files("tensor_tricks", "local").items():
        path = tmp_path / "build" / local_variant() / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    kernel = fk.get_local_kernel(tmp_path)
    with pytest.raises(ModuleNotFoundError) as raised:
        importlib.import_module(f"{kernel.__name__}.optional_part")
    assert type(raised.value) is ModuleNotFoundError


def test_python_m_flashhub_says_how_to_run_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "flashhub"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "hint: run the flashhub command, or python -m flashhub_kernels" in done.stderr


def test_name_mapping_tries_dashes_then_the_literal_name(cdn: CdnServer) -> None:
    write_kernel(cdn.root, "acme/under_score", 1)
    import flashhub.acme.under_score.v1 as k

    assert k.marker().startswith("acme/under_score@v1")
    assert fk.get_loaded_kernels()[-1].repo_id == "acme/under_score"


@pytest.mark.parametrize("prefix", ["", "deep/prefix"])
def test_prefixes(cdn: CdnServer, prefix: str) -> None:
    write_kernel(cdn.root, REPO, 1, prefix=prefix)
    fk.configure(prefix=prefix)
    assert fk.get_kernel(REPO, version=1).marker().startswith(REPO)
    assert all(p.startswith(f"/{prefix}/acme/" if prefix else "/acme/") for p in cdn.gets())


def test_probing_without_variants_json_prefers_the_best_candidate(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, ["torch-universal", local_variant()], with_variants_json=False)
    k = fk.get_kernel(REPO, version=1)
    assert k.marker().endswith(local_variant())
    assert not any("/torch-universal/" in p for p in cdn.gets() if not p.endswith(".json"))
    # A second process resolves from what the first one learnt: no requests at all.
    cdn.clear_log()
    run_python(f"import flashhub_kernels as fk; fk.get_kernel({REPO!r}, version=1)")
    assert cdn.requests == []


def test_no_compatible_variant_lists_every_variant(cdn: CdnServer) -> None:
    variants = ["torch212-cxx11-cu126-x86_64-linux", "torch213-cxx11-cpu-aarch64-linux", "bogus"]
    write_kernel(cdn.root, REPO, 1, variants)
    with pytest.raises(NoCompatibleVariantError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert isinstance(info.value, ImportError)
    for name in variants:
        assert name in message
    assert "hint:" in message
    assert "flashhub.acme.tensor_tricks.v1" not in sys.modules
    assert not any("/build/" in p for p in cdn.gets(missed_guesses=False))


def test_not_found(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    with pytest.raises(KernelNotFoundError, match="published versions: 1"):
        fk.get_kernel(REPO, version=7)
    with pytest.raises(ModuleNotFoundError):
        import flashhub.acme.nothing_here.v1  # noqa: F401
    assert "flashhub.acme.nothing_here.v1" not in sys.modules


def test_failed_exec_leaves_no_half_module(cdn: CdnServer) -> None:
    files = {"broken/__init__.py": b"raise RuntimeError('kernel bug')\n"}
    write_variant(cdn.root, "acme/broken", 1, "torch-universal", files)
    with pytest.raises(RuntimeError, match="kernel bug"):
        fk.get_kernel("acme/broken", version=1)
    assert "flashhub.acme.broken.v1" not in sys.modules


def test_find_spec_does_no_network_io(cdn: CdnServer, tmp_path: Path) -> None:
    """A thread importing an unrelated module is not held up by another thread's download.

    The server holds one kernel file until the unrelated import has finished: if the
    download held the global import lock, that import could never finish (the test
    would time out instead of passing).
    """
    write_kernel(cdn.root, REPO, 1)
    downloading, release = threading.Event(), threading.Event()
    ops = f"kernels/{REPO}/v1/build/{local_variant()}/tensor_tricks/_ops.py"
    cdn.inject(ops, held(downloading, release))
    (tmp_path / "unrelated_mod_xyz.py").write_text("VALUE = 1\n")
    sys.path.insert(0, str(tmp_path))
    loader = threading.Thread(target=fk.get_kernel, args=(REPO,), kwargs={"version": 1})
    try:
        loader.start()
        assert downloading.wait(30)
        import unrelated_mod_xyz

        assert unrelated_mod_xyz.VALUE == 1
        assert loader.is_alive(), "the kernel download should still be held by the server"
    finally:
        release.set()
        loader.join()
        sys.path.remove(str(tmp_path))
    assert "flashhub.acme.tensor_tricks.v1" in sys.modules


# A thread imports argv[3] and is held in a download (more names, after commas: a thread
# each, started then and waiting for something); the process forks; the child imports
# argv[4] and prints its name.
FORK_WHILE_DOWNLOADING = """
import importlib, os, sys, threading, time
from pathlib import Path

go, forked, loading, wanted = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
first, *more = loading.split(",")
threading.Thread(target=importlib.import_module, args=(first,), daemon=True).start()
while not go.exists():  # the server holds a file of the download: the thread is in it
    time.sleep(0.01)

def waiting(thread):
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code.co_name != "acquire":
        frame = frame.f_back
    return frame is not None

for name in more:
    thread = threading.Thread(target=importlib.import_module, args=(name,), daemon=True)
    thread.start()
    while not waiting(thread):
        time.sleep(0.01)
pid = os.fork()
if pid == 0:
    k = importlib.import_module(wanted)
    print("child:", k.__name__, flush=True)
    os._exit(0)
forked.touch()
deadline = time.monotonic() + 30  # only a hung child takes this long
while time.monotonic() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        sys.exit(os.waitstatus_to_exitcode(status))
    time.sleep(0.05)
os.kill(pid, 9)
print("child: hung", flush=True)
sys.exit(1)
"""


def fork_while_downloading(
    cdn: CdnServer, held_file: str, loading: str, wanted: str, *, prelude: str = ""
) -> str:
    """Run :data:`FORK_WHILE_DOWNLOADING` (after ``prelude``) while the CDN holds
    ``held_file``, released once the child is forked; what the child printed."""
    downloading, release = threading.Event(), threading.Event()
    cdn.inject(held_file, held(downloading, release))
    go, forked = cdn.root.parent / "go", cdn.root.parent / "forked"
    code = prelude + FORK_WHILE_DOWNLOADING
    args = (str(go), str(forked), loading, wanted)
    process = start_code(code, *args, env=dict(os.environ))
    try:
        assert downloading.wait(30)
        go.touch()
        appears(forked, process, timeout=30)
    finally:
        release.set()  # the parent's download completes; the child waits for it
    output, err = process.communicate(timeout=60)
    assert process.returncode == 0, output + err
    return output.strip()


def test_a_child_forked_while_a_thread_downloads_imports_the_kernel(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    ops = f"kernels/{REPO}/v1/build/{local_variant()}/tensor_tricks/_ops.py"
    name = "flashhub.acme.tensor_tricks.v1"
    assert fork_while_downloading(cdn, ops, name, name) == f"child: {name}"
    assert len(cdn.gets("_ops.py")) == 1  # the child found what the parent committed


@pytest.mark.parametrize("wanted", [PLAIN, FORCED])
def test_a_child_forked_while_a_thread_waits_for_the_twin_import_imports_either_name(
    cdn: CdnServer, wanted: str
) -> None:
    """One thread downloads the kernel as ``v1``; another imports ``v1_cpu`` and waits for
    it: the child starts either name afresh, not waiting for a lock of a thread it lacks."""
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    ops = f"kernels/{REPO}/v1/build/{cpu_variant()}/tensor_tricks/_ops.py"
    loading = f"{PLAIN},{FORCED}"
    printed = fork_while_downloading(cdn, ops, loading, wanted, prelude=CPU_ONLY_CHILD)
    assert printed == f"child: {wanted}"


@pytest.mark.parametrize("wanted", ["flashhub.acme.top.v1", "flashhub.acme.base.v1"])
def test_a_child_forked_while_a_kernel_downloads_what_it_depends_on_imports_either(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wanted: str
) -> None:
    """The thread runs acme/top's code, which loads acme/base first (kernel-depends),
    held in its download: the child starts acme/top afresh, not the half-made module."""
    monkeypatch.setenv(RAN_DIR_VAR, str(tmp_path))
    write_builder_kernel(cdn.root, "acme/base", 1)
    write_builder_kernel(cdn.root, "acme/top", 1, kernel_depends=[("acme/base", 1)])
    ops = f"kernels/acme/base/v1/build/{loaded_variant()}/_ops.py"
    assert fork_while_downloading(cdn, ops, "flashhub.acme.top.v1", wanted) == f"child: {wanted}"


# A thread imports argv[1], whose submodule `slow` says it runs and waits to be let go (a
# kernel's native extension loading, say); the process forks, lets it go, and the child
# imports argv[1] too.
FORK_WHILE_A_SUBMODULE_RUNS = (
    """
import importlib, os, sys, threading, time
from pathlib import Path

name, started = sys.argv[1], Path(os.environ["TEST_SUBMODULE_STARTED"])
threading.Thread(target=importlib.import_module, args=(name,), daemon=True).start()
while not started.exists():
    time.sleep(0.01)
pid = os.fork()
if pid == 0:
    k = importlib.import_module(name)
    print("child:", k.slow.let_go(), flush=True)
    os._exit(0)
Path(os.environ["TEST_SUBMODULE_GO"]).touch()
"""
    + REAP_FORKED_CHILD
)
SLOW_SUBMODULE = b"""
import os, time

open(os.environ["TEST_SUBMODULE_STARTED"], "a").close()
while not os.path.exists(os.environ["TEST_SUBMODULE_GO"]):
    time.sleep(0.01)


def let_go():
    return "let go"
"""


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_a_child_forked_while_a_thread_runs_a_kernels_submodule_imports_the_kernel(
    cdn: CdnServer, tmp_path: Path, warm: bool
) -> None:
    """The thread runs the kernel's ``__init__``, held in its submodule's import: the
    child starts both afresh, not waiting for the submodule's lock of a thread it lacks."""
    files = kernel_files("tensor_tricks", "slow")
    files["tensor_tricks/__init__.py"] += b"from . import slow\n"
    files["tensor_tricks/slow.py"] = SLOW_SUBMODULE
    write_variant(cdn.root, REPO, 1, local_variant(), files)
    env = {
        **os.environ,
        "TEST_SUBMODULE_STARTED": str(tmp_path / "started"),
        "TEST_SUBMODULE_GO": str(tmp_path / "go"),
    }
    if warm:  # a cached kernel: the import table answers, no request
        (tmp_path / "go").touch()
        run_code(f"import {PLAIN}", env=env)
        (tmp_path / "go").unlink()
        (tmp_path / "started").unlink()
    child = run_code(FORK_WHILE_A_SUBMODULE_RUNS, PLAIN, env=env, timeout=60)
    assert (child.returncode, child.stdout) == (0, "child: let go\n"), child.stderr


def test_file_url_mirror(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror"
    write_kernel(mirror, REPO, 1)
    fk.configure(cdn_url=mirror.as_uri())
    assert fk.get_kernel(REPO, version=1).marker().startswith(REPO)


def test_offline_mode(cdn: CdnServer, monkeypatch: pytest.MonkeyPatch) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    fk.get_kernel(REPO, version=1)
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    with pytest.raises(fk.errors.OfflineError, match="FLASHHUB_OFFLINE"):
        fk.get_kernel(REPO, version=2)
    del sys.modules["flashhub.acme.tensor_tricks.v1"]
    assert run_python("import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())").startswith(
        REPO
    )
    assert cdn.requests == []


def test_backend_cpu_selects_the_cpu_variant(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, ["torch-universal", cpu_variant()])
    k = fk.get_kernel(REPO, version=1, backend="cpu")
    assert k.__name__ == "flashhub.acme.tensor_tricks.v1_cpu"
    assert k.marker().endswith(cpu_variant())
    with pytest.raises(ValueError, match="backend"):
        fk.get_kernel(REPO, version=1, backend="tpu")


@pytest.mark.parametrize(
    "call",
    [fk.get_kernel, fk.install_kernel, fk.has_kernel, fk.get_kernel_variants],
    ids=lambda call: call.__name__,
)
def test_a_misspelt_backend_is_refused_naming_the_known_ones(
    cdn: CdnServer, call: Callable[..., object]
) -> None:
    write_kernel(cdn.root, REPO, 1, ["torch-universal", cpu_variant()])

    with pytest.raises(ValueError, match="unknown backend 'cdua': use one of cpu, cuda"):
        call(REPO, version=1, backend="cdua")

    assert cdn.requests == []


@pytest.mark.parametrize("forced_first", [True, False], ids=["forced-first", "plain-first"])
@pytest.mark.usefixtures("cpu_only_torch")
def test_forcing_the_backend_this_machine_runs_gives_the_same_module(
    cdn: CdnServer, forced_first: bool
) -> None:
    # This machine's torch runs on the CPU: forcing "cpu" selects the variant it picks anyway.
    write_kernel(cdn.root, REPO, 1, ["torch-universal", cpu_variant()])
    loads = [
        lambda: fk.get_kernel(REPO, version=1, backend="cpu"),
        lambda: fk.get_kernel(REPO, version=1),
    ]
    first, second = loads if forced_first else loads[::-1]
    module = first()
    assert second() is module
    assert importlib.import_module("flashhub.acme.tensor_tricks.v1") is module
    assert importlib.import_module("flashhub.acme.tensor_tricks.v1_cpu") is module
    assert module.__spec__.name == module.__name__
    assert [k.module for k in fk.get_loaded_kernels()] == [module]
    assert len(cdn.gets("_ops.py")) == 1


def test_forcing_another_backend_than_the_machine_runs_gives_its_own_module(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, CUDA_MACHINE)
    write_kernel(cdn.root, REPO, 1, [CUDA_BUILD, CPU_BUILD])
    plain = fk.get_kernel(REPO, version=1)
    forced = fk.get_kernel(REPO, version=1, backend="cpu")
    assert forced is not plain
    assert (plain.marker(), forced.marker()) == (
        f"{REPO}@v1:{CUDA_BUILD}",
        f"{REPO}@v1:{CPU_BUILD}",
    )


def test_import_statements_of_both_names_give_one_module(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    printed = run_python(
        CPU_ONLY_CHILD + "import flashhub.acme.tensor_tricks.v1_cpu as forced\n"
        "import flashhub.acme.tensor_tricks.v1 as plain\n"
        "print(forced is plain, plain.__name__)"
    )
    assert printed.split() == ["True", "flashhub.acme.tensor_tricks.v1_cpu"]


# Each import the finder's find_spec answers, with the modules imported while it ran.
FIND_SPEC_IMPORTS = """
import sys
from flashhub_kernels._finder import KernelFinder

imported = []
find_spec = KernelFinder.find_spec

def watched(self, fullname, *args):
    before = set(sys.modules)
    try:
        return find_spec(self, fullname, *args)
    finally:
        imported.extend(sorted(set(sys.modules) - before))

KernelFinder.find_spec = watched
import flashhub.acme.tensor_tricks.v1_cpu
import flashhub.acme.tensor_tricks.v1  # its twin
for name in ["flashhub.get_kernel", "flashhub.acme.tensor_tricks.v01", "flashhub._local.x_0"]:
    try:
        __import__(name)
    except ImportError:
        pass
    else:
        raise AssertionError(name)
del sys.modules["flashhub.acme.tensor_tricks.v1"]
import flashhub.acme.tensor_tricks.v1  # located before: checked again
print(imported)
"""


def test_the_finder_imports_nothing_under_the_global_import_lock(cdn: CdnServer) -> None:
    # find_spec runs under Python's global import lock: a module imported there waits for
    # another thread's import of it, which waits for that lock. Four threads loading one
    # kernel under its names at once hung so (the finder imported the twin names' module).
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    run_python(CPU_ONLY_CHILD + "import flashhub.acme.tensor_tricks.v1")
    assert run_python(CPU_ONLY_CHILD + FIND_SPEC_IMPORTS, torch_only=True).strip() == "[]"


# Threads import argv[2] and argv[3] at once ("check_arch=False": get_kernel's own
# resolution of the forced name). The first import is held (argv[1] appears
# then); the second starts, and once it waits for something, argv[4] appears and the
# hold is released by whoever made it. Then what each got.
TWO_NAMES_AT_ONCE = (
    CPU_ONLY_CHILD
    + """
import faulthandler, importlib, json, sys, threading, time
from pathlib import Path

import flashhub_kernels as fk

faulthandler.dump_traceback_later(60, exit=True)  # a hang prints every thread's stack
held, first, second, waits = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
modules, whole = {}, {}

def load(name):
    try:
        if name == "check_arch=False":  # get_kernel's own resolution: backend "cpu", no archs
            modules[name] = fk.get_kernel(
                "acme/tensor-tricks", version=1, backend="cpu", check_arch=False
            )
        else:
            modules[name] = importlib.import_module(name)
    except ImportError as exc:
        modules[name] = exc
    else:
        whole[name] = hasattr(modules[name], "marker")  # when the import returned it

def waiting(thread):
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code.co_name != "acquire":
        frame = frame.f_back
    return frame is not None

earlier = threading.Thread(target=load, args=(first,))
earlier.start()
while not held.exists():
    time.sleep(0.01)
later = threading.Thread(target=load, args=(second,))
later.start()
while later.is_alive() and not waiting(later):
    time.sleep(0.01)
waits.touch()
earlier.join()
later.join()
a, b = modules[first], modules[second]
print(json.dumps({
    "first": type(a).__name__ if isinstance(a, ImportError) else a.__name__,
    "same": a is b,
    "whole": whole[second],
    "spec": b.__spec__.name == b.__name__ and b.__loader__ is b.__spec__.loader,
    "loaded": [k.module.__name__ for k in fk.get_loaded_kernels()],
}))
"""
)


def import_two_names_at_once(
    first: str, second: str, held_file: Path, release: Callable[[], object]
) -> dict[str, object]:
    """Run :data:`TWO_NAMES_AT_ONCE`; ``release()`` lets the first import go on."""
    waits = held_file.with_name("waits")
    args = (str(held_file), first, second, str(waits))
    process = start_code(TWO_NAMES_AT_ONCE, *args, env=dict(os.environ))
    try:
        assert appears(waits, process, timeout=90), "the second import never waited"
    finally:
        release()
    output, err = process.communicate(timeout=90)
    assert process.returncode == 0, output + err
    result: dict[str, object] = json.loads(output)
    return result


def held_until(release: threading.Event, arrived: Path, *, status: int = 200) -> Fault:
    """Create ``arrived`` when the request comes; once ``release`` is set, serve the
    file (or answer ``status``)."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        arrived.touch()
        release.wait(60)
        if status == 200:
            handler.send_file(body)
        else:
            handler.send_simple(status, b"gone")

    return fault


TWIN_ORDERS = pytest.mark.parametrize(
    ("first", "second"), [(FORCED, PLAIN), (PLAIN, FORCED)], ids=["forced-first", "plain-first"]
)


@TWIN_ORDERS
def test_two_names_imported_at_once_while_downloading_give_one_module(
    cdn: CdnServer, tmp_path: Path, first: str, second: str
) -> None:
    """The second name is imported while the first one's download is held: it waits for
    that import and gets its module, not a second copy of the kernel."""
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    release = threading.Event()
    ops = f"kernels/{REPO}/v1/build/{cpu_variant()}/tensor_tricks/_ops.py"
    cdn.inject(ops, held_until(release, tmp_path / "held"))
    result = import_two_names_at_once(first, second, tmp_path / "held", release.set)
    assert result == {"first": first, "same": True, "whole": True, "spec": True, "loaded": [first]}
    assert len(cdn.gets("_ops.py")) == 1


@TWIN_ORDERS
def test_a_name_imported_while_its_twin_runs_gets_the_whole_module(
    cdn: CdnServer, tmp_path: Path, first: str, second: str
) -> None:
    """The second name is imported while the first one's code runs: it gets the module
    once that code has finished, not the half-run module."""
    gate = (
        f"import pathlib, time\npathlib.Path({str(tmp_path / 'held')!r}).touch()\n"
        f"while not pathlib.Path({str(tmp_path / 'go')!r}).exists():\n    time.sleep(0.01)\n"
    )
    files = kernel_files("tensor_tricks", "gated")
    files["tensor_tricks/__init__.py"] = gate.encode() + files["tensor_tricks/__init__.py"]
    write_variant(cdn.root, REPO, 1, cpu_variant(), files)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([cpu_variant()]))
    result = import_two_names_at_once(first, second, tmp_path / "held", (tmp_path / "go").touch)
    assert result == {"first": first, "same": True, "whole": True, "spec": True, "loaded": [first]}


def test_get_kernel_without_arch_check_waits_for_the_import_of_the_other_name(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """``check_arch=False`` resolves the kernel itself: while the plain name's download
    is held, it waits for that import and returns its module, not a second copy."""
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    release = threading.Event()
    ops = f"kernels/{REPO}/v1/build/{cpu_variant()}/tensor_tricks/_ops.py"
    cdn.inject(ops, held_until(release, tmp_path / "held"))
    result = import_two_names_at_once(PLAIN, "check_arch=False", tmp_path / "held", release.set)
    assert result == {"first": PLAIN, "same": True, "whole": True, "spec": True, "loaded": [PLAIN]}
    assert len(cdn.gets("_ops.py")) == 1


def test_a_name_whose_twin_failed_meanwhile_loads_the_kernel_itself(
    cdn: CdnServer, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    release = threading.Event()
    ops = f"kernels/{REPO}/v1/build/{cpu_variant()}/tensor_tricks/_ops.py"
    cdn.inject(ops, held_until(release, tmp_path / "held", status=404))
    result = import_two_names_at_once(PLAIN, FORCED, tmp_path / "held", release.set)
    assert result == {
        "first": "TransportError",
        "same": False,
        "whole": True,
        "spec": True,
        "loaded": [FORCED],
    }


@pytest.mark.usefixtures("cpu_only_torch")
def test_a_backend_this_torch_cannot_run_is_an_import_error_and_a_value_error(
    cdn: CdnServer,
) -> None:
    """Asked for by a module name (``except ImportError`` guards it), or by get_kernel's
    ``backend=`` (a ``ValueError``, as Hugging Face kernels raises)."""
    write_kernel(cdn.root, REPO, 1, [cpu_variant()])
    with pytest.raises(BackendUnavailableError, match="cannot select backend 'cuda'") as info:
        import flashhub.acme.tensor_tricks.v1_cuda  # noqa: F401
    assert isinstance(info.value, ImportError) and info.value.hint
    with pytest.raises(ValueError, match="cannot select backend 'cuda'"):
        fk.get_kernel(REPO, version=1, backend="cuda")
    assert fk.get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{cpu_variant()}"


def test_a_spelling_that_failed_does_not_stand_in_the_way_of_the_published_one(
    cdn: CdnServer,
) -> None:
    """acme/tensor_tricks is published; get_kernel of acme/tensor-tricks (the same module
    name) fails first. The published spelling then loads, by get_kernel and by import."""
    write_kernel(cdn.root, "acme/tensor_tricks", 1)
    with pytest.raises(KernelNotFoundError):
        fk.get_kernel("acme/tensor-tricks", version=1)
    k = fk.get_kernel("acme/tensor_tricks", version=1)
    assert k.marker().startswith("acme/tensor_tricks@v1")
    assert importlib.import_module("flashhub.acme.tensor_tricks.v1") is k
    with pytest.raises(ValueError, match="already bound to acme/tensor_tricks"):
        fk.get_kernel("acme/tensor-tricks", version=1)  # once loaded, the name is taken


def test_get_local_kernel(tmp_path: Path) -> None:
    repo = tmp_path / "my-kernel"
    from support.trees import kernel_files

    for variant in ("torch-universal", local_variant()):
        for rel, data in kernel_files("my_kernel", variant).items():
            path = repo / "build" / variant / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    k = fk.get_local_kernel(repo)
    assert k.marker() == local_variant()
    assert (
        fk.get_local_kernel(repo / "build" / "torch-universal" / "my_kernel").marker()
        == "torch-universal"
    )
    assert fk.get_local_kernel(repo) is k
    assert k.__name__.startswith("flashhub._local.my_kernel_")
    with pytest.raises(FileNotFoundError):  # as in 0.1.2 and Hugging Face kernels
        fk.get_local_kernel(tmp_path / "nowhere")


@pytest.mark.usefixtures("cpu_only_torch")
def test_has_kernel_and_variants(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, ["torch-universal", "torch212-cxx11-cu126-x86_64-linux"])
    write_kernel(cdn.root, REPO, 2, ["torch212-cxx11-cu126-x86_64-linux"])
    assert fk.has_kernel(REPO, version=1)
    assert not fk.has_kernel(REPO, version=2)
    assert not fk.has_kernel(REPO)  # newest is v2
    assert not fk.has_kernel("acme/absent", version=1)
    verdicts = fk.get_kernel_variants(REPO, version=1)
    assert (
        isinstance(verdicts[0], fk.VariantAccepted) and verdicts[0].variant_str == "torch-universal"
    )
    assert isinstance(verdicts[1], fk.VariantRejected) and "cu126" in verdicts[1].reason
    assert not any("/build/" in p for p in cdn.gets() if REPO in p)  # variants.json sufficed


@pytest.mark.usefixtures("cpu_only_torch")
def test_has_kernel_without_a_version_raises_where_no_versions_json_names_the_newest(
    cdn: CdnServer,
) -> None:
    """Without versions.json the newest version is unknown, and a missing kernel looks
    the same: a False would deny the v1 that is published."""
    write_kernel(cdn.root, REPO, 1, ["torch-universal"], with_versions_json=False)

    assert fk.has_kernel(REPO, version=1)
    for repo_id in (REPO, "acme/absent"):
        with pytest.raises(KernelNotFoundError, match=r"has no versions\.json on the CDN") as info:
            fk.has_kernel(repo_id)
        assert "so its newest version is unknown" in info.value.message
        assert "pass version=" in (info.value.hint or "")


def test_loaded_kernels_and_config(cdn: CdnServer, tmp_path: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    k = fk.get_kernel(REPO, version=1)
    (record,) = fk.get_loaded_kernels()
    assert (record.repo_id, record.version, record.variant) == (REPO, 1, local_variant())
    assert record.module is k and record.path == Path(k.__file__).parent
    config = fk.configure(cache_dir=tmp_path / "elsewhere", cdn_url="http://a.test, http://b.test/")
    assert config.cdn_urls == ("http://a.test", "http://b.test")
    assert fk.get_config().cache_dir == tmp_path / "elsewhere"
    with pytest.raises(ValueError, match="CDN URL"):
        fk.configure(cdn_url="ftp://x")


def test_default_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("FLASHHUB_CDN_URL", "FLASHHUB_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    config = fk.get_config()
    assert config.cdn_urls == ("https://flashhub-cdn.aodianyun.com",)
    assert config.prefix == "kernels"
    assert config.cache_dir == tmp_path / "xdg" / "flashhub"


@pytest.mark.parametrize("blank", ["", " ", "\t"])
def test_a_cdn_url_of_blanks_only_is_the_default(
    monkeypatch: pytest.MonkeyPatch, blank: str
) -> None:
    monkeypatch.setenv("FLASHHUB_CDN_URL", blank)  # an empty template value, say
    assert fk.get_config().cdn_urls == ("https://flashhub-cdn.aodianyun.com",)


def test_importing_the_packages_imports_neither_torch_nor_requests() -> None:
    code = textwrap.dedent(
        f"""
        import sys, flashhub, flashhub_kernels, flashhub_kernels.errors
        flashhub_kernels.configure(prefix="x"); flashhub_kernels.get_config()
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        """
    )
    assert json.loads(run_python("import json\n" + code, fresh=True)) == []


def test_kernel_import_errors_are_import_errors() -> None:
    assert issubclass(NoCompatibleVariantError, KernelImportError)
    assert issubclass(KernelImportError, ImportError)
    assert issubclass(KernelImportError, fk.errors.FlashhubError)


def test_reimport_after_the_cache_entry_is_gone_resolves_afresh(
    cdn: CdnServer, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    first = fk.get_kernel(REPO, version=1)
    fk.configure(cache_dir=tmp_path / "another-cache")
    shutil.rmtree(tmp_path / "cache")
    del sys.modules["flashhub.acme.tensor_tricks.v1"]
    again = fk.get_kernel(REPO, version=1)
    assert again is not first
    assert Path(again.__file__).is_relative_to(tmp_path / "another-cache")
