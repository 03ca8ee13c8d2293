"""One native build loaded from two paths in one process.

torch lets one ``TORCH_LIBRARY`` block register an op namespace; a second copy of a
library (the same build at another path, or another build that kept the namespace)
calls ``abort()`` from its static initializer when it is loaded. Every load here runs in
a child process, which such an abort kills with SIGABRT. The loader loads the copy of
the same build already in the process instead, and turns another build's load into an
``ImportError`` that names both kernels. The kernels are the compiled example
tensor-tricks, published to the loopback CDN. Its native build is a CPU build, loaded as
``backend="cpu"`` names it (``...v1_cpu``), so that a CUDA build of torch loads it too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

from conftest import run_python
from flashhub_kernels._publish import publish
from support.cdn_server import CdnServer
from support.preloaded import REAP_FORKED_CHILD, run_code
from support.trees import cpu_variant

REPO = "acme/tensor-tricks"
PY_PKG = "tensor_tricks"
GUARD = 'if not hasattr(ops, "version"):\n    '


@pytest.fixture
def guarded(built: list[Any]) -> Path:
    """The build directory of the example tensor-tricks v1: its ``_ops.py`` loads the
    ``.so`` only when the namespace is not registered yet."""
    tricks = next(b for b in built if b.repo_id == REPO and b.version == 1)
    build_dir: Path = tricks.build_dir
    return build_dir


@pytest.fixture
def unguarded(guarded: Path, tmp_path: Path) -> Path:
    """A copy of ``guarded`` whose ``_ops.py`` loads the ``.so`` unconditionally."""
    copy = tmp_path / "unguarded"
    shutil.copytree(guarded, copy)
    ops_file = copy / cpu_variant() / PY_PKG / "_ops.py"
    source = ops_file.read_text()
    assert GUARD in source
    ops_file.write_text(source.replace(GUARD, ""))
    return copy


# The builder's _ops.py imports its library as an extension module. This one defines no
# PyInit_ function, so the import fails, but only after the dynamic loader ran its
# TORCH_LIBRARY block: its ops are registered, as a builder's library registers them.
EXTENSION_OPS = """
import torch

NAMESPACE = {namespace!r}
ops = getattr(torch.ops, NAMESPACE)
try:
    from . import {namespace}
except ImportError as exc:
    if "export function" not in str(exc):
        raise


def add_op_namespace_prefix(name):
    return f"{{NAMESPACE}}::{{name}}"
"""


@pytest.fixture
def imported(guarded: Path, tmp_path: Path) -> Path:
    """A copy of ``guarded`` whose ``_ops.py`` imports the ``.so`` as an extension module."""
    copy = tmp_path / "imported"
    shutil.copytree(guarded, copy)
    namespace = native_library(copy).name.removesuffix(".so")
    ops_file = copy / cpu_variant() / PY_PKG / "_ops.py"
    ops_file.write_text(EXTENSION_OPS.format(namespace=namespace))
    return copy


def native_library(build_dir: Path) -> Path:
    """The ``.so`` of this torch's CPU build in ``build_dir`` (which may hold other
    torches' builds beside it)."""
    (so,) = (build_dir / cpu_variant() / PY_PKG).glob("*.so")
    return so


