"""``flashhub cache list``, ``verify``, ``prune`` and ``clear``: what they print, their
exit codes and options, and how they treat entries a load would refuse (another owner, a
symlink), names with control characters, and a download in progress.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cdn_server import CdnServer, held
from cli_runner import flashhub, ok_json
from conftest import NOBODY, MakeProject, assert_terminal_safe, needs_root
from projects import CUDA, PY_PKG, REPO, UNIVERSAL, publish_tensor_tricks
from trees import MIB_BLOB, local_variant, write_blob_kernel, write_kernel

LOCAL = local_variant()


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
    assert f"  {REPO}@v3 {UNIVERSAL}: 4 files, " in text.stdout

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

    cleared = flashhub("cache", "clear", "--yes")
    assert cleared.returncode == 0, cleared.stderr
    assert "removed 2 entries" in cleared.stdout
    assert ok_json(flashhub("cache", "list", "--json"))["entries"] == []
    assert foreign.read_text() == "not a kernel"
    assert not (cache_dir / "kernels").exists()


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


def test_cache_prune_removes_leftovers_of_dead_downloads(cdn: CdnServer, cache_dir: Path) -> None:
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_dir / "kernels" / REPO / "v3"
    trash = version_dir / f".trash-{UNIVERSAL}.0123abcd"
    (trash / PY_PKG).mkdir(parents=True)
    dead = version_dir / f".staging-{UNIVERSAL}.0123abcd.999999999.{os.uname().nodename}"
    dead.mkdir()

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert sorted(document["stale_directories"]) == sorted([str(dead), str(trash)])
    assert document["removed"] == []
    assert (version_dir / UNIVERSAL).is_dir()


def test_cache_clear_with_nothing_cached_says_so_without_asking(cache_dir: Path) -> None:
    result = flashhub("cache", "clear")  # no --yes and no terminal: nothing to confirm
    document = ok_json(flashhub("cache", "clear", "--json"))

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"no kernels are cached in {cache_dir}; nothing to remove\n"
    assert document == {"cache_dir": str(cache_dir), "removed": [], "skipped_busy": []}


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


def test_flashhub_cache_list_escapes_directory_names(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    (cache_dir / "kernels" / REPO / "v1" / "evil\x1b]0;title\x07").mkdir()

    result = flashhub("cache", "list")

    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result.stdout)
    assert "evil\\x1b]0;title\\x07: 0 files" in result.stdout


@pytest.mark.parametrize("command", [["clear", "--yes"], ["prune"]])
def test_cache_maintenance_during_a_download_leaves_it_alone(
    cdn: CdnServer, command: list[str]
) -> None:
    blob_path = write_blob_kernel(cdn.root, MIB_BLOB)
    started, release = threading.Event(), threading.Event()
    cdn.inject(blob_path, held(started, release))
    load = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
    loader = subprocess.Popen(  # a real process: its download runs while the command does
        [sys.executable, "-c", load],
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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
