"""``flashhub cache list``, ``verify``, ``prune`` and ``clear``: what they print, their
exit codes and options, and how they treat entries a load would refuse (another owner, a
symlink), names with control characters, and a download in progress.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pty
import py_compile
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from conftest import NOBODY, MakeProject, assert_terminal_safe, needs_root, run_python
from flashhub_kernels._cache import verify
from flashhub_kernels._cache.entries import CacheEntry
from flashhub_kernels._cache.mutex import download_mutex
from flashhub_kernels._cache_imports import mark_in_use
from flashhub_kernels._constants import RECEIPT_NAME
from support.cdn_server import CdnServer, held
from support.cli_runner import (
    PYTHON_M_FLASHHUB,
    flashhub,
    flashhub_process,
    flashhub_unprivileged,
    ok_json,
    unprivileged,
)
from support.preloaded import Child, appears, run_code, start_code, stderr_into, written
from support.projects import CUDA, PY_PKG, REPO, UNIVERSAL, publish_tensor_tricks, write_project
from support.trees import (
    MIB_BLOB,
    b64sha256,
    kernel_files,
    local_variant,
    write_blob_kernel,
    write_kernel,
    write_variant,
)

LOCAL = local_variant()


def fetched_v1(cdn: CdnServer) -> Path:
    """Publish v1 of the kernel and `flashhub get` it: its cache entry."""
    write_kernel(cdn.root, REPO, 1)
    return Path(ok_json(flashhub("get", REPO, "--version", "1", "--json"))["path"])


# -- list, verify, prune, clear -----------------------------------------------------------------


def test_cache_list_verify_prune_clear(project: Path, cdn: CdnServer, cache_dir: Path) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project, "--all-variants").returncode == 0
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    foreign = cache_dir / "notes.txt"
    foreign.write_text("not a kernel")

    listed = ok_json(flashhub("cache", "list", "--json"))
    entries = {(e["version"], e["variant"]) for e in listed["entries"]}
    assert entries == {(2, LOCAL), (2, UNIVERSAL), (2, CUDA), (3, UNIVERSAL)}
    text = flashhub("cache", "list")
    assert text.stdout.splitlines()[-1].split()[-3:-1] == ["v3", UNIVERSAL]

    verified = flashhub("cache", "verify")
    assert verified.returncode == 0, verified.stderr
    assert "4 entries checked" in verified.stdout

    damaged = cache_dir / "kernels" / REPO / "v2" / CUDA / PY_PKG / "helpers.py"
    damaged.write_text("# changed in the cache\n")
    verified = flashhub("cache", "verify", "--json")
    assert verified.returncode == 1
    problems = {
        e["variant"]: e["problem"] for e in json.loads(verified.stdout)["entries"] if e["problem"]
    }
    assert problems == {CUDA: f"{PY_PKG}/helpers.py does not match its sha256 in metadata.json"}

    pruned = ok_json(flashhub("cache", "prune", "--json"))
    assert [r["variant"] for r in pruned["removed"]] == [CUDA]
    kept = flashhub("cache", "prune", "--keep-locked", project)
    assert kept.returncode == 0, kept.stderr
    assert f"removed {REPO}@v3 {UNIVERSAL}: {REPO}@v3 is not in " in kept.stdout
    assert "1 entry removed" in kept.stdout
    remaining = ok_json(flashhub("cache", "list", "--json"))["entries"]
    assert {e["variant"] for e in remaining} == {LOCAL, UNIVERSAL}

    run_python("import flashhub.acme.tensor_tricks.v2")  # a row in the import table
    rows = cache_dir / "import-table"
    assert list(rows.glob("*.json")), "the import recorded its name in the import table"
    cleared = flashhub("cache", "clear", "--yes")
    assert cleared.returncode == 0, cleared.stderr
    assert "removed 2 entries" in cleared.stdout
    assert ok_json(flashhub("cache", "list", "--json"))["entries"] == []
    assert foreign.read_text() == "not a kernel"
    assert not (cache_dir / "kernels").exists()
    assert list(rows.glob("*.json")) == [], "no row outlives its entry"


# What a kernel that compiles code when it is imported may do: write beside its own entry.
COMPILES_BESIDE_ITS_ENTRY = b"""
import pathlib
_built = pathlib.Path(__file__).parents[2] / "build" / "jit_module"
_built.mkdir(parents=True, exist_ok=True)
(_built / "module.so").write_bytes(b"compiled")
"""


def test_a_directory_a_kernel_wrote_beside_its_entry_is_no_entry_and_is_left_alone(
    cdn: CdnServer, cache_dir: Path
) -> None:
    files = kernel_files(PY_PKG, "compiles")
    files[f"{PY_PKG}/__init__.py"] += COMPILES_BESIDE_ITS_ENTRY
    write_variant(cdn.root, REPO, 1, LOCAL, files)
    run_python("import flashhub.acme.tensor_tricks.v1")
    version_dir = cache_dir / "kernels" / REPO / "v1"
    built = version_dir / "build" / "jit_module" / "module.so"
    assert built.is_file()

    listed = ok_json(flashhub("cache", "list", "--json"))
    verified = flashhub("cache", "verify")
    as_json = json.loads(flashhub("cache", "verify", "--json").stdout)
    pruned = flashhub("cache", "prune")

    assert [e["variant"] for e in listed["entries"]] == [LOCAL]
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{version_dir / 'build'}: not a cache entry" in verified.stdout
    assert "1 entry checked" in verified.stdout
    assert as_json["not_entries"] == [str(version_dir / "build")]
    assert [e["variant"] for e in as_json["entries"]] == [LOCAL]
    assert pruned.returncode == 0 and "0 entries removed" in pruned.stdout
    assert built.read_bytes() == b"compiled"
    # An entry of the cache's own that lost its receipt is still one, and fails.
    (version_dir / LOCAL / RECEIPT_NAME).unlink()
    damaged = flashhub("cache", "verify")
    assert damaged.returncode == 1
    assert f"{REPO}@v1 {LOCAL}: FAILED: no receipt" in damaged.stdout


@pytest.mark.parametrize("command", [["list"], ["verify"], ["prune"]])
def test_a_directory_beside_an_entry_that_this_user_cannot_read_is_left_alone(
    cdn: CdnServer, cache_dir: Path, command: list[str]
) -> None:
    """As one that a kernel run by another user compiled into, and kept private: the
    commands cannot look inside it, and need not, since it is no entry of the cache's."""
    entry = fetched_v1(cdn)
    private = entry.parent / "build"
    (private / "jit_module").mkdir(parents=True)
    private.chmod(0)
    try:
        result = flashhub_unprivileged("cache", *command)
    finally:
        private.chmod(0o700)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Errno" not in result.stderr
    assert entry.is_dir() and (private / "jit_module").is_dir()
    if command == ["list"]:
        assert entry.name in result.stdout
    if command == ["verify"]:
        assert f"{private}: not a cache entry" in result.stdout
        assert "1 entry checked" in result.stdout


