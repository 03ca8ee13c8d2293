"""Which published variant this system loads: the choice both load paths, lock files and
the offline answers make, and the error when there is none.

A variant's name says most of its fit (:func:`~._variants.judge_variants`); its
``metadata.json`` says the rest, for the candidates where it matters
(:func:`needs_target`):

- on a CUDA or ROCm system whose device is known (or can be asked about), a build for
  that backend whose archs lack the device is passed over, for the next candidate in
  preference order: another CUDA build, a stable-ABI one, ``torch-cuda``,
  ``torch-universal``;
- on a free-threaded Python before 3.15, a native build (exact, stable-ABI or tvm-ffi)
  loads only if it declares ``"free-threaded": true``.

So choosing reads the ``metadata.json`` of the candidates up to the one taken, which is
fetched anyway to download it (:func:`judge_builds`); a warm load, and a cold one that
waited for another process to choose, reads what the cache recorded of them
(:func:`pick_cached_variant`).

Pure but for :func:`target_system`, which asks torch (through
:func:`~._variants.detect_system`) what this machine runs, and
:func:`~._variants.with_device`, which reads what the device is when a build lists
archs. On the warm path: it imports nothing that the variant grammar does not.
"""

from __future__ import annotations

from ..errors import NoCompatibleVariantError
from .archs import arch_mismatch
from .system import (
    VariantAccepted,
    VariantRejected,
    as_variant,
    build_variant_name,
    candidate_names,
    detect_system,
    format_trace,
    gpu_torch_needed,
    judge_variants,
    system_from_variant,
    with_backend,
    with_device,
    with_device_named,
)

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from .._cache.layout import Cache, VariantIndex
    from .._models.names import RepoInfo
    from .archs import BuildTarget
    from .system import SystemInfo, Variant, VariantVerdict

    # The devices a variant's metadata.json declares; None when it cannot be read.
    TargetOf = Callable[[str], BuildTarget | None]

_NATIVE_TIERS = ("exact", "stable-abi", "tvm-ffi")
_FREE_THREADED = (
    "a native build, and this Python is free-threaded: native builds load on it only "
    'when their metadata.json declares "free-threaded": true (use a Python built with '
    "the GIL, or Python 3.15+)"
)


def target_system(
    backend: str | None,
    *,
    system: str | None = None,
    cuda_capability: str | None = None,
    rocm_arch: str | None = None,
) -> SystemInfo:
    """This machine, or the one that loads the exact build ``system`` (a variant name),
    as if it ran ``backend``; with its device named by ``cuda_capability`` (``"9.0"``) or
    ``rocm_arch`` (``"gfx942"``) rather than asked of torch.

    Raises:
        ValueError: ``system`` names no machine, or the device is malformed or of
            another backend (see :func:`~._variants.system_from_variant`).
    """
    device = {"cuda_capability": cuda_capability, "rocm_arch": rocm_arch}
    if system is not None:
        chosen = system_from_variant(system, **device)
    else:
        chosen = with_device_named(detect_system(), **device)
    return with_backend(chosen, backend) if backend else chosen


def needs_target(variant: Variant, system: SystemInfo) -> bool:
    """Whether an accepted ``variant`` fits ``system`` only if its ``metadata.json`` says so."""
    if system.free_threaded and variant.tier in _NATIVE_TIERS:
        return True
    return variant.backend == system.backend and system.knows_device


def build_mismatch(variant: Variant, target: BuildTarget, system: SystemInfo) -> str | None:
    """Why the build ``variant``, declaring ``target``, does not run on ``system``; ``None``
    when it does. Reads what the device is (once) only when the build lists archs."""
    if system.free_threaded and variant.tier in _NATIVE_TIERS and not target.free_threaded:
        return _FREE_THREADED
    if not target.archs or target.backend != system.backend:
        return None
    device = with_device(system)
    return arch_mismatch(
        target,
        device.backend,
        cuda_capability=device.cuda_capability,
        rocm_arch=device.rocm_arch,
    )


