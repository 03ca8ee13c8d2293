"""Hugging Face kernels' own ``tests/test_variants.py``, ported to this API.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names, variant lists and
assertions follow the original; what differs:

- ``parse_variant(s).variant_str == s`` is ``parse_variant(s) == s`` with the name parsed
  (a :class:`~flashhub_kernels._variants.grammar.Variant` is the name, as a ``str``, carrying
  the parsed fields).
- ``_resolve_variant_for_system(variants, selected_backend=CUDA(Version("12.8")), cpu=,
  os=, torch_version=, torch_cxx11_abi=, ...)`` is :func:`resolve`: the variants judged
  by ``judge_variants`` against a ``SystemInfo`` (backend tag ``cu128``, arch, OS,
  torch ``(2, 10)``, C++ ABI), the accepted ones in preference order and the trace.
- ``get_variants(api, repo_id=..., revision="v1")`` is ``get_kernel_variants(repo_id,
  version=1)``, against ``kernels-community/relu`` v1 published with the Hub's variant
  names on the loopback CDN.
- ``SystemInfo`` has no macOS version: the Metal tests that reject builds for macOS 26
  on an older system fail, marked ``xfail(strict=True)`` below.
"""

from __future__ import annotations

import pytest

from flashhub_kernels import VariantAccepted, VariantRejected, get_kernel_variants
from flashhub_kernels._variants.grammar import Variant, parse_variant
from flashhub_kernels._variants.system import SystemInfo
from flashhub_kernels._variants.verdicts import VariantVerdict, judge_variants
from support.cdn_server import CdnServer
from support.hf_kernels import RELU, package, write_hf_kernel

VARIANT_STRINGS = (
    [
        f"{torch}{abi}-{backend}-{system}"
        for torch in ["torch25", "torch29", "torch210"]
        for abi in ["", "-cxx98", "-cxx11"]
        for backend in [
            "cpu",
            "cu126",
            "cu128",
            "cu130",
            "rocm63",
            "rocm64",
            "xpu20252",
        ]
        for system in ["aarch64-linux", "x86_64-linux"]
    ]
    + [
        f"{framework}-{backend}-{system}"
        for framework in ["torch25", "torch29", "torch210", "tvm-ffi01"]
        for backend in ["cpu", "metal"]
        for system in ["aarch64-darwin"]
    ]
    + [
        f"{tvmFfi}-{backend}-{system}"
        for tvmFfi in ["tvm-ffi01"]
        for backend in [
            "cpu",
            "cu126",
            "cu128",
            "cu130",
            "rocm63",
            "rocm64",
            "xpu20252",
        ]
        for system in ["aarch64-linux", "x86_64-linux"]
    ]
)

STABLE_ABI_VARIANT_STRINGS = [
    f"torch-stable-abi{abi_ver}-{backend}-{system}"
    for abi_ver in ["211", "29"]
    for backend in [
        "cpu",
        "cu126",
        "cu128",
        "cu130",
        "rocm63",
        "rocm64",
        "xpu20252",
    ]
    for system in ["aarch64-linux", "x86_64-linux"]
] + [
    f"torch-stable-abi{abi_ver}-{backend}-{system}"
    for abi_ver in ["211", "29"]
    for backend in ["cpu", "metal"]
    for system in ["aarch64-darwin"]
]

NOARCH_VARIANT_STRINGS = [
    "torch-cpu",
    "torch-cuda",
    "torch-metal",
    "torch-neuron",
    "torch-rocm",
    "torch-tpu",
    "torch-xpu",
    "torch-npu",
    "torch-universal",
]

