"""Lock files: locking against a loopback CDN, pre-downloading, and loading what a lock pins.

What ``flashhub lock`` and ``flashhub download`` print, and their options, are tested in
test_cli_lock.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

import flashhub_kernels
from conftest import MakeCdn, MakeProject, import_in_child, python_after_mount, run_python
from flashhub_kernels import (
    LockedLayerRepository,
    get_kernel,
    get_locked_kernel,
    install_kernel,
    load_kernel,
)
from flashhub_kernels._cache.layout import Cache, VariantIndex
from flashhub_kernels._cache.mutex import index_mutex
from flashhub_kernels._cache.receipt import read_receipt
from flashhub_kernels._cache.staging import record_index
from flashhub_kernels._config import get_config
from flashhub_kernels._lockfiles.format import LOCKFILE_NAME, parse_lockfile, read_lockfile
from flashhub_kernels._lockfiles.pinning import lock_project
from flashhub_kernels._lockfiles.predownload import download_locked
from flashhub_kernels._lockfiles.project import exact_version, read_project
from flashhub_kernels._models.manifest import parse_metadata
from flashhub_kernels._models.names import RepoInfo
from flashhub_kernels._variants.compat import BuildTarget
from flashhub_kernels.errors import (
    CacheError,
    IntegrityError,
    LockedContentChangedWarning,
    LockfileError,
    LockMismatchError,
    NoCompatibleVariantError,
    OfflineError,
    RollbackError,
)
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.machines import CPU_ONLY_CHILD, python_310_without_tomli
from support.preloaded import run_code, start_code, stderr_into, written
from support.projects import (
    CUDA,
    PY_PKG,
    REPO,
    UNIVERSAL,
    change_published_file,
    entry,
    lockfile_of,
    publish_tensor_tricks,
    published_hash,
    skip_unless_this_checkout_builds,
    variant_dir,
    write_project,
)
from support.trees import cpu_variant, local_variant, write_kernel

LOCAL = local_variant()
CPU_LOCAL = cpu_variant()  # what a probed_project system loads
MODULE = "flashhub.acme.tensor_tricks.v2"
# The HTTP layer: the http(s) mirror, its requests session, and what they stand on (not
# http.client, which torch imports).
HTTP_MODULES = [
    "flashhub_kernels._network.http_mirror",
    "flashhub_kernels._network.session",
    "requests",
    "urllib3",
]


# -- locking ------------------------------------------------------------------------------


def test_lock_pins_newest_matching_version_and_every_variant(project: Path, cdn: CdnServer) -> None:
    lock = lock_project(project)

    locked = lock.kernel(REPO)
    assert (locked.version, locked.specifier) == (2, ">=1,<3")
    assert set(locked.variants) == {LOCAL, UNIVERSAL, CUDA}
    for variant, content_hash in locked.variants.items():
        manifest = (variant_dir(cdn.root, 2, variant) / "metadata.json").read_bytes()
        assert content_hash == parse_metadata(manifest).content_hash
    written = lockfile_of(project).read_bytes()
    document = json.loads(written)
    assert document["version"] == 1
    assert document["kernels"][0]["variants"][UNIVERSAL] == {"hash": locked.variants[UNIVERSAL]}
    assert read_lockfile(lockfile_of(project)).kernels == lock.kernels
    lock_project(project)
    assert lockfile_of(project).read_bytes() == written, "locking again gives the same bytes"


def test_lock_accepts_an_exact_version_and_any_version(project: Path) -> None:
    write_kernel(project.parent / "cdn", "acme/other", 4, [UNIVERSAL])
    write_project(project, {REPO: 1, "acme/other": ""})

    lock = lock_project(project)

    assert lock.kernel(REPO).version == 1
    assert lock.kernel("acme/other").specifier == ""
    assert lock.kernel("acme/other").version == 4


@pytest.mark.usefixtures("cpu_only_torch")
def test_an_exact_version_locks_without_versions_json_and_a_range_does_not(
    make_project: MakeProject, cdn: CdnServer
) -> None:
    """Without versions.json an exact pin names its version, which is locked as a load
    finds its variants (variants.json, or a probe); a range cannot be resolved."""
    plain = "acme/plain"
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL, CUDA], with_versions_json=False)
    write_kernel(
        cdn.root, plain, 1, [UNIVERSAL, CUDA], with_variants_json=False, with_versions_json=False
    )
    project = make_project({REPO: 1, plain: "==1"}, publish=False)

    lock = lock_project(project)

    listed, probed = lock.kernel(REPO), lock.kernel(plain)
    assert (listed.version, listed.specifier, listed.variants_source) == (1, "==1", "published")
    assert set(listed.variants) == {UNIVERSAL, CUDA}
    assert (probed.version, probed.specifier, probed.variants_source) == (1, "==1", "probed")
    assert list(probed.variants) == [UNIVERSAL]  # the one a probe finds for this system
    module = get_locked_kernel(plain, lockfile=lockfile_of(project))
    assert module.marker() == f"{plain}@v1:{UNIVERSAL}"

    write_project(project, {REPO: ">=1", plain: "==2"})
    with pytest.raises(LockfileError) as info:
        lock_project(project)
    assert f"{REPO} has no versions.json on the CDN" in info.value.message
    assert "so '>=1' cannot be resolved" in info.value.message
    assert f"{plain}@v2 has no variants.json" in info.value.message
    assert "the version may not exist" in info.value.message
    assert "an exact version (==2) locks without it" in (info.value.hint or "")


@pytest.mark.parametrize(
    ("specifier", "version"),
    [("==2", 2), ("== 2", 2), ("==2.0", 2), ("==02", 2)]
    + [(s, None) for s in (">=2", "==2,<3", "==2.*", "==2.1", "==2rc1", "==2.post0", "==0", "")],
)
def test_only_one_exact_version_is_an_exact_pin(specifier: str, version: int | None) -> None:
    assert exact_version(specifier) == version


def test_lock_range_without_match_lists_published_versions(project: Path) -> None:
    write_project(project, {REPO: ">=7"})
    with pytest.raises(LockfileError, match=r"matches '>=7' \(published: 1, 2, 3\)"):
        lock_project(project)
    assert not lockfile_of(project).exists()


DEEP = 100_000  # arrays nested this deep
_DECLARED = '[tool.flashhub.dependencies]\n"acme/x" = 1\n[tool.flashhub]\n'


@pytest.mark.parametrize(
    ("pyproject", "message"),
    [
        (None, "pyproject.toml does not exist"),
        ('[project]\nname = "x"\n', "declares no kernels"),
        ("[tool.flashhub.dependencies\n", "is not valid TOML"),
        ('[tool.flashhub.dependencies]\n"a/b/c" = ">=1"\n', "invalid repo id"),
        ('[tool.flashhub.dependencies]\n"acme/x" = "latest"\n', "is not a version range"),
        ('[tool.flashhub.dependencies]\n"acme/x" = 0\n', "version must be >= 1"),
        ('[tool.flashhub.dependencies]\n"acme/x" = [1]\n', "must be a string"),
        (_DECLARED + 'variants = "torch-cuda"\n', "variants must be a list"),
        (_DECLARED + 'variants = ["torch-cuda", "cu126"]\n', "'cu126' is not a variant"),
        (_DECLARED + 'variants = ["../x"]\n', "'../x' is not a variant name"),
        # what Python's TOML parser cannot take: a clear error, not ValueError or RecursionError
        ('[tool.flashhub.dependencies]\n"acme/x" = ' + "5" * 5000, "integer with too many"),
        ('[tool.flashhub.dependencies]\n"acme/x" = ' + "[" * DEEP + "]" * DEEP, "too deeply"),
    ],
)
def test_bad_dependency_tables_are_explained(
    tmp_path: Path, pyproject: str | None, message: str
) -> None:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    with pytest.raises(LockfileError, match=message):
        read_project(tmp_path)


_HASH = "sha256-" + "ab" * 32


def _chain_lock(length: int) -> bytes:
    """A lock whose kernel depends on a chain of ``length`` kernels, each on the next."""
    kernels = [
        {
            "repo_id": f"a/k{i}",
            "version": 1,
            "variants": {UNIVERSAL: {"hash": _HASH}},
            "kernel_depends": [{"repo_id": f"a/k{i + 1}", "version": 1}] if i < length else [],
        }
        for i in range(length + 1)
    ]
    return json.dumps({"version": 1, "kernels": kernels[:1], "dependencies": kernels[1:]}).encode()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"{", "is not valid JSON"),
        (b'"flashhub.lock"', "must hold a JSON object"),
        (b'{"kernels": []}', 'expected "version": 1'),
        (b'{"version": 2, "kernels": []}', "upgrade flashhub-kernels"),
        (b'{"version": 1}', 'list its kernels in "kernels"'),
        (b'{"version": 1, "kernels": [{"repo_id": "a/b/c"}]}', "invalid repo id"),
        (
            b'{"version": 1, "kernels": [{"repo_id": "a/b", "version": 1, "variants": {}}]}',
            "must map each variant",
        ),
        (
            b'{"version": 1, "kernels": [{"repo_id": "a/b", "version": 1,'
            b' "variants": {"x": {"hash": "md5-1"}}}]}',
            r'variant x: "hash" must be',
        ),
        (
            b'{"version": 1, "kernels": [{"repo_id": "a/b", "version": 1,'
            b' "variants": {"../up": {"hash": "' + _HASH.encode() + b'"}}}]}',
            "is not a variant name",
        ),
        (  # a variant's name, then a way out of the cache: the whole name must be one
            b'{"version": 1, "kernels": [{"repo_id": "a/b", "version": 1, "variants":'
            b' {"torch-universal/../../../../../../../tmp/escaped": {"hash": "'
            + _HASH.encode()
            + b'"}}}]}',
            r"'torch-universal/(\.\./)+tmp/escaped' is not a variant name",
        ),
        (
            b'{"version": 1, "kernels": [{"repo_id": "a/b", "version": 1, "variants_source":'
            b' "guessed", "variants": {"x": {"hash": "' + _HASH.encode() + b'"}}}]}',
            '"variants_source" must be "published" or "probed"',
        ),
        # what Python's JSON parser cannot take: a clear error, not ValueError or RecursionError
        (
            b'{"version": 1, "kernels": [{"repo_id": "a/b", "version": ' + b"5" * 5000 + b"}]}",
            "holds an integer with too many digits",
        ),
        (b'{"version": 1, "kernels": ' + b"[" * DEEP + b"]" * DEEP + b"}", "is nested too deeply"),
        (_chain_lock(5000), "kernel dependencies are nested too deeply"),
    ],
)
def test_malformed_lock_files_are_rejected(document: bytes, message: str) -> None:
    with pytest.raises(LockfileError, match=message) as info:
        parse_lockfile(document, source="demo.lock")
    assert "demo.lock" in str(info.value)


def test_duplicate_kernels_in_a_lock_are_rejected() -> None:
    kernel = {"repo_id": "a/b", "version": 1, "variants": {UNIVERSAL: {"hash": _HASH}}}
    document = json.dumps({"version": 1, "kernels": [kernel, kernel]}).encode()
    with pytest.raises(LockfileError, match="locks a/b twice"):
        parse_lockfile(document)


# -- download, then load without the server ----------------------------------------------------


def test_download_then_load_with_the_server_stopped(project: Path, cdn: CdnServer) -> None:
    lock = lock_project(project)

    results = download_locked(lock)

    assert [(r.variant, r.status) for r in results] == [(LOCAL, "downloaded")]
    assert results[0].path == entry(2, LOCAL)
    cdn.stop()
    module = load_kernel(REPO, lockfile=lockfile_of(project))
    assert module.marker() == f"{REPO}@v2:{LOCAL}"
    assert module is sys.modules[MODULE] is get_kernel(REPO, version=2)
    assert get_locked_kernel(REPO, lockfile=lockfile_of(project)) is module
    assert [r.status for r in download_locked(lock)] == ["cached"]


def test_download_locked_offline_reports_the_cache_or_names_what_is_missing(
    project: Path, cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = lock_project(project)
    download_locked(lock)
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    assert [(r.variant, r.status) for r in download_locked(lock)] == [(LOCAL, "cached")]
    with pytest.raises(OfflineError, match="not cached as locked") as raised:
        download_locked(lock, all_variants=True)
    assert f"{REPO}@v2 {UNIVERSAL}" in str(raised.value)
    assert cdn.requests == []


def test_load_kernel_in_a_new_offline_process_imports_no_http(
    project: Path, cdn: CdnServer
) -> None:
    download_locked(lock_project(project))
    cdn.stop()
    code = f"""
        import sys
        from flashhub_kernels import load_kernel
        module = load_kernel({REPO!r}, lockfile={str(lockfile_of(project))!r})
        import flashhub.acme.tensor_tricks.v2 as imported
        http = [m for m in {HTTP_MODULES!r} if m in sys.modules]
        print(module.marker(), imported is module, http)
    """
    output = run_python(textwrap.dedent(code), env={"FLASHHUB_OFFLINE": "1"}, torch_only=True)
    assert output.split() == [f"{REPO}@v2:{LOCAL}", "True", "[]"]


def test_a_warm_load_kernel_imports_no_network_module(project: Path, cdn: CdnServer) -> None:
    """Online too: the cache-only path never imports the download path."""
    download_locked(lock_project(project))
    cdn.clear_log()
    code = f"""
        import sys
        from flashhub_kernels import load_kernel
        module = load_kernel({REPO!r}, lockfile={str(lockfile_of(project))!r})
        network = sorted(
            name
            for name in sys.modules
            if name.split(".")[:2] == ["flashhub_kernels", "_network"]
            or name.split(".")[0] in ("requests", "urllib3")
        )
        print(module.marker(), network)
    """
    output = run_python(textwrap.dedent(code), torch_only=True)
    assert output.split() == [f"{REPO}@v2:{LOCAL}", "[]"]
    assert cdn.requests == []


def test_load_kernel_with_a_cold_cache_names_flashhub_download(
    project: Path, cdn: CdnServer
) -> None:
    lock_project(project)
    cdn.clear_log()

    with pytest.raises(LockfileError, match="flashhub download") as info:
        load_kernel(REPO, lockfile=lockfile_of(project))

    assert f"{REPO}@v2 (variant {LOCAL})" in str(info.value)
    assert cdn.gets() == []
    assert MODULE not in sys.modules


def test_a_locked_load_ignores_local_kernels_and_refuses_a_module_imported_from_it(
    project: Path, cdn: CdnServer, tmp_path: Path
) -> None:
    download_locked(lock_project(project))
    write_kernel(tmp_path / "devel", REPO, 9, [LOCAL])  # marker: acme/tensor-tricks@v9:...
    local_build = tmp_path / "devel" / "kernels" / REPO / "v9"
    env = {"FLASHHUB_OFFLINE": "1", "LOCAL_KERNELS": f"{REPO}={local_build}"}
    load = f"from flashhub_kernels import load_kernel; print(load_kernel({REPO!r}).marker())"
    assert run_python(load, env=env, cwd=project).split() == [f"{REPO}@v2:{LOCAL}"]

    code = f"""
        from flashhub_kernels import get_kernel, load_kernel
        from flashhub_kernels.errors import LockfileError
        print(get_kernel({REPO!r}, version=2).marker())  # LOCAL_KERNELS serves plain loads
        try:
            load_kernel({REPO!r})
        except LockfileError as exc:
            print(exc)
    """
    output = run_python(textwrap.dedent(code), env=env, cwd=project).splitlines()
    assert output[0] == f"{REPO}@v9:{LOCAL}"
    assert output[1].startswith(f"{MODULE} was imported in this process from {local_build}")
    assert "load the kernel from the lock before anything else imports it" in output[2]


def test_locked_loads_take_a_backend_as_hugging_face_load_kernel_does(
    project: Path, cdn: CdnServer
) -> None:
    lockfile = lockfile_of(project)
    lock_project(project)

    module = get_locked_kernel(REPO, lockfile=lockfile, backend="cpu")

    assert module.__name__ == f"{MODULE}_cpu"
    assert module.marker() == f"{REPO}@v2:{LOCAL if LOCAL == CPU_LOCAL else UNIVERSAL}"
    cdn.stop()
    assert load_kernel(REPO, lockfile=lockfile, backend="cpu") is module
    with pytest.raises(ValueError, match="tpu"):
        load_kernel(REPO, lockfile=lockfile, backend="tpu")


def test_get_locked_kernel_downloads_when_needed_then_stays_warm(
    project: Path, cdn: CdnServer
) -> None:
    lock_project(project)
    cdn.clear_log()

    module = get_locked_kernel(REPO, lockfile=lockfile_of(project))

    assert module.marker() == f"{REPO}@v2:{LOCAL}"
    assert cdn.gets(f"/build/{LOCAL}/metadata.json")
    assert not cdn.gets(f"/build/{UNIVERSAL}/metadata.json")
    cdn.clear_log()
    del sys.modules[MODULE]
    assert get_locked_kernel(REPO, lockfile=lockfile_of(project)).marker() == module.marker()
    assert cdn.gets() == []


def test_get_locked_kernel_offline_with_a_cold_cache_says_what_to_do(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_project(project)
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    with pytest.raises(LockfileError, match="unset FLASHHUB_OFFLINE, or run `flashhub download`"):
        get_locked_kernel(REPO, lockfile=lockfile_of(project))


# -- a CDN object changed after locking ----------------------------------------------------------


def test_changed_object_is_caught_by_get_locked_kernel_before_import(
    project: Path, cdn: CdnServer
) -> None:
    lock_project(project)
    change_published_file(cdn.root, 2, LOCAL)

    with pytest.raises(LockMismatchError) as info:
        get_locked_kernel(REPO, lockfile=lockfile_of(project))

    assert f"{REPO}@v2 variant {LOCAL}" in str(info.value)
    assert isinstance(info.value, ImportError)
    assert MODULE not in sys.modules
    assert not entry(2, LOCAL).exists(), "the changed bytes are not kept in the cache"


def test_changed_object_is_caught_by_download(project: Path, cdn: CdnServer) -> None:
    lock = lock_project(project)
    change_published_file(cdn.root, 2, UNIVERSAL)

    results = {r.variant: r for r in download_locked(lock, all_variants=True)}

    assert results[UNIVERSAL].status == "failed"
    assert f"{REPO}@v2 variant {UNIVERSAL}" in str(results[UNIVERSAL].error)
    assert {results[LOCAL].status, results[CUDA].status} == {"downloaded"}
    assert not entry(2, UNIVERSAL).exists()


def _republished_mirror(
    make_cdn: MakeCdn, cdn: CdnServer, root: Path, times: int = 1
) -> tuple[CdnServer, str]:
    """A mirror of ``cdn`` whose v2 this-system variant was published again with other
    bytes (``times`` over) after locking, and the content hash it then serves."""
    shutil.copytree(cdn.root, root)
    for _ in range(times):
        change_published_file(root, 2, LOCAL)
    manifest = (variant_dir(root, 2, LOCAL) / "metadata.json").read_bytes()
    return make_cdn(root), parse_metadata(manifest).content_hash


@pytest.mark.parametrize("load", ["get_locked_kernel", "download_locked"])
def test_a_locked_load_passes_over_a_mirror_that_serves_other_content(
    project: Path,
    cdn: CdnServer,
    make_cdn: MakeCdn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    load: str,
) -> None:
    lock = lock_project(project)
    stale, _ = _republished_mirror(make_cdn, cdn, tmp_path / "stale")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{stale.url},{cdn.url}")

    if load == "get_locked_kernel":
        get_locked_kernel(REPO, lockfile=lockfile_of(project))
    else:
        assert [r.status for r in download_locked(lock)] == ["downloaded"]

    ops = f"{PY_PKG}/_ops.py"
    assert (entry(2, LOCAL) / ops).read_bytes() == (
        variant_dir(cdn.root, 2, LOCAL) / ops
    ).read_bytes()
    # The stale mirror was asked for the manifest only; the files came from the other.
    assert stale.gets(f"/build/{LOCAL}/metadata.json")
    assert not stale.gets(f"/build/{LOCAL}/{ops}")
    assert len(cdn.gets(f"/build/{LOCAL}/{ops}")) == 1


def test_a_locked_load_that_no_mirror_serves_names_each_mirror_and_its_content(
    project: Path,
    cdn: CdnServer,
    make_cdn: MakeCdn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pinned = lock_project(project).kernel(REPO).variants[LOCAL]
    first, first_hash = _republished_mirror(make_cdn, cdn, tmp_path / "first")
    second, second_hash = _republished_mirror(make_cdn, cdn, tmp_path / "second", times=2)
    with_password = first.url_for("127.0.0.1", "bob:s3cret")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{with_password},{second.url}")

    with pytest.raises(LockMismatchError) as info:
        get_locked_kernel(REPO, lockfile=lockfile_of(project))

    message = str(info.value)
    assert f"{REPO}@v2 variant {LOCAL}: the lock pins {pinned}, but no CDN mirror" in message
    assert f"\n  {first.url}: serves content {first_hash}\n" in message
    assert f"\n  {second.url}: serves content {second_hash}\n" in message
    assert "s3cret" not in message
    assert not entry(2, LOCAL).exists()
    assert not first.gets(f"{PY_PKG}/_ops.py") and not second.gets(f"{PY_PKG}/_ops.py")


def test_a_relock_pins_changed_content_and_warns_naming_the_variant(
    project: Path, cdn: CdnServer
) -> None:
    first = lock_project(project)
    change_published_file(cdn.root, 2, LOCAL)

    with pytest.warns(LockedContentChangedWarning) as caught:
        second = lock_project(project)

    [warning] = caught
    assert f"{REPO}@v2: the CDN serves other content than" in str(warning.message)
    assert LOCAL in str(warning.message) and UNIVERSAL not in str(warning.message)
    assert warning.filename == __file__, "it points at the caller's line"
    assert second.kernels[REPO].variants[LOCAL] != first.kernels[REPO].variants[LOCAL]
    assert read_lockfile(lockfile_of(project)) == second


def test_a_relock_of_unchanged_content_warns_nothing(project: Path, cdn: CdnServer) -> None:
    lock_project(project)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lock_project(project)


def test_cached_copy_that_differs_from_the_lock_is_not_loaded_and_is_replaced(
    project: Path, cdn: CdnServer
) -> None:
    lock_project(project)
    original = (variant_dir(cdn.root, 2, LOCAL) / PY_PKG / "_ops.py").read_bytes()
    original_manifest = (variant_dir(cdn.root, 2, LOCAL) / "metadata.json").read_bytes()
    change_published_file(cdn.root, 2, LOCAL)
    install_kernel(REPO, version=2)  # a plain download caches the changed bytes
    (variant_dir(cdn.root, 2, LOCAL) / PY_PKG / "_ops.py").write_bytes(original)
    (variant_dir(cdn.root, 2, LOCAL) / "metadata.json").write_bytes(original_manifest)

    with pytest.raises(LockfileError, match="the lock pins sha256-"):
        load_kernel(REPO, lockfile=lockfile_of(project))
    module = get_locked_kernel(REPO, lockfile=lockfile_of(project))

    assert not hasattr(module, "CHANGED_AFTER_LOCKING")
    assert (entry(2, LOCAL) / PY_PKG / "_ops.py").read_bytes() == original


USE_UNTIL_RELEASED = """
import pathlib, sys, time
import flashhub.acme.tensor_tricks.v2 as k
ready, release = map(pathlib.Path, sys.argv[1:])
ready.write_text(k.__file__)
deadline = time.monotonic() + 60
while not release.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
"""


def test_a_locked_load_does_not_replace_a_differing_copy_a_running_process_uses(
    project: Path, cdn: CdnServer, tmp_path: Path
) -> None:
    # A process without the lock cached other bytes of the locked variant, and runs
    # them: the locked load must not swap the lock's bytes in beneath it, where its
    # next submodule import, or a reload, would run code it never verified.
    lock_project(project)
    original = (variant_dir(cdn.root, 2, LOCAL) / PY_PKG / "_ops.py").read_bytes()
    original_manifest = (variant_dir(cdn.root, 2, LOCAL) / "metadata.json").read_bytes()
    change_published_file(cdn.root, 2, LOCAL)
    ready, release = tmp_path / "ready", tmp_path / "release"
    user = start_code(USE_UNTIL_RELEASED, str(ready), str(release), env=dict(os.environ))
    while not ready.exists() and user.poll() is None:
        time.sleep(0.05)
    ops = entry(2, LOCAL) / PY_PKG / "_ops.py"
    changed = ops.read_bytes()
    (variant_dir(cdn.root, 2, LOCAL) / PY_PKG / "_ops.py").write_bytes(original)
    (variant_dir(cdn.root, 2, LOCAL) / "metadata.json").write_bytes(original_manifest)

    with pytest.raises(CacheError, match="a running process uses it") as info:
        get_locked_kernel(REPO, lockfile=lockfile_of(project))

    assert str(entry(2, LOCAL)) in str(info.value)
    assert ops.read_bytes() == changed, "the running process's files are as it verified them"
    assert MODULE not in sys.modules
    release.touch()
    assert user.wait(60) == 0
    module = get_locked_kernel(REPO, lockfile=lockfile_of(project))  # nobody uses it now
    assert not hasattr(module, "CHANGED_AFTER_LOCKING")
    assert ops.read_bytes() == original


# -- --all-variants --------------------------------------------------------------------------


# What the lock file argv[1] pins, downloaded as `flashhub download` does, or loaded.
DOWNLOAD_LOCKED = """
import sys
from pathlib import Path
from flashhub_kernels._lockfiles.format import read_lockfile
from flashhub_kernels._lockfiles.predownload import download_locked
print([result.status for result in download_locked(read_lockfile(Path(sys.argv[1])))])
"""
LOAD_LOCKED = """
import sys
from flashhub_kernels import load_kernel
print(load_kernel("acme/tensor-tricks", lockfile=sys.argv[1]).marker())
"""


@pytest.mark.parametrize(
    ("code", "printed"),
    [(DOWNLOAD_LOCKED, "['downloaded']"), (LOAD_LOCKED, f"{REPO}@v2:{LOCAL}")],
    ids=["download", "load_kernel"],
)
def test_a_locked_download_or_load_records_the_variant_list_under_the_index_mutex(
    project: Path, cdn: CdnServer, code: str, printed: str
) -> None:
    # Every writer of a version's variant index holds its mutex, so that what another
    # process records meanwhile is merged, not lost: the locked download or load waits
    # for the writer holding it, then adds the lock's list to what that one recorded.
    lock = lock_project(project)
    info = RepoInfo(REPO, 2)
    if code == LOAD_LOCKED:  # a cache with the entry but no index (a copy of one)
        download_locked(lock)
        (entry(2, LOCAL).parent / "variants-index.json").unlink()
    cache = Cache.from_config(get_config())
    found = VariantIndex(False, frozenset({CUDA}), targets={CUDA: BuildTarget("cuda", ("8.0",))})
    log = project.parent / "child.log"
    with index_mutex(cache, info):
        child = start_code(stderr_into(log) + code, str(lockfile_of(project)), env={**os.environ})
        waits = written(log, "waiting for another", child, timeout=120)
        assert f"choosing the variant of {info}" in waits, "never waited"
        record_index(cache, info, found)  # the other writer's findings
    out, _err = child.communicate(timeout=120)

    assert child.returncode == 0, log.read_text()
    assert out.strip() == printed
    recorded = cache.read_index(info)
    assert recorded is not None and recorded.complete
    assert recorded.present == {LOCAL, UNIVERSAL, CUDA}
    assert recorded.targets[CUDA] == found.targets[CUDA]


def test_all_variants_fetches_every_variant(project: Path, cdn: CdnServer) -> None:
    lock = lock_project(project)
    cdn.clear_log()

    results = download_locked(lock, all_variants=True)

    assert sorted((r.variant, r.status) for r in results) == sorted(
        (v, "downloaded") for v in (LOCAL, UNIVERSAL, CUDA)
    )
    for variant in (LOCAL, UNIVERSAL, CUDA):
        assert len(cdn.gets(f"/build/{variant}/{PY_PKG}/_ops.py")) == 1
        assert (entry(2, variant) / PY_PKG / "__init__.py").is_file()
    cdn.stop()
    assert load_kernel(REPO, lockfile=lockfile_of(project)).marker() == f"{REPO}@v2:{LOCAL}"


# -- a version without variants.json ---------------------------------------------------------

PROBED_MODULE = "flashhub.acme.tensor_tricks.v1"


@pytest.mark.parametrize(
    ("changed", "error", "named"),
    [
        ("metadata.json", LockMismatchError, f"{REPO}@v1 variant {CPU_LOCAL}"),
        ("file", IntegrityError, f"{CPU_LOCAL}/{PY_PKG}/_ops.py"),
    ],
)
def test_probed_lock_refuses_an_object_changed_after_locking(
    probed_project: Path, cdn: CdnServer, changed: str, error: type[Exception], named: str
) -> None:
    lock_project(probed_project)
    ops = variant_dir(cdn.root, 1, CPU_LOCAL) / PY_PKG / "_ops.py"
    if changed == "metadata.json":
        change_published_file(cdn.root, 1, CPU_LOCAL)  # the manifest lists the new digest
    else:
        ops.write_bytes(ops.read_bytes() + b"\nCHANGED_AFTER_LOCKING = True\n")

    with pytest.raises(error) as info:
        get_locked_kernel(REPO, lockfile=lockfile_of(probed_project))
    result = flashhub("download", probed_project)

    assert named in str(info.value)
    assert result.returncode == 1
    assert f"error: {REPO}@v1 {CPU_LOCAL}: " in result.stderr
    assert PROBED_MODULE not in sys.modules
    assert not entry(1, CPU_LOCAL).exists()


@pytest.mark.usefixtures("cpu_only_torch")
def test_probed_version_with_nothing_for_this_system_needs_a_named_variant(
    make_project: MakeProject, cdn: CdnServer
) -> None:
    write_kernel(cdn.root, REPO, 1, [CUDA], with_variants_json=False)
    project = make_project({REPO: 1}, publish=False)

    with pytest.raises(LockfileError, match="none of the variants this system can load") as info:
        lock_project(project)
    lock = lock_project(project, variants=[CUDA])

    assert "--variant NAME" in str(info.value)
    assert dict(lock.kernel(REPO).variants) == {CUDA: published_hash(cdn.root, CUDA)}
    with pytest.raises(NoCompatibleVariantError, match=f"- {CUDA}: built for cu126") as error:
        get_locked_kernel(REPO, lockfile=lockfile_of(project))
    assert "--variant NAME" in str(error.value)


def write_probed_lock(project: Path, cdn: CdnServer, variants: list[str]) -> Path:
    """A lock as `flashhub lock` writes it on a machine that probed only ``variants``."""
    kernel = {
        "repo_id": REPO,
        "specifier": "==1",
        "variants": {v: {"hash": published_hash(cdn.root, v)} for v in variants},
        "variants_source": "probed",
        "version": 1,
    }
    lockfile_of(project).write_text(json.dumps({"kernels": [kernel], "version": 1}))
    return lockfile_of(project)


def test_probed_lock_from_another_system_loads_its_best_locked_variant(
    probed_project: Path, cdn: CdnServer
) -> None:
    lockfile = write_probed_lock(probed_project, cdn, [UNIVERSAL, CUDA])

    module = get_locked_kernel(REPO, lockfile=lockfile)
    cdn.clear_log()
    del sys.modules[PROBED_MODULE]

    assert module.marker() == f"{REPO}@v1:{UNIVERSAL}", "the lock stands for the CDN"
    assert get_kernel(REPO, version=1).marker() == module.marker()
    assert cdn.requests == []


# `python -c CLI_AS_CPU_ONLY ARGS...`: the `flashhub` command, resolving kernels as
# `probed_project`'s CPU-only machine does.
CLI_AS_CPU_ONLY = (
    CPU_ONLY_CHILD
    + "import sys\nfrom flashhub_kernels.cli import main\nsys.exit(main(sys.argv[1:]))\n"
)


def test_a_probed_lock_lacking_this_systems_build_says_so_alike_on_every_path(
    probed_project: Path, cdn: CdnServer
) -> None:
    lockfile = lock_project(probed_project).source  # this system's build and torch-universal
    document = json.loads(Path(lockfile).read_text())
    del document["kernels"][0]["variants"][CPU_LOCAL]  # edited by hand, or merged wrong
    Path(lockfile).write_text(json.dumps(document))
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{CPU_LOCAL}"  # probed: cached
    del sys.modules[PROBED_MODULE]
    index = entry(1, CPU_LOCAL).parent / "variants-index.json"
    recorded = index.read_bytes()
    load = f"import flashhub_kernels as fk\nfk.load_kernel({REPO!r}, lockfile={lockfile!r})"

    with pytest.raises(LockfileError) as info:
        get_locked_kernel(REPO, lockfile=lockfile)
    loaded = run_code(CPU_ONLY_CHILD + load, env=dict(os.environ))
    downloaded = run_code(CLI_AS_CPU_ONLY, "download", str(probed_project), env=dict(os.environ))
    offline = {**os.environ, "FLASHHUB_OFFLINE": "1"}
    confirmed = run_code(CLI_AS_CPU_ONLY, "lock", str(probed_project), env=offline)

    said = (
        f"{REPO}@v1 publishes {CPU_LOCAL}, which the lock does not pin: without variants.json, "
        "a lock holds the variants `flashhub lock` found where it ran"
    )
    assert said in str(info.value)
    assert "re-run `flashhub lock` on this machine" in str(info.value)
    assert loaded.returncode == downloaded.returncode == confirmed.returncode == 1
    for printed in (loaded.stderr, downloaded.stderr):
        assert said in printed
        assert "re-run `flashhub lock` on this machine" in printed
    assert said in confirmed.stderr
    assert "run `flashhub lock` with network access" in confirmed.stderr
    assert not entry(1, UNIVERSAL).exists(), "nothing was downloaded for a lock it refused"
    assert index.read_bytes() == recorded, "a refused lock records nothing of it"
    assert PROBED_MODULE not in sys.modules

    lock_project(probed_project)  # as the hint says
    assert get_locked_kernel(REPO, lockfile=lockfile).marker() == f"{REPO}@v1:{CPU_LOCAL}"


def test_a_probed_kernel_loads_from_its_lock_in_a_read_only_baked_cache(
    probed_project: Path, cdn: CdnServer, cache_dir: Path
) -> None:
    # As docs/hosting.md bakes an image: every locked variant downloaded, then loaded
    # offline from the cache on a read-only mount. Without variants.json the lock adds
    # what the cache does not record for this system (the names probed before its
    # variant): the load checks with it, and writes nothing.
    download_locked(lock_project(probed_project), all_variants=True)
    cdn.stop()
    lockfile = str(lockfile_of(probed_project))
    load = f"import flashhub_kernels as fk\nk = fk.load_kernel({REPO!r}, lockfile={lockfile!r})"

    assert offline_in_read_only_cache(cache_dir, f"{load}\nprint(k.marker())") == (
        f"{REPO}@v1:{CPU_LOCAL}"
    )


def test_a_probed_kernel_imports_from_a_read_only_baked_cache_once_downloaded_for_the_node(
    probed_project: Path, cdn: CdnServer, cache_dir: Path
) -> None:
    # The import by name, as docs/hosting.md says: after --all-variants, `flashhub
    # download` for the node's system records the names probed before its variant.
    lock = lock_project(probed_project)
    download_locked(lock, all_variants=True)
    download_locked(lock)  # this system's, as `flashhub download --system NAME` names it
    cdn.stop()

    output = offline_in_read_only_cache(
        cache_dir, f"import {PROBED_MODULE} as k; print(k.marker())"
    )
    assert output == f"{REPO}@v1:{CPU_LOCAL}"


def offline_in_read_only_cache(cache_dir: Path, code: str) -> str:
    """What ``code`` prints, run offline as a CPU-only machine, the cache mounted read-only."""
    read_only = f"mount --bind {cache_dir} {cache_dir} && mount -o remount,ro,bind {cache_dir}"
    result = python_after_mount(
        read_only, CPU_ONLY_CHILD + code, env={**os.environ, "FLASHHUB_OFFLINE": "1"}
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_a_lock_without_variants_source_is_a_published_one(project: Path) -> None:
    lock = lock_project(project)
    document = json.loads(lockfile_of(project).read_text())

    assert "variants_source" not in document["kernels"][0]
    assert not lock.kernel(REPO).probed
    document["kernels"][0]["variants_source"] = "published"
    assert parse_lockfile(json.dumps(document).encode()).kernels == lock.kernels


# -- finding the lock -------------------------------------------------------------------------


def test_lock_shipped_as_package_data_is_found_from_the_calling_package(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    download_locked(lock_project(project))
    package = tmp_path / "site" / "lockedapp"
    package.mkdir(parents=True)
    (package / LOCKFILE_NAME).write_bytes(lockfile_of(project).read_bytes())
    (package / "__init__.py").write_text(
        "from flashhub_kernels import LockedLayerRepository, load_kernel\n"
        f"REPOSITORY = LockedLayerRepository({REPO!r}, 'Double')\n"
        f"def load():\n    return load_kernel({REPO!r})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.chdir(tmp_path)  # no flashhub.lock here: it must come from the package
    monkeypatch.delitem(sys.modules, "lockedapp", raising=False)
    import lockedapp  # type: ignore[import-not-found]

    assert lockedapp.load().marker() == f"{REPO}@v2:{LOCAL}"
    repository = lockedapp.REPOSITORY
    assert (repository.repo_id, repository.layer_name) == (REPO, "Double")
    assert repository.load_kernel() is sys.modules[MODULE]
    with pytest.raises(LockfileError, match=r"no flashhub\.lock found"):
        load_kernel(REPO)  # called from this test module: no package lock, none in cwd


def test_a_lock_in_a_distributions_metadata_that_is_not_utf8_is_a_lockfile_error(
    project: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    (site / "lockedapp").mkdir(parents=True)
    (site / "lockedapp" / "__init__.py").write_text(
        f"from flashhub_kernels import load_kernel\nload_kernel({REPO!r})\n"
    )
    dist_info = site / "lockedapp-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: lockedapp\nVersion: 1.0\n")
    (dist_info / "top_level.txt").write_text("lockedapp\n")
    lock_project(project)
    lock = lockfile_of(project).read_bytes()
    (dist_info / LOCKFILE_NAME).write_bytes(lock.replace(b"{", b'{"note": "caf\xe9",', 1))
    raised, printed = import_in_child("lockedapp", first=on_path(site))

    assert raised is LockfileError, printed
    assert "flashhub.lock in the metadata of lockedapp is not valid JSON" in printed
    assert "UnicodeDecodeError" not in printed
    assert "pip install --force-reinstall lockedapp" in printed


def on_path(site: Path) -> str:
    """Code that, run first in a child, puts ``site`` on ``sys.path`` where PYTHONPATH
    would have put it at the child's start: after the script's directory."""
    return f"import sys\nsys.path.insert(1, {str(site)!r})\n"


ROOT = Path(__file__).resolve().parents[1]
BUILD_SYSTEM = (
    '[build-system]\nrequires = ["flashhub-kernels", "setuptools"]\n'
    'build-backend = "setuptools.build_meta"\n'
)


def _pip_install(source: Path, target: Path, *, pythonpath: Path | None = None) -> None:
    """``pip install --target target source`` from local disk, building ``source`` with the
    setuptools installed here and the distributions under ``pythonpath``."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    command += ["--no-build-isolation", "--target", str(target), str(source)]
    subprocess.run(command, env=env, check=True, capture_output=True, timeout=120)