def publish_quietly(build_dir: Path, version: int, cdn: CdnServer) -> None:
    """Publish ``build_dir`` as ``REPO`` v``version`` (the publisher's warning that the
    build is published twice is tested in test_publish.py)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        publish(build_dir, repo_id=REPO, version=version, out=cdn.root)


def run_child(body: str) -> dict[str, Any]:
    """Run ``body`` in a fresh interpreter; it fills ``result``, printed as JSON.

    ``load(what)`` runs ``what`` and records the ImportError it raises (its class, its
    message, and whether it is a KernelImportError). ``sha256_file`` calls on native
    libraries are counted in ``hashed`` (the cache also hashes the bytecode it compiles).
    """
    prelude = textwrap.dedent(
        """
        import json, os, sys
        import torch
        import flashhub_kernels as fk
        from flashhub_kernels._utils import hashing as _hashing
        result = {"hashed": 0, "errors": []}
        _sha256_file = _hashing.sha256_file
        def counting(path):
            result["hashed"] += str(path).endswith(".so")
            return _sha256_file(path)
        _hashing.sha256_file = counting
        def load(what):
            try:
                return what()
            except ImportError as exc:
                result["errors"].append({
                    "type": type(exc).__name__,
                    "kernel_error": isinstance(exc, fk.errors.KernelImportError),
                    "message": str(exc),
                })
        def mapped():
            # the native libraries the process maps; None where /proc cannot tell
            if not os.path.exists("/proc/self/maps"):
                return None
            with open("/proc/self/maps") as maps:
                return sorted({l.split()[-1] for l in maps if l.rstrip().endswith(".so")})
        """
    )
    out = run_python(prelude + textwrap.dedent(body) + "\nprint(json.dumps(result))\n")
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


TWO_VERSIONS = """
import importlib
v1 = load(lambda: importlib.import_module("flashhub.acme.tensor_tricks.v1_cpu"))
result["v1"] = float(v1.scale_shift(torch.ones(1), 2.0)[0])
v2 = load(lambda: importlib.import_module("flashhub.acme.tensor_tricks.v2_cpu"))
result["v2"] = v2 and float(v2.scale_shift(torch.ones(1), 2.0)[0])
result["v2_module_left"] = "flashhub.acme.tensor_tricks.v2_cpu" in sys.modules
result["v1_after"] = float(v1.scale_shift(torch.ones(1), 3.0)[0])
result["mapped"] = mapped()
"""


def assert_one_copy(result: dict[str, Any], so_name: str, first: Path) -> None:
    """The process maps one copy of the library, the one loaded from ``first``."""
    if result["mapped"] is None:
        return  # no /proc: that the child ran at all shows torch did not abort
    copies = [path for path in result["mapped"] if Path(path).name == so_name]
    assert len(copies) == 1 and Path(copies[0]).is_relative_to(first.resolve()), copies


def test_one_build_published_as_two_versions_runs_both_on_one_copy_of_its_library(
    cdn: CdnServer, unguarded: Path, cache_dir: Path
) -> None:
    publish_quietly(unguarded, 1, cdn)
    publish_quietly(unguarded, 2, cdn)
    so_name = native_library(unguarded).name
    for load in ("cold", "warm"):
        result = run_child(TWO_VERSIONS)
        assert result["errors"] == [], load
        assert (result["v1"], result["v2"], result["v1_after"]) == (3.0, 3.0, 4.0), load
        assert_one_copy(result, so_name, cache_dir / f"kernels/{REPO}/v1")
        # The digests come from the cached manifests: no .so is hashed.
        assert result["hashed"] == 0, load


@pytest.mark.parametrize("local_first", [True, False], ids=["local-first", "cdn-first"])
def test_a_local_build_and_its_published_copy_run_on_one_copy(
    cdn: CdnServer, unguarded: Path, cache_dir: Path, local_first: bool
) -> None:
    publish_quietly(unguarded, 1, cdn)
    local = f"lambda: fk.get_local_kernel({str(unguarded)!r}, backend='cpu')"
    remote = f"lambda: fk.get_kernel({REPO!r}, version=1, backend='cpu')"
    first, second = (local, remote) if local_first else (remote, local)
    result = run_child(
        f"""
        kernels = [load({first}), load({second})]
        result["values"] = [float(k.scale_shift(torch.ones(1), 2.0)[0]) for k in kernels]
        result["names"] = [k.__name__ for k in kernels]
        result["mapped"] = mapped()
        """
    )
    assert result["errors"] == []
    assert result["values"] == [3.0, 3.0]
    names = result["names"] if local_first else result["names"][::-1]
    assert names[0].startswith("flashhub._local.tensor_tricks_")
    assert names[1] == "flashhub.acme.tensor_tricks.v1_cpu"
    first_dir = unguarded if local_first else cache_dir / f"kernels/{REPO}/v1"
    assert_one_copy(result, native_library(unguarded).name, first_dir)


def test_a_guarded_ops_module_shares_the_library_already_loaded(
    cdn: CdnServer, guarded: Path
) -> None:
    """The ``_ops.py`` of the kernel requirements skips ``load_library`` when its
    namespace is registered: the second copy then runs on the first one's library."""
    publish_quietly(guarded, 1, cdn)
    result = run_child(
        f"""
        local = load(lambda: fk.get_local_kernel({str(guarded)!r}, backend="cpu"))
        remote = load(lambda: fk.get_kernel({REPO!r}, version=1, backend="cpu"))
        result["values"] = [float(k.scale_shift(torch.ones(1), 2.0)[0]) for k in (local, remote)]
        result["same_namespace"] = local.NAMESPACE == remote.NAMESPACE
        result["distinct_modules"] = local is not remote
        """
    )
    assert result["errors"] == []
    assert result["values"] == [3.0, 3.0]
    assert result["same_namespace"] and result["distinct_modules"]


