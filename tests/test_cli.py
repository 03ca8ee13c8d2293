"""The ``flashhub`` lock, download, inspection and cache commands, each run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cdn_server import CdnHandler, CdnServer
from cli_runner import flashhub, ok_json
from conftest import run_python
from flashhub_kernels._lockfile import LOCKFILE_NAME
from projects import (
    CUDA,
    PY_PKG,
    REPO,
    UNIVERSAL,
    change_published_file,
    publish_tensor_tricks,
    write_project,
)
from trees import kernel_files, local_variant, write_kernel, write_variant

LOCAL = local_variant()


@pytest.fixture
def project(tmp_path: Path, cdn: CdnServer) -> Path:
    publish_tensor_tricks(cdn.root)
    return write_project(tmp_path / "project", {REPO: ">=1,<3"})


def cache_root() -> Path:
    return Path(os.environ["FLASHHUB_CACHE_DIR"])


# -- lock and download ------------------------------------------------------------------------


def test_lock_download_then_load_offline(project: Path, cdn: CdnServer) -> None:
    locked = flashhub("lock", project)
    assert locked.returncode == 0, locked.stderr
    assert f"{REPO} >=1,<3: v2 (3 variants)" in locked.stdout
    assert f"wrote {project / LOCKFILE_NAME}" in locked.stdout

    downloaded = flashhub("download", cwd=project)  # PROJECT_DIR defaults to .
    assert downloaded.returncode == 0, downloaded.stderr
    assert downloaded.stdout.split()[:3] == ["downloaded", f"{REPO}@v2", LOCAL]

    cdn.stop()
    code = f"from flashhub_kernels import load_kernel; print(load_kernel({REPO!r}).marker())"
    output = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project,
        env={**os.environ, "FLASHHUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert output.returncode == 0, output.stderr
    assert output.stdout.strip() == f"{REPO}@v2:{LOCAL}"


def test_lock_json(project: Path) -> None:
    document = ok_json(flashhub("lock", project, "--json"))
    assert document["lockfile"] == str(project / LOCKFILE_NAME)
    assert document["version"] == 1
    [kernel] = document["kernels"]
    assert (kernel["repo_id"], kernel["version"]) == (REPO, 2)
    assert set(kernel["variants"]) == {LOCAL, UNIVERSAL, CUDA}
    assert json.loads((project / LOCKFILE_NAME).read_text())["kernels"] == [kernel]


def test_download_all_variants_json(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    cdn.clear_log()

    document = ok_json(flashhub("download", project, "--all-variants", "--json"))

    results = {r["variant"]: r for r in document["results"]}
    assert set(results) == {LOCAL, UNIVERSAL, CUDA}
    for variant, result in results.items():
        assert result["status"] == "downloaded"
        assert Path(result["path"], PY_PKG, "__init__.py").is_file()
        assert len(cdn.gets(f"/v2/build/{variant}/{PY_PKG}/__init__.py")) == 1
    again = ok_json(flashhub("download", project, "--all-variants", "--json"))
    assert {r["status"] for r in again["results"]} == {"cached"}


def test_download_detects_an_object_changed_after_locking(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    change_published_file(cdn.root, 2, LOCAL)

    result = flashhub("download", project)

    assert result.returncode == 1
    assert f"error: {REPO}@v2 {LOCAL}: {REPO}@v2 variant {LOCAL}" in result.stderr
    assert "the lock pins sha256-" in result.stderr


def test_download_without_a_lock_fails_with_a_hint(tmp_path: Path) -> None:
    result = flashhub("download", tmp_path)
    assert result.returncode == 1
    assert f"{tmp_path / LOCKFILE_NAME} does not exist" in result.stderr
    assert "flashhub lock" in result.stderr


def test_lock_without_dependencies_fails(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    result = flashhub("lock", tmp_path)
    assert result.returncode == 1
    assert "declares no kernels" in result.stderr
    assert "[tool.flashhub.dependencies]" in result.stderr


# -- variants, info, get ------------------------------------------------------------------


def test_variants_text_and_json(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    text = flashhub("variants", REPO, "--version", "2")
    document = ok_json(flashhub("variants", REPO, "--json"))  # newest: v3

    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].startswith(f"{REPO}@v2 on torch ")
    assert f"  + {LOCAL}: compatible" in text.stdout
    assert f"  - {CUDA}: " in text.stdout
    assert f"chosen: {LOCAL}" in text.stdout
    assert (document["version"], document["chosen"]) == (3, UNIVERSAL)
    assert document["variants"] == [{"variant": UNIVERSAL, "compatible": True, "reason": None}]


def test_variants_exits_1_when_nothing_fits(cdn: CdnServer) -> None:
    write_kernel(cdn.root, "acme/gpu-only", 1, [CUDA])
    result = flashhub("variants", "acme/gpu-only", "--version", "1")
    assert result.returncode == 1
    assert f"  - {CUDA}: built for cu126" in result.stdout
    assert "chosen: none" in result.stdout


def _serve_head(handler: CdnHandler) -> None:
    file = handler.cdn.root / handler.path.split("?")[0].lstrip("/")
    handler.send_response(200 if file.is_file() else 404)
    handler.send_header("Content-Length", str(file.stat().st_size if file.is_file() else 0))
    handler.end_headers()


def test_info_lists_variants_files_and_sizes(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CdnHandler, "do_HEAD", _serve_head, raising=False)
    files = write_kernel(cdn.root, REPO, 1, [LOCAL, CUDA])

    document = ok_json(flashhub("info", REPO, "--version", "1", "--json"))
    text = flashhub("info", REPO, "--version", "1")

    assert document["chosen"] == LOCAL
    variants = {v["variant"]: v for v in document["variants"]}
    assert variants[LOCAL]["compatible"] and not variants[CUDA]["compatible"]
    assert "cu126" in variants[CUDA]["reason"]
    for name, published in files.items():
        listed = {f["path"]: f["bytes"] for f in variants[name]["files"]}
        assert listed == {path: len(data) for path, data in published.items()}
        assert variants[name]["bytes"] == sum(map(len, published.values()))
        assert variants[name]["content_hash"].startswith("sha256-")
    assert text.returncode == 0, text.stderr
    assert f"chosen variant: {LOCAL}" in text.stdout
    init_size = len(files[LOCAL][f"{PY_PKG}/__init__.py"])
    assert f"{init_size} B  {PY_PKG}/__init__.py" in text.stdout
    assert "rejected: built for cu126" in text.stdout


def test_info_takes_sizes_from_metadata_json_without_head(cdn: CdnServer) -> None:
    files = kernel_files(PY_PKG, "sized")
    write_variant(cdn.root, REPO, 1, UNIVERSAL, files, with_sizes=True)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([UNIVERSAL]))
    [variant] = ok_json(flashhub("info", REPO, "--version", "1", "--json"))["variants"]
    assert {f["path"]: f["bytes"] for f in variant["files"]} == {
        path: len(data) for path, data in files.items()
    }  # the test server answers HEAD with 501: these sizes can only come from the manifest


def test_info_from_a_file_mirror_and_without_head_support(cdn: CdnServer) -> None:
    files = write_kernel(cdn.root, REPO, 1, [UNIVERSAL])
    size = len(files[UNIVERSAL][f"{PY_PKG}/_ops.py"])

    mirror = ok_json(
        flashhub(
            "info", REPO, "--version", "1", "--json", env={"FLASHHUB_CDN_URL": cdn.root.as_uri()}
        )
    )
    no_head = ok_json(flashhub("info", REPO, "--version", "1", "--json"))

    [variant] = mirror["variants"]
    assert {"path": f"{PY_PKG}/_ops.py", "bytes": size} in variant["files"]
    [variant] = no_head["variants"]
    assert variant["bytes"] is None, "the test server answers HEAD with 501: size unknown"


def test_get_downloads_one_kernel(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    text = flashhub("get", REPO, "--version", "2")
    document = ok_json(flashhub("get", REPO, "--version", "1", "--json"))

    assert text.returncode == 0, text.stderr
    path = Path(text.stdout.strip())
    assert path == cache_root() / "kernels" / REPO / "v2" / LOCAL
    assert (path / PY_PKG / "__init__.py").is_file()
    assert document == {
        "repo_id": REPO,
        "version": 1,
        "variant": LOCAL,
        "path": str(cache_root() / "kernels" / REPO / "v1" / LOCAL),
    }


def test_info_and_get_default_to_the_newest_version_like_variants(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)  # v1, v2 and v3, which holds only torch-universal

    info = ok_json(flashhub("info", REPO, "--json"))
    got = ok_json(flashhub("get", REPO, "--json"))
    text = flashhub("info", REPO)

    assert (info["version"], info["chosen"]) == (3, UNIVERSAL)
    assert got == {
        "repo_id": REPO,
        "version": 3,
        "variant": UNIVERSAL,
        "path": str(cache_root() / "kernels" / REPO / "v3" / UNIVERSAL),
    }
    assert text.stdout.startswith(f"{REPO}@v3 on torch ")


@pytest.mark.parametrize("command", ["variants", "info", "get"])
def test_the_newest_version_offline_is_an_offline_error_naming_the_option(
    cdn: CdnServer, command: str
) -> None:
    publish_tensor_tricks(cdn.root)
    result = flashhub(command, REPO, env={"FLASHHUB_OFFLINE": "1"})
    assert result.returncode == 1
    assert f"the newest version of {REPO} cannot be looked up" in result.stderr
    assert f"`flashhub {command} {REPO} --version 1`" in result.stderr
    assert cdn.requests == []


def test_get_a_missing_kernel_fails(cdn: CdnServer) -> None:
    result = flashhub("get", "acme/missing", "--version", "1")
    assert result.returncode == 1
    assert "acme/missing@v1 was not found on the CDN" in result.stderr
    assert "hint:" in result.stderr


# -- cache ---------------------------------------------------------------------------------


def test_cache_list_verify_prune_clear(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project, "--all-variants").returncode == 0
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    foreign = cache_root() / "notes.txt"
    foreign.write_text("not a kernel")

    listed = ok_json(flashhub("cache", "list", "--json"))
    entries = {(e["version"], e["variant"]) for e in listed["entries"]}
    assert entries == {(2, LOCAL), (2, UNIVERSAL), (2, CUDA), (3, UNIVERSAL)}
    text = flashhub("cache", "list")
    assert f"  {REPO}@v3 {UNIVERSAL}: 4 files, " in text.stdout

    verified = flashhub("cache", "verify")
    assert verified.returncode == 0, verified.stderr
    assert "4 entries checked" in verified.stdout

    damaged = cache_root() / "kernels" / REPO / "v2" / CUDA / PY_PKG / "helpers.py"
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
    assert not (cache_root() / "kernels").exists()


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


def test_cache_prune_removes_leftovers_of_dead_downloads(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    version_dir = cache_root() / "kernels" / REPO / "v3"
    trash = version_dir / f".trash-{UNIVERSAL}.0123abcd"
    (trash / PY_PKG).mkdir(parents=True)
    dead = version_dir / f".staging-{UNIVERSAL}.0123abcd.999999999.{os.uname().nodename}"
    dead.mkdir()

    document = ok_json(flashhub("cache", "prune", "--json"))

    assert sorted(document["stale_directories"]) == sorted([str(dead), str(trash)])
    assert document["removed"] == []
    assert (version_dir / UNIVERSAL).is_dir()


def test_cache_clear_with_nothing_cached_says_so_without_asking() -> None:
    result = flashhub("cache", "clear")  # no --yes and no terminal: nothing to confirm
    document = ok_json(flashhub("cache", "clear", "--json"))

    assert result.returncode == 0, result.stderr
    assert result.stdout == f"no kernels are cached in {cache_root()}; nothing to remove\n"
    assert document == {"cache_dir": str(cache_root()), "removed": [], "skipped_busy": []}


def test_counts_are_pluralized(cdn: CdnServer, tmp_path: Path) -> None:
    publish_tensor_tricks(cdn.root)
    project = write_project(tmp_path / "one", {REPO: ">=3"})  # v3: one variant
    locked = flashhub("lock", project)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    verified = flashhub("cache", "verify")

    assert f"{REPO} >=3: v3 (1 variant)\n" in locked.stdout
    assert verified.stdout.endswith("1 entry checked, 0 untrusted directories\n")


def test_cache_clear_needs_yes_without_a_terminal(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    result = flashhub("cache", "clear")
    assert result.returncode == 2
    assert "pass --yes" in result.stderr
    assert (cache_root() / "kernels" / REPO / "v3" / UNIVERSAL).is_dir()


# -- usage, help, and the 0.1.2 script ------------------------------------------------------


COMMANDS = [
    ["lock"],
    ["download"],
    ["variants"],
    ["info"],
    ["get"],
    ["cache"],
    ["cache", "list"],
    ["cache", "verify"],
    ["cache", "prune"],
    ["cache", "clear"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command: list[str]) -> None:
    result = flashhub(*command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: flashhub {' '.join(command)}")


@pytest.mark.parametrize(
    "args",
    [
        ["variants"],
        ["variants", "a/b/c"],
        ["info", REPO, "--version", "0"],
        ["get", "nope", "--version", "1"],
        ["download", "--bogus"],
        ["lock", "a", "b"],
        ["cache"],
        ["cache", "bogus"],
        ["cache", "prune", "--keep-locked"],
        ["variants", REPO, "--backend", "tpu"],
    ],
    ids=" ".join,
)
def test_bad_usage_exits_2(args: list[str]) -> None:
    result = flashhub(*args)
    assert result.returncode == 2
    assert "usage: flashhub" in result.stderr
    assert "Traceback" not in result.stderr


def test_flashhub_kernel_load_keeps_working(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    script = Path(sys.executable).with_name("flashhub-kernel-load")
    result = subprocess.run(
        [script, REPO, "--version", "2"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "flashhub.acme.tensor_tricks.v2"


def test_cli_help_imports_neither_torch_nor_requests() -> None:
    code = (
        "import sys\nfrom flashhub_kernels.cli import main\n"
        "try:\n    main(['cache', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted({'torch', 'requests', 'http.client'} & set(sys.modules)))"
    )
    assert run_python(code).strip().splitlines()[-1] == "[]"
