"""Choosing by device arch, for this machine and for another (``--system``), end to end
through the loopback CDN: kernels whose metadata.json is laid out as HF's builder writes
it, the trace of what was passed over, a cache filled on a CPU node and used offline by
the GPU node's own loads, and the version advised when one has no build for a system."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import flashhub_kernels as fk
from conftest import MakeCdn, run_python
from flashhub_kernels._lockfiles.pinning import lock_project
from flashhub_kernels._signing.signing_keys import generate_signing_key, write_key_pair
from flashhub_kernels._variants.system import SystemInfo, detect_system
from flashhub_kernels.errors import NoCompatibleVariantError
from support.cdn_server import CdnServer
from support.cli_runner import OFFLINE, flashhub, ok_json
from support.machines import run_as
from support.projects import write_project
from support.trees import b64sha256, kernel_files, local_variant, write_variant

REPO, PY_PKG = "acme/relu", "relu"
SYSTEM = "torch213-cxx11-cu126-x86_64-linux"  # the GPU nodes' torch, as a build name
CU126 = SYSTEM  # built for CUDA archs 8.0 and 8.6
CU124 = "torch213-cxx11-cu124-x86_64-linux"  # built for 9.0a: an H100 only
UNIVERSAL = "torch-universal"
CPU_BUILD = "torch213-cxx11-cpu-x86_64-linux"
BUILDS: dict[str, list[str] | None] = {CU126: ["8.0", "8.6"], CU124: ["9.0a"], UNIVERSAL: None}


def gpu_node(capability: tuple[int, int]) -> SystemInfo:
    return SystemInfo((2, 13), True, "cuda", "cu126", "x86_64", "linux", capability)


def publish(
    root: Path, version: int, builds: dict[str, list[str] | None], *, listed: bool = True
) -> None:
    """``REPO`` at ``version`` with ``builds`` (variant -> CUDA archs, ``None``: no backend),
    each ``metadata.json`` as HF's kernel-builder writes it; ``listed``: a variants.json."""
    for variant, archs in builds.items():
        files = kernel_files(PY_PKG, f"{REPO}@v{version}:{variant}")
        metadata: dict[str, object] = {
            "name": "relu",
            "id": f"_relu_{variant.replace('-', '_')}",
            "version": version,
            "license": "Apache-2.0",
            "python-depends": [],
            "digest": {"files": {path: b64sha256(data) for path, data in sorted(files.items())}},
        }
        if archs is not None:
            metadata["backend"] = {"type": "cuda", "archs": archs}
        write_variant(root, REPO, version, variant, files, manifest=metadata)
    repo_dir = root / "kernels" / REPO
    if listed:
        (repo_dir / f"v{version}" / "variants.json").write_text(json.dumps(sorted(builds)))
    versions = repo_dir / "versions.json"
    known = json.loads(versions.read_text()) if versions.exists() else []
    versions.write_text(json.dumps(sorted({*known, version})))


def cached_variants(cache_dir: Path, version: int = 1) -> list[str]:
    version_dir = cache_dir / "kernels" / REPO / f"v{version}"
    return sorted(p.name for p in version_dir.iterdir() if p.is_dir() and p.name[0] != ".")


def as_gpu_node(capability: tuple[int, int], code: str) -> str:
    """Python code that resolves kernels as a GPU node of ``capability`` would, then ``code``.
    The node sees a device of its own: another node, on another boot, would see another
    (what the cache's import table reads the device from)."""
    return (
        "import os\n"
        f"os.environ['CUDA_VISIBLE_DEVICES'] = 'GPU-node-{capability[0]}{capability[1]}'\n"
        "import flashhub_kernels._variants.system as system\n"
        "from flashhub_kernels._variants.system import SystemInfo\n"
        "node = SystemInfo((2, 13), True, 'cuda', 'cu126', 'x86_64', 'linux', "
        f"{capability!r})\n"
        "system.detect_system = lambda: node\n" + code
    )


# -- flashhub variants --system ----------------------------------------------------------------