SUPERSET_VARIANT_STRINGS = [
    "torch210-cpu-aarch64-darwin",
    "torch210-cxx11-cpu-aarch64-linux",
    "torch210-cxx11-cpu-x86_64-linux",
    "torch210-cxx11-cu126-aarch64-linux",
    "torch210-cxx11-cu126-x86_64-linux",
    "torch210-cxx11-cu128-aarch64-linux",
    "torch210-cxx11-cu128-x86_64-linux",
    "torch210-cxx11-cu130-aarch64-linux",
    "torch210-cxx11-cu130-x86_64-linux",
    "torch210-cxx11-rocm70-x86_64-linux",
    "torch210-cxx11-rocm71-x86_64-linux",
    "torch210-cxx11-xpu20253-x86_64-linux",
    "torch210-metal-aarch64-darwin",
    "torch211-cpu-aarch64-darwin",
    "torch211-cxx11-cpu-aarch64-linux",
    "torch211-cxx11-cpu-x86_64-linux",
    "torch211-cxx11-cu126-aarch64-linux",
    "torch211-cxx11-cu126-x86_64-linux",
    "torch211-cxx11-cu128-aarch64-linux",
    "torch211-cxx11-cu128-x86_64-linux",
    "torch211-cxx11-cu130-aarch64-linux",
    "torch211-cxx11-cu130-x86_64-linux",
    "torch211-cxx11-rocm71-x86_64-linux",
    "torch211-cxx11-rocm72-x86_64-linux",
    "torch211-cxx11-xpu20253-x86_64-linux",
    "torch211-metal-aarch64-darwin",
    "torch212-cpu-aarch64-darwin",
    "torch212-cxx11-cpu-aarch64-linux",
    "torch212-cxx11-cpu-x86_64-linux",
    "torch212-cxx11-cu126-aarch64-linux",
    "torch212-cxx11-cu126-x86_64-linux",
    "torch212-cxx11-cu130-aarch64-linux",
    "torch212-cxx11-cu130-x86_64-linux",
    "torch212-cxx11-cu132-aarch64-linux",
    "torch212-cxx11-cu132-x86_64-linux",
    "torch212-cxx11-rocm71-x86_64-linux",
    "torch212-cxx11-rocm72-x86_64-linux",
    "torch212-cxx11-xpu20253-x86_64-linux",
    "torch212-metal-aarch64-darwin",
]


@pytest.mark.parametrize("variant_str", VARIANT_STRINGS)
def test_arch_variants(variant_str: str) -> None:
    # Roundtrip parse and generate variant string.
    assert parse_variant(variant_str) == variant_str
    assert parse_variant(variant_str).tier in ("exact", "tvm-ffi")


@pytest.mark.parametrize("variant_str", STABLE_ABI_VARIANT_STRINGS)
def test_stable_abi_variants(variant_str: str) -> None:
    # Roundtrip parse and generate variant string.
    assert parse_variant(variant_str) == variant_str
    assert parse_variant(variant_str).tier == "stable-abi"


@pytest.mark.parametrize("variant_str", NOARCH_VARIANT_STRINGS)
def test_noarch_variants(variant_str: str) -> None:
    # Roundtrip parse and generate variant string.
    assert parse_variant(variant_str) == variant_str
    assert parse_variant(variant_str).tier in ("noarch", "universal")


def test_get_variants(cdn: CdnServer) -> None:
    files = package("relu", {"__init__.py": "def relu(x):\n    return x.relu()\n"})
    write_hf_kernel(cdn.root, RELU, 1, SUPERSET_VARIANT_STRINGS, files)
    variants = get_kernel_variants(RELU, version=1)
    variant_strs = {v.variant_str for v in variants}
    # Superset because new variants may be added in the future.
    assert variant_strs.issuperset(SUPERSET_VARIANT_STRINGS)


def test_a_verdicts_variant_has_its_variant_str(cdn: CdnServer) -> None:
    # Hugging Face's get_kernel_variants example names each one decision.variant.variant_str
    files = package("relu", {"__init__.py": "def relu(x):\n    return x.relu()\n"})
    names = ["torch-universal", "torch-npu", "no_such_name"]
    write_hf_kernel(cdn.root, RELU, 1, names, files)
    verdicts = get_kernel_variants(RELU, version=1)
    assert sorted(v.variant.variant_str for v in verdicts) == sorted(names)
    assert all(type(v.variant.variant_str) is str for v in verdicts)


