"""Zip builds: ``"build-layout": "zip"`` in ``metadata.json``, the package's files in one
archive ``<id>.zip`` in the variant directory, its native libraries beside it.

Loaded through the hook and ``get_kernel`` as Hugging Face ``kernels`` loads them (the
module's ``__file__`` inside the archive, ``__path__`` the variant directory then the
archive), verified before any of it runs, from the cache without a request; and written
by ``flashhub publish --layout zip``.
"""

from __future__ import annotations

import importlib
import importlib.resources
import inspect
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

import flashhub_kernels as fk
import test_import_cost
from conftest import import_in_child, run_python
from flashhub_kernels._publish import publish
from flashhub_kernels.errors import (
    FileRelativePathWarning,
    IntegrityError,
    KernelImportError,
    KernelNotFoundError,
    ManifestError,
    PublishError,
)
from support.builds import CPU, PY_PKG, REPO as REPO_BUILT, SO_NAME, make_kernel
from support.cdn_server import CdnServer
from support.cli_runner import flashhub, flashhub_process, ok_json
from support.hf_kernels import COMPAT_INIT, FLATTENED, SILU_AND_MUL_INIT
from support.trees import b64sha256, cpu_variant, write_variant

REPO = "acme/zipped"
MODULE = "flashhub.acme.zipped.v1"
KERNEL_ID = "_zipped_0a1b2c3"
ARCHIVE = f"{KERNEL_ID}.zip"
UNIVERSAL = "torch-universal"
LOAD = f"import {MODULE} as k; print(k.helpers.shout())"


def package_files(marker: str) -> dict[str, bytes]:
    """A package as a zip build's archive holds it, at the archive's root: relative
    imports, a submodule, a subpackage importing its parent's module, a data file."""
    return {
        "__init__.py": f'"""Zipped kernel {marker}."""\nfrom . import helpers, sub\n'.encode(),
        "_ops.py": f"MARKER = {marker!r}\n".encode(),
        "helpers.py": b"from ._ops import MARKER\n\n\ndef shout():\n    return MARKER.upper()\n",
        "sub/__init__.py": b"from .deep import echo\n",
        "sub/deep.py": b"from ..helpers import shout\n\n\ndef echo():\n    return shout()\n",
        "data/table.txt": f"table of {marker}\n".encode(),
    }