def test_variants_for_another_machine_says_which_build_it_passes_over(cdn: CdnServer) -> None:
    publish(cdn.root, 1, BUILDS)
    args = ["variants", REPO, "--version", "1", "--system", SYSTEM]
    result = flashhub(*args, "--cuda-capability", "9.0")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (
        f"{REPO}@v1 on torch 2.13 (cxx11), cu126, x86_64-linux, CUDA capability 9.0:"
    )
    assert f"  + {CU124}: compatible" in lines
    assert f"  - {CU126}: built for CUDA archs 8.0, 8.6; this device is 9.0" in lines
    assert lines[-1] == f"chosen: {CU124}"

    h200_next = ok_json(flashhub(*args, "--cuda-capability", "9.1", "--json"))
    reasons = {v["variant"]: v["reason"] for v in h200_next["variants"]}
    assert h200_next["chosen"] == UNIVERSAL
    assert reasons[CU124] == "built for CUDA archs 9.0a; this device is 9.1"
    assert reasons[UNIVERSAL] is None

    unknown_device = ok_json(flashhub(*args, "--json"))  # the archs cannot be checked
    assert unknown_device["chosen"] == CU126 and "capability" not in unknown_device["system"]


def test_variants_for_another_machine_offline_reads_what_the_cache_recorded(
    cdn: CdnServer,
) -> None:
    publish(cdn.root, 1, BUILDS)
    machine = ["--version", "1", "--system", SYSTEM, "--cuda-capability", "9.1"]
    assert flashhub("get", REPO, *machine).returncode == 0  # records what it passed over
    cdn.clear_log()
    offline = ok_json(flashhub("variants", REPO, *machine, "--json", env=OFFLINE))
    assert offline["chosen"] == UNIVERSAL and cdn.gets() == []
    reasons = {v["variant"]: v["reason"] for v in offline["variants"]}
    assert reasons[CU126] == "built for CUDA archs 8.0, 8.6; this device is 9.1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--system", "torch-universal"], "exact build"),
        (["--system", "torch213-cxx11-cu126"], "not a variant name: give the exact build"),
        (["--system", "bogus"], "e.g. torch213-cxx11-cu126-x86_64-linux or torch-2.13-cpu-"),
        (["--cuda-capability", "9"], "compute capability"),
        (["--system", "torch213-cxx11-cpu-x86_64-linux", "--cuda-capability", "9.0"], "no CUDA"),
        (["--system", SYSTEM, "--rocm-arch", "gfx942"], "runs no ROCm"),
        (["--system", SYSTEM, "--cuda-capability", "9.0", "--rocm-arch", "gfx942"], "not allowed"),
    ],
)
def test_a_bad_machine_is_a_usage_error(cdn: CdnServer, args: list[str], message: str) -> None:
    publish(cdn.root, 1, BUILDS)
    for command in ("variants", "get"):
        result = flashhub(command, REPO, "--version", "1", *args)
        assert result.returncode == 2, result
        assert message in result.stderr and "Traceback" not in result.stderr


# -- pre-downloading for another machine ---------------------------------------------------


def test_get_for_another_machine_fills_the_cache_its_loads_use_offline(
    cdn: CdnServer, cache_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    result = flashhub("get", REPO, "--version", "1", "--system", SYSTEM, "--cuda-capability", "9.0")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).name == CU124
    assert cached_variants(cache_dir) == [CU124]
    # The metadata.json of the build passed over once, of the one taken once (not again),
    # and the universal build's, asked for beside variants.json.
    assert sorted(cdn.gets("metadata.json")) == sorted(
        f"/kernels/{REPO}/v1/build/{v}/metadata.json" for v in (CU126, CU124, UNIVERSAL)
    )
    load = "import flashhub.acme.relu.v1 as k; print(k.marker())"
    out = run_python(as_gpu_node((9, 0), load), env=OFFLINE)
    assert out.strip() == f"{REPO}@v1:{CU124}"
    # A node with another GPU loads another build, which this cache does not hold.
    failure = run_python(
        as_gpu_node((8, 6), f"try:\n    {load}\nexcept ImportError as exc:\n    print(exc)\n"),
        env=OFFLINE,
    )
    assert f"{REPO}@v1 is not in the cache and FLASHHUB_OFFLINE is set" in failure