def test_another_build_that_kept_the_namespace_is_an_import_error(
    cdn: CdnServer, unguarded: Path, tmp_path: Path
) -> None:
    """A v2 rebuilt without a new namespace: other bytes, the same TORCH_LIBRARY block."""
    publish_quietly(unguarded, 1, cdn)
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(unguarded, rebuilt)
    with native_library(rebuilt).open("ab") as so:
        so.write(b"\0" * 64)  # past the end of the ELF image: it still loads
    publish_quietly(rebuilt, 2, cdn)
    result = run_child(TWO_VERSIONS)
    assert result["v1"] == 3.0 and result["v1_after"] == 4.0
    (error,) = result["errors"]
    assert error["type"] == "NativeLibraryConflictError"
    namespace = native_library(unguarded).name.removesuffix(".so")
    assert f"op namespace {namespace}" in error["message"]
    assert "another build" in error["message"]
    assert not result["v2_module_left"]


def test_another_build_of_the_namespace_is_refused_even_when_its_ops_module_skips_the_load(
    cdn: CdnServer, guarded: Path, tmp_path: Path
) -> None:
    """v2 rebuilt under v1's namespace, its ``_ops.py`` guarded as the kernel
    requirements show: v1's namespace is registered, so it never calls
    ``load_library``, and it ran v1's ops as its own."""
    publish_quietly(guarded, 1, cdn)
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(guarded, rebuilt)
    with native_library(rebuilt).open("ab") as so:
        so.write(b"\0" * 64)  # other bytes, the same TORCH_LIBRARY block
    publish_quietly(rebuilt, 2, cdn)
    for load in ("cold", "warm"):
        result = run_child(TWO_VERSIONS)
        assert result["v1"] == 3.0 and result["v1_after"] == 4.0, load
        assert result["v2"] is None, f"{load}: v2 ran v1's ops: {result['v2']}"
        (error,) = result["errors"]
        assert error["type"] == "NativeLibraryConflictError", load
        assert error["message"].startswith("flashhub.acme.tensor_tricks.v2_cpu cannot load")
        assert "flashhub.acme.tensor_tricks.v1_cpu loaded another build" in error["message"]
        assert not result["v2_module_left"], load
        assert result["hashed"] == 0, load  # the digests come from the cached manifests


def test_a_library_imported_as_an_extension_module_is_shared_too(
    cdn: CdnServer, imported: Path, cache_dir: Path
) -> None:
    """``from . import <namespace>`` loads the second copy without ``load_library``."""
    publish_quietly(imported, 1, cdn)
    publish_quietly(imported, 2, cdn)
    result = run_child(TWO_VERSIONS)
    assert result["errors"] == []
    assert (result["v1"], result["v2"], result["v1_after"]) == (3.0, 3.0, 4.0)
    assert_one_copy(result, native_library(imported).name, cache_dir / f"kernels/{REPO}/v1")


# An extension module as Hugging Face's kernel builder makes one (its PyInit function makes
# a module), with a static initializer that stands for the builder's TORCH_LIBRARY block.
EXTENSION_C = """
#include <Python.h>
static int initialized = 0;
__attribute__((constructor)) static void initialize(void) { initialized++; }
static PyObject *count(PyObject *self, PyObject *args) { return PyLong_FromLong(initialized); }
static PyMethodDef methods[] = {{"count", count, METH_NOARGS, ""}, {NULL, NULL, 0, NULL}};
PyMODINIT_FUNC PyInit__ns(void) {
    static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ns", NULL, 0, methods};
    return PyModule_Create(&module);
}
"""


