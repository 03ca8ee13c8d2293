"""Today's variant names (Hugging Face kernels 0.19's builder) beside the legacy ones:
parsed, judged and ordered as that release's resolver does them, and loaded through the
import hook and lock files.

The expected orders below are what kernels 0.19.1's own resolver gives for the same
names and system (a CUDA 12.8 or CPU torch 2.12/2.13 on CPython 3.11, x86_64 Linux). Where
it leaves two names in no particular order (it collects them in a set), they are ordered
by name here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from conftest import run_python
from flashhub_kernels._publish import publish
from flashhub_kernels._variants.grammar import VariantNameError, as_variant, parse_variant
from flashhub_kernels._variants.named_system import system_from_variant
from flashhub_kernels._variants.system import SystemInfo
from flashhub_kernels._variants.verdicts import VariantAccepted, describe_system, judge_variants
from support.builds import REPO, make_kernel
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.projects import lockfile_of, write_project
from support.trees import local_variant, todays_name, write_kernel

CPU = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux", python=(3, 11))
CUDA = SystemInfo((2, 12), True, "cuda", "cu128", "x86_64", "linux", python=(3, 11))


@pytest.mark.parametrize(
    ("name", "fields"),
    [
        (
            "torch-2.13-cxx11-cpu-cpython-3.11-abi3-x86_64-linux",
            {"tier": "exact", "torch": (2, 13), "abi": "cxx11", "backend_tag": "cpu"},
        ),
        (
            "torch-2.10-cxx11-cuda-12.8-cpython-3.12-abi3-x86_64-linux",
            {"backend": "cuda", "backend_tag": "cu128", "backend_version": (12, 8)},
        ),
        (
            "torch-2.10-rocm-7.14-cpython-3.15-abi3t-x86_64-linux",
            {"backend_tag": "rocm714", "backend_version": (7, 14), "python_abi": "abi3t"},
        ),
        ("torch29-rocm714-x86_64-linux", {"backend_version": (7, 14), "python": (3, 9)}),
        ("torch-2.9-xpu-2025.1-cpython-3.10-abi3-x86_64-linux", {"backend_tag": "xpu20251"}),
        ("torch-2.10-cann-8.1-cpython-3.10-abi3-aarch64-linux", {"backend": "npu"}),
        (
            "torch-stable-abi-2.11-cuda-12.8-cpython-3.9-abi3-x86_64-linux",
            {"tier": "stable-abi", "torch": (2, 11), "python": (3, 9)},
        ),
        (
            "tvm-ffi-0.1-cuda-12.8-cpython-3.10-abi3-x86_64-linux",
            {"tier": "tvm-ffi", "tvm_ffi": (0, 1), "torch": None},
        ),
        ("sdk", {"tier": "sdk", "framework": "sdk", "backend": None, "arch": None}),
        ("sdk-cuda", {"tier": "sdk", "backend": "cuda", "python": None}),
        (
            "sdk-cpython-3.12-abi3-x86_64-linux",
            {"tier": "sdk", "backend": None, "python": (3, 12), "arch": "x86_64"},
        ),
        (
            "sdk-cuda-12.8-cpython-3.12-abi3-x86_64-linux",
            {"tier": "sdk", "backend_tag": "cu128", "torch": None},
        ),
        ("mlx-metal", {"tier": "noarch", "framework": "mlx", "backend": "metal"}),
        ("mlx-universal", {"tier": "universal", "framework": "mlx", "backend": None}),
        ("torch-gpu", {"tier": "noarch", "backend": "gpu"}),  # parsed; fits no system
        ("torch213-cxx11-cu126-x86_64-linux", {"python": (3, 9), "python_abi": "abi3"}),
    ],
)
def test_every_spelling_parses_into_its_fields(name: str, fields: dict[str, object]) -> None:
    variant = parse_variant(name)
    assert variant == name
    assert {key: getattr(variant, key) for key in fields} == fields


@pytest.mark.parametrize(
    "name",
    [
        "torch-2.13-cpu-x86_64-linux",  # today's spelling needs the CPython part
        "torch-2.13-cpu-cpython-3.14-abi3t-x86_64-linux",  # abi3t starts at 3.15
        "torch-2.13-cpu-cpython-3-abi3-x86_64-linux",
        "torch-2.13-cpu-cpython-3.11-abi4-x86_64-linux",
        "torch-2.13-cuda-cpython-3.11-abi3-x86_64-linux",  # cuda needs a version
        "torch-2.13-cu128-cpython-3.11-abi3-x86_64-linux",  # legacy tag, today's spelling
        "torch-stable-abi-2.11",
        "sdk-cuda-12.8",  # a versioned backend comes with compiled parts
        "sdk-cuda-extra",
        "torch-2.x-cpu-cpython-3.11-abi3-x86_64-linux",
    ],
)
def test_malformed_names_of_todays_spelling_are_no_variant(name: str) -> None:
    with pytest.raises(VariantNameError, match="is not a variant name"):
        parse_variant(name)
    assert as_variant(name).tier is None


def _judged(names: list[str], system: SystemInfo) -> list[tuple[str, str | None]]:
    return [
        (str(v.variant), None if isinstance(v, VariantAccepted) else v.reason)
        for v in judge_variants(names, system)
    ]


def test_a_cpu_system_judges_and_orders_as_kernels_0_19_does(monkeypatch) -> None:
    monkeypatch.setattr("flashhub_kernels._variants.compat.mlx_installed", lambda: False)
    published = [
        "torch-universal",
        "torch-cpu",
        "sdk",
        "sdk-cpu",
        "sdk-cpython-3.9-abi3-x86_64-linux",
        "sdk-cpu-cpython-3.10-abi3-x86_64-linux",
        "torch213-cxx11-cpu-x86_64-linux",
        "torch213-cpu-x86_64-linux",
        "torch-2.13-cxx11-cpu-cpython-3.11-abi3-x86_64-linux",
        "torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux",
        "torch-2.13-cpu-cpython-3.12-abi3-x86_64-linux",
        "torch-stable-abi210-cpu-x86_64-linux",
        "torch-stable-abi-2.11-cpu-cpython-3.9-abi3-x86_64-linux",
        "torch-stable-abi-2.14-cpu-cpython-3.9-abi3-x86_64-linux",
        "mlx-cpu",
        "torch-2.13-cpu-cpython-3.15-abi3t-x86_64-linux",
    ]
    judged = _judged(published, CPU)
    assert [name for name, reason in judged if reason is None] == [
        "torch-stable-abi-2.11-cpu-cpython-3.9-abi3-x86_64-linux",
        "torch-stable-abi210-cpu-x86_64-linux",
        "torch-2.13-cpu-cpython-3.10-abi3-x86_64-linux",
        "torch213-cpu-x86_64-linux",
        "torch-2.13-cxx11-cpu-cpython-3.11-abi3-x86_64-linux",
        "torch213-cxx11-cpu-x86_64-linux",
        "sdk-cpu-cpython-3.10-abi3-x86_64-linux",
        "sdk-cpython-3.9-abi3-x86_64-linux",
        "torch-cpu",
        "torch-universal",
        "sdk-cpu",
        "sdk",
    ]
    reasons = {name: reason for name, reason in judged if reason is not None}
    assert "needs CPython 3.12 or later" in reasons[published[10]]
    assert "torch >= 2.14" in reasons[published[13]]
    assert "MLX" in reasons["mlx-cpu"] and "pip install mlx" in reasons["mlx-cpu"]
    assert "CPython 3.15 or later (abi3t)" in reasons[published[15]]


def test_mlx_universal_loads_wherever_mlx_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("flashhub_kernels._variants.compat.mlx_installed", lambda: True)
    assert _judged(["torch-cuda", "mlx-universal"], CPU)[0] == ("mlx-universal", None)
    monkeypatch.setattr("flashhub_kernels._variants.compat.mlx_installed", lambda: False)
    ((_, reason),) = _judged(["mlx-universal"], CPU)
    assert reason is not None and "pip install mlx" in reason


def test_a_cxx_abi_tag_loads_on_linux_only() -> None:
    """Off Linux torch has no C++ ABI to match (kernels 0.19 reads none there): a tagged
    name is passed over for an untagged one or torch-universal."""
    mac = SystemInfo((2, 10), True, "metal", "metal", "aarch64", "darwin", macos=(26, 0))
    tagged, untagged = "torch210-cxx11-metal-aarch64-darwin", "torch210-metal-aarch64-darwin"
    assert _judged([tagged, "torch-universal", untagged], mac) == [
        (untagged, None),
        ("torch-universal", None),
        (tagged, "tagged with the cxx11 C++ ABI, which only Linux builds carry"),
    ]
    windows = SystemInfo((2, 10), False, "cpu", "cpu", "x86_64", "windows")
    assert describe_system(windows) == "torch 2.10, cpu, x86_64-windows"  # no ABI to name
    assert _judged(["torch210-cxx98-cpu-x86_64-windows"], windows)[0][1] == (
        "tagged with the cxx98 C++ ABI, which only Linux builds carry"
    )


def test_a_macos_version_without_a_minor_counts_as_its_dot_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``platform.mac_ver()`` may say ``26``: that is macOS 26.0, which runs Metal builds."""
    import platform

    import torch

    from flashhub_kernels._variants.system import detect_system

    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "mac_ver", lambda: ("26", ("", "", ""), "arm64"))
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    monkeypatch.setattr(torch.version, "cuda", None)  # a CUDA build of torch runs no Metal
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    system = detect_system.__wrapped__()
    assert (system.os, system.macos, system.backend) == ("darwin", (26, 0), "metal")
    assert _judged(
        ["torch-metal", "torch210-metal-aarch64-darwin"], system._replace(torch=(2, 10))
    )[0] == ("torch210-metal-aarch64-darwin", None)