def test_get_kernel_variants_takes_a_revision(cdn: CdnServer) -> None:
    files = package("relu", {"__init__.py": "def relu(x):\n    return x.relu()\n"})
    write_hf_kernel(cdn.root, RELU, 1, ["torch-universal"], files)
    write_hf_kernel(cdn.root, RELU, 2, ["torch-cpu", "torch-universal"], files)
    assert [v.variant for v in get_kernel_variants(RELU, revision="v1")] == ["torch-universal"]
    assert get_kernel_variants(RELU, revision="2") == get_kernel_variants(RELU, version=2)
    with pytest.raises(ValueError, match="give exactly one of version= or revision="):
        get_kernel_variants(RELU, version=1, revision="v1")
    with pytest.raises(ValueError, match="invalid revision 'main'"):
        get_kernel_variants(RELU, revision="main")


def system(
    backend_tag: str,
    *,
    cpu: str = "x86_64",
    os: str = "linux",
    torch_version: tuple[int, int] = (2, 10),
    torch_cxx11_abi: bool = True,
    macos_version: str | None = None,
) -> SystemInfo:
    """The system HF's resolver is given: ``CUDA(Version("12.8"))`` is ``"cu128"``."""
    backend = {"cu": "cuda", "ro": "rocm"}.get(backend_tag[:2], backend_tag)
    return SystemInfo(
        torch=torch_version,
        cxx11_abi=torch_cxx11_abi,
        backend=backend,
        backend_tag=backend_tag,
        arch=cpu,
        os=os,
        macos=None if macos_version is None else _major_minor(macos_version),
    )


def _major_minor(version: str) -> tuple[int, int]:
    major, minor = version.split(".")
    return int(major), int(minor)


def resolve(variants: list[Variant], on: SystemInfo) -> tuple[list[Variant], list[VariantVerdict]]:
    """``_resolve_variant_for_system``: the accepted variants, best first, and the trace."""
    trace = judge_variants(variants, on)
    return [vs.variant for vs in trace if isinstance(vs, VariantAccepted)], trace


RESOLVE_VARIANTS = [
    parse_variant(s)
    for s in [
        "torch210-cxx11-cu128-x86_64-linux",
        "torch210-cxx11-cu126-x86_64-linux",
        "torch210-cxx11-cu130-x86_64-linux",
        "torch210-cxx11-rocm70-x86_64-linux",
        "torch210-cxx11-cpu-x86_64-linux",
        "torch210-cpu-aarch64-darwin",
        "torch210-metal-aarch64-darwin",
        "torch-cuda",
        "torch-cpu",
    ]
]


def test_resolve_cuda_exact() -> None:
    # CUDA 12.8 should resolve to cu128.
    result, trace = resolve(RESOLVE_VARIANTS, system("cu128"))
    assert result != []
    assert result[0] == "torch210-cxx11-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_cuda_best_older_minor() -> None:
    # CUDA 12.9 is not available, should fall back to cu128 (highest <= 12.9).
    result, trace = resolve(RESOLVE_VARIANTS, system("cu129"))
    assert result != []
    assert result[0] == "torch210-cxx11-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_cuda_no_newer_minor() -> None:
    # CUDA 12.5 is older than all the variants, fall back to noarch.
    result, trace = resolve(RESOLVE_VARIANTS, system("cu125"))
    assert result != []
    assert result[0] == "torch-cuda"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_cuda_no_different_major() -> None:
    # Different major version must not match.
    result, trace = resolve(RESOLVE_VARIANTS, system("cu118"))
    assert result != []
    assert result[0] == "torch-cuda"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_rocm() -> None:
    result, trace = resolve(RESOLVE_VARIANTS, system("rocm70"))
    assert result != []
    assert result[0] == "torch210-cxx11-rocm70-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_cpu_linux() -> None:
    result, trace = resolve(RESOLVE_VARIANTS, system("cpu"))
    assert result != []
    assert result[0] == "torch210-cxx11-cpu-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_cpu_darwin() -> None:
    on = system("cpu", cpu="aarch64", os="darwin", torch_cxx11_abi=False)
    result, trace = resolve(RESOLVE_VARIANTS, on)
    assert result != []
    assert result[0] == "torch210-cpu-aarch64-darwin"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_metal_darwin() -> None:
    on = system("metal", cpu="aarch64", os="darwin", torch_cxx11_abi=False, macos_version="26.0")
    result, trace = resolve(RESOLVE_VARIANTS, on)
    assert result != []
    assert result[0] == "torch210-metal-aarch64-darwin"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