@pytest.fixture
def installed_flashhub(tmp_path: Path) -> Path:
    """This checkout's flashhub-kernels installed as a distribution (entry points and all),
    for builds that put it on their PYTHONPATH."""
    skip_unless_this_checkout_builds()
    source = tmp_path / "flashhub-source"
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    _pip_install(source, tmp_path / "flashhub-installed")
    return tmp_path / "flashhub-installed"


def test_a_lock_installed_with_its_project_is_found_from_its_package(
    project: Path, tmp_path: Path, installed_flashhub: Path
) -> None:
    """As Hugging Face kernels' locking docs have it: `flashhub lock`, `pip install .`, then a
    locked load from anywhere; building again without the lock leaves no copy behind, not
    even in the metadata the first build left in the project."""
    (project / "pyproject.toml").write_text(BUILD_SYSTEM + (project / "pyproject.toml").read_text())
    (project / "lockedapp").mkdir()
    (project / "lockedapp" / "__init__.py").write_text(
        f"from flashhub_kernels import get_locked_kernel\n"
        f"def load():\n    return get_locked_kernel({REPO!r})\n"
    )
    lock_project(project)
    site = tmp_path / "site"
    _pip_install(project, site, pythonpath=installed_flashhub)

    shipped = site / "demo-1.0.dist-info" / LOCKFILE_NAME
    assert shipped.read_bytes() == lockfile_of(project).read_bytes()
    elsewhere = tmp_path / "elsewhere"  # no flashhub.lock here: it must come from the package
    elsewhere.mkdir()
    code = on_path(site) + "import lockedapp; print(lockedapp.load().marker())"
    out = run_python(code, cwd=elsewhere)
    assert out.strip() == f"{REPO}@v2:{LOCAL}"

    left = project / "demo.egg-info" / LOCKFILE_NAME  # the build's metadata in the project
    assert left.exists()
    lockfile_of(project).unlink()
    _pip_install(project, tmp_path / "again", pythonpath=installed_flashhub)
    assert not (tmp_path / "again" / "demo-1.0.dist-info" / LOCKFILE_NAME).exists()
    assert not left.exists()


