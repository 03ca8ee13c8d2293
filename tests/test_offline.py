"""``FLASHHUB_OFFLINE=1``: every question is answered from the cache, or refused, with
zero requests; a lock file is never rewritten.

Each test runs against a live loopback CDN and asserts that it saw no request at all,
once with a cache an earlier online run primed (it can answer) and once without.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import flashhub_kernels as fk
from cdn_server import CdnServer
from cli_runner import CliResult, flashhub, ok_json
from flashhub_kernels.errors import OfflineError
from projects import CUDA, PY_PKG, REPO, UNIVERSAL, publish_tensor_tricks, write_project
from trees import local_variant, write_kernel

LOCAL = local_variant()
OFFLINE = {"FLASHHUB_OFFLINE": "1"}


def refused(result: CliResult, *phrases: str) -> None:
    """The command failed with an error and a hint in CLI terms, and no traceback."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "FLASHHUB_OFFLINE" in result.stderr and "  hint: " in result.stderr
    assert "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in result.stderr


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")


# -- has_kernel and get_kernel_variants ------------------------------------------------------


def test_variants_come_from_the_cache_a_load_primed(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_tensor_tricks(cdn.root)
    write_kernel(cdn.root, "acme/gpu-only", 1, [CUDA])
    fk.get_kernel(REPO, version=2)
    with pytest.raises(fk.errors.NoCompatibleVariantError):
        fk.get_kernel("acme/gpu-only", version=1)  # records the variant list all the same
    online = fk.get_kernel_variants(REPO, version=2)
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    assert fk.get_kernel_variants(REPO, version=2) == online
    assert fk.has_kernel(REPO, version=2)
    assert not fk.has_kernel("acme/gpu-only", version=1)
    assert cdn.requests == []


def test_a_probed_version_answers_what_its_probe_learnt(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL], with_variants_json=False)
    fk.get_kernel(REPO, version=1)  # probes until the first hit: later names stay unknown
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    assert fk.has_kernel(REPO, version=1)
    with pytest.raises(OfflineError, match="every variant this system could load"):
        fk.get_kernel_variants(REPO, version=1)
    assert cdn.requests == []


def test_variants_offline_without_a_cache_are_an_offline_error(
    cdn: CdnServer, offline: None
) -> None:
    publish_tensor_tricks(cdn.root)

    for ask in (fk.has_kernel, fk.get_kernel_variants):
        with pytest.raises(OfflineError, match="FLASHHUB_OFFLINE") as info:
            ask(REPO, version=2)
        assert f"flashhub get {REPO} --version 2" in str(info.value.hint)
        with pytest.raises(OfflineError, match="newest version") as info:
            ask(REPO)
        assert "version=" in str(info.value.hint)
    assert cdn.requests == []


# -- flashhub variants, info ------------------------------------------------------------------