RESOLVE_VARIANTS_METAL = [
    parse_variant(s)
    for s in [
        "torch210-cpu-aarch64-darwin",
        "torch210-metal-aarch64-darwin",
        "torch-metal",
    ]
]


@pytest.mark.parametrize("macos_version", ["15.7", None])
def test_resolve_metal_darwin_old_macos(macos_version: str | None) -> None:
    # Metal arch kernels are built for macOS 26+, so they must be rejected
    # on older systems (falling back to the noarch variant).
    on = system(
        "metal", cpu="aarch64", os="darwin", torch_cxx11_abi=False, macos_version=macos_version
    )
    result, trace = resolve(RESOLVE_VARIANTS_METAL, on)
    assert result != []
    assert result[0] == "torch-metal"
    rejected = {vs.variant: vs.reason for vs in trace if isinstance(vs, VariantRejected)}
    assert "require macOS 26.0" in rejected["torch210-metal-aarch64-darwin"]
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_METAL)


def test_resolve_metal_darwin_new_macos() -> None:
    # On macOS 26+ the Metal arch kernel is accepted and preferred.
    on = system("metal", cpu="aarch64", os="darwin", torch_cxx11_abi=False, macos_version="26.1")
    result, trace = resolve(RESOLVE_VARIANTS_METAL, on)
    assert result != []
    assert result[0] == "torch210-metal-aarch64-darwin"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_METAL)


def test_resolve_noarch_fallback() -> None:
    # With no matching arch variant, should fall back to torch noarch.
    result, trace = resolve(RESOLVE_VARIANTS, system("cu128", cpu="aarch64"))
    assert result != []
    assert result[0] == "torch-cuda"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


def test_resolve_no_match() -> None:
    result, trace = resolve(RESOLVE_VARIANTS, system("rocm70", torch_version=(2, 9)))
    assert result == []
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS)


RESOLVE_VARIANTS_UNIVERSAL = [
    parse_variant(s)
    for s in [
        "torch210-cxx11-cu128-x86_64-linux",
        "torch-universal",
    ]
]


def test_resolve_universal_matches_any_backend() -> None:
    # Universal works with every backend.
    result, trace = resolve(RESOLVE_VARIANTS_UNIVERSAL, system("rocm70", torch_version=(2, 9)))
    assert result != []
    assert result[0] == "torch-universal"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_UNIVERSAL)


def test_resolve_universal_is_last_resort() -> None:
    # Specific match is preferred over universal.
    result, trace = resolve(RESOLVE_VARIANTS_UNIVERSAL, system("cu128"))
    assert result != []
    assert result[0] == "torch210-cxx11-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_UNIVERSAL)


def test_resolve_specific_noarch_preferred_over_universal() -> None:
    # Backend-specific noarch is preferred over universal.
    variants = [parse_variant(s) for s in ["torch-universal", "torch-cuda"]]
    result, trace = resolve(variants, system("cu128", torch_version=(2, 9)))
    assert result != []
    assert result[0] == "torch-cuda"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(variants)


