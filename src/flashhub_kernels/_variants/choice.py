"""Which published variant a system loads, from a version's variant index: the choice
a cold load, lock files and the offline answers make, and the error when there is none.

Choosing reads the ``metadata.json`` of the candidates up to the one taken, which is
fetched anyway to download it (:func:`~.verdicts.judge_builds`). A warm load, and a cold
one that waited for another process to choose, read what the cache recorded of them
instead (:func:`~.compat.pick_cached_variant`).
"""

from __future__ import annotations

from ..errors import NoCompatibleVariantError
from .compat import pick_cached_variant
from .grammar import as_variant
from .probing import build_variant_name
from .system import with_backend
from .verdicts import best_variant, describe_system, format_trace, judge_builds, judge_variants

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._cache.layout import Cache, VariantIndex
    from .._models.names import RepoInfo
    from .compat import TargetOf
    from .system import SystemInfo
    from .verdicts import VariantVerdict


def cached_targets(cache: Cache, info: RepoInfo) -> TargetOf:
    """The devices variants of ``info`` declare, as far as ``cache`` knows: what its index
    records, else a cached entry's ``metadata.json``."""
    index = cache.read_index(info)
    recorded = index.targets if index is not None else {}
    return lambda name: recorded.get(name) or cache.read_target(info, name)


def choose_variant(
    index: VariantIndex, info: RepoInfo, system: SystemInfo, target_of: TargetOf | None = None
) -> str:
    """The best published variant for ``system``, or the full rejection trace.

    ``target_of`` reads a variant's declared devices (see :func:`judge_builds`); without
    it the index's recorded targets judge, and an unrecorded one counts as fitting.
    """
    if not index.complete:
        chosen = pick_cached_variant(index, system, target_of)
        if chosen is None:  # every build the probe found is for other devices
            probed = judge_variants(sorted(index.present), system)
            verdicts = judge_builds(probed, system, index.targets.get, first_fit=False)
            raise unfit_error(info, system, verdicts, published=None)
        return chosen
    published = sorted(index.present)
    verdicts = judge_builds(
        judge_variants(published, system), system, target_of or index.targets.get
    )
    chosen = best_variant(verdicts)
    if chosen is None:
        raise unfit_error(info, system, verdicts, published=published)
    return chosen


def unfit_error(
    info: RepoInfo,
    system: SystemInfo,
    verdicts: Sequence[VariantVerdict],
    *,
    published: Sequence[str] | None,
    recorded: bool = False,
) -> NoCompatibleVariantError:
    """The error for ``info`` when none of its variants fits ``system``, with the
    ``verdicts`` on each. ``published`` is its ``variants.json``, or ``None`` when it has
    none and the verdicts are on the variants found by probing; ``recorded``: the
    variants are those the cache recorded (an offline load), not the CDN's answer."""
    source = " (as recorded in the cache)" if recorded else ""
    if published is None:
        message = (
            f"{info} has no variants.json, and none of the variants found for this "
            f"system ({describe_system(system)}) fits it{source}"
        )
    else:
        message = (
            f"{info} has no variant for this system ({describe_system(system)}). "
            f"Published variants{source}"
        )
    return no_variant_error(f"{message}:\n{format_trace(verdicts)}", system, published=published)


def no_variant_error(
    message: str, system: SystemInfo, *, published: Sequence[str] | None
) -> NoCompatibleVariantError:
    """The error for a version with no build ``system`` loads, advising only what can work.

    ``published`` names the version's variants, or is ``None`` when it has no
    ``variants.json`` and only ``system``'s own candidates were probed. Forcing
    ``backend='cpu'`` helps only on a machine whose torch runs another backend, and only
    when a CPU build exists.
    """
    from .device_arch import with_device

    system = with_device(system)  # the build to ask for is one compiled for the device
    devices = (
        " compiled for CUDA capability {}.{}".format(*system.cuda_capability)
        if system.cuda_capability and system.backend == "cuda"
        else f" compiled for {system.rocm_arch}"
        if system.rocm_arch and system.backend == "rocm"
        else ""
    )
    wanted = (
        f"ask the publisher for a build this system loads (its torch, C++ ABI, backend and "
        f"arch): {build_variant_name(system)}{devices}, or torch-universal"
    )
    if system.backend == "cpu":
        gpu = gpu_torch_needed(published or ())
        needs = (
            f"every published build needs a {gpu} build of torch, and this torch is a "
            f"CPU-only build: install a {gpu} build of torch on a machine with such a GPU"
        )
        return NoCompatibleVariantError(message, hint=f"{needs}; or {wanted}" if gpu else wanted)
    if published is None:
        return NoCompatibleVariantError(
            message,
            hint=f"{wanted}; or pass backend='cpu' to look for a CPU build",
            cli_hint=f"{wanted}; or pass --backend cpu to look for a CPU build",
        )
    cpu_build = best_variant(judge_variants(published, with_backend(system, "cpu")))
    if cpu_build is None:
        return NoCompatibleVariantError(message, hint=wanted)
    return NoCompatibleVariantError(
        message,
        hint=f"pass backend='cpu' to run the CPU build {cpu_build} instead, or {wanted}",
        cli_hint=f"pass --backend cpu to use the CPU build {cpu_build} instead, or {wanted}",
    )


_GPU_TORCH = {"cuda": "CUDA", "rocm": "ROCm"}


def gpu_torch_needed(published: Sequence[str]) -> str | None:
    """``"CUDA"``, ``"ROCm"`` or ``"CUDA or ROCm"`` when every one of ``published`` is a
    build for those backends (so only such a build of torch loads any), else ``None``."""
    backends = {as_variant(name).backend for name in published}
    gpus = sorted({_GPU_TORCH[b] for b in backends if b is not None and b in _GPU_TORCH})
    if not gpus or len(gpus) != len(backends):
        return None
    return " or ".join(gpus)
