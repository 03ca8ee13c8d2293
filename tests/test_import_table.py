"""The import table: a warm import answered from the entry the same import loaded last,
only while everything that decided that answer, and everything the full lookup checked,
is as it was.

Each case fills the cache with a cold load and records a row with a warm one (each in a
process of its own), then changes one thing and imports again in a fresh process, which
says whether the full lookup ran (``flashhub_kernels._cache.obtain`` imported) and what
it loaded. The attacks stage a table that another user could have written, rows naming
paths outside the cache, and files changed under a recorded row.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import flashhub_kernels as fk
from conftest import NOBODY, needs_root, run_python
from flashhub_kernels import _cache_imports as imports
from support.cdn_server import CdnServer
from support.preloaded import run_code
from support.trees import local_variant, write_kernel
from test_signing_load import TRUSTED, key_pair, sign

REPO = "acme/tensor-tricks"
MODULE = "flashhub.acme.tensor_tricks.v1"
# What one import in a fresh process reports: whether it looked its kernel up in full, and
# the kernel's marker and file.
IMPORT = f"""
import json, sys
import {MODULE} as k
print(json.dumps(["flashhub_kernels._cache.obtain" in sys.modules, k.marker(), k.__file__]))
"""


def import_once(
    env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[bool, str, str]:
    """(looked up in full, marker, file) of one import in a fresh process."""
    in_full, marker, file = json.loads(run_python(IMPORT, env=env, cwd=cwd).splitlines()[-1])
    return in_full, marker, file


@pytest.fixture
def recorded(cdn: CdnServer, cache_dir: Path) -> Path:
    """A kernel cached by a cold load, its row recorded by a warm one; the table's path."""
    write_kernel(cdn.root, REPO, 1)
    assert import_once()[0]  # cold
    assert import_once()[0]  # warm, looked up in full: recorded
    table = Path(imports.table_file(str(cache_dir), MODULE))
    assert table.is_file()
    return table


def entry_dir(cache_dir: Path) -> Path:
    return cache_dir / f"kernels/{REPO}/v1/{local_variant()}"


def test_the_table_answers_the_next_import_and_the_same_files_load(
    recorded: Path, cache_dir: Path, cdn: CdnServer
) -> None:
    cdn.clear_log()
    in_full, marker, file = import_once()
    assert not in_full
    assert marker.startswith("acme/tensor-tricks@v1")
    assert Path(file) == entry_dir(cache_dir) / "tensor_tricks/__init__.py"
    assert cdn.requests == []
    assert recorded.stat().st_mode & 0o777 == 0o600  # the user's own record


def test_a_row_stamps_each_directory_once(recorded: Path, cache_dir: Path) -> None:
    """The cache root, resolved and as named, is one directory where no link leads to it:
    every hit stats each directory a row lists."""
    (row,) = json.loads(recorded.read_text())["rows"].values()
    judged = [path for path, _identity in row["dirs"]]
    assert str(cache_dir) in judged and "/" in judged
    assert sorted(judged) == sorted(set(judged))


def test_get_kernel_is_answered_by_the_table_too(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    code = f"""
import json, sys, flashhub_kernels as fk
k = fk.get_kernel({REPO!r}, version=1)
print(json.dumps("flashhub_kernels._cache.obtain" in sys.modules))
"""
    looked_up = [json.loads(run_python(code).splitlines()[-1]) for _ in range(3)]
    assert looked_up == [True, True, False]  # cold, recorded, answered


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"FLASHHUB_READ_TIMEOUT": "7"}, id="a FLASHHUB_ setting"),
        pytest.param({"FLASHHUB_CACHE_SHARED": "1"}, id="the shared-cache setting"),
        pytest.param({"HOME": "/nonexistent-home"}, id="what places the cache"),
    ],
)
def test_another_setting_is_another_key(recorded: Path, change: dict[str, str]) -> None:
    assert import_once(env=change)[0]  # looked up in full, and recorded under its key
    assert not import_once(env=change)[0]
    assert not import_once()[0]  # the first key's row is kept beside it


