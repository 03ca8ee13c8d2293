"""Which published variant this system loads: the choice both load paths, lock files and
the offline answers make, and the error when there is none.

Pure but for :func:`target_system`, which asks torch (through
:func:`~._variants.detect_system`) what this machine runs. On the warm path: it imports
nothing that the variant grammar does not.
"""

from __future__ import annotations

from ._variants import (
    VariantAccepted,
    build_variant_name,
    candidate_names,
    detect_system,
    format_trace,
    gpu_torch_needed,
    judge_variants,
    with_backend,
)
from .errors import NoCompatibleVariantError

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._cache import VariantIndex
    from ._names import RepoInfo
    from ._variants import SystemInfo, VariantVerdict


def target_system(backend: str | None) -> SystemInfo:
    """This machine, or this machine as if it ran ``backend``."""
    system = detect_system()
    return with_backend(system, backend) if backend else system


def pick_cached_variant(index: VariantIndex, system: SystemInfo) -> str | None:
    """The variant the CDN would give ``system``, if the index knows enough to say."""
    if index.complete:
        return best_variant(judge_variants(sorted(index.present), system))
    for name in candidate_names(system):
        if name in index.present:
            return name
        if name not in index.absent:
            return None  # never probed for this system: ask the CDN
    return None


def best_variant(verdicts: Sequence[VariantVerdict]) -> str | None:
    """The preferred accepted variant of a :func:`judge_variants` result, if any."""
    first = verdicts[0] if verdicts else None
    # A plain str: it is recorded in receipts and in LoadedKernel.
    return str(first.variant) if isinstance(first, VariantAccepted) else None


def choose_variant(index: VariantIndex, info: RepoInfo, system: SystemInfo) -> str:
    """The best published variant for ``system``, or the full rejection trace."""
    if not index.complete:
        chosen = pick_cached_variant(index, system)
        assert chosen is not None, "fetch_index probes until it finds a variant"
        return chosen
    published = sorted(index.present)
    verdicts = judge_variants(published, system)
    chosen = best_variant(verdicts)
    if chosen is None:
        raise no_variant_error(
            f"{info} has no variant for this system ({system.describe()}). "
            f"Published variants:\n{format_trace(verdicts)}",
            system,
            published=published,
        )
    return chosen


def no_variant_error(
    message: str, system: SystemInfo, *, published: Sequence[str] | None
) -> NoCompatibleVariantError:
    """The error for a version with no build ``system`` loads, advising only what can work.

    ``published`` names the version's variants, or is ``None`` when it has no
    ``variants.json`` and only ``system``'s own candidates were probed. Forcing
    ``backend='cpu'`` helps only on a machine whose torch runs another backend, and only
    when a CPU build exists.
    """
    wanted = (
        f"ask the publisher for a build this system loads (its torch, C++ ABI, backend and "
        f"arch): {build_variant_name(system)}, or torch-universal"
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
