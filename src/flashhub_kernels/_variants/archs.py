"""Whether the device archs a build lists include this device. Pure.

Builders record the device architectures a build was compiled for (read into a
:class:`~.compat.BuildTarget`)::

    {"backend": {"type": "cuda", "archs": ["8.0", "9.0a", "10.0f", "9.0+PTX"]}}
    {"backend": {"type": "rocm", "archs": ["gfx90a", "gfx942"]}}

A CUDA arch ``X.Y`` runs on compute capability ``X.Z`` for ``Z >= Y`` (the same major);
``X.Ya`` (architecture-specific) on ``X.Y`` only; ``X.Yf`` (family-specific) on the same
major with a minor at or above ``Y``; ``X.Y+PTX`` on every capability at or above
``X.Y``, since the driver compiles the PTX for the device. A ROCm build runs on the gfx
targets it lists; feature flags (``gfx90a:sramecc+:xnack-``) are not compared. When none
of a build's archs has a form this client knows (a newer builder's, say), the build is
taken to run anywhere, as when it lists none.
"""

from __future__ import annotations

from .._models.names import is_digits

TYPE_CHECKING = False  # not typing's: a warm load of a build that lists archs imports it
if TYPE_CHECKING:
    from collections.abc import Iterable

    from .compat import BuildTarget


def parse_cuda_arch(arch: str) -> tuple[int, int, str, bool] | None:
    """``"9.0a"`` -> ``(9, 0, "a", False)``, ``"8.0+PTX"`` -> ``(8, 0, "", True)``;
    ``None`` when ``arch`` is not of the form ``X.Y[a|f][+PTX]``."""
    ptx = arch.endswith("+PTX")
    arch = arch.removesuffix("+PTX")
    suffix = arch[-1:] if arch.endswith(("a", "f")) else ""
    major, dot, minor = arch[: len(arch) - len(suffix)].partition(".")
    if not (dot and is_digits(major) and is_digits(minor)):
        return None
    return int(major), int(minor), suffix, ptx


def gfx_name(arch: str) -> str:
    """``"gfx90a:sramecc+:xnack-"`` -> ``"gfx90a"``: a ROCm target without feature flags."""
    return arch.split(":", 1)[0].strip().lower()


def cuda_arch_runs_on(arch: str, capability: tuple[int, int]) -> bool | None:
    """Whether code built for ``arch`` runs on ``capability``; ``None`` for an unknown form."""
    parsed = parse_cuda_arch(arch)
    if parsed is None:
        return None
    major, minor, suffix, ptx = parsed
    if suffix == "a":
        return capability == (major, minor)
    if ptx and suffix == "":
        return capability >= (major, minor)
    return capability[0] == major and capability[1] >= minor


def cuda_archs_support(archs: Iterable[str], capability: tuple[int, int]) -> bool:
    """Whether a build listing ``archs`` runs on ``capability`` (see the module's rules)."""
    verdicts = [cuda_arch_runs_on(arch, capability) for arch in archs]
    return any(verdicts) or all(v is None for v in verdicts)


def rocm_archs_support(archs: Iterable[str], gfx: str) -> bool:
    """Whether a build listing ``archs`` runs on the ROCm target ``gfx``."""
    known = {gfx_name(arch) for arch in archs if gfx_name(arch).startswith("gfx")}
    return not known or gfx_name(gfx) in known


def arch_mismatch(
    target: BuildTarget,
    backend: str,
    *,
    cuda_capability: tuple[int, int] | None = None,
    rocm_arch: str | None = None,
) -> str | None:
    """Why a build for ``target`` does not run on a ``backend`` device of that capability
    or gfx target; ``None`` when it does, or when either side does not say."""
    if not target.archs or target.backend != backend:
        return None
    listed = ", ".join(target.archs)
    if backend == "cuda" and cuda_capability is not None:
        if cuda_archs_support(target.archs, cuda_capability):
            return None
        major, minor = cuda_capability
        return f"built for CUDA archs {listed}; this device is {major}.{minor}"
    if backend == "rocm" and rocm_arch is not None:
        if rocm_archs_support(target.archs, rocm_arch):
            return None
        return f"built for ROCm archs {listed}; this device is {gfx_name(rocm_arch)}"
    return None