def test_flashhub_variants_offline(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    online = flashhub("variants", REPO, "--version", "2")
    cold = [flashhub("variants", REPO, "--version", "2", env=OFFLINE)]
    cold.append(flashhub("variants", REPO, env=OFFLINE))
    assert flashhub("get", REPO, "--version", "2").returncode == 0
    cdn.clear_log()

    warm = flashhub("variants", REPO, "--version", "2", env=OFFLINE)
    newest = flashhub("variants", REPO, env=OFFLINE)

    assert online.returncode == 0, online.stderr
    assert (warm.returncode, warm.stdout) == (0, online.stdout)
    refused(cold[0], f"`flashhub get {REPO} --version 2`")
    refused(cold[1], "--version N")
    refused(newest, "--version N")
    assert cdn.requests == []


def test_flashhub_info_offline(cdn: CdnServer, tmp_path: Path) -> None:
    publish_tensor_tricks(cdn.root)
    project = write_project(tmp_path / "project", {REPO: ">=1,<3"})
    assert flashhub("lock", project).returncode == 0
    online = ok_json(flashhub("info", REPO, "--version", "2", "--json"))
    cold = flashhub("info", REPO, "--version", "2", env=OFFLINE)
    assert flashhub("download", project).returncode == 0
    one_cached = flashhub("info", REPO, "--version", "2", env=OFFLINE)
    assert flashhub("download", project, "--all-variants").returncode == 0
    cdn.clear_log()

    warm = ok_json(flashhub("info", REPO, "--version", "2", "--json", env=OFFLINE))
    text = flashhub("info", REPO, "--version", "2", env=OFFLINE)

    refused(cold, f"`flashhub get {REPO} --version 2`")
    refused(one_cached, repr(UNIVERSAL), repr(CUDA), "flashhub download --all-variants")
    for variant in online["variants"]:  # the test CDN answers no HEAD: sizes unknown online
        variant["bytes"] = None
        for file in variant["files"]:
            file["bytes"] = None
    sizes = {
        f["path"]: f["bytes"] for v in warm["variants"] if v["variant"] == LOCAL for f in v["files"]
    }
    published = cdn.root / "kernels" / REPO / "v2" / "build" / LOCAL
    assert sizes == {p: (published / p).stat().st_size for p in sizes}
    assert len(sizes) == 4
    for variant in warm["variants"]:
        variant["bytes"] = None
        for file in variant["files"]:
            file["bytes"] = None
    assert warm == online
    assert text.returncode == 0, text.stderr
    assert f"chosen variant: {LOCAL}" in text.stdout
    assert f"B  {PY_PKG}/__init__.py" in text.stdout
    assert cdn.requests == []


# -- flashhub lock ------------------------------------------------------------------------------


@pytest.fixture
def project(tmp_path: Path, cdn: CdnServer) -> Path:
    publish_tensor_tricks(cdn.root)
    return write_project(tmp_path / "project", {REPO: ">=1,<3"})


def lock_state(project: Path) -> tuple[bytes, int]:
    path = project / "flashhub.lock"
    return path.read_bytes(), path.stat().st_mtime_ns


def test_flashhub_lock_offline_confirms_the_lock_from_the_cache(
    project: Path, cdn: CdnServer
) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project).returncode == 0
    before = lock_state(project)
    cdn.clear_log()

    text = flashhub("lock", project, env=OFFLINE)
    document = ok_json(flashhub("lock", project, "--json", env=OFFLINE))

    assert text.returncode == 0, text.stderr
    assert f"{REPO} >=1,<3: v2 (3 variants)" in text.stdout
    assert "is up to date as far as the cache knows" in text.stdout
    assert "wrote" not in text.stdout
    assert document["written"] is False
    assert document["kernels"] == json.loads(before[0])["kernels"]
    assert lock_state(project) == before
    assert cdn.requests == []


def test_flashhub_lock_offline_without_a_cache_is_refused_and_writes_nothing(
    project: Path, cdn: CdnServer
) -> None:
    missing = flashhub("lock", project, env=OFFLINE)
    assert flashhub("lock", project).returncode == 0
    before = lock_state(project)
    cdn.clear_log()

    cold = flashhub("lock", project, env=OFFLINE)

    refused(missing, "flashhub.lock does not exist", "`flashhub lock`")
    refused(cold, f"the cache does not record the variants.json of {REPO}@v2", "`flashhub lock`")
    assert lock_state(project) == before
    assert cdn.requests == []


def test_flashhub_lock_offline_reports_a_stale_lock_and_leaves_it(
    project: Path, cdn: CdnServer
) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project).returncode == 0
    assert flashhub("get", REPO, "--version", "3").returncode == 0  # newer, cached
    before = lock_state(project)
    widened = write_project(project, {REPO: ">=1"})
    cdn.clear_log()

    changed_range = flashhub("lock", widened, env=OFFLINE)
    assert lock_state(project) == before
    (project / "pyproject.toml").write_text(
        (project / "pyproject.toml").read_text().replace('">=1"', '">=1,<4"')
    )
    lock_json = json.loads(before[0])
    lock_json["kernels"][0]["specifier"] = ">=1,<4"
    (project / "flashhub.lock").write_text(json.dumps(lock_json))
    rewritten = lock_state(project)
    newer_cached = flashhub("lock", project, env=OFFLINE)

    refused(changed_range, "is locked for '>=1,<3', but declared as '>=1'")
    refused(newer_cached, f"{REPO} v3 is in the cache and in the range '>=1,<4'")
    assert lock_state(project) == rewritten
    assert cdn.requests == []