def judge_builds(
    verdicts: Sequence[VariantVerdict],
    system: SystemInfo,
    target_of: TargetOf,
    *,
    first_fit: bool = True,
) -> list[VariantVerdict]:
    """``verdicts`` (from :func:`judge_variants`), each accepted variant whose fit depends
    on its ``metadata.json`` judged by what ``target_of`` reads of it, in preference order.

    With ``first_fit``, metadata is read only up to the first variant that fits: those
    after it stay accepted as their names are. A variant whose metadata cannot be read
    (``None``) is judged by its name. Passed-over variants come first among the rejected.
    """
    accepted: list[VariantVerdict] = []
    rejected: list[VariantVerdict] = []
    for verdict in verdicts:
        if not isinstance(verdict, VariantAccepted):
            rejected.append(verdict)
            continue
        variant = verdict.variant
        if not (first_fit and accepted) and needs_target(variant, system):
            target = target_of(variant)
            reason = None if target is None else build_mismatch(variant, target, system)
            if reason is not None:
                rejected.append(VariantRejected(variant, reason))
                continue
        accepted.append(verdict)
    return [*accepted, *rejected]


def cached_targets(cache: Cache, info: RepoInfo) -> TargetOf:
    """The devices variants of ``info`` declare, as far as ``cache`` knows: what its index
    records, else a cached entry's ``metadata.json``."""
    index = cache.read_index(info)
    recorded = index.targets if index is not None else {}
    return lambda name: recorded.get(name) or cache.read_target(info, name)


def pick_cached_variant(
    index: VariantIndex, system: SystemInfo, cached_target: TargetOf | None = None
) -> str | None:
    """The variant the CDN would give ``system``, if the index knows enough to say.

    A candidate whose fit depends on its metadata is judged by the target the index
    records, else by ``cached_target`` (the metadata.json of a cached entry); when
    neither knows it, ``None``: ask the CDN.
    """
    for variant in _cached_candidates(index, system):
        if variant is None:
            return None  # never probed for this system: ask the CDN
        # A plain str: it is recorded in receipts and in LoadedKernel.
        name = str(variant)
        if not needs_target(variant, system):
            return name
        target = index.targets.get(name) or (cached_target(name) if cached_target else None)
        if target is None:
            return None
        if build_mismatch(variant, target, system) is None:
            return name
    return None


def _cached_candidates(index: VariantIndex, system: SystemInfo) -> Iterator[Variant | None]:
    """The published variants ``system`` loads by name, best first; ``None`` in place of
    one that a probe never asked about, and nothing after it."""
    if index.complete:
        verdicts = judge_variants(sorted(index.present), system)
        yield from (v.variant for v in verdicts if isinstance(v, VariantAccepted))
        return
    for name in candidate_names(system):
        if name in index.present:
            yield as_variant(name)
        elif name not in index.absent:
            yield None
            return


def best_variant(verdicts: Sequence[VariantVerdict]) -> str | None:
    """The preferred accepted variant of a :func:`judge_variants` result, if any."""
    first = verdicts[0] if verdicts else None
    # A plain str: it is recorded in receipts and in LoadedKernel.
    return str(first.variant) if isinstance(first, VariantAccepted) else None


def choose_variant(
    index: VariantIndex, info: RepoInfo, system: SystemInfo, target_of: TargetOf | None = None
) -> str:
    """The best published variant for ``system``, or the full rejection trace.

    ``target_of`` reads a variant's declared devices (see :func:`judge_builds`); without
    it the index's recorded targets judge, and an unrecorded one counts as fitting.
    """
    if not index.complete:
        chosen = pick_cached_variant(index, system)
        if chosen is None:  # every build the probe found is for other devices
            probed = judge_variants(sorted(index.present), system)
            verdicts = judge_builds(probed, system, index.targets.get, first_fit=False)
            raise no_variant_error(
                f"{info} has no variants.json, and none of the variants found for this "
                f"system ({system.describe()}) fits it:\n{format_trace(verdicts)}",
                system,
                published=None,
            )
        return chosen
    published = sorted(index.present)
    verdicts = judge_builds(
        judge_variants(published, system), system, target_of or index.targets.get
    )
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