def test_download_of_a_lock_for_another_machine_fills_the_cache_its_loads_use_offline(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    assert flashhub("lock", project).returncode == 0
    args = ["download", project, "--system", SYSTEM, "--cuda-capability", "9.1", "--json"]
    (downloaded,) = ok_json(flashhub(*args))["results"]
    assert (downloaded["variant"], downloaded["status"]) == (UNIVERSAL, "downloaded")
    assert cached_variants(cache_dir) == [UNIVERSAL]
    code = (
        "from flashhub_kernels import load_kernel\n"
        f"k = load_kernel({REPO!r}, lockfile={str(project / 'flashhub.lock')!r})\n"
        "print(k.marker())\n"
        "import flashhub.acme.relu.v1 as same\n"
        "print(same is k)\n"
    )
    out = run_python(as_gpu_node((9, 1), code), env=OFFLINE)
    assert out.split() == [f"{REPO}@v1:{UNIVERSAL}", "True"]
    again = flashhub(*args, env=OFFLINE)  # what a GPU node's `download` says offline
    assert ok_json(again)["results"][0]["status"] == "cached"


def test_download_for_another_machine_fetches_each_manifest_once(
    cdn: CdnServer, tmp_path: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    assert flashhub("lock", project).returncode == 0
    cdn.clear_log()
    args = ["download", project, "--system", SYSTEM, "--cuda-capability", "9.0", "--json"]
    (downloaded,) = ok_json(flashhub(*args))["results"]
    assert (downloaded["variant"], downloaded["status"]) == (CU124, "downloaded")
    manifests = cdn.gets("/metadata.json")
    assert sorted(manifests) == sorted(set(manifests))  # CU126's, passed over, and CU124's
    assert len(manifests) == 2


def test_download_for_all_variants_takes_no_machine(cdn: CdnServer, tmp_path: Path) -> None:
    publish(cdn.root, 1, BUILDS)
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    assert flashhub("lock", project).returncode == 0
    result = flashhub("download", project, "--all-variants", "--system", SYSTEM)
    assert result.returncode == 2 and "--all-variants" in result.stderr


# -- loads on this machine -------------------------------------------------------------------


def test_a_load_passes_over_a_build_for_other_devices(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, BUILDS)
    run_as(monkeypatch, gpu_node((9, 1)))
    kernel = fk.get_kernel(REPO, version=1)
    assert kernel.marker() == f"{REPO}@v1:{UNIVERSAL}"
    assert cached_variants(cache_dir) == [UNIVERSAL]
    # The warm load of another process passes over them by what the cache recorded.
    cdn.clear_log()
    load = "import flashhub.acme.relu.v1 as k; print(k.marker())"
    assert run_python(as_gpu_node((9, 1), load)).strip() == f"{REPO}@v1:{UNIVERSAL}"
    assert cdn.gets() == []


@pytest.mark.signing
def test_a_copy_a_hostile_mirror_gave_a_neighbour_does_not_say_which_devices_a_build_runs_on(
    cdn: CdnServer, make_cdn: MakeCdn, tmp_path: Path
) -> None:
    # A neighbour checking no signatures cached the CUDA 12.6 build from a hostile mirror
    # whose metadata.json says it is for an H100 only. A GPU node trusting the publisher's
    # key judges the build by the signed metadata.json, not by that cached copy.
    publish(cdn.root, 1, BUILDS)
    key = generate_signing_key()
    write_key_pair(key, tmp_path / "publisher.key")
    assert flashhub("sign", cdn.root, "--key", tmp_path / "publisher.key").returncode == 0
    hostile = make_cdn(tmp_path / "hostile")
    publish(hostile.root, 1, {CU126: ["9.0a"], UNIVERSAL: None})
    load = "import flashhub.acme.relu.v1 as k; print(k.marker())"
    neighbour = {"FLASHHUB_CDN_URL": hostile.url}
    assert run_python(as_gpu_node((9, 0), load), env=neighbour).strip() == f"{REPO}@v1:{CU126}"
    cdn.clear_log()

    trusting = {"FLASHHUB_TRUSTED_KEYS": key.public_line}
    assert run_python(as_gpu_node((8, 0), load), env=trusting).strip() == f"{REPO}@v1:{CU126}"

    assert f"/kernels/{REPO}/v1/build/{CU126}/metadata.json.sig" in cdn.gets()
    listed = ok_json(flashhub("cache", "list", "--json"))["entries"]
    assert {e["variant"]: e["signer"] for e in listed}[CU126] == key.key_id


def test_a_probe_goes_on_past_a_build_for_other_devices(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, BUILDS, listed=False)
    run_as(monkeypatch, gpu_node((9, 0)))
    assert fk.get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{CU124}"


def test_no_build_for_the_device_lists_each_build_passed_over(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, {CU126: ["8.0", "8.6"], CU124: ["9.0a"]})
    run_as(monkeypatch, gpu_node((12, 0)))
    with pytest.raises(NoCompatibleVariantError) as caught:
        fk.get_kernel(REPO, version=1)
    message = str(caught.value)
    assert f"- {CU126}: built for CUDA archs 8.0, 8.6; this device is 12.0" in message
    assert f"- {CU124}: built for CUDA archs 9.0a; this device is 12.0" in message


def test_free_threaded_python_loads_the_python_build(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    native = local_variant()
    publish(cdn.root, 1, {native: None, UNIVERSAL: None})
    this = detect_system()
    run_as(monkeypatch, this._replace(free_threaded=True))
    assert fk.get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{UNIVERSAL}"


def test_a_process_whose_gil_is_off_loads_the_python_build(cdn: CdnServer) -> None:
    publish(cdn.root, 1, {local_variant(): None, UNIVERSAL: None})
    code = (
        "import sys\n"
        "sys._is_gil_enabled = lambda: False  # as on python3.13t\n"
        "import flashhub_kernels as fk\n"
        f"print(fk.get_kernel({REPO!r}, version=1).marker())\n"
    )
    assert run_python(code).strip() == f"{REPO}@v1:{UNIVERSAL}"


# -- the version that has a build ----------------------------------------------------------------


def test_a_version_without_a_build_for_this_system_names_the_newest_that_has_one(
    cdn: CdnServer,
) -> None:
    publish(cdn.root, 1, {UNIVERSAL: None})
    publish(cdn.root, 2, {local_variant(): None})
    publish(cdn.root, 3, {CU126: None})
    with pytest.raises(NoCompatibleVariantError) as caught:
        fk.get_kernel(REPO, version=3)
    assert f"{REPO}@v2 is the newest published version with a build for it" in str(caught.value)
    assert caught.value.hint is not None and caught.value.hint.startswith("load version=2")
    result = flashhub("get", REPO, "--version", "3")
    assert result.returncode == 1 and "pass --version 2" in result.stderr


def test_the_version_advised_has_a_build_for_the_device(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, {UNIVERSAL: None})
    publish(cdn.root, 2, {CU126: ["8.0"]})
    publish(cdn.root, 3, {CU126: ["10.0"]})
    run_as(monkeypatch, gpu_node((9, 0)))
    with pytest.raises(NoCompatibleVariantError, match=f"{REPO}@v1 is the newest"):
        fk.get_kernel(REPO, version=3)


def test_a_lock_range_takes_the_newest_version_with_a_build_for_this_system(
    cdn: CdnServer, tmp_path: Path
) -> None:
    publish(cdn.root, 1, {UNIVERSAL: None})
    publish(cdn.root, 2, {local_variant(): None, CU126: None})
    publish(cdn.root, 3, {CU126: None})
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    assert lock_project(project).kernels[REPO].version == 2
    publish(cdn.root, 4, {UNIVERSAL: None})
    assert lock_project(project).kernels[REPO].version == 4


def test_a_lock_range_without_a_build_for_this_system_takes_the_newest(
    cdn: CdnServer, tmp_path: Path
) -> None:
    publish(cdn.root, 1, {CU124: None})
    publish(cdn.root, 2, {CU126: None})
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    assert lock_project(project).kernels[REPO].version == 2  # locked for other machines


def test_a_local_kernel_repo_passes_over_a_build_for_other_devices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(tmp_path, 1, BUILDS)
    repo = tmp_path / "kernels" / REPO / "v1"  # holds build/<variant>/ as a kernel repo does
    run_as(monkeypatch, gpu_node((9, 1)))
    assert fk.get_local_kernel(repo).marker() == f"{REPO}@v1:{UNIVERSAL}"


def test_a_probed_version_without_a_build_names_the_version_that_has_one(
    cdn: CdnServer,
) -> None:
    publish(cdn.root, 1, {UNIVERSAL: None})
    publish(cdn.root, 2, {CU126: None}, listed=False)
    with pytest.raises(NoCompatibleVariantError, match=f"{REPO}@v1 is the newest published"):
        fk.get_kernel(REPO, version=2)


def test_the_python_api_chooses_for_another_machine(cdn: CdnServer) -> None:
    publish(cdn.root, 1, BUILDS)
    h100 = {"system": SYSTEM, "cuda_capability": "9.0"}
    verdicts = fk.get_kernel_variants(REPO, 1, **h100)
    assert isinstance(verdicts[0], fk.VariantAccepted) and verdicts[0].variant == CU124
    (passed_over,) = [r for r in verdicts if isinstance(r, fk.VariantRejected)]
    assert passed_over.reason == "built for CUDA archs 8.0, 8.6; this device is 9.0"
    assert fk.install_kernel(REPO, version=1, **h100).name == CU124
    with pytest.raises(ValueError, match="runs no ROCm"):
        fk.install_kernel(REPO, version=1, system=SYSTEM, rocm_arch="gfx942")


# -- check_arch=False: the archs builds list are not checked --------------------------------------

ONLY_AMPERE = {CU126: ["8.0", "8.6"]}  # no build for an H100 (9.0)


def test_check_arch_false_loads_a_build_whose_archs_lack_the_device(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, ONLY_AMPERE)
    run_as(monkeypatch, gpu_node((9, 0)))
    with pytest.raises(NoCompatibleVariantError, match=r"built for CUDA archs 8\.0, 8\.6"):
        fk.get_kernel(REPO, version=1)
    assert not fk.has_kernel(REPO, version=1)
    assert fk.has_kernel(REPO, version=1, check_arch=False)
    kernel = fk.get_kernel(REPO, version=1, check_arch=False)
    assert kernel.marker() == f"{REPO}@v1:{CU126}"
    import flashhub.acme.relu.v1 as by_statement  # the module imported: returned as it is

    assert by_statement is kernel and fk.get_kernel(REPO, version=1) is kernel
    (loaded,) = fk.get_loaded_kernels()
    assert (loaded.repo_id, loaded.version, loaded.variant) == (REPO, 1, CU126)

    # Another process loads it from the cache, with no request; offline too.
    cdn.clear_log()
    load = (
        "import flashhub_kernels as fk\n"
        f"print(fk.get_kernel({REPO!r}, version=1, check_arch=False).marker())"
    )
    assert run_python(as_gpu_node((9, 0), load)).strip() == f"{REPO}@v1:{CU126}"
    assert run_python(as_gpu_node((9, 0), load), env=OFFLINE).strip() == f"{REPO}@v1:{CU126}"
    assert cdn.gets() == []


def test_check_arch_false_takes_the_best_build_by_its_name(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, BUILDS)
    run_as(monkeypatch, gpu_node((9, 1)))  # checked, only torch-universal fits
    assert fk.get_kernel(REPO, version=1, check_arch=False).marker() == f"{REPO}@v1:{CU126}"
    assert cached_variants(cache_dir) == [CU126]
    # No metadata.json was asked for to judge the archs: only the two asked for beside
    # variants.json (this node's own build, which was downloaded, and the universal one).
    assert sorted(cdn.gets("metadata.json")) == [
        f"/kernels/{REPO}/v1/build/{v}/metadata.json" for v in sorted((CU126, UNIVERSAL))
    ]


def test_check_arch_false_on_local_kernels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cdn: CdnServer
) -> None:
    publish(tmp_path, 1, BUILDS)
    repo = tmp_path / "kernels" / REPO / "v1"  # holds build/<variant>/ as a kernel repo does
    run_as(monkeypatch, gpu_node((9, 1)))
    assert fk.get_local_kernel(repo, check_arch=False).marker() == f"{REPO}@v1:{CU126}"
    layer_repo = fk.LocalLayerRepository(repo, "Relu", check_arch=False)
    assert layer_repo.load_kernel().marker() == f"{REPO}@v1:{CU126}"

    publish(tmp_path / "ampere", 1, ONLY_AMPERE)
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={tmp_path / 'ampere' / 'kernels' / REPO / 'v1'}")
    assert not fk.has_kernel(REPO, version=1)
    assert fk.has_kernel(REPO, version=1, check_arch=False)
    assert fk.get_kernel(REPO, version=1, check_arch=False).marker() == f"{REPO}@v1:{CU126}"
    assert cdn.requests == []


def test_check_arch_false_on_locked_kernels(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, ONLY_AMPERE)
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    lock_project(project)
    lockfile = project / "flashhub.lock"
    run_as(monkeypatch, gpu_node((9, 0)))
    kernel = fk.get_locked_kernel(REPO, lockfile=lockfile, check_arch=False)
    assert kernel.marker() == f"{REPO}@v1:{CU126}"
    assert fk.load_kernel(REPO, lockfile=lockfile, check_arch=False) is kernel
    layer_repo = fk.LockedLayerRepository(REPO, "Relu", lockfile=lockfile, check_arch=False)
    assert layer_repo.load_kernel() is kernel

    # From the cache only, in processes that have not imported it: checked, it is refused.
    code = (
        "import flashhub_kernels as fk\n"
        "for check in (True, False):\n"
        "    try:\n"
        f"        k = fk.load_kernel({REPO!r}, lockfile={str(lockfile)!r}, check_arch=check)\n"
        "        print(k.marker())\n"
        "    except ImportError as exc:\n"
        "        print(type(exc).__name__)\n"
    )
    out = run_python(as_gpu_node((9, 0), code), env=OFFLINE).split()
    assert out == ["NoCompatibleVariantError", f"{REPO}@v1:{CU126}"]


def test_check_arch_false_reaches_the_layer_repository(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(cdn.root, 1, ONLY_AMPERE)
    run_as(monkeypatch, gpu_node((9, 0)))
    checked = fk.LayerRepository(REPO, "Relu", version=1)
    with pytest.raises(NoCompatibleVariantError):
        checked.load_kernel()
    unchecked = fk.LayerRepository(REPO, "Relu", version=1, check_arch=False)
    assert unchecked.load_kernel().marker() == f"{REPO}@v1:{CU126}"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_check_arch_false_reaches_the_function_repositories(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As in Hugging Face kernels, whose function repositories take check_arch too."""
    publish(cdn.root, 1, ONLY_AMPERE)
    run_as(monkeypatch, gpu_node((9, 0)))
    with pytest.raises(NoCompatibleVariantError):
        fk.FuncRepository(repo_id=REPO, func_name="marker", version=1).load()
    unchecked = fk.FuncRepository(repo_id=REPO, func_name="marker", version=1, check_arch=False)
    assert unchecked.load_kernel().marker() == f"{REPO}@v1:{CU126}"
    project = write_project(tmp_path / "project", {REPO: ">=1"})
    lock_project(project)
    lockfile = project / "flashhub.lock"
    locked = fk.LockedFuncRepository(REPO, func_name="marker", lockfile=lockfile, check_arch=False)
    assert locked.load_kernel() is unchecked.load_kernel()
    local = tmp_path / "local"
    publish(local, 1, ONLY_AMPERE)
    repo_path = local / "kernels" / REPO / "v1"
    local_repo = fk.LocalFuncRepository(repo_path=repo_path, func_name="marker", check_arch=False)
    assert local_repo.load_kernel().marker() == f"{REPO}@v1:{CU126}"


@pytest.mark.parametrize(
    "make",
    [
        lambda **kw: fk.LayerRepository(REPO, "Relu", version=1, **kw),
        lambda **kw: fk.LocalLayerRepository("/kernels/relu", "Relu", **kw),
        lambda **kw: fk.LockedLayerRepository(REPO, "Relu", lockfile="flashhub.lock", **kw),
        lambda **kw: fk.FuncRepository(REPO, "relu", version=1, **kw),
        lambda **kw: fk.LocalFuncRepository("/kernels/relu", "relu", **kw),
        lambda **kw: fk.LockedFuncRepository(REPO, "relu", lockfile="flashhub.lock", **kw),
    ],
)
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_check_arch_takes_part_in_a_layer_repository_equality(make: Any) -> None:
    checked, unchecked = make(), make(check_arch=False)
    assert checked == make(check_arch=True) and hash(checked) == hash(make(check_arch=True))
    assert checked != unchecked and unchecked == make(check_arch=False)
    assert len({checked, unchecked}) == 2
    assert (checked.check_arch, unchecked.check_arch) == (True, False)
    assert "check_arch=False" in repr(unchecked)


def test_a_cpu_build_passed_over_on_a_gpu_machine_names_the_option_forcing_it(
    cdn: CdnServer,
) -> None:
    publish(cdn.root, 1, {CPU_BUILD: None, CU124: ["9.0a"]})
    result = flashhub("variants", REPO, "--version", "1", "--system", SYSTEM)
    assert result.returncode == 0, result.stderr
    assert (
        f"  - {CPU_BUILD}: built for cpu, but this system uses cu126 "
        "(--backend cpu loads it anyway)"
    ) in result.stdout.splitlines()