def test_a_cuda_system_judges_and_orders_as_kernels_0_19_does() -> None:
    accepted = [
        "torch-stable-abi-2.11-cuda-12.8-cpython-3.9-abi3-x86_64-linux",
        "torch-stable-abi-2.11-cuda-12.6-cpython-3.10-abi3-x86_64-linux",
        "torch-stable-abi210-cu126-x86_64-linux",
        "torch-2.12-cuda-12.8-cpython-3.10-abi3-x86_64-linux",
        "torch-2.12-cuda-12.6-cpython-3.11-abi3-x86_64-linux",
        "torch212-cu126-x86_64-linux",
        "torch212-cu124-x86_64-linux",
        "torch-2.12-cxx11-cuda-12.8-cpython-3.11-abi3-x86_64-linux",
        "torch212-cxx11-cu128-x86_64-linux",
        "torch212-cxx11-cu126-x86_64-linux",
        "sdk-cuda-12.8-cpython-3.10-abi3-x86_64-linux",
        "sdk-cuda-12.6-cpython-3.11-abi3-x86_64-linux",
        "sdk-cpython-3.9-abi3-x86_64-linux",
        "torch-cuda",
        "torch-universal",
        "sdk-cuda",
        "sdk",
    ]
    rejected = {
        "torch-stable-abi-2.13-cuda-12.8-cpython-3.9-abi3-x86_64-linux": "torch >= 2.13",
        "torch-2.12-cuda-12.9-cpython-3.9-abi3-x86_64-linux": "CUDA 12.9",
        "torch-2.12-cuda-12.8-cpython-3.9-abi3-aarch64-linux": "aarch64-linux",
        "torch-2.12-rocm-6.3-cpython-3.10-abi3-x86_64-linux": "rocm63",
        "torch211-cxx11-cu128-x86_64-linux": "torch 2.11",
        "torch212-cxx98-cu126-x86_64-linux": "cxx98",
        "tvm-ffi-0.1-cuda-12.8-cpython-3.10-abi3-x86_64-linux": "tvm-ffi 0.1",
        "torch-cpu": "built for cpu, but this system uses cu128",
    }
    judged = _judged(sorted([*accepted, *rejected]), CUDA)
    assert [name for name, reason in judged if reason is None] == accepted
    assert {name: reason for name, reason in judged if reason is not None}.keys() == rejected.keys()
    for name, reason in judged[len(accepted) :]:
        assert reason is not None and rejected[name] in reason