def test_cache_verify_reports_a_file_touched_after_verification(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    path = Path(ok_json(flashhub("get", REPO, "--version", "3", "--json"))["path"])
    os.utime(path / PY_PKG / "helpers.py", (1, 1))

    result = flashhub("cache", "verify")

    assert result.returncode == 1
    assert f"{REPO}@v3 {UNIVERSAL}: FAILED: {PY_PKG}/helpers.py has another size or mtime" in (
        result.stdout
    )
    assert "flashhub cache prune" in result.stderr


def test_cache_verify_reports_a_module_planted_beside_the_verified_files(cdn: CdnServer) -> None:
    # A package directory beats a module of its name in Python's import order: the
    # planted code runs, while every file the manifest lists is as it was verified.
    publish_tensor_tricks(cdn.root)
    path = Path(ok_json(flashhub("get", REPO, "--version", "3", "--json"))["path"])
    planted = path / PY_PKG / "helpers"
    planted.mkdir()
    (planted / "__init__.py").write_text("PLANTED = True\n")

    result = flashhub("cache", "verify")

    assert result.returncode == 1
    assert f"{REPO}@v3 {UNIVERSAL}: FAILED: {PY_PKG}/helpers is not in its metadata.json" in (
        result.stdout
    )
    assert flashhub("cache", "prune").returncode == 0
    assert not planted.exists()
    assert flashhub("get", REPO, "--version", "3").returncode == 0  # fetched again, as listed
    assert not planted.exists() and (path / PY_PKG / "helpers.py").is_file()


def test_cache_verify_reports_a_file_it_cannot_read_and_checks_the_others(
    cdn: CdnServer,
) -> None:
    publish_tensor_tricks(cdn.root)
    first = Path(ok_json(flashhub("get", REPO, "--version", "1", "--json"))["path"])
    ok_json(flashhub("get", REPO, "--version", "3", "--json"))
    (first / PY_PKG / "helpers.py").chmod(0)

    result = flashhub_unprivileged("cache", "verify")

    assert result.returncode == 1, result.stderr
    assert f"FAILED: {PY_PKG}/helpers.py cannot be read (Permission denied)" in result.stdout
    assert f"{REPO}@v3 {UNIVERSAL}: ok" in result.stdout
    assert "Traceback" not in result.stderr and "[Errno" not in result.stderr


def test_cache_prune_removes_leftovers_of_dead_downloads(cdn: CdnServer, cache_dir: Path) -> None:
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v3"
    trash = version_dir / f".trash-{UNIVERSAL}.0123abcd"
    (trash / PY_PKG).mkdir(parents=True)
    dead = version_dir / f".staging-{UNIVERSAL}.0123abcd.999999999.{os.uname().nodename}"
    dead.mkdir()
    (dead / "blob.bin").write_bytes(os.urandom(1 << 20))

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert sorted(document["stale_directories"]) == sorted([str(dead), str(trash)])
    assert document["removed"] == []
    assert document["bytes_freed"] >= 1 << 20, "the leftovers' space is counted"
    assert (version_dir / UNIVERSAL).is_dir()


def test_cache_prune_counts_the_leftovers_of_every_version(cdn: CdnServer, cache_dir: Path) -> None:
    publish_tensor_tricks(cdn.root)
    for version in ("1", "3"):
        assert flashhub("get", REPO, "--version", version).returncode == 0
        kept = cache_dir / "kernels" / REPO / f"v{version}" / f".partial-{UNIVERSAL}"
        kept.mkdir()
        (kept / "blob.bin").write_bytes(os.urandom(1 << 20))

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert len(document["stale_directories"]) == 2
    assert document["bytes_freed"] >= 2 << 20


@pytest.mark.parametrize("command", [["prune"], ["clear", "--yes"]])
def test_cache_maintenance_removes_the_mutexes_of_names_that_were_asked_for_in_vain(
    cdn: CdnServer, cache_dir: Path, command: list[str]
) -> None:
    """A service that passes its users' names to get_kernel leaves a mutex for each, the
    names that do not exist too; maintenance removes those no process holds."""
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    for repo, version in [("acme/absent", "1"), (REPO, "9"), ("acme/held", "1")]:
        assert flashhub("get", repo, "--version", version).returncode != 0
    locks = cache_dir / ".locks"
    held_mutex = locks / "acme/held/v1.lock"
    assert held_mutex.is_file() and (locks / "acme/absent/v1.lock").is_file()

    with FileLock(held_mutex):
        assert flashhub("cache", *command).returncode == 0

    left = sorted(str(path.relative_to(locks)) for path in locks.rglob("*.lock"))
    kept = [] if command[0] == "clear" else [f"{REPO}/v3.lock"]  # prune keeps the kernel
    assert left == sorted(["acme/held/v1.lock", *kept])
    assert not (locks / "acme/absent").exists()
    assert flashhub("get", "acme/absent", "--version", "1").returncode != 0  # asked again
    assert (locks / "acme/absent/v1.lock").is_file()


def test_cache_prune_removes_a_neighbours_symlinks_named_as_leftovers_not_what_they_reach(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    # In a cache a group shares, a member may plant symlinks to another member's files
    # under the names of a download's leftovers (the group writes the version directory).
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v3"
    outside = tmp_path / "project"
    (outside / PY_PKG).mkdir(parents=True)
    (outside / PY_PKG / "helpers.py").write_text("# the user's own work\n")
    planted = [
        version_dir / f".partial-{UNIVERSAL}",
        version_dir / f".staging-{UNIVERSAL}.0123abcd.999999999.{os.uname().nodename}",
        version_dir / f".trash-{UNIVERSAL}.0123abcd",
    ]
    for link in planted:
        link.symlink_to(outside)

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert sorted(document["stale_directories"]) == sorted(map(str, planted))
    assert [link for link in planted if os.path.lexists(link)] == []
    assert (outside / PY_PKG / "helpers.py").read_text() == "# the user's own work\n"
    assert (version_dir / UNIVERSAL).is_dir()
    assert ok_json(flashhub("cache", "prune", "--json"))["stale_directories"] == []


def test_cache_prune_removes_a_dead_download_whose_pid_a_live_process_took(
    cdn: CdnServer, cache_dir: Path
) -> None:
    # Killed as PID 1 of a container that restarted, on a volume kept: PID 1 lives again.
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v3"
    dead = version_dir / f".staging-{UNIVERSAL}.0123abcd.1.{os.uname().nodename}"
    (dead / PY_PKG).mkdir(parents=True)

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert document["stale_directories"] == [str(dead)]
    assert not dead.exists()


def test_cache_prune_removes_a_download_it_cannot_ask_about_once_idle_for_a_day(
    cdn: CdnServer, cache_dir: Path
) -> None:
    # Another host's (a pod recreated under a new name, on the same cache volume), and
    # one whose name records no process: their processes cannot be asked, so age tells.
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v3"
    stale_elsewhere = version_dir / f".staging-{UNIVERSAL}.0123abcd.4242.old-pod-name"
    stale_unnamed = version_dir / f".staging-{UNIVERSAL}.4567cdef"
    busy_elsewhere = version_dir / f".staging-{UNIVERSAL}.89abcdef.4242.other-pod-name"
    two_days_ago = time.time() - 2 * 86400
    for staging in (stale_elsewhere, stale_unnamed, busy_elsewhere):
        (staging / PY_PKG).mkdir(parents=True)
        (staging / PY_PKG / "helpers.py").write_text("# half written\n")
        for path in (staging / PY_PKG / "helpers.py", staging / PY_PKG, staging):
            os.utime(path, (two_days_ago, two_days_ago))
    os.utime(busy_elsewhere / PY_PKG / "helpers.py")  # its download still writes

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert sorted(document["stale_directories"]) == sorted(
        [str(stale_elsewhere), str(stale_unnamed)]
    )
    assert not stale_elsewhere.exists() and not stale_unnamed.exists()
    assert (busy_elsewhere / PY_PKG / "helpers.py").read_text() == "# half written\n"
    assert (version_dir / UNIVERSAL).is_dir()


def test_cache_clear_with_nothing_cached_says_so_without_asking(cache_dir: Path) -> None:
    cache_dir.mkdir()
    result = flashhub("cache", "clear")  # no --yes and no terminal: nothing to confirm
    document = ok_json(flashhub("cache", "clear", "--json"))

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"no kernels are cached in {cache_dir}; nothing to remove\n"
    assert document == {
        "cache_dir": str(cache_dir),
        "removed": [],
        "skipped_busy": [],
        "skipped_in_use": [],
    }


def test_counts_are_pluralized(make_project: MakeProject) -> None:
    project = make_project({REPO: ">=3"})  # v3: one variant
    locked = flashhub("lock", project)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    verified = flashhub("cache", "verify")

    assert f"{REPO} >=3: v3 (1 variant)\n" in locked.stdout
    assert verified.stdout.endswith("1 entry checked, 0 untrusted directories\n")


def test_cache_clear_needs_yes_without_a_terminal(cdn: CdnServer, cache_dir: Path) -> None:
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    result = flashhub("cache", "clear")
    assert result.returncode == 2
    assert "pass --yes" in result.stderr
    assert (cache_dir / "kernels" / REPO / "v3" / UNIVERSAL).is_dir()


@pytest.mark.parametrize(
    ("answer", "removed"),
    [(b"y\n", True), (b"n\n", False), (b"\x04", False)],
    ids=["yes", "no", "eof"],
)
def test_cache_clear_asks_on_the_terminal_and_keeps_json_clean(
    cdn: CdnServer, cache_dir: Path, answer: bytes, removed: bool
) -> None:
    """stdin is a terminal, stdout a pipe (``| jq``): the question goes to stderr and the
    JSON document alone to stdout. Ctrl-D (end of input) answers no, without a traceback."""
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "flashhub_kernels", "cache", "clear", "--json"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(terminal)
    try:
        os.write(controller, answer)
        out, err = process.communicate(timeout=60)
    finally:
        os.close(controller)
    assert process.returncode == 0, err
    assert "[y/N]" in err.decode() and "Traceback" not in err.decode()
    document = json.loads(out)
    assert bool(document["removed"]) == removed
    assert (cache_dir / "kernels" / REPO / "v3" / UNIVERSAL).is_dir() != removed


def test_ctrl_c_at_the_cache_clear_question_reports_it_on_a_line_of_its_own(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """The terminal's line was left open by the question: the interruption's message was
    written onto it (``[y/N] ^Cinterrupted``), as Ctrl-D's newline is not."""
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "flashhub_kernels", "cache", "clear"],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as a shell's job
    )
    os.close(terminal)
    try:
        assert process.stderr is not None
        asked = b""
        while not asked.endswith(b"[y/N] "):
            chunk = process.stderr.read1()
            assert chunk, asked  # the command ended without asking
            asked += chunk
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        os.close(controller)
    assert process.returncode == 130
    assert (asked + err).decode().endswith("[y/N] \ninterrupted\n"), asked + err
    assert out == b""
    assert (cache_dir / "kernels" / REPO / "v3" / UNIVERSAL).is_dir()


# -- entries a load would refuse, hostile names, a download in progress ---------------------


def test_cache_verify_reports_untrusted_and_symlinked_entries(
    planted_cache: Path, cache_dir: Path, tmp_path: Path
) -> None:
    needs_root()
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    entry = version_dir / local_variant()
    os.chown(entry, NOBODY, NOBODY)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(entry, elsewhere)
    (version_dir / "torch-cuda").symlink_to(elsewhere, target_is_directory=True)
    result = flashhub("cache", "verify")
    assert result.returncode != 0
    assert f"{entry}: is owned by another user" in result.stdout
    assert f"{version_dir / 'torch-cuda'}: is a symlink" in result.stdout
    assert "2 untrusted directories" in result.stdout  # never a silent "0 entries checked"
    assert "cache prune" not in result.stderr  # which leaves them
    assert "left as it is: remove it, or make it yours and private" in result.stderr


def test_flashhub_cache_list_verify_and_prune_escape_directory_names(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v1"
    (version_dir / "evil\x1b]0;title\x07").mkdir()
    (version_dir / "evil\x1b]0;title\x07" / "metadata.json").write_text("{}")  # an entry
    (version_dir / "\x1b[2Jforeign").mkdir()  # no variant's name, no metadata.json

    result = flashhub("cache", "list")
    verified = flashhub("cache", "verify")
    pruned = flashhub("cache", "prune")

    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result.stdout + verified.stdout + pruned.stdout)
    assert "evil\\x1b]0;title\\x07 no receipt" in " ".join(result.stdout.split())
    assert "\\x1b[2Jforeign: not a cache entry" in verified.stdout
    assert f"{REPO}@v1 evil\\x1b]0;title\\x07: FAILED: no receipt" in verified.stdout
    assert f"removed {REPO}@v1 evil\\x1b]0;title\\x07: no receipt" in pruned.stdout


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune"]])
def test_cache_maintenance_during_a_download_leaves_it_alone(
    cdn: CdnServer, command: list[str]
) -> None:
    blob_path = write_blob_kernel(cdn.root, MIB_BLOB)
    started, release = threading.Event(), threading.Event()
    cdn.inject(blob_path, held(started, release))
    load = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
    loader = start_code(load, env=dict(os.environ))  # its download runs while the command does
    try:
        assert started.wait(60), "the download never reached the held file"
        maintenance = flashhub("cache", *command)
        assert maintenance.returncode == 0, maintenance.stderr
        assert "a download is in progress there" in maintenance.stdout
    finally:
        release.set()
        out, err = loader.communicate(timeout=120)
    assert loader.returncode == 0, err
    assert out.strip() == "blob"  # the kernel loaded, its download undisturbed


# -- repair: bytecode, and a cache copied without its modification times ----------------------

IMPORT_HELPERS = "import flashhub.acme.tensor_tricks.v1.helpers as h; print(h.shout())"
SHOUT = f"{REPO}@v1:{LOCAL}".upper()


def test_cache_verify_reports_damaged_bytecode_and_repair_recompiles_it(
    cdn: CdnServer, cache_dir: Path
) -> None:
    entry = fetched_v1(cdn)
    (pyc,) = (entry / PY_PKG / "__pycache__").glob("helpers.*.pyc")
    pyc.write_bytes(b"garbage")

    verified = flashhub("cache", "verify")
    repaired = flashhub("cache", "verify", "--repair", "--json")

    assert verified.returncode == 1
    relpath = pyc.relative_to(entry).as_posix()
    assert f"{REPO}@v1 {LOCAL}: FAILED: {relpath} is not the bytecode compiled" in verified.stdout
    assert "flashhub cache verify --repair" in verified.stderr
    (document,) = ok_json(repaired)["entries"]
    assert document["ok"] and document["repaired"] and relpath in document["problem"]
    assert pyc.read_bytes()[:4] == importlib.util.MAGIC_NUMBER
    assert flashhub("cache", "verify").returncode == 0
    cdn.clear_log()
    assert run_python(IMPORT_HELPERS, env={"FLASHHUB_OFFLINE": "1"}).strip() == SHOUT
    assert cdn.requests == []


def test_cache_verify_reports_bytecode_it_did_not_compile_and_repair_removes_it(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    entry = fetched_v1(cdn)
    pycache = entry / PY_PKG / "__pycache__"
    optimized = {"FLASHHUB_OFFLINE": "1", "PYTHONOPTIMIZE": "1", "PYTHONDONTWRITEBYTECODE": ""}
    tag = sys.implementation.cache_tag
    # Python's own bytecode of a verified source, which a `python -O` import writes.
    assert run_python(IMPORT_HELPERS, env=optimized, fresh=True).strip() == SHOUT
    assert (pycache / f"helpers.{tag}.opt-1.pyc").is_file()
    assert flashhub("cache", "verify").returncode == 0

    planted = pycache / f"_ops.{tag}.opt-1.pyc"
    other_code = tmp_path / "_ops.py"
    other_code.write_text("print('planted code ran')\n" + (entry / PY_PKG / "_ops.py").read_text())
    py_compile.compile(
        str(other_code),
        cfile=str(planted),
        optimize=1,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    # Another Python's bytecode of a verified source is that Python's to check; with no
    # source, nothing would run it.
    another_python = pycache / "helpers.cpython-399.pyc"
    another_python.write_bytes(b"anything")
    sourceless = pycache / "ghost.cpython-399.pyc"
    sourceless.write_bytes(b"anything")
    assert "planted code ran" in run_python(IMPORT_HELPERS, env=optimized, fresh=True)

    verified = flashhub("cache", "verify")
    repaired = flashhub("cache", "verify", "--repair")

    assert verified.returncode == 1
    assert (
        f"{REPO}@v1 {LOCAL}: FAILED: {planted.relative_to(entry).as_posix()} is not bytecode "
        "compiled from the verified files: no one verified it, and an import of the kernel may "
        "run it (under -O, or by another Python)"
    ) in verified.stdout
    assert repaired.returncode == 0, repaired.stderr
    assert not planted.exists() and not sourceless.exists() and another_python.exists()
    assert (pycache / f"helpers.{tag}.opt-1.pyc").is_file()
    assert flashhub("cache", "verify").returncode == 0
    assert run_python(IMPORT_HELPERS, env=optimized, fresh=True).strip() == SHOUT


# A pytest run whose conftest registers the kernel's modules for assertion rewriting, and
# whose test imports one: pytest writes its own bytecode beside the module's source.
PYTEST_REWRITING_THE_KERNEL = f"""
import sys, pytest
sys.dont_write_bytecode = False  # as for a user, who does not set PYTHONDONTWRITEBYTECODE
open("conftest.py", "w").write("import pytest; pytest.register_assert_rewrite('flashhub.acme')")
open("test_kernel.py", "w").write(
    "import flashhub.acme.tensor_tricks.v1.helpers as h\\n"
    "def test_shout():\\n    assert h.shout() == {SHOUT!r}\\n"
)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "test_kernel.py"]))
"""


def test_cache_verify_says_which_tool_wrote_bytecode_beside_a_verified_source(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    entry = fetched_v1(cdn)
    pycache = entry / PY_PKG / "__pycache__"
    tag = sys.implementation.cache_tag
    run_python(PYTEST_REWRITING_THE_KERNEL, env={"FLASHHUB_OFFLINE": "1"}, cwd=tmp_path)
    # pytest rewrote the modules the package's __init__ imports; verify reports the first.
    rewritten = pycache / f"_ops.{tag}-pytest-{pytest.__version__}.pyc"
    assert rewritten.is_file()

    by_pytest = flashhub("cache", "verify")
    assert flashhub("cache", "verify", "--repair").returncode == 0
    assert not rewritten.exists()
    # typeguard's and beartype's hooks name theirs as an optimization level of their own.
    source = entry / PY_PKG / "helpers.py"
    hooked = Path(importlib.util.cache_from_source(str(source), optimization="typeguard461"))
    py_compile.compile(str(source), cfile=str(hooked))
    by_another_tool = flashhub("cache", "verify")
    assert flashhub("cache", "verify", "--repair").returncode == 0

    assert by_pytest.returncode == 1
    assert (
        f"{REPO}@v1 {LOCAL}: FAILED: {rewritten.relative_to(entry).as_posix()} is bytecode that "
        f"pytest's assertion rewriting wrote for {PY_PKG}/_ops.py: no one verified it, and "
        "pytest may run it when it imports the kernel; `flashhub cache verify --repair` "
        "removes it; do not register the flashhub.* modules for assertion rewriting, so that "
        "pytest writes none there"
    ) in by_pytest.stdout
    assert by_another_tool.returncode == 1
    assert (
        f"{REPO}@v1 {LOCAL}: FAILED: {hooked.relative_to(entry).as_posix()} is bytecode that "
        f"another tool's import hook (opt-typeguard461) wrote for {PY_PKG}/helpers.py: no one "
        "verified it, and the tool may run it when it imports the kernel; `flashhub cache "
        "verify --repair` removes it; keep that tool's hook off the flashhub.* modules, so "
        "that the tool writes none there"
    ) in by_another_tool.stdout
    assert not hooked.exists()
    assert flashhub("cache", "verify").returncode == 0


def test_a_cache_copied_without_modification_times_is_repaired_offline(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    copy = tmp_path / "copied-cache"
    subprocess.run(["cp", "-r", str(cache_dir), str(copy)], check=True)  # mtimes not kept
    offline = {"FLASHHUB_CACHE_DIR": str(copy), "FLASHHUB_OFFLINE": "1"}
    cdn.clear_log()

    refused = run_code(IMPORT_HELPERS, env={**os.environ, **offline})
    verified = flashhub("cache", "verify", env=offline)
    repaired = flashhub("cache", "verify", "--repair", env=offline)

    assert refused.returncode == 1 and "flashhub cache verify --repair" in refused.stderr
    assert verified.returncode == 1 and "has another size or mtime" in verified.stdout
    assert repaired.returncode == 0, repaired.stderr
    assert f"{REPO}@v1 {LOCAL}: repaired (" in repaired.stdout
    assert flashhub("cache", "verify", env=offline).returncode == 0
    assert run_python(IMPORT_HELPERS, env=offline).strip() == SHOUT
    assert cdn.requests == []


def test_a_locked_load_from_a_copy_without_modification_times_names_the_offline_repair(
    project: Path, cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project).returncode == 0
    copy = tmp_path / "copied-cache"
    subprocess.run(["cp", "-r", str(cache_dir), str(copy)], check=True)  # mtimes not kept
    offline = {"FLASHHUB_CACHE_DIR": str(copy), "FLASHHUB_OFFLINE": "1"}
    load = f"import flashhub_kernels as fk; print(fk.load_kernel({REPO!r}).marker())"

    refused = run_code(load, env={**os.environ, **offline}, cwd=project)
    downloaded = flashhub("download", project, env=offline)
    repaired = flashhub("cache", "verify", "--repair", env=offline)
    loaded = run_code(load, env={**os.environ, **offline}, cwd=project)

    assert refused.returncode == 1 and "LockedVariantNotCachedError" in refused.stderr
    assert "was modified after it was verified" in refused.stderr
    assert "flashhub cache verify --repair" in refused.stderr
    assert downloaded.returncode == 1 and "flashhub cache verify --repair" in downloaded.stderr
    assert repaired.returncode == 0, repaired.stdout
    assert loaded.returncode == 0 and loaded.stdout.startswith(f"{REPO}@v2:"), loaded.stderr


@pytest.mark.parametrize("tar_format", ["gnu", "ustar"])
def test_a_cache_shipped_in_a_tar_archive_that_keeps_whole_seconds_loads_offline(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path, tar_format: str
) -> None:
    """GNU tar's default format and ustar, and container image layers, keep a file's
    mtime in whole seconds only: the copy is trusted, and a file changed in it is not."""
    if shutil.which("tar") is None:
        pytest.skip("no tar command")
    entry = fetched_v1(cdn)
    archive, copy = tmp_path / "cache.tar", tmp_path / "shipped-cache"
    copy.mkdir(mode=0o700)
    subprocess.run(
        ["tar", "-C", cache_dir, f"--format={tar_format}", "-cf", archive, "."], check=True
    )
    subprocess.run(["tar", "-C", copy, "-xf", archive], check=True)
    helpers = copy / entry.relative_to(cache_dir) / PY_PKG / "helpers.py"
    assert helpers.stat().st_mtime_ns % 10**9 == 0  # as the archive kept it
    offline = {"FLASHHUB_CACHE_DIR": str(copy), "FLASHHUB_OFFLINE": "1"}
    cdn.clear_log()

    loaded = run_code(IMPORT_HELPERS, env={**os.environ, **offline})
    verified = flashhub("cache", "verify", env=offline)
    helpers.write_text(helpers.read_text().replace("upper()", "lower()"))  # same size
    changed = run_code(IMPORT_HELPERS, env={**os.environ, **offline})

    assert loaded.returncode == 0 and loaded.stdout.strip() == SHOUT, loaded.stderr
    assert verified.returncode == 0, verified.stdout
    assert changed.returncode == 1 and "IntegrityError" in changed.stderr
    assert SHOUT.lower() not in changed.stdout
    assert cdn.requests == []


def test_a_file_changed_and_stamped_with_a_later_whole_second_is_refused(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """Only an mtime cut to its whole second (as an archive keeps it) stands for the one
    recorded: a file changed since, whose mtime lands on the whole second after it (a
    tool or file system that rounds up), is changed."""
    entry = fetched_v1(cdn)
    helpers = entry / PY_PKG / "helpers.py"
    recorded = helpers.stat().st_mtime_ns
    if recorded % 10**9 == 0:
        pytest.skip("this file system keeps whole seconds: no later whole second is near")
    helpers.write_text(helpers.read_text().replace("upper()", "lower()"))  # same size
    later = recorded - recorded % 10**9 + 10**9
    os.utime(helpers, ns=(later, later))
    cdn.clear_log()

    changed = run_code(IMPORT_HELPERS, env={**os.environ, "FLASHHUB_OFFLINE": "1"})
    verified = flashhub("cache", "verify", env={"FLASHHUB_OFFLINE": "1"})

    assert changed.returncode == 1 and "IntegrityError" in changed.stderr, changed.stdout
    assert SHOUT.lower() not in changed.stdout
    assert verified.returncode == 1 and "does not match its sha256" in verified.stdout
    assert cdn.requests == []


def test_cache_verify_repair_leaves_changed_content_to_prune(cdn: CdnServer) -> None:
    entry = fetched_v1(cdn)
    (entry / PY_PKG / "helpers.py").write_text("def shout():\n    return 'edited'\n")

    repaired = flashhub("cache", "verify", "--repair")

    assert repaired.returncode == 1
    assert f"FAILED: {PY_PKG}/helpers.py does not match its sha256" in repaired.stdout
    assert (entry / PY_PKG / "helpers.py").read_text().endswith("'edited'\n")


# Each tampering leaves every file the receipt stamps as it was, so that only the check
# it defeats can fail the entry; it returns the problem verify must report.
def _manifest_rewritten_for_an_edited_file(entry: Path, outside: Path) -> str:
    helpers = entry / PY_PKG / "helpers.py"
    stamp = helpers.stat()
    edited = helpers.read_bytes().replace(b"upper()", b"lower()")  # same size
    helpers.write_bytes(edited)
    os.utime(helpers, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    manifest = entry / "metadata.json"
    document = json.loads(manifest.read_text())
    document["digest"]["files"][f"{PY_PKG}/helpers.py"] = b64sha256(edited)
    manifest.write_text(json.dumps(document))
    return "metadata.json is not the manifest the entry was verified against"


def _module_planted_at_the_top(entry: Path, outside: Path) -> str:
    (entry / "planted.py").write_text("print('planted code ran')\n")
    return "planted.py is not in its metadata.json"


def _pycache_symlinked_outside(entry: Path, outside: Path) -> str:
    # The verified bytecode, times kept, beside -O bytecode no one verified.
    pycache = entry / PY_PKG / "__pycache__"
    shutil.copytree(pycache, outside, copy_function=shutil.copy2)
    (outside / f"helpers.{sys.implementation.cache_tag}.opt-1.pyc").write_bytes(b"planted")
    shutil.rmtree(pycache)
    pycache.symlink_to(outside, target_is_directory=True)
    return f"{PY_PKG}/__pycache__ is not in its metadata.json"


@pytest.mark.parametrize(
    "tamper",
    [
        _manifest_rewritten_for_an_edited_file,
        _module_planted_at_the_top,
        _pycache_symlinked_outside,
    ],
)
def test_cache_verify_fails_an_entry_tampered_with_beyond_its_listed_files(
    cdn: CdnServer, tmp_path: Path, tamper: Callable[[Path, Path], str]
) -> None:
    entry = fetched_v1(cdn)
    problem = tamper(entry, tmp_path / "outside")

    verified = flashhub("cache", "verify")

    assert verified.returncode == 1
    assert f"{REPO}@v1 {LOCAL}: FAILED: {problem}" in verified.stdout


@pytest.mark.parametrize(
    ("relpath", "problem", "repairable"),
    [
        (f"{PY_PKG}/helpers.py", "is missing or not a regular file", False),
        (
            f"{PY_PKG}/__pycache__/helpers.{sys.implementation.cache_tag}.pyc",
            "is not the bytecode compiled when the entry was verified",
            True,
        ),
    ],
    ids=["listed-file", "bytecode"],
)
def test_cache_verify_fails_a_file_replaced_by_a_symlink_to_an_identical_copy(
    cdn: CdnServer, tmp_path: Path, relpath: str, problem: str, repairable: bool
) -> None:
    """What a symlink reaches may change after verify: only a regular file is verified.
    Bytecode is compiled again; a listed file is left for prune and a load to fetch."""
    entry = fetched_v1(cdn)
    path, copy = entry / relpath, tmp_path / "outside"
    shutil.copy2(path, copy)
    path.unlink()
    path.symlink_to(copy)

    verified = flashhub("cache", "verify")
    repaired = flashhub("cache", "verify", "--repair")

    assert verified.returncode == 1
    assert f"{REPO}@v1 {LOCAL}: FAILED: {relpath} {problem}" in verified.stdout
    assert repaired.returncode == (0 if repairable else 1), repaired.stdout
    assert path.is_symlink() is not repairable
    assert (flashhub("cache", "verify").returncode == 0) is repairable


def test_cache_verify_repair_leaves_an_entry_changed_while_it_waited_for_the_mutex(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Repair finds a file's mtime changed, then waits for the entry's mutex; meanwhile
    the file's bytes change. It checks the entry again under the mutex, and stamps
    nothing: a receipt stamped anew would have warm loads trust the changed bytes."""
    entry = fetched_v1(cdn)
    helpers = entry / PY_PKG / "helpers.py"
    os.utime(helpers, (1, 1))  # repairable: a copy that lost its modification times
    receipt = (entry / RECEIPT_NAME).read_bytes()

    @contextlib.contextmanager
    def changed_while_waiting(*args: Any) -> Iterator[None]:
        helpers.write_text("print('not the published code')\n")
        with download_mutex(*args):
            yield

    monkeypatch.setattr(verify, "download_mutex", changed_while_waiting)
    repaired = flashhub("cache", "verify", "--repair")

    assert repaired.returncode == 1
    assert f"FAILED: {PY_PKG}/helpers.py does not match its sha256" in repaired.stdout
    assert (entry / RECEIPT_NAME).read_bytes() == receipt


# What an import of the kernel in a fresh process reports: whether it looked the kernel up
# in full (rather than answered by the import table), and what the kernel says.
IMPORT_HELPERS_SAYING_HOW = """
import json, sys
import flashhub.acme.tensor_tricks.v1.helpers as h
print(json.dumps(["flashhub_kernels._cache.obtain" in sys.modules, h.shout()]))
"""


def _modes(entry: Path) -> dict[str, int]:
    """The permission bits of everything in ``entry``, by path in it."""
    return {
        path.relative_to(entry).as_posix(): path.lstat().st_mode & 0o7777
        for path in entry.rglob("*")
    }


@pytest.mark.parametrize(
    "relpath",
    [
        f"{PY_PKG}/helpers.py",
        f"{PY_PKG}/__pycache__",
        f"{PY_PKG}/__pycache__/helpers.{sys.implementation.cache_tag}.pyc",
        RECEIPT_NAME,
    ],
    ids=["listed-file", "directory", "bytecode", "receipt"],
)
def test_cache_verify_reports_what_every_user_may_write_in_an_entry_and_repair_settles_it(
    cdn: CdnServer, relpath: str
) -> None:
    """What an older client left cached under ``umask 000``: every byte verifies, but
    anyone reaching the cache could write there. ``--repair`` gives the entry the modes a
    download gives it; the receipt still vouches for the files, and the import table
    answers warm loads again."""
    entry = fetched_v1(cdn)
    settled = _modes(entry)
    receipt = json.loads((entry / RECEIPT_NAME).read_text())
    offline = {"FLASHHUB_OFFLINE": "1"}
    assert json.loads(run_python(IMPORT_HELPERS_SAYING_HOW, env=offline)) == [True, SHOUT]
    path = entry / relpath
    path.chmod(path.stat().st_mode & 0o777 | 0o002)
    mode = f"{path.stat().st_mode & 0o777:04o}"

    verified = flashhub("cache", "verify")
    repaired = flashhub("cache", "verify", "--repair")

    problem = (
        f"{relpath} is writable by every user (mode {mode}): whoever may reach the cache "
        "could change what an import of the kernel runs; `flashhub cache verify --repair` "
        "gives the entry the modes a new download gets"
    )
    assert verified.returncode == 1
    assert f"{REPO}@v1 {LOCAL}: FAILED: {problem}\n" in verified.stdout
    assert "`flashhub cache verify --repair` repairs the entries" in verified.stderr
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert f"{REPO}@v1 {LOCAL}: repaired ({problem})\n" in repaired.stdout
    assert _modes(entry) == settled
    assert json.loads((entry / RECEIPT_NAME).read_text()) == receipt
    assert flashhub("cache", "verify").returncode == 0
    cdn.clear_log()
    loads = [json.loads(run_python(IMPORT_HELPERS_SAYING_HOW, env=offline)) for _ in range(2)]
    # The table's row stamped the entry's files as they were: looked up in full again,
    # then answered by the row recorded anew.
    assert loads == [[True, SHOUT], [False, SHOUT]]
    assert cdn.requests == []


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_cache_verify_lets_the_group_write_an_entry_only_in_a_cache_a_group_shares(
    cdn: CdnServer, shared: bool
) -> None:
    env = {"FLASHHUB_CACHE_SHARED": "1"} if shared else {}
    write_kernel(cdn.root, REPO, 1)
    got = flashhub("get", REPO, "--version", "1", "--json", env=env)
    helpers = Path(ok_json(got)["path"]) / PY_PKG / "helpers.py"
    helpers.chmod(0o664)

    verified = flashhub("cache", "verify", env=env)

    if shared:  # its directories are the group's to write too (0775)
        assert verified.returncode == 0, verified.stdout
        assert f"{REPO}@v1 {LOCAL}: ok" in verified.stdout
    else:
        assert verified.returncode == 1
        assert (
            f"{REPO}@v1 {LOCAL}: FAILED: {PY_PKG}/helpers.py is writable by its group "
            "(mode 0664): whoever may reach the cache"
        ) in verified.stdout
        assert flashhub("cache", "verify", "--repair").returncode == 0
        assert helpers.stat().st_mode & 0o777 == 0o644


# -- entries a running process uses; a cache that cannot be written ---------------------------

USE_AND_WAIT = """
import flashhub.acme.tensor_tricks.v1 as k
print(k.marker())
sign("loaded")
when("go")
from flashhub.acme.tensor_tricks.v1 import helpers  # a submodule, imported after the command
print(helpers.shout())
sign("shouted")
when("done")
"""
# A job's way to talk to the test: files in the directory argv[1], one a sign.
SIGNS = """
import pathlib, sys, time
signs = pathlib.Path(sys.argv[1])

def sign(name):  # to the test
    (signs / name).touch()

def when(name):  # the test's sign
    while not (signs / name).exists():
        time.sleep(0.01)
"""


def job(code: str, signs: Path) -> Child:
    """A job running ``code`` in a process of its own, which talks to the test through
    files in ``signs`` (:data:`SIGNS`)."""
    signs.mkdir()
    return start_code(SIGNS + code, str(signs), env=dict(os.environ))


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune"]])
def test_cache_maintenance_leaves_an_entry_in_use_alone_unless_forced(
    cdn: CdnServer, tmp_path: Path, command: list[str]
) -> None:
    entry = fetched_v1(cdn)
    signs = tmp_path / "signs"
    user = job(USE_AND_WAIT, signs)  # a job using the kernel, in a process of its own
    try:
        assert appears(signs / "loaded", user, timeout=60), "the job never loaded the kernel"
        if command == ["prune"]:
            os.utime(entry / PY_PKG / "data" / "table.txt", (1, 1))  # prune would remove it

        kept = flashhub("cache", *command)
        (signs / "go").touch()
        appears(signs / "shouted", user, timeout=60)
        forced = flashhub("cache", *command, "--force", "--json")
    finally:
        (signs / "go").touch()
        (signs / "done").touch()
        out, err = user.communicate(timeout=60)
    assert kept.returncode == 0, kept.stderr
    assert f"skipped {entry}: in use by a running process" in kept.stdout
    assert "--force" in kept.stdout and "a download is in progress" not in kept.stdout
    assert out.splitlines() == [f"{REPO}@v1:{LOCAL}", SHOUT], err
    assert user.returncode == 0, err
    assert [e["path"] for e in ok_json(forced)["removed"]] == [str(entry)]
    assert not entry.exists()


MANY_KERNELS_UNDER_A_LOW_LIMIT = """
import os, resource
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import flashhub_kernels as fk
for n in range(1, 41):
    assert fk.get_kernel("acme/tensor-tricks", version=n).marker().endswith(f"v{{n}}:{local}")
print(len(os.listdir("/proc/self/fd")))
"""


def test_entries_in_use_hold_at_most_a_quarter_of_the_open_files_limit(cdn: CdnServer) -> None:
    """Past it they load unprotected: the program's own files come first."""
    for version in range(1, 41):
        write_kernel(cdn.root, REPO, version)
    code = MANY_KERNELS_UNDER_A_LOW_LIMIT.format(local=LOCAL)
    run_python(code)  # cold: downloads them
    for _warm in range(2):  # the second from the import table
        assert int(run_python(code)) <= 64 // 4 + 8, "descriptors beyond the marks are few"


def test_threads_marking_entries_in_use_at_once_hold_one_descriptor_each(tmp_path: Path) -> None:
    """The first loads of a process's threads mark the same entries at once (one kernel
    under its names): each entry keeps one descriptor, not one per thread that raced."""
    entries = [tmp_path / f"entry{n}" for n in range(100)]
    for entry in entries:
        entry.mkdir()
    start = threading.Barrier(8)

    def mark_all() -> None:
        start.wait()
        assert all(mark_in_use(entry) for entry in entries)

    threads = [threading.Thread(target=mark_all) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    held = [path for path in _open_paths() if path.startswith(str(tmp_path))]
    assert sorted(held) == sorted(map(str, entries))


def _open_paths() -> list[str]:
    """What this process's descriptors are open on."""
    paths = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # the listing's own, closed since
            paths.append(os.readlink(f"/proc/self/fd/{fd}"))
    return paths


def test_an_entry_a_finished_process_used_is_removed(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    entry = Path(run_python("import flashhub.acme.tensor_tricks.v1 as k; print(k.__file__)"))
    assert flashhub("cache", "clear", "--yes").returncode == 0
    assert not entry.exists()


@contextlib.contextmanager
def _read_only(directory: Path) -> Iterator[None]:
    """``chmod -R a-w directory`` (the lock files too) for the ``with`` block."""
    modes = {path: path.stat().st_mode for path in [directory, *directory.rglob("*")]}
    for path, mode in modes.items():
        path.chmod(mode & ~0o222)
    try:
        yield
    finally:
        for path, mode in modes.items():
            path.chmod(mode)


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune"]])
def test_cache_maintenance_on_a_read_only_cache_says_it_cannot_write(
    cdn: CdnServer, cache_dir: Path, command: list[str]
) -> None:
    entry = fetched_v1(cdn)
    os.utime(entry / PY_PKG / "helpers.py", (1, 1))  # so that prune has something to remove
    with _read_only(cache_dir):
        result = flashhub_unprivileged("cache", *command)
    assert result.returncode == 1, result.stdout
    assert "a download is in progress" not in result.stdout
    assert "error: cannot write " in result.stderr and str(entry.parent) in result.stderr
    assert entry.is_dir()


@pytest.mark.parametrize("command", [["get", REPO, "--version", "2"], ["download", "."]])
def test_a_download_into_a_read_only_cache_says_it_cannot_write_and_changes_nothing(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path, command: list[str]
) -> None:
    """As a cache baked into an image, read-only, is to a job that asks for one more
    kernel: an error naming the option given, no traceback, and the cache as it was."""
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    write_project(tmp_path, {REPO: "==2"})
    assert flashhub("lock", tmp_path).returncode == 0
    before = sorted(str(path) for path in cache_dir.rglob("*"))
    with _read_only(cache_dir):
        result = unprivileged(
            f"import os; os.chdir({str(tmp_path)!r})\n" + PYTHON_M_FLASHHUB,
            *command,
            "--cache-dir",
            str(cache_dir),
            "--json",
        )
    assert (result.returncode, result.stdout) == (1, "")
    # get names the kernel the cache lacks; download, whose work is to write, the write.
    said = f"{REPO}@v2 is not in the cache, and this process cannot write there to download it: "
    shown = said if command[0] == "get" else ""
    assert result.stderr.startswith(f"error: {shown}cannot write {cache_dir}/")
    assert "point --cache-dir at a directory this user can write" in result.stderr
    assert "FLASHHUB_CACHE_DIR" not in result.stderr and "Traceback" not in result.stderr
    assert sorted(str(path) for path in cache_dir.rglob("*")) == before
    assert flashhub("cache", "verify").returncode == 0


@pytest.mark.parametrize("private", ["", "kernels/acme"], ids=["root", "org"])
@pytest.mark.parametrize("command", [["list"], ["verify"], ["prune"], ["clear", "--yes"]])
def test_cache_maintenance_on_a_cache_it_cannot_read_says_so_with_the_chmod(
    cdn: CdnServer, cache_dir: Path, private: str, command: list[str]
) -> None:
    """As an image's cache, made private by the user who built it, is to another user."""
    entry = fetched_v1(cdn)
    closed = cache_dir / private
    mode = closed.stat().st_mode
    closed.chmod(0)
    try:
        result = flashhub_unprivileged("cache", *command)
    finally:
        closed.chmod(mode)
    assert result.returncode == 1, result.stdout
    error, hint = result.stderr.splitlines()
    assert error.startswith(f"error: cannot read {cache_dir}/") and "Errno" not in error
    assert "chmod -R a+rX" in hint
    assert entry.is_dir()


@pytest.mark.parametrize("command", [["list"], ["verify"], ["prune"], ["clear", "--yes"]])
def test_cache_maintenance_on_a_file_in_place_of_the_cache_says_so(
    tmp_path: Path, command: list[str]
) -> None:
    """A --cache-dir naming a file (a typo, a volume mounted at the wrong path) is no
    empty cache: ``cache verify`` passed a CI job that checked nothing."""
    not_a_cache = tmp_path / "cache.tar"
    not_a_cache.write_bytes(b"not a directory")
    result = flashhub("cache", *command, "--cache-dir", not_a_cache)
    assert result.returncode == 1, result.stdout
    error, hint = result.stderr.splitlines()  # what it read, and the option it was given
    assert error == f"error: cannot read {not_a_cache}/kernels: {not_a_cache} is not a directory"
    assert hint == "  hint: point --cache-dir at the cache's directory"
    assert not_a_cache.read_bytes() == b"not a directory"


@pytest.mark.parametrize("command", [["list"], ["verify"], ["verify", "--json"]])
@pytest.mark.parametrize("given_as", ["--cache-dir", "FLASHHUB_CACHE_DIR"])
def test_inspecting_a_cache_directory_that_does_not_exist_fails_naming_it(
    tmp_path: Path, command: list[str], given_as: str
) -> None:
    """A mistyped cache path is no empty cache: ``cache verify`` passed a CI job that
    checked nothing ("0 entries checked", status 0)."""
    typo = tmp_path / "cahce"
    if given_as == "--cache-dir":
        result = flashhub_process("cache", *command, "--cache-dir", typo)
    else:
        result = flashhub_process("cache", *command, env={"FLASHHUB_CACHE_DIR": str(typo)})
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    error, hint = result.stderr.splitlines()
    assert error == f"error: the cache directory {typo} does not exist"
    assert hint.startswith(f"  hint: check the path in {given_as}, or load a kernel")
    assert not typo.exists()


@pytest.mark.parametrize("command", [["prune"], ["clear"], ["clear", "--yes"]])
def test_prune_and_clear_of_a_cache_directory_that_does_not_exist_say_so_and_create_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    """With nothing to remove they succeed, as on an empty cache, but name the path that
    is not there, and neither create it nor ask to confirm."""
    typo = tmp_path / "cahce"
    result = flashhub("cache", *command, "--cache-dir", typo)
    document = ok_json(flashhub("cache", *command, "--json", "--cache-dir", typo))
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{typo} does not exist; nothing to remove\n"
    assert document.get("removed") == []
    assert not typo.exists()


def test_a_read_only_copy_that_lost_its_modification_times_says_why_it_is_not_used(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """Online, such a copy is fetched again, which a read-only cache (an image's) cannot
    do: the error says why the cached copy was passed over, not just which lock failed."""
    write_kernel(cdn.root, REPO, 1)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    copy = tmp_path / "copied-cache"
    subprocess.run(["cp", "-r", str(cache_dir), str(copy)], check=True)  # mtimes not kept
    before = {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()}

    with _read_only(copy):
        result = unprivileged(IMPORT_HELPERS, env={"FLASHHUB_CACHE_DIR": str(copy)})

    assert result.returncode == 1, result.stdout
    error = result.stderr.splitlines()
    assert "CacheError: the cached copy of acme/tensor-tricks@v1 cannot be used" in error[-2]
    assert "differs from its receipt" in error[-2]
    assert "cannot write" in error[-2] and "flashhub cache verify --repair" in error[-1]
    assert SHOUT not in result.stdout
    assert {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()} == before


def test_cache_prune_removes_temporary_files_of_killed_writers_once_stale(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """A process killed while it replaces a small file of the cache (`write_atomic`)
    leaves its temporary file; one not written to for an hour is no writer's now."""
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v3"
    (cache_dir / "import-table").mkdir(exist_ok=True)

    def temporary(directory: Path, name: str) -> Path:  # as write_atomic names it
        path = directory / f".{name}.{os.urandom(8).hex()}.tmp"
        path.write_text("{")
        return path

    stale = [
        temporary(cache_dir, "versions-seen.json"),
        temporary(cache_dir, "gpus"),
        temporary(cache_dir / "import-table", "kernels.acme.tensor_tricks.v3.json"),
        temporary(version_dir, "variants-index.json"),
        temporary(version_dir / UNIVERSAL, ".flashhub-receipt.json"),
        temporary(version_dir / UNIVERSAL, "metadata.json.sig"),
    ]
    fresh = temporary(version_dir, "variants-index.json")  # a writer may be at it
    not_ours = temporary(cache_dir, "notes.txt")
    two_hours_ago = time.time() - 2 * 3600
    for path in [*stale, not_ours]:
        os.utime(path, (two_hours_ago, two_hours_ago))

    text = flashhub("cache", "prune")
    document = ok_json(flashhub("cache", "prune", "--json"))

    assert text.returncode == 0, text.stderr
    assert sorted(text.stdout.splitlines()[:-1]) == sorted(f"removed leftover {p}" for p in stale)
    assert document["stale_files"] == []
    assert [p for p in [*stale, fresh, not_ours] if p.exists()] == [fresh, not_ours]
    assert flashhub("cache", "verify").returncode == 0


def test_cache_clear_leaves_alone_an_entry_committed_after_it_listed_the_cache(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flashhub_kernels._cache import admin
    from flashhub_kernels._cache.layout import Cache
    from flashhub_kernels._config import get_config

    write_kernel(cdn.root, REPO, 1)
    signs = tmp_path / "signs"
    user = job(USE_AND_READ, signs)  # a job that loads the kernel while clear runs
    listed = admin.version_dirs

    def listed_once_the_job_loaded(cache: Cache) -> Iterator[tuple[object, Path]]:
        assert appears(signs / "loaded", user, timeout=60), "the job never loaded the kernel"
        yield from listed(cache)

    monkeypatch.setattr(admin, "version_dirs", listed_once_the_job_loaded)
    try:
        report = admin.clear(Cache.from_config(get_config()))
    finally:
        (signs / "go").touch()
        out, err = user.communicate(timeout=60)
    loaded, read = out.strip().splitlines()
    assert loaded == f"{REPO}@v1:{LOCAL}", err
    assert read == f"table of {REPO}@v1:{LOCAL}", err  # its files are still there
    assert user.returncode == 0, err
    assert report.removed == [] and [p.name for p in report.in_use] == [LOCAL]


USE_AND_READ = """
import flashhub.acme.tensor_tricks.v1 as k
print(k.marker())
sign("loaded")
when("go")
print((pathlib.Path(k.__file__).parent / "data" / "table.txt").read_text())
"""


def test_a_load_waiting_while_cache_clear_removes_its_version_loads_once_clear_is_done(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flashhub_kernels._cache import admin
    from flashhub_kernels._cache.layout import Cache
    from flashhub_kernels._config import get_config

    write_kernel(cdn.root, REPO, 1)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    mutex = str(cache_dir / "kernels" / REPO / "v1" / ".locks" / f"{LOCAL}.lock")
    evict = admin._evict_unused
    loaders: list[Child] = []
    log = cache_dir.parent / "loader.log"

    def evict_then_let_a_load_wait(entry: CacheEntry, *, force: bool) -> bool:
        removed = evict(entry, force=force)
        loader = start_code(stderr_into(log) + LOAD_SAYING_IT_WAITS, env=dict(os.environ))
        loaders.append(loader)
        # It found no entry, and waits for the download mutex that clear holds.
        waits = written(log, f"not acquired on {mutex}", loader, timeout=120)
        assert waits, "the load never waited for the download mutex"
        return removed

    monkeypatch.setattr(admin, "_evict_unused", evict_then_let_a_load_wait)
    admin.clear(Cache.from_config(get_config()))  # removes the version, mutexes and all
    out, _err = loaders[0].communicate(timeout=120)
    assert loaders[0].returncode == 0, log.read_text()
    assert out.strip() == f"{REPO}@v1:{LOCAL}"


LOAD_SAYING_IT_WAITS = """
import logging, sys
logging.basicConfig(stream=sys.stderr)
logging.getLogger("filelock").setLevel(logging.DEBUG)  # says each time a mutex is busy
import flashhub.acme.tensor_tricks.v1 as k
print(k.marker())
"""
