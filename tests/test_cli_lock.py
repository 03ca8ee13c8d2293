"""``flashhub lock`` and ``flashhub download``: what they print and write, their options
(``--json``, ``--all-variants``, ``--variant``), exit codes, and how they behave offline.

Locking and loading what a lock pins, as the library does it, is tested in test_lock.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MakeProject, run_python
from flashhub_kernels import get_kernel, get_locked_kernel, load_kernel
from flashhub_kernels._lockfiles.format import LOCKFILE_NAME, read_lockfile
from flashhub_kernels._lockfiles.pinning import lock_project
from flashhub_kernels._signing.signing_keys import generate_signing_key, write_key_pair
from support.cdn_server import CdnServer
from support.cli_runner import OFFLINE, flashhub, flashhub_process, ok_json, refused_offline
from support.projects import (
    CUDA,
    NOARCH_CUDA,
    PY_PKG,
    REPO,
    UNIVERSAL,
    change_published_file,
    entry,
    lockfile_of,
    published_hash,
    replayable_versions,
    write_project,
)
from support.trees import cpu_variant, local_variant, write_kernel

LOCAL = local_variant()
CPU_LOCAL = cpu_variant()  # what a probed_project system loads


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
    # A fresh interpreter: what this one loaded cannot help the load in the project.
    output = run_python(code, env=OFFLINE, cwd=project)
    assert output.strip() == f"{REPO}@v2:{LOCAL}"


def test_a_hugging_face_kernels_project_locks_unchanged(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().replace(
        "[tool.flashhub.dependencies]", "[tool.kernels.dependencies]"
    )
    pyproject.write_text(text.replace('">=1,<3"', "2"))  # as HF writes it: an exact version
    document = ok_json(flashhub("lock", project, "--json"))
    assert [(k["repo_id"], k["version"]) for k in document["kernels"]] == [(REPO, 2)]

    pyproject.write_text(text.replace('">=1,<3"', '"two"'))
    refused = flashhub("lock", project)
    assert refused.returncode != 0
    assert f"[tool.kernels.dependencies] '{REPO}'" in refused.stderr


def test_a_kernel_declared_in_the_table_not_read_is_refused_not_dropped(project: Path) -> None:
    """A Hugging Face project that added [tool.flashhub.dependencies], as the hint of a
    kernel missing from its lock said, for another kernel: locking the table read alone
    dropped the first kernel from the lock without a word."""
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().replace(
        "[tool.flashhub.dependencies]", "[tool.kernels.dependencies]"
    )
    pyproject.write_text(text + '\n[tool.flashhub.dependencies]\n"acme/other" = 1\n')
    refused = flashhub("lock", project)
    assert refused.returncode == 1
    assert (
        f"[tool.kernels.dependencies] '{REPO}': not read, since [tool.flashhub.dependencies] "
        "is there"
    ) in refused.stderr
    assert "declare it under [tool.flashhub.dependencies], which is read" in refused.stderr
    assert not (project / LOCKFILE_NAME).exists()


def test_lock_json(project: Path) -> None:
    document = ok_json(flashhub("lock", project, "--json"))
    assert document["lockfile"] == str(project / LOCKFILE_NAME)
    assert document["version"] == 1
    [kernel] = document["kernels"]
    assert (kernel["repo_id"], kernel["version"]) == (REPO, 2)
    assert set(kernel["variants"]) == {LOCAL, UNIVERSAL, CUDA}
    assert json.loads((project / LOCKFILE_NAME).read_text())["kernels"] == [kernel]
    assert document["written"] is True


def test_a_relock_that_changes_nothing_says_so(project: Path) -> None:
    assert flashhub("lock", project).returncode == 0
    lockfile = project / LOCKFILE_NAME
    os.utime(lockfile, (0, 0))  # a rewrite would move it
    again = flashhub("lock", project)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == f"{lockfile} is up to date"
    assert ok_json(flashhub("lock", project, "--json"))["written"] is False
    assert lockfile.stat().st_mtime == 0


@pytest.mark.signing
def test_lock_refuses_to_move_a_pin_down_to_a_replayed_signed_versions_json(
    make_project: MakeProject, cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edge serves the versions.json of the v1 days again, validly signed: re-locking
    must not quietly move the pin from v2 to v1."""
    key = generate_signing_key()
    keyfile = tmp_path / "release.key"
    write_key_pair(key, keyfile)
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL])
    assert flashhub("sign", cdn.root, "--key", keyfile).returncode == 0
    replay = replayable_versions(cdn.root)  # [1], signed
    write_kernel(cdn.root, REPO, 2, [LOCAL, UNIVERSAL])
    assert flashhub("sign", cdn.root, "--key", keyfile).returncode == 0
    monkeypatch.setenv("FLASHHUB_TRUSTED_KEYS", key.public_line)
    project = make_project(publish=False)
    assert flashhub("lock", project).returncode == 0
    locked = lockfile_of(project).read_bytes()
    assert read_lockfile(lockfile_of(project)).kernels[REPO].version == 2

    replay()
    refused = flashhub("lock", project)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "lists v1 as the newest version, but this machine has seen v2" in refused.stderr
    assert "flashhub lock --allow-downgrade" in refused.stderr
    assert lockfile_of(project).read_bytes() == locked

    # A machine that never saw v2 (a fresh cache, a CI runner): the lock itself knows.
    monkeypatch.setenv("FLASHHUB_CACHE_DIR", str(tmp_path / "fresh-cache"))
    refused = flashhub("lock", project)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"would move {REPO} from v2 down to v1" in refused.stderr
    assert "flashhub lock --allow-downgrade" in refused.stderr
    assert lockfile_of(project).read_bytes() == locked

    allowed = flashhub("lock", project, "--allow-downgrade")
    assert allowed.returncode == 0, allowed.stderr
    assert f"{REPO} >=1,<3: v1" in allowed.stdout
    assert read_lockfile(lockfile_of(project)).kernels[REPO].version == 1


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