def _write_egg_lockfile(metadata: Path) -> None:
    """What a setuptools build of the project in the working directory runs of flashhub's
    writer, with ``metadata`` its ``.egg-info``."""
    from setuptools.command.egg_info import egg_info
    from setuptools.dist import Distribution

    from flashhub_kernels._lockfiles.egg_lockfile import write_egg_lockfile

    write_egg_lockfile(egg_info(Distribution()), LOCKFILE_NAME, str(metadata / LOCKFILE_NAME))


@pytest.mark.parametrize(
    "pyproject",
    [None, '[project]\nname = "demo"\n', "[tool.flashhub.dependencies\n"],
    ids=["no pyproject.toml", "no kernels declared", "not TOML"],
)
def test_a_build_of_a_project_that_declares_no_kernels_gets_no_lock(
    pyproject: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pyproject is not None:
        (tmp_path / "pyproject.toml").write_text(pyproject)
    (tmp_path / LOCKFILE_NAME).write_text("a lock of something else")
    metadata = tmp_path / "demo.egg-info"
    metadata.mkdir()
    monkeypatch.chdir(tmp_path)

    _write_egg_lockfile(metadata)

    assert list(metadata.iterdir()) == []


def test_a_build_with_a_malformed_lock_fails_naming_it(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lockfile_of(project).write_text('{"version": 1}')
    _refused_build(project, monkeypatch, f"{re.escape(str(lockfile_of(project)))} must list")


def _refused_build(project: Path, monkeypatch: pytest.MonkeyPatch, match: str) -> None:
    """Run the writer as a build of ``project`` does: it must stop with a ``LockfileError``
    matching ``match``, having written nothing into the metadata."""
    metadata = project / "demo.egg-info"
    metadata.mkdir()
    monkeypatch.chdir(project)
    with pytest.raises(LockfileError, match=match):
        _write_egg_lockfile(metadata)
    assert list(metadata.iterdir()) == []


@pytest.mark.parametrize("lock", ["utf-16", "directory"])
def test_a_build_with_a_lock_no_install_can_read_fails_naming_it(
    lock: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An installed package's metadata holds its lock as UTF-8 text, so a UTF-16 lock (which
    JSON alone would take) or a directory in its place stops the build, named."""
    lock_project(project)
    path = lockfile_of(project)
    if lock == "directory":
        path.unlink()
        path.mkdir()
    else:
        path.write_bytes(path.read_text().encode("utf-16"))
    _refused_build(project, monkeypatch, f"cannot ship {re.escape(str(path))}")


# The writer as a setuptools build on Python 3.10 runs it; setuptools.extern is made
# unimportable for "nowhere": a setuptools carrying no TOML reader where the writer looks.
WRITER_ON_PYTHON_310 = """
import logging, sys
import setuptools
from setuptools.command.egg_info import egg_info
from setuptools.dist import Distribution
if sys.argv[1] == "nowhere":
    sys.modules["setuptools.extern"] = None
from flashhub_kernels._lockfiles.egg_lockfile import write_egg_lockfile
write_egg_lockfile(egg_info(Distribution()), "flashhub.lock", "demo.egg-info/flashhub.lock")
"""


@pytest.mark.parametrize("reader", ["setuptools", "nowhere"])
def test_a_build_on_python_310_without_tomli_ships_the_lock_or_says_why_not(
    project: Path, reader: str
) -> None:
    python = python_310_without_tomli()
    if python is None:
        pytest.skip("needs a Python 3.10 without tomli (on PATH, or installed by pyenv)")
    lock_project(project)
    (project / "demo.egg-info").mkdir()
    src = Path(flashhub_kernels.__file__).parents[1]
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = subprocess.run(
        [python, "-c", WRITER_ON_PYTHON_310, reader],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    shipped = project / "demo.egg-info" / LOCKFILE_NAME
    if reader == "setuptools":
        assert shipped.read_bytes() == lockfile_of(project).read_bytes()
    else:
        assert not shipped.exists()
        assert "needs the 'tomli' package: the package ships no lock" in result.stderr
        assert "pip install tomli" in result.stderr


def test_the_lock_writer_a_build_runs_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "import flashhub_kernels._lockfiles.egg_lockfile\n"
        "print(sorted({'torch', 'requests', 'packaging', 'filelock'} & set(sys.modules)))\n"
    )
    assert run_python(code, fresh=True).strip() == "[]"


def test_lock_in_the_working_directory_is_found(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    download_locked(lock_project(project))
    monkeypatch.chdir(project)
    assert load_kernel(REPO).marker() == f"{REPO}@v2:{LOCAL}"
    with pytest.raises(LockfileError, match="acme/absent is not locked in"):
        load_kernel("acme/absent")


def test_no_lock_and_a_kernel_it_does_not_lock_are_value_errors_too(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hugging Face kernels raises ValueError for both: code that catches it still does."""
    monkeypatch.chdir(project.parent)
    with pytest.raises(ValueError, match=r"no flashhub\.lock found"):
        load_kernel(REPO)
    with pytest.raises(ValueError, match=r"no flashhub\.lock found"):
        get_locked_kernel(REPO)
    lock_project(project)
    with pytest.raises(ValueError, match="acme/absent is not locked in"):
        load_kernel("acme/absent", lockfile=lockfile_of(project))


# kernels.lock as Hugging Face kernels 0.19 writes it, and as its releases before 0.12 did.
_COMMIT = "0123456789abcdef" * 2 + "01234567"
_HF_LOCKS = [
    [{"dependency": {"repo-id": REPO, "version": 2}, "lock": {"commit": _COMMIT}}],
    [
        {
            "repo_id": REPO,
            "sha": _COMMIT,
            "variants": {UNIVERSAL: {"hash": _HASH, "hash_type": "git_lfs_concat"}},
        }
    ],
]


@pytest.mark.parametrize("document", _HF_LOCKS)
def test_a_hugging_face_kernels_lock_is_named_with_what_to_do(
    tmp_path: Path, document: list[object]
) -> None:
    path = tmp_path / "kernels.lock"
    path.write_text(json.dumps(document))
    with pytest.raises(LockfileError) as info:
        load_kernel(REPO, lockfile=path)
    assert f"{path} is a Hugging Face kernels lock file" in info.value.message
    assert info.value.hint is not None and "run `flashhub lock`" in info.value.hint
    assert "regenerate it" not in info.value.hint


def test_no_lock_beside_a_hugging_face_kernels_lock_says_it_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LockfileError) as alone:
        load_kernel(REPO)
    (tmp_path / "kernels.lock").write_text(json.dumps(_HF_LOCKS[0]))
    with pytest.raises(LockfileError) as beside:
        load_kernel(REPO)

    assert "Hugging Face" not in (alone.value.hint or "")
    assert beside.value.message == alone.value.message  # no flashhub.lock found
    assert (beside.value.hint or "").startswith(
        f"{tmp_path / 'kernels.lock'} is Hugging Face kernels' lock, which flashhub does not "
        "read (`flashhub lock` reads the project's [tool.kernels.dependencies] in "
        "pyproject.toml); run `flashhub lock`"
    )


def test_a_lockfile_argument_that_is_a_directory_is_a_lockfile_error(tmp_path: Path) -> None:
    with pytest.raises(LockfileError, match="cannot read") as info:
        load_kernel(REPO, lockfile=tmp_path)
    assert "pass the path of a flashhub.lock file" in str(info.value)


def test_locked_layer_repository_validates_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="invalid repo id"):
        LockedLayerRepository("nope", "Double")
    with pytest.raises(ValueError, match="layer_name"):
        LockedLayerRepository(REPO, "not a name")
    repository = LockedLayerRepository(REPO, "Double", lockfile=tmp_path / "x.lock")
    assert repository == LockedLayerRepository(REPO, "Double", lockfile=tmp_path / "x.lock")
    with pytest.raises(LockfileError, match=r"x\.lock does not exist"):
        repository.load_kernel()


