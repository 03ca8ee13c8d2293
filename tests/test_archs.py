"""The device archs a build declares, and the choice that passes over a build for other
devices (pure: no CDN)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from flashhub_kernels import _constants
from flashhub_kernels._cache.layout import VariantIndex
from flashhub_kernels._cache.staging import index_document, merge_indexes
from flashhub_kernels._models.names import RepoInfo
from flashhub_kernels._variants import device_arch as _device_arch, system as _variants
from flashhub_kernels._variants.archs import (
    arch_mismatch,
    cuda_arch_runs_on,
    cuda_archs_support,
    rocm_archs_support,
)
from flashhub_kernels._variants.choice import choose_variant
from flashhub_kernels._variants.compat import (
    BuildTarget,
    pick_cached_variant,
    read_target,
    target_from_json,
)
from flashhub_kernels._variants.device_arch import with_device
from flashhub_kernels._variants.grammar import VariantNameError
from flashhub_kernels._variants.named_system import system_from_variant, with_device_named
from flashhub_kernels._variants.probing import candidate_names
from flashhub_kernels._variants.system import SystemInfo, with_backend
from flashhub_kernels._variants.verdicts import (
    VariantAccepted,
    best_variant,
    describe_system,
    judge_builds,
    judge_variants,
)
from flashhub_kernels.errors import NoCompatibleVariantError

H100 = SystemInfo((2, 13), True, "cuda", "cu126", "x86_64", "linux", cuda_capability=(9, 0))
MI300 = SystemInfo((2, 13), True, "rocm", "rocm63", "x86_64", "linux", rocm_arch="gfx942")
CUDA_BUILD = "torch213-cxx11-cu126-x86_64-linux"
OTHER_CUDA_BUILD = "torch213-cxx11-cu124-x86_64-linux"
STABLE_BUILD = "torch-stable-abi211-cu126-x86_64-linux"
ROCM_BUILD = "torch213-cxx11-rocm63-x86_64-linux"


def cuda(*archs: str) -> BuildTarget:
    return BuildTarget("cuda", archs)


# -- the rules for one arch ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "capability", "runs"),
    [
        ("9.0", (9, 0), True),
        ("8.0", (8, 6), True),  # same major, newer minor
        ("8.6", (8, 0), False),
        ("8.0", (9, 0), False),  # another major
        ("9.0a", (9, 0), True),  # architecture-specific: that capability only
        ("9.0a", (9, 1), False),
        ("10.0f", (10, 3), True),  # family-specific: the same major, minor at or above
        ("10.3f", (10, 0), False),
        ("10.0f", (11, 0), False),
        ("8.0+PTX", (9, 0), True),  # PTX: the driver compiles it for any newer device
        ("8.0+PTX", (12, 1), True),
        ("9.0+PTX", (8, 9), False),
        ("9.0a+PTX", (9, 1), False),
        ("10.0f+PTX", (11, 0), False),
    ],
)
def test_cuda_arch_rules(arch: str, capability: tuple[int, int], runs: bool) -> None:
    assert cuda_arch_runs_on(arch, capability) is runs


@pytest.mark.parametrize(
    "arch", ["sm_90", "9", "9.x", "nine.0", "9.0b", "", "+PTX", "\u0669.\u0660"]
)
def test_unknown_cuda_arch_forms(arch: str) -> None:
    assert cuda_arch_runs_on(arch, (9, 0)) is None


def test_archs_of_unknown_forms_only_are_taken_to_run_anywhere() -> None:
    assert cuda_archs_support(["sm_100", "compute_100"], (9, 0))
    assert not cuda_archs_support(["sm_100", "8.0"], (9, 0))  # one known form decides
    assert cuda_archs_support(["sm_100", "8.0", "9.0a"], (9, 0))


def test_rocm_targets_compare_without_feature_flags() -> None:
    assert rocm_archs_support(["gfx90a", "gfx942"], "gfx942")
    assert rocm_archs_support(["gfx90a"], "gfx90a:sramecc+:xnack-")
    assert rocm_archs_support(["gfx90a:xnack+"], "gfx90a")
    assert not rocm_archs_support(["gfx90a", "gfx942"], "gfx1100")
    assert rocm_archs_support(["some-future-target"], "gfx1100")  # no known form


def test_arch_mismatch_says_what_the_build_has_and_what_the_device_is() -> None:
    assert arch_mismatch(cuda("8.0", "8.6"), "cuda", cuda_capability=(9, 0)) == (
        "built for CUDA archs 8.0, 8.6; this device is 9.0"
    )
    rocm = BuildTarget("rocm", ("gfx90a",))
    assert arch_mismatch(rocm, "rocm", rocm_arch="gfx1100:xnack-") == (
        "built for ROCm archs gfx90a; this device is gfx1100"
    )
    assert arch_mismatch(cuda("8.0"), "cuda") is None  # the device is unknown
    assert arch_mismatch(cuda(), "cuda", cuda_capability=(9, 0)) is None  # no archs listed
    assert arch_mismatch(rocm, "cuda", cuda_capability=(9, 0)) is None  # another backend's


# -- what a metadata.json declares ------------------------------------------------------------


def test_the_target_of_a_builder_metadata_document() -> None:
    document = {
        "name": "relu",
        "id": "relu_cuda_1a2b3c",
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": [],
        "backend": {"type": "cuda", "archs": ["8.0", "9.0a", "10.0f", "9.0+PTX"]},
        "digest": {"files": {}},
    }
    assert read_target(document) == BuildTarget("cuda", ("8.0", "9.0a", "10.0f", "9.0+PTX"))
    assert read_target({"backend": {"type": "cann"}}) == BuildTarget("npu")
    assert read_target({"digest": {}}) == BuildTarget()
    assert read_target({"free-threaded": True}).free_threaded
    target = read_target(document)
    assert target_from_json(target.to_json()) == target


@pytest.mark.parametrize(
    "backend",
    [
        "cuda",
        ["cuda"],
        {"type": 3, "archs": ["9.0"]},
        {"type": "cuda", "archs": "9.0"},
        {"type": "cuda", "archs": [9.0, None, "x" * 65]},
    ],
)
def test_a_malformed_backend_never_rejects_a_build(backend: object) -> None:
    target = read_target({"backend": backend})
    assert arch_mismatch(target, "cuda", cuda_capability=(1, 0)) is None


def test_a_hostile_archs_list_is_capped() -> None:
    assert len(read_target({"backend": {"type": "cuda", "archs": ["9.0"] * 10_000}}).archs) == 256
    assert target_from_json(["cuda"]) is None


# -- the choice ------------------------------------------------------------------------------


def judged(published: list[str], system: SystemInfo, targets: dict[str, BuildTarget]) -> list[str]:
    verdicts = judge_builds(judge_variants(published, system), system, targets.get)
    return [
        f"+ {r.variant}" if isinstance(r, VariantAccepted) else f"- {r.variant}: {r.reason}"
        for r in verdicts
    ]


def test_a_build_lacking_the_device_is_skipped_for_torch_universal() -> None:
    lines = judged([CUDA_BUILD, "torch-universal"], H100, {CUDA_BUILD: cuda("8.0", "8.6")})
    assert lines == [
        "+ torch-universal",
        f"- {CUDA_BUILD}: built for CUDA archs 8.0, 8.6; this device is 9.0",
    ]


@pytest.mark.parametrize(
    ("archs", "capability", "taken"),
    [
        (("9.0a",), (9, 0), True),
        (("9.0a",), (9, 1), False),
        (("10.0f",), (10, 3), True),
        (("8.0+PTX",), (9, 0), True),
        (("8.0", "8.6"), (9, 0), False),
        (("sm_90a",), (9, 0), True),  # no arch of a known form: judged as without archs
        ((), (9, 0), True),  # no archs: judged by the name, as ever
    ],
)
def test_the_cuda_build_is_taken_where_its_archs_run(
    archs: tuple[str, ...], capability: tuple[int, int], taken: bool
) -> None:
    system = H100._replace(cuda_capability=capability)
    targets = {CUDA_BUILD: cuda(*archs)}
    verdicts = judge_variants([CUDA_BUILD, "torch-universal"], system)
    verdicts = judge_builds(verdicts, system, targets.get)
    assert best_variant(verdicts) == (CUDA_BUILD if taken else "torch-universal")


def test_the_choice_falls_through_every_tier_in_preference_order() -> None:
    published = [CUDA_BUILD, OTHER_CUDA_BUILD, STABLE_BUILD, "torch-cuda", "torch-universal"]
    lacking = cuda("8.0")
    targets = {STABLE_BUILD: lacking, CUDA_BUILD: lacking}
    assert best_variant(judge_builds(judge_variants(published, H100), H100, targets.get)) == (
        OTHER_CUDA_BUILD
    )
    targets[OTHER_CUDA_BUILD] = lacking
    assert judged(published, H100, targets)[:2] == ["+ torch-cuda", "+ torch-universal"]
    targets["torch-cuda"] = cuda("10.0")  # a noarch build may list archs too
    assert judged(published, H100, targets)[0] == "+ torch-universal"


def test_metadata_is_read_only_up_to_the_build_taken() -> None:
    asked: list[str] = []

    def target_of(name: str) -> BuildTarget:
        asked.append(name)
        return cuda("8.0") if name == STABLE_BUILD else cuda("9.0")

    published = [STABLE_BUILD, CUDA_BUILD, OTHER_CUDA_BUILD, "torch-universal"]
    verdicts = judge_builds(judge_variants(published, H100), H100, target_of)
    assert best_variant(verdicts) == CUDA_BUILD and asked == [STABLE_BUILD, CUDA_BUILD]
    asked.clear()
    judge_builds(judge_variants(published, H100), H100, target_of, first_fit=False)
    assert asked == [STABLE_BUILD, CUDA_BUILD, OTHER_CUDA_BUILD]  # never torch-universal


def test_no_metadata_is_read_where_the_device_is_unknown() -> None:
    def target_of(name: str) -> BuildTarget:
        raise AssertionError(f"read the metadata of {name}")

    unknown = H100._replace(cuda_capability=None)
    verdicts = judge_builds(judge_variants([CUDA_BUILD], unknown), unknown, target_of)
    assert best_variant(verdicts) == CUDA_BUILD
    cpu = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux", probe_device=True)
    published = ["torch213-cxx11-cpu-x86_64-linux", "torch-universal"]
    assert best_variant(judge_builds(judge_variants(published, cpu), cpu, target_of))


def test_rocm_builds_are_judged_by_the_gfx_target() -> None:
    targets = {ROCM_BUILD: BuildTarget("rocm", ("gfx90a", "gfx942"))}
    assert judged([ROCM_BUILD, "torch-universal"], MI300, targets)[0] == f"+ {ROCM_BUILD}"
    navi = MI300._replace(rocm_arch="gfx1100")
    assert judged([ROCM_BUILD, "torch-rocm"], navi, targets) == [
        "+ torch-rocm",
        f"- {ROCM_BUILD}: built for ROCm archs gfx90a, gfx942; this device is gfx1100",
    ]


def test_the_device_is_asked_about_only_when_a_build_lists_archs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[SystemInfo] = []

    def probed(system: SystemInfo, chosen_by: object) -> SystemInfo:
        asked.append(system)
        return system._replace(cuda_capability=(9, 0), probe_device=False)

    monkeypatch.setattr(_device_arch, "_probed", probed)
    local = H100._replace(cuda_capability=None, probe_device=True)
    published = [CUDA_BUILD, "torch-universal"]
    verdicts = judge_builds(judge_variants(published, local), local, {CUDA_BUILD: cuda()}.get)
    assert best_variant(verdicts) == CUDA_BUILD and asked == []
    verdicts = judge_builds(judge_variants(published, local), local, {CUDA_BUILD: cuda("8.0")}.get)
    assert best_variant(verdicts) == "torch-universal" and asked == [local]
    assert with_device(H100) is H100  # a named device is never asked about


def test_the_no_variant_error_lists_what_was_passed_over() -> None:
    index = VariantIndex(True, frozenset([CUDA_BUILD]), targets={CUDA_BUILD: cuda("8.0")})
    with pytest.raises(NoCompatibleVariantError) as caught:
        choose_variant(index, RepoInfo("acme/relu", 1), H100)
    message = str(caught.value)
    assert f"- {CUDA_BUILD}: built for CUDA archs 8.0; this device is 9.0" in message
    assert "CUDA capability 9.0" in message and "compiled for CUDA capability 9.0" in message


def test_a_probed_version_whose_builds_are_all_for_other_devices_says_so() -> None:
    absent = frozenset(name for name in candidate_names(H100) if name != CUDA_BUILD)
    index = VariantIndex(False, frozenset([CUDA_BUILD]), absent, {CUDA_BUILD: cuda("8.0")})
    with pytest.raises(NoCompatibleVariantError, match="none of the variants found") as caught:
        choose_variant(index, RepoInfo("acme/relu", 1), H100)
    assert "built for CUDA archs 8.0; this device is 9.0" in str(caught.value)


# -- the warm path: what the cache records ---------------------------------------------------


def test_the_warm_pick_passes_over_what_the_index_records_as_for_other_devices() -> None:
    index = VariantIndex(
        True, frozenset([CUDA_BUILD, "torch-universal"]), targets={CUDA_BUILD: cuda("8.0")}
    )
    assert pick_cached_variant(index, H100) == "torch-universal"
    assert pick_cached_variant(index, H100._replace(cuda_capability=(8, 6))) == CUDA_BUILD


def test_the_warm_pick_reads_a_cached_entry_or_asks_the_cdn() -> None:
    index = VariantIndex(True, frozenset([CUDA_BUILD, "torch-universal"]))
    assert pick_cached_variant(index, H100) is None  # never read: ask the CDN
    assert pick_cached_variant(index, H100, {CUDA_BUILD: cuda("9.0")}.get) == CUDA_BUILD
    assert pick_cached_variant(index, H100, {CUDA_BUILD: cuda("8.0")}.get) == "torch-universal"
    assert pick_cached_variant(index, H100._replace(cuda_capability=None)) == CUDA_BUILD


def test_the_index_records_targets_and_merges_them() -> None:
    first = VariantIndex(True, frozenset([CUDA_BUILD]), targets={CUDA_BUILD: cuda("8.0")})
    more = VariantIndex(False, frozenset(), frozenset(), {"torch-cuda": cuda("9.0")})
    merged = merge_indexes(first, more)
    assert merged.complete and merged.present == first.present
    assert dict(merged.targets) == {CUDA_BUILD: cuda("8.0"), "torch-cuda": cuda("9.0")}
    assert index_document(merged)["targets"][CUDA_BUILD]["archs"] == ["8.0"]


# -- free-threaded Python ---------------------------------------------------------------------


def test_free_threaded_python_takes_no_native_build_unless_it_declares_so() -> None:
    system = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux", free_threaded=True)
    native = "torch213-cxx11-cpu-x86_64-linux"
    stable = "torch-stable-abi210-cpu-x86_64-linux"
    published = [native, stable, "torch-cpu", "torch-universal"]
    verdicts = judge_builds(judge_variants(published, system), system, {}.get)
    assert best_variant(verdicts) == stable  # metadata unread: judged by the name
    read = {name: BuildTarget("cpu") for name in published}
    lines = judged(published, system, read)
    assert lines[:2] == ["+ torch-cpu", "+ torch-universal"]
    assert lines[2].startswith(f"- {stable}: a native build, and this Python is free-threaded")
    assert (
        lines[3].startswith(f"- {native}: a native build") and '"free-threaded": true' in lines[3]
    )
    read[native] = BuildTarget("cpu", (), free_threaded=True)
    assert judged(published, system, read)[0] == f"+ {native}"


# -- another machine, by the name of the build it loads ----------------------------------------


def test_a_machine_from_the_build_it_loads() -> None:
    system = system_from_variant(CUDA_BUILD, cuda_capability="9.0")
    assert system == SystemInfo(
        (2, 13), True, "cuda", "cu126", "x86_64", "linux", (9, 0), backend_version=(12, 6)
    )
    assert describe_system(system) == (
        "torch 2.13 (cxx11), cu126, x86_64-linux, CUDA capability 9.0"
    )
    assert system_from_variant("torch212-cxx98-cpu-aarch64-linux").abi == "cxx98"
    assert system_from_variant("torch213-cu126-x86_64-linux").cxx11_abi  # no tag: cxx11
    rocm = system_from_variant(ROCM_BUILD, rocm_arch="gfx90a:sramecc+:xnack-")
    assert rocm.rocm_arch == "gfx90a"
    mac = system_from_variant("torch212-metal-aarch64-darwin")
    assert judge_variants(["torch212-metal-aarch64-darwin"], mac)[0] == VariantAccepted(
        "torch212-metal-aarch64-darwin"
    )


@pytest.mark.parametrize(
    ("name", "device", "error", "match"),
    [
        ("torch-universal", {}, VariantNameError, "exact build"),
        ("torch-stable-abi210-cu126-x86_64-linux", {}, VariantNameError, "exact build"),
        ("bogus", {}, VariantNameError, "not a variant name"),
        (CUDA_BUILD, {"cuda_capability": "9"}, ValueError, "compute capability"),
        (CUDA_BUILD, {"cuda_capability": "9.0a"}, ValueError, "compute capability"),
        (CUDA_BUILD, {"rocm_arch": "gfx942"}, ValueError, "runs no ROCm"),
        ("torch213-cxx11-cpu-x86_64-linux", {"cuda_capability": "9.0"}, ValueError, "no CUDA"),
        (ROCM_BUILD, {"rocm_arch": "mi300"}, ValueError, "gfx target"),
    ],
)
def test_a_bad_machine_name_or_device_says_what_is_wrong(
    name: str, device: dict[str, str], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        system_from_variant(name, **device)


def test_a_named_device_replaces_asking_torch() -> None:
    local = H100._replace(cuda_capability=None, probe_device=True)
    named = with_device_named(local, cuda_capability="8.6")
    assert named.cuda_capability == (8, 6) and not named.probe_device
    assert with_device_named(local) is local


# -- detection: what this machine's torch says ------------------------------------------------


def fake_torch(**version: str) -> SimpleNamespace:
    """A module standing in for ``torch``, of a build whose ``torch.version`` says ``version``."""
    return SimpleNamespace(
        version=SimpleNamespace(**{"cuda": None, "hip": None, "xpu": None, **version}),
        backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: False)),
        _C=SimpleNamespace(),
    )


def test_cuda_rocm_and_cpu_builds_of_torch_are_detected() -> None:
    assert _variants._detect_backend(fake_torch(cuda="12.6")) == ("cuda", "cu126", (12, 6))
    hip = fake_torch(hip="6.3.42131-fa1d09cbd")
    assert _variants._detect_backend(hip) == ("rocm", "rocm63", (6, 3))
    assert _variants._detect_backend(fake_torch()) == ("cpu", "cpu", None)


def test_a_rocm_minor_past_9_is_compared_as_a_minor() -> None:
    """ROCm 7.10 packs as rocm710, which reads as 71.0: the version is kept as detected."""
    detected = _variants._detect_backend(fake_torch(hip="7.10.25001-abc"))
    assert detected == ("rocm", "rocm710", (7, 10))
    system = SystemInfo((2, 10), True, "rocm", "rocm710", "x86_64", "linux")
    system = system._replace(backend_version=(7, 10))
    published = ["torch-universal", "torch210-cxx11-rocm71-x86_64-linux"]
    published.append("torch-2.10-cxx11-rocm-7.11-cpython-3.9-abi3-x86_64-linux")
    assert judged(published, system, {})[0] == "+ torch210-cxx11-rocm71-x86_64-linux"
    assert judged(published, system, {})[-1].startswith(
        "- torch-2.10-cxx11-rocm-7.11-cpython-3.9-abi3-x86_64-linux: built for ROCm 7.11, "
        "this torch has ROCm 7.10"
    )


def test_a_gpu_machine_forced_to_cpu_loads_cpu_builds() -> None:
    """``backend="cpu"`` leaves no trace of the GPU backend's version to compare against."""
    system = SystemInfo((2, 13), True, "cuda", "cu128", "x86_64", "linux", backend_version=(12, 8))
    cpu = with_backend(system, "cpu")
    published = [
        "torch213-cxx11-cu128-x86_64-linux",
        "torch-2.13-cpu-cpython-3.9-abi3-x86_64-linux",
    ]
    assert judged(published, cpu, {})[0] == f"+ {published[1]}"