def test_a_builders_extension_module_from_two_paths_is_made_from_the_copy_loaded_first(
    tmp_path: Path,
) -> None:
    """Each kernel gets a module of its own, made from the one copy in the process."""
    import sysconfig

    if not Path("/proc/self/maps").exists():
        pytest.skip("counts the copies a process maps in /proc/self/maps")
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("needs a C compiler to build an extension module")
    (tmp_path / "ns.c").write_text(EXTENSION_C)
    include = sysconfig.get_paths()["include"]
    library = tmp_path / "_ns.so"
    run = subprocess.run(
        [compiler, "-shared", "-fPIC", f"-I{include}", str(tmp_path / "ns.c"), "-o", str(library)],
        capture_output=True,
        text=True,
    )
    if run.returncode != 0:
        pytest.skip(f"cannot build an extension module here: {run.stderr.strip()[-300:]}")
    for name in ("a", "b"):
        package = tmp_path / name / "build" / "torch-universal" / name
        package.mkdir(parents=True)
        shutil.copy(library, package / "_ns.so")
        (package / "__init__.py").write_text("from . import _ns\n")
    result = run_child(
        f"""
        a = load(lambda: fk.get_local_kernel({str(tmp_path / "a")!r}, "a"))
        b = load(lambda: fk.get_local_kernel({str(tmp_path / "b")!r}, "b"))
        result.update(same=b._ns is a._ns, initialized=b._ns.count(), file=b._ns.__file__)
        result["mapped"] = mapped()
        """
    )
    first = tmp_path / "a" / "build" / "torch-universal" / "a"
    assert result["errors"] == [] and not result["same"] and result["initialized"] == 1
    assert Path(result["file"]).resolve() == (first / "_ns.so").resolve()
    assert_one_copy(result, "_ns.so", first)


# -- a forked child ---------------------------------------------------------------------------

# A thread loads local kernel b while the process forks; the child then loads kernel c. The
# native libraries of a and b are FIFOs of one size (0): noting b's, the thread hashes it to
# compare it with a's, and waits in the read, as on a slow filesystem, with the lock that
# notes native libraries held. The child prints what it loaded, or "child: hung". Given "again",
# the child loads b itself, once a's and b's libraries are the same bytes, with a's as if
# loaded; it then prints which file loading b's library loads (the dynamic loader refuses
# both empty files, naming the one it was given).
FORK_WHILE_NOTING = (
    """
import os, sys, threading, time
from pathlib import Path
import flashhub_kernels as fk

def local(name, native):
    package = Path(sys.argv[1], name, "build", "torch-universal", name)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"NAME = {name!r}\\n")
    native(package / f"_{name}_ops.so")
    return package.parents[2]

def hashing(thread):
    frame = sys._current_frames().get(thread.ident)
    while frame is not None and frame.f_code.co_name != "sha256_file":
        frame = frame.f_back
    return frame is not None

a, b = local("a", os.mkfifo), local("b", os.mkfifo)
c = local("c", lambda path: path.write_bytes(b"\\x7fELF"))
fk.get_local_kernel(a, "a")
loading = threading.Thread(target=fk.get_local_kernel, args=(b, "b"), daemon=True)
loading.start()
while not hashing(loading):
    time.sleep(0.01)
pid = os.fork()
if pid == 0 and sys.argv[2:] == ["again"]:
    import torch
    a_so, b_so = next(a.rglob("*.so")), next(b.rglob("*.so"))
    for library in (a_so, b_so):
        library.unlink()
        library.touch()
    torch.ops.loaded_libraries.add(os.path.realpath(a_so))
    fk.get_local_kernel(b, "b")
    try:
        torch.ops.load_library(str(b_so))
    except OSError as error:
        print("child: loads", a_so.name if a_so.name in str(error) else b_so.name, flush=True)
    os._exit(0)
if pid == 0:
    print("child:", fk.get_local_kernel(c, "c").NAME, flush=True)
    os._exit(0)
"""
    + REAP_FORKED_CHILD
    + "os._exit(0)\n"
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_child_forked_while_a_thread_notes_a_native_library_loads_kernels(
    tmp_path: Path,
) -> None:
    child = run_code(FORK_WHILE_NOTING, str(tmp_path), env=os.environ)
    assert (child.returncode, child.stdout) == (0, "child: c\n"), child.stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_child_forked_while_a_thread_notes_a_library_notes_it_when_it_loads_it(
    tmp_path: Path,
) -> None:
    """The library the thread was noting at the fork was not noted in the child: a load of
    its kernel there took it for noted, and then loaded the copy of another kernel's
    library that torch aborts on, not the copy loaded already."""
    child = run_code(FORK_WHILE_NOTING, str(tmp_path), "again", env=os.environ)
    assert child.stdout == "child: loads _a_ops.so\n", child.stderr