# -- install_kernel ---------------------------------------------------------------------------


def test_install_kernel_downloads_without_importing(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    path = install_kernel(REPO, revision="v2")
    newest = install_kernel(REPO)

    assert path == entry(2, LOCAL)
    assert (path / PY_PKG / "__init__.py").is_file()
    assert read_receipt(path) is not None
    assert newest == entry(3, UNIVERSAL)
    assert not [name for name in sys.modules if name.startswith("flashhub.acme")]


def test_install_kernel_never_takes_an_older_versions_json_for_the_newest(
    cdn: CdnServer, tmp_path: Path
) -> None:
    publish_tensor_tricks(cdn.root)
    versions = cdn.root / "kernels" / REPO / "versions.json"
    assert install_kernel(REPO) == entry(3, UNIVERSAL)
    record = get_config().cache_dir / "versions-seen.json"
    assert json.loads(record.read_text()) == {REPO: 3}

    versions.write_text("[1, 2]")  # the versions.json of the v2 days, served again
    cdn.clear_log()
    with pytest.raises(RollbackError) as info:
        install_kernel(REPO)
    assert "lists v2 as the newest version, but this machine has seen v3" in str(info.value)
    assert str(record) in str(info.value)
    assert cdn.gets() == [f"/kernels/{REPO}/versions.json"], "nothing of v2 was fetched"
    assert not entry(2, LOCAL).exists()
    result = flashhub("get", REPO)
    assert result.returncode == 1 and "pass --version N" in result.stderr, result.stderr
    with pytest.raises(RollbackError):
        flashhub_kernels.get_kernel_variants(REPO)
    assert json.loads(record.read_text()) == {REPO: 3}, "the record never goes down"

    assert install_kernel(REPO, version=2) == entry(2, LOCAL), "a named version is as asked"
    cdn.clear_log()
    code = "import flashhub.acme.tensor_tricks.v2, json, sys; print(json.dumps(list(sys.modules)))"
    modules = json.loads(run_python(code))
    assert cdn.requests == []
    assert "flashhub_kernels._cache.versions_seen" not in modules, (
        "warm loads never read the record"
    )


def test_a_mirror_behind_gives_way_to_one_that_lists_the_newest(
    project: Path,
    cdn: CdnServer,
    make_cdn: MakeCdn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert install_kernel(REPO) == entry(3, UNIVERSAL)  # this machine has seen v3 listed
    # An edge first in FLASHHUB_CDN_URL still serves the versions.json of the v2 days.
    shutil.copytree(cdn.root, tmp_path / "edge")
    (tmp_path / "edge" / "kernels" / REPO / "versions.json").write_text("[1, 2]")
    edge = make_cdn(tmp_path / "edge")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{edge.url},{cdn.url}")
    versions = f"/kernels/{REPO}/versions.json"
    cdn.clear_log()
    assert install_kernel(REPO) == entry(3, UNIVERSAL)
    assert edge.gets() == [versions] and cdn.gets() == [versions]
    result = flashhub("get", REPO)
    assert result.returncode == 0 and "/v3/" in result.stdout, result.stderr
    assert lock_project(project).kernels[REPO].version == 2

    # Every mirror behind: refused, naming each mirror and what it listed.
    (cdn.root / "kernels" / REPO / "versions.json").write_text("[1, 2]")
    with pytest.raises(RollbackError) as info:
        install_kernel(REPO)
    message = str(info.value)
    assert f"127.0.0.1:{edge.port}" in message and f"127.0.0.1:{cdn.port}" in message
    assert message.count("lists v2 as the newest version, but this machine has seen v3") == 2
    assert json.loads((get_config().cache_dir / "versions-seen.json").read_text()) == {REPO: 3}
    result = flashhub("get", REPO)
    assert result.returncode == 1 and "pass --version N" in result.stderr, result.stderr


def test_the_versions_record_of_an_untrusted_cache_is_not_used(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    cache_dir = get_config().cache_dir
    cache_dir.mkdir(mode=0o700)
    record = cache_dir / "versions-seen.json"
    cache_dir.chmod(0o770)  # anyone in the group could have written the record

    record.write_text(json.dumps({REPO: 1}))
    assert flashhub_kernels.get_kernel_variants(REPO)
    assert json.loads(record.read_text()) == {REPO: 1}, "not written: v3 is not recorded"
    record.write_text(json.dumps({REPO: 9}))
    assert flashhub_kernels.get_kernel_variants(REPO), "not read: v3 is taken as the newest"

    cache_dir.chmod(0o700)  # trusted, the same record is taken at its word
    with pytest.raises(RollbackError, match="has seen v9"):
        flashhub_kernels.get_kernel_variants(REPO)


def test_lock_project_refuses_a_downgrade_unless_allowed(
    project: Path, cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert lock_project(project).kernels[REPO].version == 2
    locked = lockfile_of(project).read_bytes()
    versions = cdn.root / "kernels" / REPO / "versions.json"
    versions.write_text("[1]")  # an old versions.json, served again

    with pytest.raises(RollbackError, match="this machine has seen v3"):
        lock_project(project)
    monkeypatch.setenv("FLASHHUB_CACHE_DIR", str(tmp_path / "fresh-cache"))  # never saw v2
    with pytest.raises(RollbackError, match=f"would move {REPO} from v2 down to v1") as info:
        lock_project(project)
    assert info.value.hint is not None and "allow_downgrade=True" in info.value.hint
    assert lockfile_of(project).read_bytes() == locked, "nothing was written"

    assert lock_project(project, allow_downgrade=True).kernels[REPO].version == 1
    assert read_lockfile(lockfile_of(project)).kernels[REPO].version == 1

    # A range that no longer admits the locked version moves the pin down as asked.
    versions.write_text("[1, 2, 3]")
    assert lock_project(project).kernels[REPO].version == 2
    write_project(project, {REPO: "==1"})
    assert lock_project(project).kernels[REPO].version == 1


def test_lock_functions_are_public() -> None:
    for name in ("load_kernel", "get_locked_kernel", "install_kernel", "LockedLayerRepository"):
        assert name in flashhub_kernels.__all__
        assert getattr(flashhub_kernels, name).__doc__


def test_a_cache_index_that_contradicts_the_lock_is_not_trusted(
    project: Path, cdn: CdnServer
) -> None:
    download_locked(lock_project(project))
    index = entry(2, LOCAL).parent / "variants-index.json"
    index.write_text(json.dumps({"complete": True, "present": [UNIVERSAL], "absent": []}))
    cdn.clear_log()

    with pytest.raises(LockfileError, match="variant list for acme/tensor-tricks@v2 disagrees"):
        load_kernel(REPO, lockfile=lockfile_of(project))

    assert MODULE not in sys.modules
    assert cdn.gets() == []


def test_a_relock_refuses_a_lock_in_a_newer_format_and_replaces_a_malformed_one_warning(
    project: Path,
) -> None:
    lock_project(project)
    newer = lockfile_of(project).read_text().replace('"version": 1\n}', '"version": 2\n}')
    lockfile_of(project).write_text(newer)

    with pytest.raises(LockfileError, match=r"has format version 2;.*nothing was written") as e:
        lock_project(project)
    assert e.value.hint == "upgrade flashhub-kernels, and lock with that"
    assert lockfile_of(project).read_text() == newer

    lockfile_of(project).write_text("{not JSON")
    with pytest.warns(UserWarning, match="its pins were not checked") as caught:
        lock = lock_project(project)
    assert caught[0].filename == __file__, "it points at the caller's line"
    assert read_lockfile(lockfile_of(project)) == lock


def test_an_unchanged_lock_is_not_written_and_one_that_cannot_be_is_a_lockfile_error(
    project: Path,
) -> None:
    lock_project(project)
    written = lockfile_of(project).stat()

    lock_project(project)  # a read-only project, up to date, locks as well

    assert lockfile_of(project).stat().st_ino == written.st_ino, "the lock was not replaced"
    lockfile_of(project).unlink()
    lockfile_of(project).mkdir()  # what stops a write as root too
    with pytest.raises(
        LockfileError, match=f"cannot write {re.escape(str(lockfile_of(project)))}: "
    ) as e:
        lock_project(project)
    assert (
        e.value.hint
        == f"make {project} writable (or remove what is at {lockfile_of(project)}), and lock again"
    )