def test_a_machine_named_by_todays_spelling() -> None:
    name = "torch-2.12-cuda-12.8-cpython-3.99-abi3-x86_64-linux"
    system = system_from_variant(name)
    assert (system.torch, system.backend_tag, system.python) == ((2, 12), "cu128", (3, 99))
    assert _judged([name], system) == [(name, None)]
    legacy = system_from_variant("torch212-cxx11-cu126-x86_64-linux")
    assert legacy.python == (sys.version_info.major, sys.version_info.minor)


def test_the_import_hook_loads_the_build_kernels_0_19_would(cdn: CdnServer) -> None:
    best = todays_name(local_variant())
    too_new = todays_name(local_variant(), python="3.99")
    write_kernel(cdn.root, "acme/tensor-tricks", 1, [too_new, "torch-universal", best])
    import flashhub.acme.tensor_tricks.v1 as k

    assert k.marker().endswith(f":{best}")
    assert not any(too_new in path for path in cdn.gets())


def test_a_lock_file_pins_and_loads_todays_names(cdn: CdnServer, tmp_path: Path) -> None:
    best = todays_name(local_variant())
    write_kernel(cdn.root, "acme/tensor-tricks", 1, [best, "torch-universal"])
    project = write_project(tmp_path / "project", {"acme/tensor-tricks": ">=1"})
    locked = flashhub("lock", project)
    assert locked.returncode == 0, locked.stderr
    assert best in lockfile_of(project).read_text()
    downloaded = flashhub("download", cwd=project)
    assert downloaded.returncode == 0, downloaded.stderr
    load = "import flashhub_kernels as fk; print(fk.load_kernel('acme/tensor-tricks').marker())"
    assert run_python(load, cwd=project).strip() == f"acme/tensor-tricks@v1:{best}"