def test_tpu_and_neuron_come_before_the_torch_build_they_load_into() -> None:
    tpu = fake_torch(cuda="12.6")
    tpu.backends.tpu = SimpleNamespace()  # what torch_tpu sets when torch loads it
    assert _variants._detect_backend(tpu) == ("tpu", "tpu", None)
    neuron = fake_torch(cuda="12.6")
    neuron.neuron = SimpleNamespace()
    assert _variants._detect_backend(neuron) == ("neuron", "neuron", None)


def test_an_ascend_npu_is_detected_with_its_cann_version(monkeypatch: pytest.MonkeyPatch) -> None:
    npu = fake_torch()
    npu._C._get_privateuse1_backend_name = lambda: "npu"
    assert _variants._detect_backend(npu) == ("npu", "cann", None)  # torch_npu cannot say
    collect_env = ModuleType("torch_npu.utils.collect_env")
    collect_env.get_cann_version = lambda: "8.1.RC1"  # type: ignore[attr-defined]
    for name in ("torch_npu", "torch_npu.utils"):
        monkeypatch.setitem(sys.modules, name, ModuleType(name))
    monkeypatch.setitem(sys.modules, "torch_npu.utils.collect_env", collect_env)
    assert _variants._detect_backend(npu) == ("npu", "cann81", (8, 1))
    collect_env.get_cann_version = lambda: "8.10.RC1"  # type: ignore[attr-defined]
    assert _variants._detect_backend(npu) == ("npu", "cann810", (8, 10))
    npu._C._get_privateuse1_backend_name = lambda: "privateuseone"
    assert _variants._detect_backend(npu) == ("cpu", "cpu", None)


