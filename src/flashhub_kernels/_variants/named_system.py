"""Another machine than this one, named rather than detected: the one an exact build's
variant name describes (``flashhub variants --system``), with its device named by a CUDA
capability or a ROCm gfx target."""

from __future__ import annotations

import sys

from .archs import gfx_name, parse_cuda_arch
from .grammar import VariantNameError, parse_variant
from .system import METAL_MIN_MACOS, SystemInfo, this_system, with_backend
from .verdicts import describe_system


def system_from_variant(
    name: str, *, cuda_capability: str | None = None, rocm_arch: str | None = None
) -> SystemInfo:
    """The machine that loads the exact build ``name`` (``torch213-cxx11-cu126-x86_64-linux``):
    its torch, C++ ABI (``cxx11`` when the name carries no tag), backend, arch and OS, and
    this Python (or the newer CPython the name asks for).

    ``cuda_capability`` (``"9.0"``) or ``rocm_arch`` (``"gfx942"``) name its device, so
    that the archs builds list are checked. A Metal machine is taken to run a macOS that
    loads Metal builds.

    Raises:
        VariantNameError: ``name`` is not the name of an exact build.
        ValueError: the capability or gfx target is malformed, or not of ``name``'s backend.
    """
    try:
        variant = parse_variant(name)
    except VariantNameError:
        variant = None  # the grammar's examples include names of no one machine
    if variant is None or variant.tier != "exact":
        what = "does not name one machine" if variant else "is not a variant name"
        raise VariantNameError(
            f"{name!r} {what}: give the exact build it loads, e.g. "
            "torch213-cxx11-cu126-x86_64-linux or torch-2.13-cpu-cpython-3.11-abi3-x86_64-linux"
        )
    assert variant.backend and variant.backend_tag and variant.torch
    assert variant.arch and variant.os and variant.python
    system = SystemInfo(
        variant.torch,
        variant.abi != "cxx98",
        variant.backend,
        variant.backend_tag,
        variant.arch,
        variant.os,
        macos=METAL_MIN_MACOS if variant.backend == "metal" else None,
        python=max(variant.python, (sys.version_info.major, sys.version_info.minor)),
        backend_version=variant.backend_version,
    )
    return with_device_named(system, cuda_capability=cuda_capability, rocm_arch=rocm_arch)


def with_device_named(
    system: SystemInfo, *, cuda_capability: str | None = None, rocm_arch: str | None = None
) -> SystemInfo:
    """``system`` with the device named: ``cuda_capability="9.0"`` or ``rocm_arch="gfx942"``
    (feature flags such as ``:xnack-`` are dropped).

    Raises:
        ValueError: the value is malformed, or ``system`` runs another backend.
    """
    if cuda_capability is not None:
        if system.backend != "cuda":
            raise ValueError(
                f"a CUDA capability was given, but {describe_system(system)} runs no CUDA"
            )
        return system._replace(
            cuda_capability=parse_capability(cuda_capability), probe_device=False
        )
    if rocm_arch is not None:
        if system.backend != "rocm":
            raise ValueError(f"a ROCm arch was given, but {describe_system(system)} runs no ROCm")
        gfx = gfx_name(rocm_arch)
        if not (gfx.startswith("gfx") and len(gfx) > 3 and gfx.isascii() and gfx.isalnum()):
            raise ValueError(f"{rocm_arch!r} is not a ROCm gfx target such as 'gfx942'")
        return system._replace(rocm_arch=gfx, probe_device=False)
    return system


def parse_capability(text: str) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``; :class:`ValueError` for anything but ``MAJOR.MINOR``."""
    parsed = parse_cuda_arch(text)
    if parsed is None or parsed[2:] != ("", False):
        raise ValueError(f"{text!r} is not a CUDA compute capability such as '9.0'")
    return parsed[0], parsed[1]


def target_system(
    backend: str | None,
    *,
    system: str | None = None,
    cuda_capability: str | None = None,
    rocm_arch: str | None = None,
    check_arch: bool = True,
) -> SystemInfo:
    """This machine, or the one that loads the exact build ``system`` (a variant name),
    as if it ran ``backend``; with its device named by ``cuda_capability`` (``"9.0"``) or
    ``rocm_arch`` (``"gfx942"``) rather than asked of torch. ``check_arch=False``: its
    device unknown, and never asked about, so the device archs builds list are not
    checked (``get_kernel(..., check_arch=False)``).

    Raises:
        ValueError: ``system`` names no machine, or the device is malformed or of
            another backend (see :func:`system_from_variant`).
    """
    device = {"cuda_capability": cuda_capability, "rocm_arch": rocm_arch}
    if system is not None:
        chosen = system_from_variant(system, **device)
    else:
        chosen = with_device_named(this_system(), **device)
    chosen = with_backend(chosen, backend)
    if check_arch:
        return chosen
    return chosen._replace(cuda_capability=None, rocm_arch=None, probe_device=False)