def archive_bytes(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def publish_as_listed(root: Path, archive: bytearray) -> None:
    """Publish ``archive`` as ``acme/zipped`` v1's zip build, listed with its true digest:
    a hostile publisher's damage, which the digest check lets through."""
    digests = {ARCHIVE: b64sha256(archive)}
    manifest = {"id": KERNEL_ID, "build-layout": "zip", "digest": {"files": digests}}
    write_variant(root, REPO, 1, UNIVERSAL, {ARCHIVE: bytes(archive)}, manifest=manifest)


def publish_zip_build(
    root: Path,
    files: dict[str, bytes],
    *,
    natives: dict[str, bytes] | None = None,
    served: bytes | None = None,
    manifest: dict[str, object] | None = None,
) -> bytes:
    """``acme/zipped`` v1 as a zip build of ``files`` (``torch-universal``), ``natives``
    beside its archive; ``served``: other bytes the CDN serves as the archive than those
    ``metadata.json`` lists. Returns the archive listed."""
    archive = archive_bytes(files)
    variant = {ARCHIVE: archive, **(natives or {})}
    digests = {path: b64sha256(data) for path, data in sorted(variant.items())}
    document = manifest or {"id": KERNEL_ID, "build-layout": "zip", "digest": {"files": digests}}
    if served is not None:
        variant[ARCHIVE] = served
    write_variant(root, REPO, 1, UNIVERSAL, variant, manifest=document)
    (root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([UNIVERSAL]))
    (root / f"kernels/{REPO}/versions.json").write_text("[1]")
    return archive


def entry_of(cache_dir: Path) -> Path:
    return cache_dir / "kernels" / REPO / "v1" / UNIVERSAL


def marker_package(marker: Path) -> dict[str, bytes]:
    """A package whose ``__init__.py`` writes ``marker`` when it runs."""
    return {"__init__.py": f"open({str(marker)!r}, 'w').write('ran')\n".encode()}


# -- loading ----------------------------------------------------------------------------


def test_a_zip_build_loads_as_hugging_face_kernels_loads_it(
    cdn: CdnServer, cache_dir: Path
) -> None:
    publish_zip_build(cdn.root, package_files("zipped"))
    k = fk.get_kernel(REPO, version=1)
    import flashhub.acme.zipped.v1 as by_statement

    assert by_statement is k and k.__name__ == MODULE
    entry = entry_of(cache_dir)
    archive = entry / ARCHIVE
    assert k.__file__ == str(archive / "__init__.py")
    assert k.__path__ == [str(entry), str(archive)]
    assert k.__doc__ == "Zipped kernel zipped."
    # Submodules and a subpackage come from the archive, their relative imports too.
    assert k.helpers.shout() == "ZIPPED" and k.sub.echo() == "ZIPPED"
    assert k.helpers.__file__ == str(archive / "helpers.py")
    assert k.sub.deep.__name__ == f"{MODULE}.sub.deep"
    assert importlib.import_module(f"{MODULE}._ops").MARKER == "zipped"
    resources = importlib.resources.files(k)
    assert resources.joinpath("data/table.txt").read_text() == "table of zipped\n"
    assert sorted(p.name for p in resources.iterdir()) == [
        "__init__.py",
        "_ops.py",
        "data",
        "helpers.py",
        "sub",
    ]
    assert inspect.getsource(k).startswith('"""Zipped kernel zipped."""')
    assert "def shout" in inspect.getsource(k.helpers)
    loaded = fk.get_loaded_kernels()[-1]
    assert (loaded.module, loaded.path, loaded.variant) == (k, archive, UNIVERSAL)
    # Only the archive was fetched of the package: one request for its Python files.
    fetched = [p.rpartition("/")[2] for p in cdn.gets() if f"/build/{UNIVERSAL}/" in p]
    assert fetched == ["metadata.json", ARCHIVE]


def test_a_zip_build_reloads_and_imports_again_after_it_was_dropped(cdn: CdnServer) -> None:
    publish_zip_build(cdn.root, package_files("zipped"))
    k = fk.get_kernel(REPO, version=1)
    k.extra = "set before the reload"
    assert importlib.reload(k) is k and k.helpers.shout() == "ZIPPED"
    assert k.extra == "set before the reload"
    for name in [n for n in sys.modules if n.startswith(MODULE)]:
        del sys.modules[name]
    again = importlib.import_module(MODULE)
    assert again is not k and again.sub.echo() == "ZIPPED"
    assert again.__path__ == k.__path__


def test_a_zip_build_imported_again_in_one_process_is_not_looked_up_again(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for a build of files: where the archive is still there, one stat answers."""
    publish_zip_build(cdn.root, package_files("zipped"))
    first = fk.get_kernel(REPO, version=1)
    for name in [n for n in sys.modules if n.startswith(MODULE)]:
        del sys.modules[name]

    def looked_up(self: object, fullname: str) -> object:
        raise AssertionError(f"{fullname} was looked up again")

    monkeypatch.setattr(fk._finder.KernelFinder, "locate", looked_up)
    again = importlib.import_module(MODULE)
    assert again is not first and again.sub.echo() == "ZIPPED"


def _compile(source: str, output: Path, *, python: bool) -> None:
    """Compile the C ``source`` into the shared library ``output`` (a Python extension
    module with ``python``)."""
    c_file = output.with_suffix(".c")
    c_file.write_text(source)
    include = ["-I", sysconfig.get_paths()["include"]] if python else []
    command = ["gcc", "-shared", "-fPIC", "-O1", *include, "-o", str(output), str(c_file)]
    subprocess.run(command, check=True, capture_output=True)


EXTENSION = f"""
#include <Python.h>
static struct PyModuleDef module = {{PyModuleDef_HEAD_INIT, "{KERNEL_ID}", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit_{KERNEL_ID}(void) {{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL) PyModule_AddIntConstant(m, "ANSWER", 42);
    return m;
}}
"""
LIBRARY = "int zipped_plain_answer(void) { return 7; }\n"
# Both ways a kernel's _ops.py reaches a native library beside the archive: importing it
# as an extension module (the builder's _ops.py), and torch.ops.load_library of a path in
# the package's first directory.
NATIVE_OPS = f"""
import ctypes
import sys
from pathlib import Path

import torch

from . import {KERNEL_ID} as extension

library = Path(sys.modules[__package__].__path__[0]) / "libzipped_plain.so"
torch.ops.load_library(str(library))
plain = ctypes.CDLL(str(library)).zipped_plain_answer()
ANSWERS = (extension.ANSWER, plain, str(library) in torch.ops.loaded_libraries)
"""


def test_native_libraries_beside_the_archive_load(cdn: CdnServer, tmp_path: Path) -> None:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    extension, plain = tmp_path / f"{KERNEL_ID}{suffix}", tmp_path / "libzipped_plain.so"
    _compile(EXTENSION, extension, python=True)
    _compile(LIBRARY, plain, python=False)
    files = {**package_files("native"), "_ops.py": NATIVE_OPS.encode()}
    files["__init__.py"] = b"from ._ops import ANSWERS\n"
    natives = {extension.name: extension.read_bytes(), plain.name: plain.read_bytes()}
    publish_zip_build(cdn.root, files, natives=natives)
    code = f"import {MODULE} as k; print(k.ANSWERS, k._ops.extension.__file__)"
    answers, where = run_python(code).strip().rsplit(" ", 1)
    assert answers == "(42, 7, True)"
    assert where == str(entry_of(Path(os.environ["FLASHHUB_CACHE_DIR"])) / extension.name)


# -- verified before any of it runs ------------------------------------------------------


def test_a_tampered_archive_on_the_cdn_is_refused_before_it_runs(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    evil = archive_bytes(marker_package(marker))
    publish_zip_build(cdn.root, package_files("honest"), served=evil)
    error, stderr = import_in_child(MODULE)
    assert issubclass(error, IntegrityError) and ARCHIVE in stderr
    assert not marker.exists(), "the tampered archive ran"
    assert not entry_of(cache_dir).exists()


def test_an_archive_changed_in_the_cache_never_runs(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    publish_zip_build(cdn.root, package_files("honest"))
    assert run_python(LOAD).strip() == "HONEST"
    cached = entry_of(cache_dir) / ARCHIVE
    cached.write_bytes(archive_bytes(marker_package(marker)))  # after it was verified
    offline = {"FLASHHUB_OFFLINE": "1"}
    error, stderr = import_in_child(MODULE, env=offline)
    assert issubclass(error, IntegrityError) and issubclass(error, ImportError)
    assert f"{cached} differs from its receipt" in stderr and "FLASHHUB_OFFLINE" in stderr
    assert not marker.exists(), "the changed archive ran"
    # Online, the entry is fetched again, and verified: the CDN's archive runs.
    cdn.clear_log()
    assert run_python(LOAD).strip() == "HONEST"
    assert cdn.gets(ARCHIVE) == [f"/kernels/{REPO}/v1/build/{UNIVERSAL}/{ARCHIVE}"]
    assert not marker.exists()


def test_a_zip_build_loads_warm_with_zero_requests_and_offline(cdn: CdnServer) -> None:
    publish_zip_build(cdn.root, package_files("warm"))
    assert run_python(LOAD).strip() == "WARM"
    cdn.clear_log()
    assert run_python(LOAD).strip() == "WARM"
    assert run_python(LOAD, env={"FLASHHUB_OFFLINE": "1"}).strip() == "WARM"
    assert cdn.requests == []


def test_a_warm_load_of_a_zip_build_imports_only_the_zip_loader_more(cdn: CdnServer) -> None:
    """Nor zipfile or importlib.resources: resources are read only when asked for."""
    publish_zip_build(cdn.root, package_files("warm"))
    run_python(LOAD)  # cold: downloads it
    run_python(LOAD)  # warm: looks it up in full, and records the answer
    added = test_import_cost._imported_by(f"import {MODULE}", setup="import flashhub, torch")
    library = {m for m in added if m.startswith("flashhub_kernels")}
    zip_loader = {"flashhub_kernels._loading", "flashhub_kernels._loading.zip_layout"}
    assert library == test_import_cost.TABLE_HIT_MODULES | zip_loader
    assert "zipfile" not in added and "importlib.resources" not in added


# -- what a zip build's metadata.json must say --------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"id": KERNEL_ID, "build-layout": "zip"}, f"does not list {KERNEL_ID}.zip"),
        ({"id": "other", "build-layout": "zip"}, "does not list other.zip"),
        ({"build-layout": "zip"}, '"id" must be a file name'),
        ({"id": "a/b", "build-layout": "zip"}, '"id" must be a file name'),
        ({"id": KERNEL_ID, "build-layout": "tarball"}, "'files' and 'zip'"),
    ],
)
def test_a_malformed_zip_build_is_refused_before_any_file_is_fetched(
    cdn: CdnServer, manifest: dict[str, object], message: str
) -> None:
    stray = b64sha256(b"an archive of another name")
    document = {**manifest, "digest": {"files": {"stray.zip": stray}}}
    publish_zip_build(cdn.root, package_files("x"), manifest=document)
    with pytest.raises(ManifestError, match=re.escape(message)):
        fk.get_kernel(REPO, version=1)
    assert cdn.gets(".zip") == []


def test_an_archive_without_a_package_at_its_root_is_an_import_error(cdn: CdnServer) -> None:
    files = {f"zipped/{name}": data for name, data in package_files("nested").items()}
    publish_zip_build(cdn.root, files)
    with pytest.raises(KernelImportError, match=r"holds no __init__\.py at its root") as raised:
        fk.get_kernel(REPO, version=1)
    assert ARCHIVE in raised.value.message and raised.value.hint
    assert MODULE not in sys.modules


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="zipimport reads ZIP64 from 3.13")
def test_a_zip64_archive_is_an_import_error_that_says_so(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # More members than zipfile's limit (lowered) give it a ZIP64 end record, which
    # zipimport before Python 3.13 reads as no members at all.
    with monkeypatch.context() as patched:
        patched.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
        publish_zip_build(cdn.root, package_files("zip64"))
    with pytest.raises(KernelImportError, match=r"is a ZIP64 archive") as raised:
        fk.get_kernel(REPO, version=1)
    assert ARCHIVE in raised.value.message and "before Python 3.13" in raised.value.message
    assert "Python 3.13 or newer" in (raised.value.hint or "")
    assert MODULE not in sys.modules


def test_an_archive_whose_directory_disagrees_with_its_entries_is_an_import_error(
    cdn: CdnServer,
) -> None:
    # A hostile publisher's archive: listed with its true digest, but its central
    # directory states a size the __init__.py entry does not have.
    archive = bytearray(archive_bytes(package_files("lying")))
    directory = archive.find(b"PK\x01\x02")  # the first entry's, __init__.py's
    struct.pack_into("<II", archive, directory + 20, 1 << 30, 1 << 30)
    publish_as_listed(cdn.root, archive)
    with pytest.raises(KernelImportError, match=r"is malformed") as raised:
        fk.get_kernel(REPO, version=1)
    assert ARCHIVE in raised.value.message and raised.value.hint
    assert MODULE not in sys.modules


def test_an_archive_whose_package_does_not_inflate_is_an_import_error(cdn: CdnServer) -> None:
    # Listed with its true digest: the __init__.py entry is deflated, its data is not a
    # deflate stream.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as written:
        written.writestr("__init__.py", b"MARKER = 'deflated'\n" * 64)
    archive = bytearray(buffer.getvalue())
    data = len(b"PK\x03\x04") + 26 + len("__init__.py")  # past its local header
    archive[data : data + 8] = b"\xff" * 8
    publish_as_listed(cdn.root, archive)
    with pytest.raises(KernelImportError, match=r"is malformed") as raised:
        fk.get_kernel(REPO, version=1)
    assert ARCHIVE in raised.value.message and raised.value.hint
    assert MODULE not in sys.modules


def _nth_header(archive: bytearray, signature: bytes, name: str) -> int:
    """Where the ``signature`` header (local or central) of entry ``name`` starts."""
    at = -1
    for _ in range(list(package_files("x")).index(name) + 1):
        at = archive.find(signature, at + 1)
    return at


def _lying_size(archive: bytearray) -> None:  # the directory states a size it does not have
    struct.pack_into(
        "<II", archive, _nth_header(archive, b"PK\x01\x02", "helpers.py") + 20, *[1 << 30] * 2
    )


def _broken_header(archive: bytearray) -> None:  # its local header is not one
    at = _nth_header(archive, b"PK\x03\x04", "helpers.py")
    archive[at : at + 4] = b"XXXX"


@pytest.mark.parametrize("damage", [_lying_size, _broken_header], ids=["size", "header"])
def test_a_submodule_the_archive_cannot_give_is_an_import_error_naming_it(
    cdn: CdnServer, damage: Callable[[bytearray], None]
) -> None:
    # Listed with its true digest: the __init__.py entry is sound, helpers.py's is not.
    archive = bytearray(archive_bytes(package_files("damaged")))
    damage(archive)
    publish_as_listed(cdn.root, archive)

    raised, printed = import_in_child(MODULE)

    assert raised is KernelImportError
    last = printed.splitlines()[-2]
    assert ARCHIVE in last and f"an entry for {MODULE}.helpers that cannot be read" in last
    assert "at its root" not in last  # what the root holds is not the problem here
    assert "hint: report it to the kernel's publisher" in printed.splitlines()[-1]


def test_a_kernel_whose_sources_are_not_utf8_shows_them(cdn: CdnServer) -> None:
    # Python reads a source in the encoding it declares, where zipimport takes UTF-8:
    # printing a traceback through it fails with a UnicodeDecodeError (3.10 to 3.14).
    latin1 = b"# -*- coding: latin-1 -*-\nNAME = '\xe9t\xe9'\n\n\n"
    latin1 += b"def boom():\n    raise ValueError(NAME)  # l\xe0\n"
    publish_zip_build(
        cdn.root, {"__init__.py": latin1 + b"from . import helpers\n", "helpers.py": latin1}
    )
    code = f"""
import inspect, sys, traceback
import {MODULE} as k
for module in (k, k.helpers):
    try:
        module.boom()
    except ValueError:
        traceback.print_exc(file=sys.stdout)
    print("source:", inspect.getsource(module).splitlines()[1])
"""
    printed = run_python(code)

    assert printed.count("ValueError: \xe9t\xe9") == 2, printed
    assert printed.count("raise ValueError(NAME)  # l\xe0") == 2, printed
    assert printed.count("source: NAME = '\xe9t\xe9'") == 2, printed


def test_the_resources_of_an_archive_zipfile_refuses_are_an_import_error(cdn: CdnServer) -> None:
    # Listed with its true digest: the directory says __init__.py needs a zip version
    # zipfile cannot read, which zipimport, reading no version, imports.
    archive = bytearray(archive_bytes(package_files("versioned")))
    struct.pack_into("<H", archive, _nth_header(archive, b"PK\x01\x02", "__init__.py") + 6, 236)
    publish_as_listed(cdn.root, archive)
    kernel = fk.get_kernel(REPO, version=1)

    with pytest.raises(
        KernelImportError, match=r"is malformed \(zip file version 23\.6\)"
    ) as raised:
        importlib.resources.files(kernel)
    assert ARCHIVE in raised.value.message and raised.value.hint


def test_an_archive_removed_while_its_kernel_runs_says_so_not_that_it_is_malformed(
    cdn: CdnServer,
) -> None:
    publish_zip_build(cdn.root, {**package_files("removed"), "lazy.py": b"LAZY = 1\n"})
    kernel = fk.get_kernel(REPO, version=1)
    archive = Path(kernel.__path__[0]) / ARCHIVE
    archive.unlink()  # as flashhub cache clear --force does to an entry in use

    with pytest.raises(KernelImportError, match="was removed while this process used it"):
        importlib.resources.files(kernel)
    with pytest.raises(KernelImportError) as raised:
        importlib.import_module(f"{MODULE}.lazy")  # not imported before
    assert "was removed while this process used it" in raised.value.message
    assert "load the kernel again in a new process" in (raised.value.hint or "")


# -- publishing: flashhub publish --layout zip ----------------------------------------------

AUDIO = "sdq/audio-codebook-primitives"
AUDIO_MODULE = "flashhub.sdq.audio_codebook_primitives.v1_cpu"
RUN_AUDIO = f"""
import torch
import {AUDIO_MODULE} as k

torch.manual_seed(0)
logits = torch.randn((4, 16), dtype=torch.bfloat16)
codebook = torch.randn((4, 16, 8), dtype=torch.bfloat16)
codes, emb = k.delayed_codebook_argmax_embed_bf16(logits, codebook, 2, 1)
ref_codes, ref_emb = k.reference_delayed_codebook_argmax_embed(logits, codebook, 2, 1)
assert torch.equal(codes, ref_codes) and torch.equal(emb, ref_emb)
print(k.__file__)
print(*sorted(torch.ops.loaded_libraries))
"""


def published_variant(root: Path, repo_id: str, variant: str) -> Path:
    return root / "kernels" / repo_id / "v1" / "build" / variant


def test_publish_layout_zip_round_trips_a_native_kernel(
    cdn: CdnServer,
    tmp_path: Path,
    built: list,  # type: ignore[type-arg]
) -> None:
    build = tmp_path / "audio"
    shutil.copytree(next(b for b in built if b.repo_id == AUDIO).build_dir, build)
    publish = ("publish", build, "--repo-id", AUDIO, "--version", "1")
    result = flashhub(*publish, "--layout", "zip", "--out", cdn.root, "--json")
    assert result.returncode == 0, result.stderr
    cpu = cpu_variant()  # this torch's CPU build, which the load below takes
    assert cpu in {v["name"] for v in json.loads(result.stdout)["variants"]}
    variant_dir = published_variant(cdn.root, AUDIO, cpu)
    metadata = json.loads((variant_dir / "metadata.json").read_text())
    namespace = metadata["id"]
    assert metadata["build-layout"] == "zip" and namespace.startswith("_audio_codebook")
    listed = sorted(metadata["digest"]["files"])
    assert listed == [f"{namespace}.so", f"{namespace}.zip"] == sorted(metadata["sizes"])
    assert sorted(p.name for p in variant_dir.iterdir()) == [*listed, "metadata.json"]
    with zipfile.ZipFile(variant_dir / f"{namespace}.zip") as archive:
        assert sorted(archive.namelist()) == ["__init__.py", "_ops.py", "_reference.py"]
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}

    # A fresh process imports it: the op runs from the library beside the archive, and
    # the Python files came in one request.
    lines = run_python(RUN_AUDIO).splitlines()
    entry = Path(os.environ["FLASHHUB_CACHE_DIR"]) / "kernels" / AUDIO / "v1" / cpu
    assert lines[0] == str(entry / f"{namespace}.zip" / "__init__.py")
    assert str(entry / f"{namespace}.so") in lines[1].split()
    fetched = sorted(p.rpartition("/")[2] for p in cdn.gets() if f"/build/{cpu}/" in p)
    assert fetched == sorted([*listed, "metadata.json"])

    # A second one loads it from the cache without a request, online or offline.
    cdn.clear_log()
    assert run_python(RUN_AUDIO).splitlines()[0] == lines[0]
    assert run_python(RUN_AUDIO, env={"FLASHHUB_OFFLINE": "1"}).splitlines()[0] == lines[0]
    assert cdn.requests == []

    # The archive is reproducible: publishing the same build again writes nothing, even
    # with the files' times changed.
    for source in build.rglob("*.py"):
        os.utime(source, (1_000_000_000, 1_000_000_000))
    again = flashhub(*publish, "--layout", "zip", "--out", cdn.root)
    assert again.returncode == 0 and "identical content" in again.stdout


# make_kernel's CPU _ops.py finds its library through __file__; this test does not load it.
@pytest.mark.filterwarnings("ignore::flashhub_kernels.errors.FileRelativePathWarning")
def test_publish_layout_zip_keeps_native_libraries_beside_the_archive(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """A build of files, in its package folder (``make_kernel``) or flattened: the native
    library at the package's top goes beside the archive, a pure build has none."""
    kernel = make_kernel(tmp_path / "kernel")
    flattened = tmp_path / "flattened" / UNIVERSAL
    shutil.copytree(kernel / "build" / UNIVERSAL / PY_PKG, flattened)
    for build, repo in ((kernel, REPO_BUILT), (flattened.parent, "acme/flat-kern")):
        report = publish(build, repo_id=repo, version=1, out=cdn.root, layout="zip")
        assert all(v.files == (2 if v.name == CPU else 1) for v in report.variants)
    cpu = published_variant(cdn.root, REPO_BUILT, CPU)
    kernel_id = json.loads((cpu / "metadata.json").read_text())["id"]
    assert kernel_id == SO_NAME.removesuffix(".so")  # the builder's rule: the op namespace
    assert sorted(p.name for p in cpu.iterdir()) == [SO_NAME, f"{kernel_id}.zip", "metadata.json"]
    for repo in (REPO_BUILT, "acme/flat-kern"):
        universal = published_variant(cdn.root, repo, UNIVERSAL)
        (archive,) = universal.glob("*.zip")
        with zipfile.ZipFile(archive) as members:
            assert sorted(members.namelist()) == ["__init__.py", "_ops.py", "helpers.py"]
    assert fk.get_kernel("acme/flat-kern", version=1).double(21) == 42


def test_publish_layout_zip_keeps_a_namespace_subpackage_importable(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """zipimport finds a folder without ``__init__.py`` only by the archive's entry for
    it: the archive has one for each folder, with a fixed time and mode."""
    package = tmp_path / "nsb" / "build" / UNIVERSAL / "nsb"
    (package / "nsp" / "deeper").mkdir(parents=True)
    (package / "__init__.py").write_text("from .nsp import mod\nfrom .nsp.deeper import leaf\n")
    (package / "nsp" / "mod.py").write_text("X = 'namespace'\n")
    (package / "nsp" / "deeper" / "leaf.py").write_text("Y = 'deeper'\n")
    publish(package.parents[2], repo_id="acme/nsb", version=1, out=cdn.root, layout="zip")
    kernel = fk.get_kernel("acme/nsb", version=1)
    assert (kernel.mod.X, kernel.leaf.Y) == ("namespace", "deeper")
    (archive,) = published_variant(cdn.root, "acme/nsb", UNIVERSAL).glob("*.zip")
    with zipfile.ZipFile(archive) as members:
        folders = [info for info in members.infolist() if info.is_dir()]
        assert [info.filename for info in folders] == ["nsp/", "nsp/deeper/"]
        assert {(info.date_time, info.external_attr >> 16) for info in folders} == {
            ((1980, 1, 1, 0, 0, 0), 0o40755)
        }


def test_publish_layout_zip_keeps_versioned_native_libraries_beside_the_archive(
    tmp_path: Path,
) -> None:
    kernel = make_kernel(tmp_path / "kernel", variants=(UNIVERSAL,))
    package = kernel / "build" / UNIVERSAL / PY_PKG
    versioned = ["libdep.so.1", "libdep.so.1.2.3", "libmac.1.dylib"]
    for name in versioned:
        (package / name).write_bytes(b"\x7fELF")
    (package / "notes.so.txt").write_text("not a library")
    publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn", layout="zip")
    variant = published_variant(tmp_path / "cdn", REPO_BUILT, UNIVERSAL)
    (archive,) = variant.glob("*.zip")
    assert sorted(p.name for p in variant.iterdir()) == sorted(
        [*versioned, archive.name, "metadata.json"]
    )
    with zipfile.ZipFile(archive) as members:
        assert sorted(members.namelist()) == [
            "__init__.py",
            "_ops.py",
            "helpers.py",
            "notes.so.txt",
        ]


def test_a_build_of_too_many_files_for_its_metadata_is_told_to_publish_layout_zip(
    tmp_path: Path,
) -> None:
    """A client refuses a metadata.json over 1 MiB (or listing over 10,000 files); a zip
    build's lists its one archive."""
    kernel = make_kernel(tmp_path / "kernel", variants=(UNIVERSAL,))
    data = kernel / "build" / UNIVERSAL / PY_PKG / "data"
    data.mkdir()
    for i in range(10_000):
        (data / f"f{i}.txt").touch()
    with pytest.raises(PublishError, match="over the 1 MiB limit") as raised:
        publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn")
    assert "--layout zip" in (raised.value.hint or "")
    assert "rename" not in (raised.value.hint or "")
    publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn", layout="zip")


def test_publish_layout_zip_refuses_a_native_library_inside_the_package(tmp_path: Path) -> None:
    kernel = make_kernel(tmp_path / "kernel", variants=(CPU,))
    nested = kernel / "build" / CPU / PY_PKG / "lib"
    nested.mkdir()
    (kernel / "build" / CPU / PY_PKG / SO_NAME).rename(nested / SO_NAME)
    with pytest.raises(PublishError, match="in a subdirectory of the package") as raised:
        publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn", layout="zip")
    assert "--layout zip" in (raised.value.hint or "")
    assert not (tmp_path / "cdn").exists()


def test_publish_layout_zip_refuses_an_archive_that_would_need_zip64(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More members than zipfile's limit need a ZIP64 end record, which zipimport reads as
    an empty archive before Python 3.13 (a limit of 2 here: 65,535 files take too long)."""
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 2)
    kernel = make_kernel(tmp_path / "kernel", variants=(UNIVERSAL,))  # three Python files
    with pytest.raises(PublishError, match="ZIP64") as raised:
        publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn", layout="zip")
    assert "65,535 files" in raised.value.message and "before Python 3.13" in raised.value.message
    assert "without --layout zip" in (raised.value.hint or "")
    assert not (tmp_path / "cdn").exists()


def test_publish_layout_zip_writes_no_archive_outside_for_an_id_that_is_a_path(
    tmp_path: Path,
) -> None:
    """The archive is named after the build's own "id": one that climbs out of the
    publisher's scratch directory is refused before anything is written there."""
    kernel = make_kernel(tmp_path / "kernel", variants=(UNIVERSAL,))
    escaped = tmp_path / "escaped"
    climbing = "../" * len(Path(tempfile.gettempdir()).resolve().parts) * 2 + str(escaped)
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text(json.dumps({"id": climbing}))
    with pytest.raises(PublishError, match='its "id" must be a file name'):
        publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn", layout="zip")
    assert not escaped.with_name("escaped.zip").exists()
    assert not (tmp_path / "cdn").exists()


def builders_zip_build(root: Path, files: dict[str, bytes], archive: bytes | None = None) -> Path:
    """A variant as a kernel builder lays a zip build out: its archive (of ``files``, or
    ``archive``) and the builder's metadata.json, digest included."""
    variant = root / "build" / UNIVERSAL
    variant.mkdir(parents=True)
    archive = archive_bytes(files) if archive is None else archive
    (variant / ARCHIVE).write_bytes(archive)
    digest = {"algorithm": "sha256", "files": {ARCHIVE: b64sha256(archive)}}
    metadata = {"name": "zipped", "id": KERNEL_ID, "build-layout": "zip", "digest": digest}
    (variant / "metadata.json").write_text(json.dumps(metadata))
    return root


def test_a_builders_zip_build_is_published_as_it_is(cdn: CdnServer, tmp_path: Path) -> None:
    build = builders_zip_build(tmp_path / "zipped", package_files("built as zip"))
    for layout in (None, "zip"):
        report = publish(build, repo_id=REPO, version=1, out=cdn.root, layout=layout)
        assert [v.files for v in report.variants] == [1]
    variant = published_variant(cdn.root, REPO, UNIVERSAL)
    assert sorted(p.name for p in variant.iterdir()) == [ARCHIVE, "metadata.json"]
    assert json.loads((variant / "metadata.json").read_text())["build-layout"] == "zip"
    assert fk.get_kernel(REPO, version=1).helpers.shout() == "BUILT AS ZIP"
    with pytest.raises(PublishError, match="zip archive, not as files"):
        publish(build, repo_id=REPO, version=2, out=cdn.root, layout="files")


def _with_native_library() -> bytes:
    return archive_bytes({**package_files("x"), f"{KERNEL_ID}.abi3.so": b"\x7fELF"})


def _bzip2() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_BZIP2) as written:
        for name, data in package_files("x").items():
            written.writestr(name, data)
    return buffer.getvalue()


def _encrypted() -> bytes:  # zipfile writes no encrypted member: its flag says it is one
    archive = bytearray(archive_bytes(package_files("x")))
    struct.pack_into("<H", archive, _nth_header(archive, b"PK\x01\x02", "helpers.py") + 8, 1)
    return bytes(archive)


@pytest.mark.parametrize(
    ("archive", "message"),
    [
        (_with_native_library, rf"holds the native library {KERNEL_ID}\.abi3\.so"),
        (_bzip2, r"holds __init__\.py compressed with bzip2"),
        (_encrypted, r"holds helpers\.py encrypted"),
    ],
    ids=["native library", "bzip2", "encrypted"],
)
def test_a_builders_zip_build_that_a_client_cannot_load_is_not_published(
    tmp_path: Path, archive: Callable[[], bytes], message: str
) -> None:
    build = builders_zip_build(tmp_path / "zipped", {}, archive())
    with pytest.raises(PublishError, match=message) as raised:
        publish(build, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert raised.value.hint
    assert not (tmp_path / "cdn").exists()


def test_a_zip_build_without_its_archive_is_not_published(tmp_path: Path) -> None:
    build = builders_zip_build(tmp_path / "zipped", package_files("x"))
    metadata = build / "build" / UNIVERSAL / "metadata.json"
    document = json.loads(metadata.read_text())
    metadata.write_text(json.dumps({**document, "id": "_other_id"}))
    with pytest.raises(PublishError, match=r"holds no _other_id\.zip"):
        publish(build, repo_id=REPO, version=1, out=tmp_path / "cdn")


EXTRA_DATA = "acme/extra-data"
# A kernel that reads its data files through __file__, as Hugging Face's
# kernels-test/extra-data does, and one that reads them as a zip build can.
READS_THROUGH_FILE = b"""import json
import os

_HERE = os.path.dirname(__file__)
with open(os.path.join(_HERE, "configs", "default.json")) as f:
    CONFIG = json.load(f)
"""
READS_RESOURCES = b"""import json
import os
from importlib.resources import files

SOURCE = os.path.basename(__file__)  # no file is looked up through it
CONFIG = json.loads((files(__package__) / "configs" / "default.json").read_text())
"""


def extra_data_build(root: Path, init: bytes) -> Path:
    """``acme/extra-data``: ``torch-universal`` with ``__init__.py`` and a data file."""
    package = root / "build" / UNIVERSAL / "extra_data"
    (package / "configs").mkdir(parents=True)
    (package / "__init__.py").write_bytes(init)
    (package / "configs" / "default.json").write_text('{"block": 64}')
    return root


def test_flashhub_publish_layout_zip_warns_of_a_path_made_from_file(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """The kernel would fail to import from its archive: the report says so, naming the
    line and what to do, and the same build as files is not warned about."""
    build = extra_data_build(tmp_path / "extra-data", READS_THROUGH_FILE)
    publish = ("publish", build, "--repo-id", EXTRA_DATA, "--out", cdn.root)
    result = flashhub_process(*publish, "--version", "1", "--layout", "zip")
    assert result.returncode == 0, result.stderr
    (warning,) = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    shown = f"build/{UNIVERSAL}/extra_data/__init__.py"
    assert warning.startswith(f"warning: {EXTRA_DATA} v1: {shown}:4 makes a path from __file__")
    assert "importlib.resources.files(__package__)" in warning
    assert "FileRelativePathWarning" not in result.stderr  # in the report, not as a warning
    raised, printed = import_in_child("flashhub.acme.extra_data.v1")
    assert raised is NotADirectoryError and ".zip/configs/default.json" in printed

    again = ok_json(flashhub_process(*publish, "--version", "1", "--layout", "zip", "--json"))
    assert again["noop"] and again["file_relative_paths"] == [{"file": shown, "line": 4}]

    as_files = ok_json(flashhub_process(*publish, "--version", "2", "--json"))
    assert as_files["file_relative_paths"] == []
    assert (
        run_python("import flashhub.acme.extra_data.v2 as k; print(k.CONFIG)") == "{'block': 64}\n"
    )


def test_flashhub_publish_layout_zip_takes_a_flattened_build_with_its_compat_module(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """Today's kernel builder flattens a variant's files and keeps the package folder as a
    module for older loaders, which runs ../__init__.py found through __file__. No loader
    that reads a zip build needs it: the archive holds the flattened package."""
    variant = tmp_path / "flattened-build" / "build" / UNIVERSAL
    (variant / "flattened_build").mkdir(parents=True)
    (variant / "__init__.py").write_text(SILU_AND_MUL_INIT)
    (variant / "flattened_build" / "__init__.py").write_text(COMPAT_INIT)
    (variant / "metadata.json").write_text('{"name": "flattened-build", "version": 1}')
    publish = ("publish", variant.parent.parent, "--repo-id", FLATTENED, "--out", cdn.root)

    result = flashhub_process(*publish, "--version", "1", "--layout", "zip")

    assert result.returncode == 0, result.stderr
    assert "warning:" not in result.stdout
    (archive,) = published_variant(cdn.root, FLATTENED, UNIVERSAL).glob("*.zip")
    with zipfile.ZipFile(archive) as zipped:
        assert zipped.namelist() == ["__init__.py"]
    loaded = "import torch, flashhub_kernels as fk\n" + (
        f"print(fk.get_kernel({FLATTENED!r}, version=1).silu_and_mul(torch.ones(2)).tolist())"
    )
    assert run_python(loaded) == "[0.7310585975646973]\n"


def test_a_kernel_that_reads_its_data_as_resources_is_not_warned_and_loads_zipped(
    cdn: CdnServer, tmp_path: Path
) -> None:
    build = extra_data_build(tmp_path / "extra-data", READS_RESOURCES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = publish(build, repo_id=EXTRA_DATA, version=1, out=cdn.root, layout="zip")
    assert report.file_relative_paths == ()
    loaded = run_python("import flashhub.acme.extra_data.v1 as k; print(k.CONFIG, k.SOURCE)")
    assert loaded == "{'block': 64} __init__.py\n"


def test_publish_warns_of_each_file_that_makes_a_path_from_file_in_a_zip_build(
    tmp_path: Path,
) -> None:
    """Any spelling of a call that locates a file, once per file at its first line; not
    ``__file__`` in a message, a base name, a string or a comment."""
    # Its CPU _ops.py loads its library from os.path.dirname(__file__).
    kernel = make_kernel(tmp_path / "kernel")
    package = kernel / "build" / UNIVERSAL / PY_PKG
    (package / "tables.py").write_text(
        "from os.path import dirname\nfrom pathlib import Path\nimport os\n\n"
        "print(__file__, os.path.basename(__file__))\n"
        "NAME = '__file__'  # Path(__file__)\n"
        "HERE = Path(__file__).resolve().parent\n"
        "THERE = dirname(os.path.realpath(__file__))\n"
    )
    with pytest.warns(FileRelativePathWarning) as caught:
        report = publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "cdn", layout="zip")
    expected = [(f"build/{UNIVERSAL}/{PY_PKG}/tables.py", 7), (f"build/{CPU}/{PY_PKG}/_ops.py", 5)]
    assert [(found.file, found.line) for found in report.file_relative_paths] == expected
    assert report.to_dict()["file_relative_paths"] == [
        {"file": file, "line": line} for file, line in expected
    ]
    assert [str(w.message).partition(" makes")[0] for w in caught] == [
        f"{REPO_BUILT} v1: {file}:{line}" for file, line in expected
    ]
    assert {w.filename for w in caught} == {__file__}  # at the publish() call
    assert "__path__[0]" in str(caught[1].message)  # where _ops.py finds its library
    with warnings.catch_warnings():
        warnings.simplefilter("error", FileRelativePathWarning)
        as_files = publish(kernel, repo_id=REPO_BUILT, version=1, out=tmp_path / "as-files")
    assert as_files.file_relative_paths == ()


def test_flashhub_publish_layout_is_files_or_zip(kernel: Path, tmp_path: Path) -> None:
    args = ("publish", kernel, "--repo-id", REPO_BUILT, "--version", "1", "--out", tmp_path)
    result = flashhub(*args, "--layout", "tar")
    assert result.returncode == 2 and "invalid choice: 'tar'" in result.stderr
    assert "--layout {files,zip}" in flashhub("publish", "--help").stdout


@pytest.mark.parametrize("first", ["with submodules", "__init__.py alone"])
def test_an_archive_fetched_again_in_one_process_is_read_afresh(
    cdn: CdnServer, cache_dir: Path, first: str
) -> None:
    """Another archive at the path of one this process imported (the version republished
    with --force, the cache cleared): its modules are read from the new archive."""
    alone = {"__init__.py": b'"""Zipped kernel first."""\n'}
    publish_zip_build(cdn.root, alone if first == "__init__.py alone" else package_files("first"))
    assert fk.get_kernel(REPO, version=1).__doc__ == "Zipped kernel first."
    republished = package_files("second build")
    republished["helpers.py"] = b"# a longer file\n" * 50 + republished["helpers.py"]
    publish_zip_build(cdn.root, republished)
    shutil.rmtree(entry_of(cache_dir))
    for name in [n for n in sys.modules if n.startswith(MODULE)]:
        del sys.modules[name]
    again = importlib.import_module(MODULE)
    assert (again.helpers.shout(), again.sub.echo()) == ("SECOND BUILD", "SECOND BUILD")


# -- local builds ----------------------------------------------------------------------------


def write_local_zip_build(root: Path, files: dict[str, bytes]) -> Path:
    """A kernel repo directory holding ``build/torch-universal/`` as a zip build."""
    variant = root / "build" / UNIVERSAL
    variant.mkdir(parents=True)
    (variant / ARCHIVE).write_bytes(archive_bytes(files))
    (variant / "metadata.json").write_text(json.dumps({"id": KERNEL_ID, "build-layout": "zip"}))
    return root


def test_get_local_kernel_imports_a_local_zip_build(tmp_path: Path) -> None:
    repo = write_local_zip_build(tmp_path / "zipped", package_files("local"))
    k = fk.get_local_kernel(repo)
    archive = repo / "build" / UNIVERSAL / ARCHIVE
    assert k.__name__.startswith(f"flashhub._local.{KERNEL_ID}_")
    assert k.__file__ == str(archive / "__init__.py")
    assert k.helpers.shout() == "LOCAL" and k.sub.echo() == "LOCAL"
    assert fk.get_local_kernel(repo / "build" / UNIVERSAL) is k  # the variant directory too
    loaded = next(entry for entry in fk.get_loaded_kernels() if entry.module is k)
    assert loaded.path == archive and loaded.metadata.build_layout == "zip"


def test_local_kernels_maps_a_repo_to_a_local_zip_build(tmp_path: Path) -> None:
    repo = write_local_zip_build(tmp_path / "zipped", package_files("mapped"))
    code = f"import {MODULE} as k; print(k.helpers.shout(), k.__file__)"
    printed = run_python(code, env={"LOCAL_KERNELS": f"{REPO}={repo}"}).split()
    assert printed == ["MAPPED", str(repo / "build" / UNIVERSAL / ARCHIVE / "__init__.py")]


def test_get_local_kernel_of_a_zip_build_without_its_archive_names_the_archive(
    tmp_path: Path,
) -> None:
    repo = write_local_zip_build(tmp_path / "zipped", package_files("gone"))
    variant = repo / "build" / UNIVERSAL
    (variant / ARCHIVE).unlink()
    for path in (repo, variant):
        with pytest.raises(KernelNotFoundError, match=rf"holds no {re.escape(ARCHIVE)}") as raised:
            fk.get_local_kernel(path)
        assert 'declares a zip build ("build-layout": "zip")' in raised.value.message
        assert str(variant / "metadata.json") in raised.value.message
        assert '"id"' in (raised.value.hint or "")
