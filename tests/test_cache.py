"""Verification and the cache: nothing unverified is importable, nothing partial is visible."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import py_compile
import stat
import sys
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import run_python
from flashhub_kernels._cache.layout import Cache
from flashhub_kernels._cache.staging import commit, new_staging, record_index
from flashhub_kernels.errors import IntegrityError, ManifestError, OfflineError
from support.cdn_server import CdnServer, tampered
from support.preloaded import run_code, start_code
from support.trees import b64sha256, kernel_files, local_variant, write_kernel, write_variant

REPO = "acme/tensor-tricks"


def version_dir(cache_dir: Path, version: int = 1) -> Path:
    return cache_dir / "kernels" / "acme" / "tensor-tricks" / f"v{version}"


def entries(cache_dir: Path) -> list[str]:
    """Committed entries and leftovers (staging, trash) under every version directory."""
    root = cache_dir / "kernels"
    if not root.exists():
        return []
    return sorted(p.name for p in root.glob("*/*/v*/*") if p.is_dir() and p.name != ".locks")


def test_the_import_table_and_the_cache_put_version_directories_in_one_place(
    tmp_path: Path,
) -> None:
    """RepoInfo.cache_path (which the import table's warm path reads) is under the
    directory the cache's commands list, clear and prune."""
    cache = Cache(tmp_path)
    assert cache.version_dir(fk.RepoInfo(REPO, 3)).parents[2] == cache.kernels_dir


def test_tampered_file_is_refused_and_nothing_is_cached(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    path = f"kernels/{REPO}/v1/build/{local_variant()}/tensor_tricks/helpers.py"
    cdn.inject(path, tampered(5), tampered(7))
    with pytest.raises(IntegrityError, match="does not match"):
        fk.get_kernel(REPO, version=1)
    assert entries(cache_dir) == []
    assert "flashhub.acme.tensor_tricks.v1" not in sys.modules
    assert cdn.gets("helpers.py") == ["/" + path] * 2  # one fresh retry, then refused
    # Tampered once: the fresh retry gets honest bytes.
    cdn.clear_log()
    cdn.inject(path, tampered(5))
    assert fk.get_kernel(REPO, version=1).marker().startswith(REPO)
    assert len(cdn.gets("helpers.py")) == 2
    assert entries(cache_dir) == [local_variant()]


@pytest.mark.parametrize(
    "bad_path", ["../escape.py", "tensor_tricks/../../escape.py", "/abs.py", "tensor_tricks\\x.py"]
)
def test_escaping_manifest_paths_are_refused(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path, bad_path: str
) -> None:
    files = kernel_files("tensor_tricks", "x")
    manifest = {
        "digest": {
            "files": {**{p: b64sha256(d) for p, d in files.items()}, bad_path: b64sha256(b"evil")}
        }
    }
    write_variant(cdn.root, REPO, 1, "torch-universal", files, manifest=manifest)
    with pytest.raises(ManifestError, match="path"):
        fk.get_kernel(REPO, version=1)
    assert entries(cache_dir) == []
    assert not any("escape" in p or "abs.py" in p for p in cdn.gets())
    assert not list(tmp_path.rglob("escape.py"))


@pytest.mark.parametrize(
    "document", ["not json", "[]", '{"digest": {"files": {"tensor_tricks/__init__.py": "abc"}}}']
)
def test_malformed_manifest(cdn: CdnServer, cache_dir: Path, document: str) -> None:
    write_variant(cdn.root, REPO, 1, "torch-universal", kernel_files("tensor_tricks", "x"))
    (cdn.root / f"kernels/{REPO}/v1/build/torch-universal/metadata.json").write_text(document)
    with pytest.raises(ManifestError):
        fk.get_kernel(REPO, version=1)
    assert entries(cache_dir) == []


def test_manifest_without_the_package_is_refused(cdn: CdnServer, cache_dir: Path) -> None:
    write_variant(cdn.root, REPO, 1, "torch-universal", {"other/__init__.py": b""})
    with pytest.raises(ManifestError, match=r"tensor_tricks/__init__\.py"):
        fk.get_kernel(REPO, version=1)
    assert entries(cache_dir) == []


def test_files_not_in_the_manifest_are_not_fetched(cdn: CdnServer) -> None:
    files = kernel_files("tensor_tricks", "x")
    listed = {p: d for p, d in files.items() if not p.endswith("table.txt")}
    manifest = {"digest": {"files": {p: b64sha256(d) for p, d in listed.items()}}}
    write_variant(cdn.root, REPO, 1, "torch-universal", files, manifest=manifest)
    k = fk.get_kernel(REPO, version=1)
    assert not (Path(k.__file__).parent / "data" / "table.txt").exists()
    assert not any(p.endswith("table.txt") for p in cdn.gets())


def test_cache_layout_receipt_and_permissions(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700
    entry = version_dir(cache_dir) / local_variant()
    receipt = json.loads((entry / ".flashhub-receipt.json").read_text())
    assert receipt["content_hash"].startswith("sha256-")
    assert sorted(receipt["files"]) == sorted(kernel_files("tensor_tricks", "x"))
    assert (entry / "metadata.json").read_bytes() == (
        cdn.root / f"kernels/{REPO}/v1/build/{local_variant()}/metadata.json"
    ).read_bytes()
    assert (
        json.loads((version_dir(cache_dir) / "variants-index.json").read_text())["complete"] is True
    )


# Nested past what Python's JSON parser takes, whatever the call stack.
TOO_DEEP = "[" * 100_000 + "]" * 100_000


INDEX = "variants-index.json"
RECEIPT = ".flashhub-receipt.json"


@pytest.mark.parametrize(
    "record, document",
    [
        (INDEX, '{"complete": true, "present": ["torch-universal", 1], "absent": []}'),
        (INDEX, '{"complete": true, "present": "torch-universal", "absent": []}'),
        (INDEX, '{"complete": true, "present": ' + TOO_DEEP + ', "absent": []}'),
        (RECEIPT, '{"content_hash": "x", "files": {}, "requires": ' + TOO_DEEP + "}"),
    ],
    ids=["a name that is a number", "a string for a list", "nested too deeply", "a deep receipt"],
)
def test_a_damaged_cache_record_is_not_used_by_a_warm_import(
    cdn: CdnServer, cache_dir: Path, record: str, document: str
) -> None:
    """A record a neighbour or a crash damaged makes the import look the kernel up again,
    not fail with a TypeError or a RecursionError, nor take the kernel for unpublished."""
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    directory = version_dir(cache_dir)
    path = directory / record if record == INDEX else directory / local_variant() / record
    path.write_text(document)
    out = run_python("import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())")
    assert out.strip() == f"{REPO}@v1:{local_variant()}"


def test_fields_a_later_client_adds_to_the_records_are_passed_over(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """Old and new clients share a cache while a fleet upgrades: what a later client adds
    to a receipt or a variant index leaves the entry usable here, offline and warm."""
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    directory = version_dir(cache_dir)
    for path in (directory / INDEX, directory / local_variant() / RECEIPT):
        document = json.loads(path.read_text())
        path.write_text(json.dumps({**document, "added_later": {"format": 2, "x": [1]}}))
    cdn.clear_log()
    out = run_python(
        "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())",
        env={"FLASHHUB_OFFLINE": "1"},
    )
    assert out.strip() == f"{REPO}@v1:{local_variant()}"
    assert cdn.requests == []


def test_modified_cached_file_is_refetched(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    ops = version_dir(cache_dir) / local_variant() / "tensor_tricks" / "_ops.py"
    ops.write_text("MARKER = 'evil'\ndef double(x):\n    return x\n")
    cdn.clear_log()
    out = run_python("import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())")
    assert out.strip() == f"{REPO}@v1:{local_variant()}"
    assert any(p.endswith("_ops.py") for p in cdn.gets())
    assert "evil" not in ops.read_text()


def test_cached_bytecode_replaced_by_a_symlink_of_its_size_and_mtime_is_refetched(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """What the receipt records of a file is its size and mtime; a symlink can have both
    (its target's name as long as the file): it is a changed file all the same, and the
    bytecode it leads to, outside the cache, never runs."""
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    ops = version_dir(cache_dir) / local_variant() / "tensor_tricks" / "_ops.py"
    bytecode = Path(importlib.util.cache_from_source(str(ops)))
    planted, compiled = tmp_path / "planted.py", tmp_path / "planted.pyc"
    planted.write_text("MARKER = 'planted'\ndouble = None\n")
    py_compile.compile(
        str(planted), str(compiled), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    recorded = bytecode.stat()
    bytecode.unlink()
    bytecode.symlink_to("/" * (recorded.st_size - len(str(compiled))) + str(compiled))
    os.utime(bytecode, ns=(recorded.st_atime_ns, recorded.st_mtime_ns), follow_symlinks=False)
    link = bytecode.lstat()
    assert (link.st_size, link.st_mtime_ns) == (recorded.st_size, recorded.st_mtime_ns)
    out = run_python("import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())")
    assert out.strip() == f"{REPO}@v1:{local_variant()}"
    assert not bytecode.is_symlink()


def test_modified_cached_file_offline_is_refused(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    del sys.modules["flashhub.acme.tensor_tricks.v1"]
    ops = version_dir(cache_dir) / local_variant() / "tensor_tricks" / "_ops.py"
    ops.write_text(ops.read_text() + "# edited\n")
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    code = "import flashhub.acme.tensor_tricks.v1"
    result = run_code(code, env=dict(os.environ))
    assert result.returncode != 0
    assert "IntegrityError" in result.stderr and "modified after it was verified" in result.stderr


def test_offline_cold_cache_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    with pytest.raises(OfflineError) as info:
        fk.get_kernel(REPO, version=1)
    assert "flashhub get acme/tensor-tricks --version 1" in str(info.value)


CONCURRENT_IMPORT = """
import sys, time
start = float(sys.argv[1])
while time.time() < start:
    time.sleep(0.005)
import flashhub.acme.tensor_tricks.v1 as k
print(k.marker())
"""


def test_eight_processes_import_one_cold_kernel_and_each_file_is_fetched_once(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1)
    monkeypatch.delenv("FLASHHUB_NO_VERSION_CHECK")  # the check as users have it: on
    import time

    start = str(time.time() + 3)
    children = [start_code(CONCURRENT_IMPORT, start, env=dict(os.environ)) for _ in range(8)]
    results = [child.communicate(timeout=180) for child in children]
    assert [c.returncode for c in children] == [0] * 8, [err for _, err in results]
    assert {out.strip() for out, _ in results} == {f"{REPO}@v1:{local_variant()}"}
    # variants.json, metadata.json, four files and (the downloader's newer-version check)
    # versions.json: each once, however many processes wait for the download.
    fetched = cdn.gets(missed_guesses=False)
    assert len(fetched) == len(set(fetched)) == 7, fetched
    assert f"/kernels/{REPO}/versions.json" in fetched
    assert entries(cache_dir) == [local_variant()]


def test_second_commit_of_an_entry_is_dropped(tmp_path: Path) -> None:
    """With flock broken, two processes may both download; the first rename wins."""
    from flashhub_kernels._cache.layout import Cache
    from flashhub_kernels._models.names import RepoInfo

    cache, info = Cache(tmp_path / "c"), RepoInfo(REPO, 1)
    entry = cache.entry_dir(info, "torch-universal")
    first, second = (new_staging(cache, info, "torch-universal") for _ in range(2))
    (first / "a").write_text("first")
    (second / "a").write_text("second")
    assert commit(first, entry) is True
    assert commit(second, entry) is False
    assert (entry / "a").read_text() == "first"
    assert not second.exists()


def test_a_failed_index_write_leaves_the_old_index_and_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rename fails (a full disk, a read-only cache): nothing half-written stays."""
    from flashhub_kernels._cache.layout import Cache, VariantIndex
    from flashhub_kernels._models.names import RepoInfo
    from flashhub_kernels.errors import CacheError

    cache, info = Cache(tmp_path / "c"), RepoInfo(REPO, 1)
    record_index(cache, info, VariantIndex(False, frozenset({"torch-universal"})))
    directory = cache.version_dir(info)
    before = {p.name: p.read_bytes() for p in directory.iterdir()}

    def refuse(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(CacheError):
        record_index(cache, info, VariantIndex(True, frozenset({"torch-universal", "cpu"})))
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    monkeypatch.undo()
    assert stat.S_IMODE((directory / "variants-index.json").stat().st_mode) == 0o644


# -- bytecode in an entry ---------------------------------------------------------------------

IMPORT_HELPERS = (
    "import flashhub.acme.tensor_tricks.v1.helpers as h, flashhub.acme.tensor_tricks.v1 as k\n"
    "print(h.shout(), k.marker())"
)


def cached_bytecode(cache_dir: Path, module: str) -> Path:
    """The bytecode the cache compiled for ``tensor_tricks/<module>.py`` of v1."""
    package = version_dir(cache_dir) / local_variant() / "tensor_tricks"
    (pyc,) = (package / "__pycache__").glob(f"{module}.*.pyc")
    return pyc


def test_bytecode_is_compiled_hash_based_and_recorded_in_the_receipt(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)  # this process does not write bytecode: the cache does
    entry = version_dir(cache_dir) / local_variant()
    receipt = json.loads((entry / ".flashhub-receipt.json").read_text())
    pyc = cached_bytecode(cache_dir, "helpers")
    size, mtime_ns, digest = receipt["bytecode"][pyc.relative_to(entry).as_posix()]
    assert (size, mtime_ns) == (pyc.stat().st_size, pyc.stat().st_mtime_ns)
    assert digest == hashlib.sha256(pyc.read_bytes()).hexdigest()
    assert int.from_bytes(pyc.read_bytes()[4:8], "little") == 0b01  # PEP 552: hash-based, unchecked
    assert len(receipt["bytecode"]) == 3  # __init__, _ops, helpers


def test_a_cold_load_under_a_pycache_prefix_compiles_the_entrys_bytecode_into_the_entry(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    # PYTHONPYCACHEPREFIX keeps a source tree's bytecode elsewhere; the cache's is the
    # entry's own, recorded in its receipt, so it stays in the entry.
    write_kernel(cdn.root, REPO, 1)
    prefix = tmp_path / "pycache-prefix"
    load = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
    marker = f"{REPO}@v1:{local_variant()}"
    assert run_python(load, env={"PYTHONPYCACHEPREFIX": str(prefix)}, fresh=True).split() == [
        marker
    ]
    assert cached_bytecode(cache_dir, "helpers").is_file()
    cdn.clear_log()
    assert run_python(load).split() == [marker]  # warm, without the prefix
    assert cdn.requests == []


@pytest.mark.parametrize("offline", [False, True])
def test_damaged_bytecode_is_detected_by_the_warm_check(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, offline: bool
) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    pyc = cached_bytecode(cache_dir, "helpers")
    genuine = pyc.read_bytes()
    damaged = genuine[:16] + b"garbage, not marshal data" * 4  # the header intact
    pyc.write_bytes(damaged)
    cdn.clear_log()
    if offline:
        monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
        result = run_code(IMPORT_HELPERS, env=dict(os.environ))
        assert result.returncode != 0 and "bad marshal data" not in result.stderr
        assert "IntegrityError" in result.stderr and pyc.name in result.stderr
        assert "flashhub cache verify --repair" in result.stderr
        return
    out = run_python(IMPORT_HELPERS)
    assert out.split()[0] == f"{REPO}@v1:{local_variant()}".upper()
    assert len(cdn.gets(".py")) == 3  # the damaged entry was fetched again
    assert pyc.read_bytes() != damaged and pyc.read_bytes()[:16] == genuine[:16]


def test_substituted_bytecode_with_the_genuine_header_does_not_run(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    pyc = cached_bytecode(cache_dir, "helpers")
    marker = tmp_path / "substituted-bytecode-ran"
    evil = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\nshout = str\n"
    code = compile(evil, str(pyc), "exec")
    pyc.write_bytes(pyc.read_bytes()[:16] + marshal.dumps(code))  # valid, same header

    out = run_python(IMPORT_HELPERS)

    assert out.split()[0] == f"{REPO}@v1:{local_variant()}".upper()
    assert not marker.exists()


def test_another_python_sharing_the_cache_adds_its_bytecode_and_fetches_nothing(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """Two Pythons (one cache tag each, as 3.11 and 3.12 on one home directory) share a
    cached entry: the other one writes its own bytecode beside the cache's, which makes
    the entry neither damaged nor fetched again, for either of them."""
    write_kernel(cdn.root, REPO, 1)
    as_another_python = (
        "import sys\n"
        "sys.implementation.cache_tag = 'cpython-399'\n"
        "sys.dont_write_bytecode = False\n"
        f"{IMPORT_HELPERS}\n"
    )
    expected = f"{REPO}@v1:{local_variant()}".upper()
    assert run_python(IMPORT_HELPERS).split()[0] == expected  # cold: this Python's bytecode
    cdn.clear_log()

    for python in (as_another_python, IMPORT_HELPERS, as_another_python, IMPORT_HELPERS):
        assert run_python(python).split()[0] == expected

    assert cdn.requests == []
    package = version_dir(cache_dir) / local_variant() / "tensor_tricks"
    assert (package / "__pycache__" / "helpers.cpython-399.pyc").is_file()


@pytest.mark.parametrize("blank", [" ", "\t\n"])
def test_a_cache_dir_variable_of_blanks_only_is_unset(
    cdn: CdnServer, tmp_path: Path, blank: str
) -> None:
    # A launcher that writes FLASHHUB_CACHE_DIR=" " (an empty template value, say): not a
    # cache in a directory named " " under wherever the process happens to run.
    write_kernel(cdn.root, REPO, 1)
    env = {"FLASHHUB_CACHE_DIR": blank, "XDG_CACHE_HOME": f" {tmp_path / 'xdg'} "}
    (tmp_path / "work").mkdir()
    run_python("import flashhub.acme.tensor_tricks.v1", env=env, cwd=tmp_path / "work")
    assert (tmp_path / "xdg" / "flashhub" / "kernels" / REPO / "v1").is_dir()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_relative_xdg_cache_home_is_ignored_as_the_xdg_spec_says(
    cdn: CdnServer, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    env = {"FLASHHUB_CACHE_DIR": "", "XDG_CACHE_HOME": "xdg", "HOME": str(tmp_path / "home")}
    (tmp_path / "work").mkdir()
    run_python("import flashhub.acme.tensor_tricks.v1", env=env, cwd=tmp_path / "work")
    assert (tmp_path / "home" / ".cache" / "flashhub" / "kernels" / REPO / "v1").is_dir()
    assert list((tmp_path / "work").iterdir()) == []


def test_a_relative_cache_dir_is_taken_from_where_the_load_runs_and_survives_a_chdir(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """FLASHHUB_CACHE_DIR=cache, relative: the kernel loads from <cwd>/cache, by absolute
    paths, so that its resources and a warm import still work after the process moves."""
    write_kernel(cdn.root, REPO, 1)
    (tmp_path / "elsewhere").mkdir()
    code = (
        "import importlib.resources, os\n"
        "import flashhub.acme.tensor_tricks.v1 as k\n"
        f"os.chdir({str(tmp_path / 'elsewhere')!r})\n"
        "print(os.path.isabs(k.__file__), importlib.resources.files(k).joinpath("
        "'data/table.txt').read_text().strip())\n"
    )
    env = {"FLASHHUB_CACHE_DIR": "cache"}
    for _cold_then_warm in range(2):
        printed = run_python(code, env=env, cwd=tmp_path)
        assert printed.strip().splitlines()[-1] == f"True table of {REPO}@v1:{local_variant()}"
    assert (tmp_path / "cache" / "kernels" / REPO).is_dir()
    assert not (tmp_path / "elsewhere" / "cache").exists()


PARENT_REMOVED_WHILE_MADE = """
import os, sys
from pathlib import Path
from flashhub_kernels._cache.directories import ensure_dir

removed = []


def remove_the_parent(event, args):  # as `flashhub cache clear` removes empty directories
    if event == "os.mkdir" and str(args[0]).endswith("/v1") and not removed:
        removed.append(os.path.dirname(args[0]))
        os.rmdir(removed[0])


sys.addaudithook(remove_the_parent)
print(ensure_dir(Path({target!r})).is_dir(), removed == [{parent!r}])
"""


def test_a_directory_whose_parent_is_removed_while_it_is_made_is_made_again(
    tmp_path: Path,
) -> None:
    target = tmp_path / "kernels" / "acme" / "tensor-tricks" / "v1"
    code = PARENT_REMOVED_WHILE_MADE.format(target=str(target), parent=str(target.parent))
    assert run_python(code) == "True True\n"