def test_tvm_ffi_is_looked_for_and_imported_only_when_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert "tvm_ffi" not in sys.modules and _variants._tvm_ffi_version() is None
    assert "tvm_ffi" not in sys.modules
    (tmp_path / "tvm_ffi").mkdir()
    (tmp_path / "tvm_ffi" / "__init__.py").write_text('__version__ = "0.1.4"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert _variants._tvm_ffi_version() == (0, 1)
    finally:
        # Not monkeypatch.delitem, whose undo would put this stand-in back for the
        # tests that run after this one in the process (a missing tvm-ffi would be found).
        sys.modules.pop("tvm_ffi", None)


def test_free_threading_is_the_build_flag_from_python_3_13(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """From 3.13 on, 3.15 included: a free-threaded 3.15 loads abi3t builds, not abi3 ones."""
    import sysconfig

    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: 1)
    assert _variants._free_threaded() is (sys.version_info >= (3, 13))
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: None)
    assert _variants._free_threaded() is False


def test_the_device_is_asked_of_torch_only_once_it_initialized_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from flashhub_kernels._variants import nvml as _nvml

    probe = _device_arch._probed.__wrapped__  # not the per-process cache
    local = H100._replace(cuda_capability=None, probe_device=True)
    monkeypatch.setattr(_nvml, "LIBRARY", "libnvidia-ml-missing.so.1")
    monkeypatch.setattr(_constants, "KFD_NODES", "/no-such-kfd-topology")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda: (9, 0))
    assert probe(local, ()) == local._replace(probe_device=False)  # no driver: nothing to check
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    assert probe(local, ()) == H100
    properties = SimpleNamespace(gcnArchName="gfx90a:sramecc+:xnack-")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: properties)
    rocm = MI300._replace(rocm_arch=None, probe_device=True)
    assert probe(rocm, ()).rocm_arch == "gfx90a"


def test_this_machine_is_asked_about_its_device_only_when_needed() -> None:
    this = _variants.detect_system()
    assert this.probe_device and this.cuda_capability is None and this.rocm_arch is None