RESOLVE_VARIANTS_NO_NOARCH = [
    parse_variant(s)
    for s in [
        "torch210-cxx11-cu126-x86_64-linux",
        "torch210-cxx11-cu128-x86_64-linux",
        "torch210-cxx11-cu130-x86_64-linux",
    ]
]


def test_resolve_cuda_no_newer_minor_no_noarch() -> None:
    # No compatible variant for 12.5.
    result, trace = resolve(RESOLVE_VARIANTS_NO_NOARCH, system("cu125"))
    assert result == []
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_NO_NOARCH)


def test_resolve_cuda_no_different_major_no_noarch() -> None:
    # 11.8 has a different major, so there is no compatible fallback.
    result, trace = resolve(RESOLVE_VARIANTS_NO_NOARCH, system("cu118"))
    assert result == []
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_NO_NOARCH)


RESOLVE_VARIANTS_STABLE_ABI = [
    parse_variant(s)
    for s in [
        "torch-stable-abi211-cu128-x86_64-linux",
        "torch210-cxx11-cu128-x86_64-linux",
        "torch-cuda",
    ]
]


def test_resolve_stable_abi_accepted() -> None:
    # Stable ABI 2.11 is accepted when torch_version == stable ABI version.
    result, trace = resolve(RESOLVE_VARIANTS_STABLE_ABI, system("cu128", torch_version=(2, 11)))
    assert result != []
    assert result[0] == "torch-stable-abi211-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_STABLE_ABI)


def test_resolve_stable_abi_accepted_newer_torch() -> None:
    # Stable ABI 2.11 is also accepted when torch_version > stable ABI version.
    result, trace = resolve(RESOLVE_VARIANTS_STABLE_ABI, system("cu128", torch_version=(2, 12)))
    assert result != []
    assert result[0] == "torch-stable-abi211-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_STABLE_ABI)


def test_resolve_stable_abi_rejected_newer_abi() -> None:
    # Stable ABI 2.11 is rejected when torch_version < stable ABI version.
    result, trace = resolve(RESOLVE_VARIANTS_STABLE_ABI, system("cu128", torch_version=(2, 10)))
    assert result != []
    assert result[0] == "torch210-cxx11-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(RESOLVE_VARIANTS_STABLE_ABI)


def test_resolve_stable_abi_newest_version_preferred() -> None:
    # When multiple stable ABI versions are accepted, the newest is preferred.
    variants = [
        parse_variant(s)
        for s in [
            "torch-stable-abi29-cu128-x86_64-linux",
            "torch-stable-abi211-cu128-x86_64-linux",
        ]
    ]
    result, trace = resolve(variants, system("cu128", torch_version=(2, 12)))
    assert result != []
    assert result[0] == "torch-stable-abi211-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(variants)


def test_resolve_tagless_preferred_over_abi_tagged() -> None:
    # Tagless variant (e.g. torch210-cu128) should be preferred over ABI-tagged
    # (e.g. torch210-cxx11-cu128) when both are accepted.
    variants = [
        parse_variant(s)
        for s in [
            "torch210-cxx11-cu128-x86_64-linux",
            "torch210-cu128-x86_64-linux",
        ]
    ]
    result, trace = resolve(variants, system("cu128"))
    assert result != []
    assert result[0] == "torch210-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(variants)


def test_resolve_stable_abi_preferred_over_torch() -> None:
    # TorchStableAbi variant is preferred over a regular Torch variant of the same version.
    variants = [
        parse_variant(s)
        for s in [
            "torch-stable-abi211-cu128-x86_64-linux",
            "torch211-cxx11-cu128-x86_64-linux",
        ]
    ]
    result, trace = resolve(variants, system("cu128", torch_version=(2, 11)))
    assert result != []
    assert result[0] == "torch-stable-abi211-cu128-x86_64-linux"
    assert result == [vs.variant for vs in trace if isinstance(vs, VariantAccepted)]
    assert {vs.variant for vs in trace} == set(variants)