def test_lock_again_after_a_change_warns_and_pins_the_new_content(
    project: Path, cdn: CdnServer
) -> None:
    assert flashhub("lock", project).returncode == 0
    change_published_file(cdn.root, 2, LOCAL)

    result = flashhub("lock", project)

    assert result.returncode == 0
    assert f"warning: {REPO}@v2: the CDN serves other content than" in result.stderr
    assert flashhub("download", project).returncode == 0


def test_download_detects_an_object_changed_after_locking(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    change_published_file(cdn.root, 2, LOCAL)

    result = flashhub("download", project)

    assert result.returncode == 1
    assert f"error: {REPO}@v2 {LOCAL}: {REPO}@v2 variant {LOCAL}" in result.stderr
    assert "the lock pins sha256-" in result.stderr


def test_download_for_a_machine_no_locked_variant_fits_advises_what_download_can_do(
    project: Path, cdn: CdnServer
) -> None:
    """The lock pins a CPU build only; the machine named is a CUDA one. A load there may
    force the CPU backend, but download has no such option: its hint names the one it
    has (--all-variants), in the command's words, in the text and in the JSON."""
    write_kernel(cdn.root, "acme/cpu-only", 1, [CPU_LOCAL])
    write_project(project, {"acme/cpu-only": 1})
    assert flashhub("lock", project).returncode == 0
    cuda = ("--system", CPU_LOCAL.replace("-cpu-", "-cu126-"), "--cuda-capability", "9.0")
    text = flashhub("download", project, *cuda)
    document = json.loads(flashhub("download", project, *cuda, "--json").stdout)
    assert text.returncode == 1
    assert "hint: pass --all-variants to download every variant the lock pins" in text.stderr
    [result] = document["results"]
    assert "--all-variants" in result["error"]
    for said in (text.stderr, result["error"]):
        hint = said.split("hint: ")[-1]
        assert "backend" not in hint and "all_variants=" not in hint


def test_download_for_a_machine_no_locked_variant_fits_names_no_option_it_lacks(
    project: Path, cdn: CdnServer
) -> None:
    """Each variant's reason says why the machine named cannot load it, not that
    ``--backend cpu`` (an option of the commands that load or judge, not of download)
    would: ``flashhub variants`` for that machine says it."""
    write_kernel(cdn.root, "acme/cpu-only", 1, [CPU_LOCAL])
    write_project(project, {"acme/cpu-only": 1})
    assert flashhub("lock", project).returncode == 0
    cuda = ("--system", CPU_LOCAL.replace("-cpu-", "-cu126-"), "--cuda-capability", "9.0")
    download = flashhub("download", project, *cuda)
    assert download.returncode == 1
    assert f"  - {CPU_LOCAL}: built for cpu, but this system uses cu126\n" in download.stderr
    assert "--backend" not in download.stderr and "backend=" not in download.stderr
    judged = flashhub("variants", "acme/cpu-only", "--version", "1", *cuda)
    assert (
        f"{CPU_LOCAL}: built for cpu, but this system uses cu126 (--backend cpu loads it anyway)"
        in judged.stdout
    )


def test_a_lock_listing_other_variants_than_the_cdn_is_not_recorded_for_later_loads(
    project: Path, cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """A lock an unreviewed change wrote, downloaded first into a cache others share: its
    list of the version's variants was recorded as the CDN's, and later plain loads of the
    version chose from it (or failed, for locks that disagreed with it)."""
    elsewhere = {"FLASHHUB_CACHE_DIR": str(tmp_path / "lockers-cache")}
    assert flashhub("lock", project, env=elsewhere).returncode == 0
    lock = json.loads((project / LOCKFILE_NAME).read_text())
    kernel = lock["kernels"][0]
    dropped = sorted(kernel["variants"])[0]
    del kernel["variants"][dropped]
    (project / LOCKFILE_NAME).write_text(json.dumps(lock))

    result = flashhub("download", project)

    assert result.returncode == 1
    assert "but the CDN's variants.json lists" in result.stderr, result.stderr
    index = cache_dir / f"kernels/{REPO}/v{kernel['version']}/variants-index.json"
    assert not index.exists() or dropped in json.loads(index.read_text())["present"]


def test_download_without_a_lock_fails_with_a_hint(tmp_path: Path) -> None:
    result = flashhub("download", tmp_path)
    assert result.returncode == 1
    assert f"{tmp_path / LOCKFILE_NAME} does not exist" in result.stderr
    assert "flashhub lock" in result.stderr
    assert "kernels.lock" not in result.stderr


def test_download_with_only_a_hugging_face_kernels_lock_says_it_is_not_read(
    tmp_path: Path,
) -> None:
    (tmp_path / "pyproject.toml").write_text(
        f'[project]\nname = "app"\n[tool.kernels.dependencies]\n"{REPO}" = 1\n'
    )
    (tmp_path / "kernels.lock").write_text('[{"repo_id": "acme/tensor-tricks", "sha": "0"}]')
    result = flashhub("download", tmp_path)
    assert result.returncode == 1
    assert f"{tmp_path / LOCKFILE_NAME} does not exist" in result.stderr
    assert (
        f"hint: {tmp_path / 'kernels.lock'} is Hugging Face kernels' lock, which flashhub "
        "does not read (`flashhub lock` reads the project's [tool.kernels.dependencies]"
    ) in " ".join(result.stderr.split())


def test_download_with_a_huge_lock_answers_without_hanging(tmp_path: Path) -> None:
    # Checking 100,000 entries for a kernel locked twice pair by pair would take minutes.
    kernel = {"repo_id": "acme/x", "variants": {UNIVERSAL: {"hash": "sha256-" + "ab" * 32}}}
    kernels = [{**kernel, "version": n} for n in range(1, 100_001)]
    lock = tmp_path / LOCKFILE_NAME
    lock.write_text(json.dumps({"version": 1, "kernels": kernels}))
    result = flashhub_process("download", tmp_path)
    assert result.returncode == 1
    assert f"error: {lock} locks acme/x twice" in result.stderr


def plant(path: Path, kind: str) -> None:
    """Put what a hostile pull request can commit, or a neighbour create, at ``path``."""
    if kind == "a pipe":
        os.mkfifo(path)  # open() would wait for a writer forever
    else:
        path.symlink_to("/dev/zero")  # git stores a symlink; read whole, it never ends


@pytest.mark.parametrize("kind", ["a pipe", "a device"])
@pytest.mark.parametrize(
    ("command", "planted"),
    [(["download"], LOCKFILE_NAME), (["lock"], "pyproject.toml")],
    ids=["download's lock", "lock's pyproject.toml"],
)
def test_a_project_file_that_is_no_regular_file_is_refused_at_once(
    tmp_path: Path, command: list[str], planted: str, kind: str
) -> None:
    """Each failed after 120 s: a pipe hung the command, a device filled its memory."""
    plant(tmp_path / planted, kind)
    result = flashhub_process(*command, tmp_path)
    assert result.returncode == 1, result.stderr
    assert f"{kind}, not a regular file" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_lock_and_download_outside_the_project_directory_say_which_to_pass(
    project: Path,
) -> None:
    subdirectory = project / "src"
    subdirectory.mkdir()
    for command in ("lock", "download"):
        from_below = flashhub(command, cwd=subdirectory)
        assert from_below.returncode == 1
        assert f"hint: pass the project directory {project}, or run the command there" in (
            from_below.stderr
        )
        given_the_file = flashhub(command, project / "pyproject.toml")
        assert given_the_file.returncode == 1
        assert "Errno" not in given_the_file.stderr
        assert f"hint: pass the directory that holds pyproject.toml ({project}), not the file" in (
            given_the_file.stderr
        )


def test_lock_in_a_directory_that_was_removed_says_so(tmp_path: Path) -> None:
    gone = tmp_path / "project"
    gone.mkdir()
    script = Path(sys.executable).with_name("flashhub")
    # The shell stays in the directory it removed, as one does after another shell's `rm -r`.
    result = subprocess.run(
        ["sh", "-c", 'cd "$1" && rmdir "$1" && exec "$2" lock', "sh", gone, script],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "error: the current directory no longer exists" in result.stderr
    assert "hint: cd to a directory that exists (the project's), or pass absolute paths" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_lock_without_dependencies_fails(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    result = flashhub("lock", tmp_path)
    assert result.returncode == 1
    assert "declares no kernels" in result.stderr
    assert "[tool.flashhub.dependencies]" in result.stderr


# -- a version without variants.json ---------------------------------------------------------


def test_probed_version_locks_downloads_and_loads_offline(
    probed_project: Path, cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = flashhub("lock", probed_project)
    assert locked.returncode == 0, locked.stderr
    downloaded = flashhub("download", probed_project)
    assert downloaded.returncode == 0, downloaded.stderr
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    module = load_kernel(REPO, lockfile=lockfile_of(probed_project))
    confirmed = flashhub("lock", probed_project)
    asked_for_more = flashhub("lock", probed_project, "--variant", CUDA)

    assert f"{REPO} ==1: v1 (2 variants, probed: no variants.json)" in locked.stdout
    kernel = json.loads(lockfile_of(probed_project).read_text())["kernels"][0]
    assert kernel["variants_source"] == "probed"
    assert kernel["variants"] == {
        v: {"hash": published_hash(cdn.root, v)} for v in (CPU_LOCAL, UNIVERSAL)
    }
    assert downloaded.stdout.split()[:3] == ["downloaded", f"{REPO}@v1", CPU_LOCAL]
    assert module.marker() == f"{REPO}@v1:{CPU_LOCAL}"
    assert (
        module
        is get_kernel(REPO, version=1)
        is get_locked_kernel(REPO, lockfile=lockfile_of(probed_project))
    )
    assert "is up to date as far as the cache knows" in confirmed.stdout
    assert asked_for_more.returncode == 1
    assert f"{REPO}@v1 is locked, but the requested variant {CUDA} is not" in asked_for_more.stderr
    assert cdn.requests == []


def test_variant_option_and_pyproject_add_variants_this_system_cannot_load(
    probed_project: Path, cdn: CdnServer
) -> None:
    with_option = ok_json(flashhub("lock", probed_project, "--variant", CUDA, "--json"))
    pyproject = probed_project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + f'[tool.flashhub]\nvariants = ["{NOARCH_CUDA}"]\n')
    from_pyproject = ok_json(flashhub("lock", probed_project, "--json"))
    both = lock_project(probed_project, variants=[CUDA])

    assert set(with_option["kernels"][0]["variants"]) == {CPU_LOCAL, UNIVERSAL, CUDA}
    assert with_option["kernels"][0]["variants"][CUDA] == {"hash": published_hash(cdn.root, CUDA)}
    assert set(from_pyproject["kernels"][0]["variants"]) == {CPU_LOCAL, UNIVERSAL, NOARCH_CUDA}
    assert set(both.kernel(REPO).variants) == {CPU_LOCAL, UNIVERSAL, CUDA, NOARCH_CUDA}
    assert read_lockfile(lockfile_of(probed_project)).kernel(REPO).probed


def test_all_variants_of_a_probed_lock_download_and_prune_keeps_them(
    probed_project: Path, cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 2, [UNIVERSAL])
    assert flashhub("lock", probed_project, "--variant", CUDA).returncode == 0
    assert flashhub("get", REPO, "--version", "2").returncode == 0  # not locked: pruned

    downloaded = ok_json(flashhub("download", probed_project, "--all-variants", "--json"))
    pruned = ok_json(flashhub("cache", "prune", "--keep-locked", probed_project, "--json"))
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    assert sorted((r["variant"], r["status"]) for r in downloaded["results"]) == sorted(
        (v, "downloaded") for v in (CPU_LOCAL, UNIVERSAL, CUDA)
    )
    assert [(r["version"], r["variant"]) for r in pruned["removed"]] == [(2, UNIVERSAL)]
    for variant in (CPU_LOCAL, UNIVERSAL, CUDA):
        assert (entry(1, variant) / PY_PKG / "__init__.py").is_file()
    module = load_kernel(REPO, lockfile=lockfile_of(probed_project))
    assert module.marker() == f"{REPO}@v1:{CPU_LOCAL}"
    assert cdn.requests == []


def test_requested_variant_the_cdn_lacks_is_an_error_naming_it(probed_project: Path) -> None:
    missing = "torch212-cxx11-cu128-x86_64-linux"
    result = flashhub("lock", probed_project, "--variant", CUDA, "--variant", missing)
    malformed = flashhub("lock", probed_project, "--variant", "cu126")

    assert result.returncode == 1
    assert f"{REPO}@v1 has no variants.json" in result.stderr
    assert f"the requested variant {missing} is not on the CDN" in result.stderr
    assert "--variant NAME" in result.stderr
    assert malformed.returncode == 2
    assert "'cu126' is not a variant name" in malformed.stderr
    assert not lockfile_of(probed_project).exists()


# -- offline: the lock is confirmed from the cache, never rewritten ---------------------------


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


def test_flashhub_lock_offline_confirms_a_lock_just_made_online(
    project: Path, cdn: CdnServer
) -> None:
    """The variants.json an online lock read is in the cache, as a load's would be."""
    assert flashhub("lock", project).returncode == 0
    before = lock_state(project)
    cdn.clear_log()

    result = flashhub("lock", project, env=OFFLINE)

    assert result.returncode == 0, result.stderr
    assert "is up to date as far as the cache knows" in result.stdout
    assert lock_state(project) == before
    assert cdn.requests == []


def test_flashhub_lock_offline_without_a_cache_is_refused_and_writes_nothing(
    project: Path, cdn: CdnServer, tmp_path: Path
) -> None:
    missing = flashhub("lock", project, env=OFFLINE)
    assert flashhub("lock", project).returncode == 0
    before = lock_state(project)
    cdn.clear_log()

    cold_cache = {**OFFLINE, "FLASHHUB_CACHE_DIR": str(tmp_path / "another-cache")}
    cold = flashhub("lock", project, env=cold_cache)

    refused_offline(missing, "flashhub.lock does not exist", "`flashhub lock`")
    refused_offline(
        cold, f"the cache does not record the variants.json of {REPO}@v2", "`flashhub lock`"
    )
    assert lock_state(project) == before
    assert cdn.requests == []


def test_flashhub_lock_offline_refuses_a_lock_whose_version_is_outside_its_range(
    project: Path, cdn: CdnServer
) -> None:
    """A lock edited by hand (or in a pull request) to pin v3 for the range '>=1,<3' was
    confirmed as up to date; download and load_kernel then took v3."""
    assert flashhub("lock", project).returncode == 0
    lock = json.loads((project / "flashhub.lock").read_text())
    lock["kernels"][0]["version"] = 3
    (project / "flashhub.lock").write_text(json.dumps(lock))
    before = lock_state(project)

    result = flashhub("lock", project, env=OFFLINE)

    assert result.returncode == 1
    assert f"{REPO} is locked at v3, outside its range '>=1,<3'" in result.stderr
    assert lock_state(project) == before


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

    refused_offline(changed_range, "is locked for '>=1,<3', but declared as '>=1'")
    refused_offline(newer_cached, f"{REPO} v3 is in the cache and in the range '>=1,<4'")
    assert lock_state(project) == rewritten
    assert cdn.requests == []


def test_download_offline_with_everything_cached_says_so(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project, "--all-variants").returncode == 0
    cdn.stop()

    text = flashhub("download", project, "--all-variants", env=OFFLINE)
    document = ok_json(flashhub("download", project, "--json", env=OFFLINE))

    assert text.returncode == 0, text.stderr
    *entries, summary = text.stdout.splitlines()
    assert sorted(line.split()[2] for line in entries) == sorted([LOCAL, UNIVERSAL, CUDA])
    assert all(line.split()[:2] == ["cached", f"{REPO}@v2"] for line in entries), entries
    assert "already in the cache" in summary and "FLASHHUB_OFFLINE is set" in summary
    assert [(r["variant"], r["status"]) for r in document["results"]] == [(LOCAL, "cached")]


def test_download_offline_with_a_variant_missing_is_refused(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    assert flashhub("download", project).returncode == 0  # this machine's variant only

    refused = flashhub("download", project, "--all-variants", env=OFFLINE)

    refused_offline(refused, CUDA, "not in the cache")


def test_lock_reports_every_bad_entry_of_the_project(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        "[tool.flashhub.dependencies]\n"
        '"a/b/c" = ">=1"\n'
        '"acme/good" = 1\n'
        '"acme/x" = "latest"\n'
        '"acme/y" = 0\n'
        "[tool.flashhub]\n"
        'variants = ["torch-cuda", "cu126", "../x"]\n'
    )
    result = flashhub("lock", tmp_path)
    assert result.returncode == 1
    for says in (
        "'a/b/c': invalid repo id",
        "'acme/x': 'latest' is not a version range",
        "'acme/y': version must be >= 1",
        "'cu126' is not a variant",
        "'../x' is not a variant name",
    ):
        assert says in result.stderr
    assert "acme/good" not in result.stderr
    assert not (tmp_path / LOCKFILE_NAME).exists()


def test_lock_with_the_prefix_doubled_in_the_cdn_url_says_so(project: Path, cdn: CdnServer) -> None:
    write_project(project, {REPO: ">=1"})
    result = flashhub("lock", project, env={"FLASHHUB_CDN_URL": f"{cdn.url}/kernels"})
    assert result.returncode == 1
    assert f"{cdn.url}/kernels/kernels/{REPO}/versions.json does not exist" in result.stderr
    assert "FLASHHUB_CDN_URL already ends with /kernels" in result.stderr


def test_lock_names_every_declared_kernel_the_cdn_cannot_resolve(
    project: Path, cdn: CdnServer
) -> None:
    write_kernel(cdn.root, "acme/other", 1, [UNIVERSAL])
    write_project(project, {"acme/absent": ">=1", "acme/other": 1, REPO: ">=7"})

    result = flashhub("lock", project)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "2 of the kernels" in result.stderr
    assert "acme/absent has no versions.json on the CDN" in result.stderr
    assert f"({cdn.url}/kernels/acme/absent/versions.json does not exist)" in result.stderr
    assert f"no published version of {REPO} matches '>=7' (published: 1, 2, 3)" in result.stderr
    assert "acme/other" not in result.stderr
    assert not lockfile_of(project).exists()


def test_lock_over_a_malformed_lock_warns_that_its_pins_went_unchecked(project: Path) -> None:
    lockfile_of(project).write_text("{not JSON")

    result = flashhub("lock", project)

    assert result.returncode == 0, result.stderr
    assert f"warning: {lockfile_of(project)}" in result.stderr
    assert "its pins were not checked against the new lock" in result.stderr
    assert read_lockfile(lockfile_of(project)).kernel(REPO).version == 2


def test_lock_that_cannot_write_the_lock_says_so_with_what_to_do(project: Path) -> None:
    lockfile_of(project).mkdir()

    result = flashhub("lock", project)

    assert result.returncode != 0
    assert f"error: cannot write {lockfile_of(project)}: Is a directory" in result.stderr
    assert f"make {project} writable" in result.stderr
    assert "Traceback" not in result.stderr