@pytest.mark.parametrize(
    ("variant", "backend_type"),
    [
        ("torch-2.13-cxx11-cpu-cpython-3.11-abi3-x86_64-linux", "cpu"),
        ("sdk-cpython-3.12-abi3-x86_64-linux", "agnostic"),
        ("sdk-cuda-12.8-cpython-3.12-abi3-x86_64-linux", "cuda"),
    ],
)
def test_the_publisher_takes_builds_named_in_todays_spelling(
    tmp_path: Path, variant: str, backend_type: str
) -> None:
    kernel = make_kernel(tmp_path / "kernel", ("torch-universal", variant))
    report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn", prefix="kernels")
    assert [v.name for v in report.variants] == sorted(["torch-universal", variant])
    metadata = report.version_dir / "build" / variant / "metadata.json"
    assert json.loads(metadata.read_text())["backend"]["type"] == backend_type


def test_a_mac_is_detected_as_kernels_0_19_detects_it(cdn: CdnServer) -> None:
    """The OS from ``platform.system()``, its version from ``platform.mac_ver()``, Metal
    from MPS: a process that sees a macOS 26.1 Apple-silicon machine lists its Metal build
    first (here the machine is faked in a child process, as a test of kernels does)."""
    torch = "{}{}".format(*parse_variant(local_variant()).torch)  # type: ignore[str-format]
    metal = f"torch{torch}-metal-aarch64-darwin"
    write_kernel(cdn.root, "acme/tensor-tricks", 1, [f"torch{torch}-cpu-aarch64-darwin", metal])
    code = """
import platform, torch
torch.version.cuda = torch.version.hip = None  # a CUDA build of torch runs no Metal
platform.system = lambda: "Darwin"
platform.machine = lambda: "arm64"
platform.mac_ver = lambda: ("26.1", ("", "", ""), "arm64")
torch.backends.mps.is_available = lambda: True
import flashhub_kernels as fk
verdicts = fk.get_kernel_variants("acme/tensor-tricks", version=1)
print([str(v.variant) for v in verdicts if isinstance(v, fk.VariantAccepted)])
"""
    assert run_python(code).strip() == str([metal])  # the CPU build is for another backend