def test_a_project_file_changed_is_another_key(recorded: Path, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    import_once(cwd=project)  # recorded for this directory, if its key is another
    assert not import_once(cwd=project)[0]
    (project / "pyproject.toml").write_text('[project]\nname = "app"\n')
    assert import_once(cwd=project)[0]
    assert not import_once(cwd=project)[0]
    (project / "pyproject.toml").write_text('[project]\nname = "app2"\n')
    assert import_once(cwd=project)[0]


def test_a_rewritten_index_is_a_miss(recorded: Path, cache_dir: Path) -> None:
    index = cache_dir / f"kernels/{REPO}/v1/variants-index.json"
    index.write_bytes(index.read_bytes())  # the same bytes, written again
    assert import_once()[0]
    assert not import_once()[0]


def test_a_judged_pick_is_a_miss_once_its_version_changes(recorded: Path, cache_dir: Path) -> None:
    """Where the index records no pick for this system, the lookup judged the builds by
    the metadata of the version's entries: an entry added there is a miss."""
    index = cache_dir / f"kernels/{REPO}/v1/variants-index.json"
    document = json.loads(index.read_text())
    del document["picks"]
    index.write_text(json.dumps(document))
    assert import_once()[0]  # judged, and recorded
    assert not import_once()[0]
    (index.parent / "torch-universal").mkdir()  # what a commit of another build does to it
    assert import_once()[0]


def test_a_changed_file_is_a_miss_and_the_full_lookup_repairs_it(
    recorded: Path, cache_dir: Path
) -> None:
    init = entry_dir(cache_dir) / "tensor_tricks/__init__.py"
    original = init.read_bytes()
    init.write_bytes(original + b"\nraise SystemExit('planted code ran')\n")
    in_full, marker, _file = import_once()
    assert in_full and marker.startswith("acme/tensor-tricks@v1")
    assert init.read_bytes() == original  # fetched again, verified


def test_a_changed_file_offline_fails_as_the_full_lookup_fails(
    recorded: Path, cache_dir: Path
) -> None:
    init = entry_dir(cache_dir) / "tensor_tricks/__init__.py"
    init.write_bytes(init.read_bytes() + b"\nraise SystemExit('planted code ran')\n")
    result = run_code(IMPORT, env={**os.environ, "FLASHHUB_OFFLINE": "1"})
    assert result.returncode == 1 and "planted code ran" not in result.stderr
    assert "differs from its receipt" in result.stderr
    assert "IntegrityError" in result.stderr and issubclass(fk.errors.IntegrityError, ImportError)


def test_a_removed_entry_is_fetched_again(recorded: Path, cache_dir: Path) -> None:
    shutil.rmtree(entry_dir(cache_dir))
    in_full, marker, _file = import_once()
    assert in_full and marker.startswith("acme/tensor-tricks@v1")


def test_a_directory_opened_to_others_is_refused_as_by_the_full_lookup(
    recorded: Path, cache_dir: Path
) -> None:
    version = cache_dir / f"kernels/{REPO}/v1"
    version.chmod(0o777)
    result = run_code(IMPORT, env=dict(os.environ))
    assert result.returncode == 1
    assert "refusing to trust the cache" in result.stderr and str(version) in result.stderr


def test_a_table_that_cannot_be_written_leaves_every_import_to_the_full_lookup(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """As on a read-only cache: recording fails, quietly, and the imports work."""
    write_kernel(cdn.root, REPO, 1)
    assert import_once()[0]
    Path(imports.table_file(str(cache_dir), MODULE)).mkdir(
        parents=True
    )  # in the way, even for root
    assert [import_once()[0] for _ in range(2)] == [True, True]


def test_configure_turns_the_table_off_for_the_process(recorded: Path) -> None:
    code = f"""
import json, sys, flashhub_kernels as fk
fk.configure(prefix="kernels")  # what the environment says too
import {MODULE}
print(json.dumps("flashhub_kernels._cache.obtain" in sys.modules))
"""
    assert json.loads(run_python(code).splitlines()[-1]) is True


# A thread imports a cold kernel and is held as the settings' module starts to run, which
# the cold path imports; another thread imports the cached kernel meanwhile.
WHILE_A_THREAD_IMPORTS_THE_SETTINGS = f"""
import importlib, sys, threading

paused, cached_done = threading.Event(), threading.Event()

def pause(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == "<module>" and code.co_filename.endswith("_config.py"):
        paused.set()
        cached_done.wait(60)

def load(name, traced):
    if traced:
        sys.settrace(pause)
    try:
        print(name, importlib.import_module(name).marker(), flush=True)
    except Exception as exc:
        print(name, type(exc).__name__, exc, flush=True)

cold = threading.Thread(target=load, args=("flashhub.acme.other.v1", True))
cold.start()
paused.wait(60)
cached = threading.Thread(target=load, args=({MODULE!r}, False))
cached.start()
cached.join(60)
cached_done.set()
cold.join(60)
"""


def test_a_cached_kernel_imports_while_another_thread_imports_the_settings(
    recorded: Path, cdn: CdnServer
) -> None:
    """The table's key looks whether configure() set anything; the settings' module,
    half-run by the other thread's cold load, has not: the import goes on (it raised
    AttributeError)."""
    write_kernel(cdn.root, "acme/other", 1)
    printed = run_python(WHILE_A_THREAD_IMPORTS_THE_SETTINGS).splitlines()
    assert printed == [
        f"{MODULE} acme/tensor-tricks@v1:{local_variant()}",
        f"flashhub.acme.other.v1 acme/other@v1:{local_variant()}",
    ]


@pytest.mark.signing
def test_the_table_never_lifts_a_signature_check(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """A row recorded while the publisher's key was trusted does not answer an import that
    trusts another key only: that one looks up in full, and is refused."""
    (signing, key), (_other_file, other) = key_pair(tmp_path, "a"), key_pair(tmp_path, "b")
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, signing)
    trusting_a, trusting_b = {TRUSTED: key.public_line}, {TRUSTED: other.public_line}
    assert [import_once(env=trusting_a)[0] for _ in range(3)] == [True, True, False]
    result = run_code(IMPORT, env={**os.environ, **trusting_b})
    assert result.returncode == 1 and "SignatureError" in result.stderr
    assert "no signature by a key trusted" in result.stderr


@pytest.mark.signing
def test_a_keys_file_behind_a_link_edited_in_place_is_another_key(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """FLASHHUB_TRUSTED_KEYS names a link (a dotfile kept elsewhere); the file it leads to
    is edited to revoke the publisher's key: the next import looks up in full and is
    refused, as the settings read the file the link leads to."""
    (signing, key), (_other_file, other) = key_pair(tmp_path, "a"), key_pair(tmp_path, "b")
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, signing)
    real, link = tmp_path / "keys.real", tmp_path / "keys.link"
    real.write_text(key.public_line + "\n")
    real.chmod(0o600)
    link.symlink_to(real)
    trusting = {TRUSTED: str(link)}
    assert [import_once(env=trusting)[0] for _ in range(3)] == [True, True, False]
    real.write_text(other.public_line + "\n")  # the same size: only its times change
    result = run_code(IMPORT, env={**os.environ, **trusting})
    assert result.returncode == 1 and "no signature by a key trusted" in result.stderr


@pytest.mark.signing
def test_a_project_file_behind_a_link_edited_in_place_is_another_key(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """The project's pyproject.toml is a link; the file it leads to comes to trust a key,
    which the (unsigned) kernel lacks a signature of: the next import is refused."""
    _other_file, other = key_pair(tmp_path, "b")
    write_kernel(cdn.root, REPO, 1)
    project, shared = tmp_path / "project", tmp_path / "shared.toml"
    project.mkdir()
    shared.write_text('[project]\nname = "app"\n')
    (project / "pyproject.toml").symlink_to(shared)
    assert [import_once(cwd=project)[0] for _ in range(3)] == [True, True, False]
    shared.write_text(
        f'[project]\nname = "app"\n[tool.flashhub]\ntrusted-keys = ["{other.public_line}"]\n'
    )
    result = run_code(IMPORT, env=dict(os.environ), cwd=project)
    assert result.returncode == 1 and "SignatureError" in result.stderr


# -- a table that cannot be trusted is not read ------------------------------------------


def test_a_table_others_could_write_is_not_read(recorded: Path) -> None:
    recorded.chmod(0o666)
    assert import_once()[0]


def test_a_table_directory_others_could_write_is_not_read(recorded: Path) -> None:
    recorded.parent.chmod(0o777)  # anyone could have replaced the file in it
    assert import_once()[0]


def test_an_import_reads_the_rows_of_its_name_alone(recorded: Path) -> None:
    """What other kernels' imports recorded costs this one nothing: even a table of other
    names too large to read leaves its answer alone."""
    other = recorded.with_name("flashhub.acme.other.v1.json")
    other.write_bytes(b"x" * (4 << 20))
    other.chmod(0o600)
    assert not import_once()[0]


def test_a_table_owned_by_another_user_is_not_read(recorded: Path) -> None:
    needs_root()
    os.chown(recorded, NOBODY, NOBODY)
    assert import_once()[0]


def test_a_symlinked_table_is_not_read(recorded: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.json"
    recorded.rename(elsewhere)
    recorded.symlink_to(elsewhere)
    assert import_once()[0]


@pytest.mark.parametrize(
    "field, value",
    [
        ("variant", "../../../.."),
        ("variant", ".."),
        ("package", "../../../../../../tmp"),
        ("package", "/tmp"),
        ("repo", 7),
    ],
)
def test_a_row_naming_a_path_outside_its_entry_is_not_used(
    recorded: Path, field: str, value: object
) -> None:
    document = json.loads(recorded.read_text())
    (row,) = document["rows"].values()
    if field == "package":
        row["kernel"]["package"] = value
    else:
        row[field] = value
    recorded.write_text(json.dumps(document))
    recorded.chmod(0o600)
    in_full, marker, _file = import_once()
    assert in_full and marker.startswith("acme/tensor-tricks@v1")


@pytest.mark.parametrize(
    "document",
    ["{not json", '{"format": 1, "rows": ' + "[" * 100_000 + "]" * 100_000 + "}"],
    ids=["not JSON", "nested past the parser"],
)
def test_a_table_that_does_not_parse_is_a_miss_and_is_written_again(
    recorded: Path, document: str
) -> None:
    recorded.write_text(document)
    assert import_once()[0]
    assert json.loads(recorded.read_text())["format"] == imports.FORMAT
    assert not import_once()[0]


@pytest.mark.parametrize("field", ["installed", "dirs", "stamped", "versions"])
def test_a_row_whose_fields_have_other_shapes_is_a_miss(recorded: Path, field: str) -> None:
    """A row damaged in place (a field of another type): the import looks up in full."""
    table = json.loads(recorded.read_text())
    for row in table["rows"].values():
        row[field] = 7 if field != "installed" else ["not", "a", "mapping"]
    recorded.write_text(json.dumps(table))
    assert import_once()[0]


@pytest.mark.parametrize("name", ["no_such_package.sub", ".relative"])
def test_a_row_naming_no_importable_package_does_not_fail_the_import(
    recorded: Path, name: str
) -> None:
    """A row damaged in place (a package name no import could find): the kernel loads."""
    table = json.loads(recorded.read_text())
    for row in table["rows"].values():
        row["installed"] = {name: None}
    recorded.write_text(json.dumps(table))
    assert import_once()[1].startswith("acme/tensor-tricks@v1")


# -- the key reads what the variant choice reads -------------------------------------------


def _digest(monkeypatch: pytest.MonkeyPatch, torch_attributes: dict[str, object]) -> str:
    import torch

    for dotted, value in torch_attributes.items():
        owner: object = torch
        *path, name = dotted.split(".")
        for part in path:
            owner = getattr(owner, part)
        monkeypatch.setattr(owner, name, value, raising=False)
    key = imports.key_of(MODULE, [fk.RepoInfo(REPO, 1)], None)
    assert key is not None
    return key.digest


# Judged on a torch built for no GPU backend, whatever this one runs: a CUDA build's
# backend would hide ROCm's and XPU's facts, as it does in detect_system.
CPU_TORCH = {"version.cuda": None, "version.hip": None, "version.xpu": None}
# The C++ ABI this torch was not built with (torch 2.5's wheels were built with the old one).
OTHER_ABI = not torch.compiled_with_cxx11_abi()


@pytest.mark.parametrize(
    "attributes",
    [
        {"version.cuda": "12.6"},
        {"version.hip": "6.3.1"},
        {"version.xpu": "20250101"},
        {"__version__": "2.99.0"},
        {"neuron": object()},
        {"backends.tpu": object()},
        {"compiled_with_cxx11_abi": lambda: OTHER_ABI},
    ],
    ids=lambda attributes: ",".join(attributes),
)
def test_what_the_system_is_judged_from_is_in_the_key(
    monkeypatch: pytest.MonkeyPatch, attributes: dict[str, object]
) -> None:
    from flashhub_kernels._variants.system import detect_system

    judge = detect_system.__wrapped__  # type: ignore[attr-defined]  # not the process's cache
    before = _digest(monkeypatch, CPU_TORCH)
    judged = judge()
    after = _digest(monkeypatch, attributes)
    assert judge() != judged  # it counts
    assert after != before
