"""Variant grammar, matching rules and preference order (pure)."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle
from dataclasses import replace

import pytest

from flashhub_kernels._variants.grammar import Variant, VariantNameError, parse_variant
from flashhub_kernels._variants.probing import build_variant_name, candidate_names
from flashhub_kernels._variants.system import SystemInfo, with_backend
from flashhub_kernels._variants.verdicts import (
    VariantAccepted,
    VariantRejected,
    format_trace,
    judge_variants,
)
from flashhub_kernels.layers._device import Device, as_device

CPU = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux")
CUDA = SystemInfo((2, 12), True, "cuda", "cu126", "x86_64", "linux")
ROCM = SystemInfo((2, 12), True, "rocm", "rocm63", "x86_64", "linux")
MAC = SystemInfo((2, 12), False, "metal", "metal", "aarch64", "darwin", macos=(26, 1))
XPU = SystemInfo((2, 12), True, "xpu", "xpu20251", "x86_64", "linux")
NPU = SystemInfo((2, 9), True, "npu", "cann81", "aarch64", "linux")
TPU = SystemInfo((2, 13), True, "tpu", "tpu", "x86_64", "linux")
NEURON = SystemInfo((2, 10), True, "neuron", "neuron", "x86_64", "linux")


def verdict(name: str, system: SystemInfo) -> str:
    (res,) = judge_variants([name], system)
    return "ok" if isinstance(res, VariantAccepted) else res.reason


@pytest.mark.parametrize(
    ("name", "torch", "backend_tag", "tier"),
    [
        ("torch213-cxx11-cpu-x86_64-linux", (2, 13), "cpu", "exact"),
        ("torch25-cxx98-cu118-x86_64-linux", (2, 5), "cu118", "exact"),
        ("torch205-cxx11-cu118-x86_64-linux", (2, 5), "cu118", "exact"),
        ("torch212-cxx11-rocm63-x86_64-linux", (2, 12), "rocm63", "exact"),
        ("torch212-metal-aarch64-darwin", (2, 12), "metal", "exact"),
        ("torch-stable-abi210-cu126-x86_64-linux", (2, 10), "cu126", "stable-abi"),
        ("torch212-cxx11-xpu20251-x86_64-linux", (2, 12), "xpu20251", "exact"),
    ],
)
def test_parse(name: str, torch: tuple[int, int], backend_tag: str, tier: str) -> None:
    variant = parse_variant(name)
    assert (variant.torch, variant.backend_tag, variant.tier) == (torch, backend_tag, tier)


@pytest.mark.parametrize(
    "name", ["torch-cpu", "torch-cuda", "torch-rocm", "torch-xpu", "torch-metal"]
)
def test_parse_noarch(name: str) -> None:
    assert parse_variant(name).tier == "noarch"


@pytest.mark.parametrize(
    "name",
    [
        "torch213-cxx11-gpu-x86_64-linux",
        "torch-gp/u",
        "tvm-ffi-cu128-x86_64-linux",  # no version
        "tvm-ffi01-cxx11-cu128-x86_64-linux",  # tvm-ffi names carry no ABI tag
        "torch213-cxx11-cpu-../..-linux",
        "pytorch213-cxx11-cpu-x86_64-linux",
        "torch213-cxx11-cpu-x86_64",
        "",
    ],
)
def test_unparseable_names_are_rejected_with_a_reason(name: str) -> None:
    (res,) = judge_variants([name], CPU)
    assert isinstance(res, VariantRejected) and res.variant == name
    assert res.variant.tier is None and res.variant.backend is None
    assert name in res.reason or "variant" in res.reason


def test_linux_names_without_the_abi_tag() -> None:
    variant = parse_variant("torch213-cpu-x86_64-linux")
    assert (variant.tier, variant.torch, variant.abi, variant.backend) == (
        "exact",
        (2, 13),
        None,
        "cpu",
    )
    assert parse_variant("torch210-cu128-x86_64-linux").backend_version == (12, 8)
    assert verdict("torch213-cpu-x86_64-linux", CPU) == "ok"
    assert verdict("torch213-cpu-x86_64-linux", replace(CPU, cxx11_abi=False)) == "ok"
    assert "torch 2.12" in verdict("torch212-cpu-x86_64-linux", CPU)
    assert verdict("torch212-cu126-x86_64-linux", CUDA) == "ok"
    assert build_variant_name(CPU, abi_tag=False) == "torch213-cpu-x86_64-linux"


def test_tagless_names_are_preferred_to_tagged_ones() -> None:
    """As Hugging Face kernels 0.19 orders them: every untagged build before the tagged
    ones, each group with the newest CUDA first."""
    published = [
        "torch-universal",
        "torch212-cxx11-cu126-x86_64-linux",
        "torch212-cu126-x86_64-linux",
        "torch212-cxx11-cu124-x86_64-linux",
        "torch212-cu124-x86_64-linux",
    ]
    accepted = [r.variant for r in judge_variants(published, CUDA)]
    assert accepted == [
        "torch212-cu126-x86_64-linux",
        "torch212-cu124-x86_64-linux",
        "torch212-cxx11-cu126-x86_64-linux",
        "torch212-cxx11-cu124-x86_64-linux",
        "torch-universal",
    ]


@pytest.mark.parametrize(
    ("name", "tvm_ffi", "backend_tag"),
    [
        ("tvm-ffi01-cu128-x86_64-linux", (0, 1), "cu128"),
        ("tvm-ffi012-cpu-aarch64-linux", (0, 12), "cpu"),
        ("tvm-ffi10-metal-aarch64-darwin", (1, 0), "metal"),
    ],
)
def test_tvm_ffi_builds_load_where_that_tvm_ffi_is_installed(
    name: str, tvm_ffi: tuple[int, int], backend_tag: str
) -> None:
    variant = parse_variant(name)
    assert (variant.tier, variant.tvm_ffi, variant.torch) == ("tvm-ffi", tvm_ffi, None)
    assert variant.backend_tag == backend_tag and variant.abi is None
    system = {"cu128": CUDA._replace(backend_tag="cu128"), "cpu": CPU, "metal": MAC}[backend_tag]
    system = system._replace(arch=variant.arch, os=variant.os)
    reason = verdict(name, system)
    assert f"built against tvm-ffi {tvm_ffi[0]}.{tvm_ffi[1]}, which is not installed" == reason
    assert verdict(name, system._replace(tvm_ffi=tvm_ffi)) == "ok"
    other = verdict(name, system._replace(tvm_ffi=(tvm_ffi[0], tvm_ffi[1] + 1)))
    assert (
        other
        == f"built against tvm-ffi {tvm_ffi[0]}.{tvm_ffi[1]}, found {tvm_ffi[0]}.{tvm_ffi[1] + 1}"
    )


def test_tvm_ffi_builds_rank_after_torch_builds_and_are_probed_where_installed() -> None:
    system = CUDA._replace(tvm_ffi=(0, 1))
    published = ["torch-cuda", "tvm-ffi01-cu126-x86_64-linux", "torch212-cxx11-cu126-x86_64-linux"]
    accepted = [str(r.variant) for r in judge_variants(published, system)]
    assert accepted == [
        "torch212-cxx11-cu126-x86_64-linux",
        "tvm-ffi01-cu126-x86_64-linux",
        "torch-cuda",
    ]
    assert "tvm-ffi01-cu124-x86_64-linux" in candidate_names(system)
    assert not any(name.startswith("tvm-ffi") for name in candidate_names(CUDA))


@pytest.mark.parametrize(
    ("name", "backend", "backend_tag", "tier"),
    [
        ("torch-neuron", "neuron", None, "noarch"),
        ("torch-tpu", "tpu", None, "noarch"),
        ("torch-npu", "npu", None, "noarch"),
        ("torch213-cxx11-tpu-x86_64-linux", "tpu", "tpu", "exact"),
        ("torch210-neuron-x86_64-linux", "neuron", "neuron", "exact"),
        ("torch29-cann81-aarch64-linux", "npu", "cann81", "exact"),
    ],
)
def test_npu_tpu_and_neuron_builds_load_on_their_backend_only(
    name: str, backend: str, backend_tag: str | None, tier: str
) -> None:
    variant = parse_variant(name)
    assert (variant.backend, variant.backend_tag, variant.tier) == (backend, backend_tag, tier)
    for system in (CPU, CUDA, ROCM, MAC, XPU):
        reason = verdict(name, system)
        assert f"built for {backend_tag or backend}" in reason and "backend=" not in reason
    verdicts = judge_variants([name, "torch-universal"], CPU)
    assert [type(r) for r in verdicts] == [VariantAccepted, VariantRejected]
    own = {"npu": NPU, "tpu": TPU, "neuron": NEURON}[backend]
    own = own._replace(torch=variant.torch or own.torch, arch=variant.arch or own.arch)
    assert verdict(name, own) == "ok"
    assert candidate_names(own)[-2:] == [f"torch-{backend}", "torch-universal"]


def test_an_npu_build_needs_its_cann_version() -> None:
    assert "built for cann80, this system has cann81" in verdict(
        "torch29-cann80-aarch64-linux", NPU
    )


def test_layer_mappings_accept_the_extra_device_types() -> None:
    for device_type in ("neuron", "tpu", "npu"):
        assert as_device(device_type) == Device(device_type)
    with pytest.raises(ValueError, match="neuron, tpu"):
        Device("gpu")


def test_exact_build_rules() -> None:
    assert verdict("torch213-cxx11-cpu-x86_64-linux", CPU) == "ok"
    assert "torch 2.12" in verdict("torch212-cxx11-cpu-x86_64-linux", CPU)
    assert "cxx98" in verdict("torch213-cxx98-cpu-x86_64-linux", CPU)
    assert "aarch64-linux" in verdict("torch213-cxx11-cpu-aarch64-linux", CPU)
    cuda_on_cpu = verdict("torch213-cxx11-cu126-x86_64-linux", CPU)
    assert "built for cu126" in cuda_on_cpu and "backend=" not in cuda_on_cpu
    cpu_on_cuda = verdict("torch212-cxx11-cpu-x86_64-linux", CUDA)  # forced by a caller only
    assert cpu_on_cuda == "built for cpu, but this system uses cu126"


def test_cuda_needs_same_major_and_minor_at_most_the_systems() -> None:
    assert verdict("torch212-cxx11-cu124-x86_64-linux", CUDA) == "ok"
    assert verdict("torch212-cxx11-cu126-x86_64-linux", CUDA) == "ok"
    assert "CUDA 12.8" in verdict("torch212-cxx11-cu128-x86_64-linux", CUDA)
    assert "CUDA 11.8" in verdict("torch212-cxx11-cu118-x86_64-linux", CUDA)


def test_rocm_follows_cuda_and_other_backends_match_exactly() -> None:
    """As Hugging Face kernels 0.19 judges them: ROCm x.z runs on ROCm x.y when z <= y."""
    assert verdict("torch212-cxx11-rocm63-x86_64-linux", ROCM) == "ok"
    assert verdict("torch212-cxx11-rocm62-x86_64-linux", ROCM) == "ok"
    assert "ROCm 6.4" in verdict("torch212-cxx11-rocm64-x86_64-linux", ROCM)
    assert "ROCm 5.7" in verdict("torch212-cxx11-rocm57-x86_64-linux", ROCM)
    assert verdict("torch212-metal-aarch64-darwin", MAC) == "ok"
    for macos in ((15, 7), None):  # Metal builds need macOS 26: the noarch one is taken
        old_mac = MAC._replace(macos=macos)
        assert "require macOS 26.0 or later" in verdict("torch212-metal-aarch64-darwin", old_mac)
        assert "require macOS 26.0" in verdict("torch-stable-abi29-metal-aarch64-darwin", old_mac)
        assert verdict("torch-metal", old_mac) == "ok"
    assert verdict("torch212-cxx11-xpu20251-x86_64-linux", XPU) == "ok"
    assert "xpu20250" in verdict("torch212-cxx11-xpu20250-x86_64-linux", XPU)


def test_stable_abi_fits_torch_at_or_above() -> None:
    assert verdict("torch-stable-abi210-cpu-x86_64-linux", CPU) == "ok"
    assert verdict("torch-stable-abi213-cpu-x86_64-linux", CPU) == "ok"
    assert "torch >= 2.14" in verdict("torch-stable-abi214-cpu-x86_64-linux", CPU)


def test_noarch_and_universal() -> None:
    assert verdict("torch-cpu", CPU) == "ok"
    assert verdict("torch-cuda", CUDA) == "ok"
    assert "cuda" in verdict("torch-cuda", CPU)
    for system in (CPU, CUDA, ROCM, MAC, XPU):
        assert verdict("torch-universal", system) == "ok"


def test_preference_order() -> None:
    published = [
        "torch-universal",
        "torch-cuda",
        "torch212-cxx11-cu124-x86_64-linux",
        "torch212-cxx11-cu126-x86_64-linux",
        "torch-stable-abi210-cu126-x86_64-linux",
        "torch-stable-abi211-cu124-x86_64-linux",
        "torch213-cxx11-cu126-x86_64-linux",
    ]
    verdicts = judge_variants(published, CUDA)
    accepted = [r.variant for r in verdicts if isinstance(r, VariantAccepted)]
    assert accepted == [
        "torch-stable-abi211-cu124-x86_64-linux",
        "torch-stable-abi210-cu126-x86_64-linux",
        "torch212-cxx11-cu126-x86_64-linux",
        "torch212-cxx11-cu124-x86_64-linux",
        "torch-cuda",
        "torch-universal",
    ]
    assert isinstance(verdicts[-1], VariantRejected)
    trace = format_trace(verdicts)
    assert (
        "+ torch-universal" in trace
        and "- torch213-cxx11-cu126-x86_64-linux: built for torch 2.13" in trace
    )


def test_build_variant_name() -> None:
    assert build_variant_name(CPU) == "torch213-cxx11-cpu-x86_64-linux"
    assert build_variant_name(MAC) == "torch212-metal-aarch64-darwin"


def test_candidates_are_in_preference_order_and_all_accepted() -> None:
    for system in (CPU, CUDA, ROCM, MAC):
        names = candidate_names(system)
        verdicts = judge_variants(names, system)
        assert all(isinstance(r, VariantAccepted) for r in verdicts), format_trace(verdicts)
        assert [r.variant for r in verdicts] == names
        assert names[-1] == "torch-universal"
    assert "torch212-cxx11-cu120-x86_64-linux" in candidate_names(CUDA)
    cuda = candidate_names(CUDA)
    assert cuda.index("torch212-cu120-x86_64-linux") < cuda.index(
        "torch212-cxx11-cu126-x86_64-linux"
    )


def test_with_backend_forces_cpu() -> None:
    assert verdict("torch212-cxx11-cpu-x86_64-linux", with_backend(CUDA, "cpu")) == "ok"
    with pytest.raises(ValueError, match="only 'cpu'"):
        with_backend(CPU, "cuda")


def test_a_variant_is_its_name_with_the_parsed_fields() -> None:
    accepted, rejected = judge_variants(
        ["torch-universal", "torch213-cxx11-cu126-x86_64-linux"], CPU
    )
    assert isinstance(accepted, VariantAccepted) and isinstance(rejected, VariantRejected)
    universal, cuda = accepted.variant, rejected.variant
    # As a str, the way 0.1.2 code reads it.
    assert universal == "torch-universal" and str(universal) == "torch-universal"
    assert type(str(universal)) is str and f"{universal}" == "torch-universal"
    assert hash(universal) == hash("torch-universal")
    assert {universal: 1}["torch-universal"] == 1
    assert sorted([cuda, universal, "torch-cpu"]) == [
        "torch-cpu",
        "torch-universal",
        "torch213-cxx11-cu126-x86_64-linux",
    ]
    assert json.dumps({"variants": [universal, cuda]}) == (
        '{"variants": ["torch-universal", "torch213-cxx11-cu126-x86_64-linux"]}'
    )
    assert json.dumps(dataclasses.asdict(accepted)) == '{"variant": "torch-universal"}'
    assert accepted.variant_str == "torch-universal" and type(accepted.variant_str) is str
    # With the parsed fields.
    assert (cuda.backend, cuda.backend_tag, cuda.torch) == ("cuda", "cu126", (2, 13))
    assert (cuda.tier, cuda.abi, cuda.arch, cuda.os) == ("exact", "cxx11", "x86_64", "linux")
    assert cuda.backend_version == (12, 6) and cuda.name == str(cuda)
    assert (universal.tier, universal.backend, universal.torch) == ("universal", None, None)
    assert repr(cuda) == "Variant('torch213-cxx11-cu126-x86_64-linux')"
    assert repr(accepted) == "VariantAccepted(variant=Variant('torch-universal'))"


def test_a_variant_is_immutable_and_survives_copies() -> None:
    variant = Variant("torch213-cxx11-cpu-x86_64-linux")
    with pytest.raises(AttributeError):
        variant.backend = "cuda"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        variant.extra = 1  # type: ignore[attr-defined]
    for clone in (pickle.loads(pickle.dumps(variant)), copy.deepcopy(variant)):
        assert type(clone) is Variant and clone == variant and clone.torch == (2, 13)
    unparsed = judge_variants(["not-a-variant"], CPU)[0].variant
    assert pickle.loads(pickle.dumps(unparsed)).tier is None
    with pytest.raises(VariantNameError, match="not a variant name"):
        Variant("not-a-variant")


def test_records_built_from_plain_names_get_parsed_variants() -> None:
    accepted = VariantAccepted("torch-cpu")  # type: ignore[arg-type]
    rejected = VariantRejected("bogus", "not a variant name")  # type: ignore[arg-type]
    assert isinstance(accepted.variant, Variant) and accepted.variant.backend == "cpu"
    assert isinstance(rejected.variant, Variant) and rejected.variant.tier is None
    assert accepted == VariantAccepted(Variant("torch-cpu"))
