"""Whether a build runs on this system, and which of several runs best.

A variant's name says most of its fit (:func:`check_compatible`) and its rank
(:func:`preference_key`); its ``metadata.json`` says the rest (:class:`BuildTarget`)
where it matters (:func:`needs_target`): the device archs a build for this CUDA or ROCm
system lists (:mod:`.archs` judges them, asked only of a build that lists some), and on
a free-threaded Python whether an abi3 build declares ``"free-threaded":
true``. A build that does not fit is passed over for the next in preference order.

Nothing here reads a file or the network: the metadata comes from the caller
(``target_of``). What a check asks of the machine is the MLX package's presence and,
for a build that lists archs, the device (read once).

A warm load takes the pick its cache's index records for its system
(:func:`~.._cache.layout.recorded_pick`, without importing this module); that pick is
made when the index is written (:func:`pick_by_name`). Where the index records none, the
warm load picks among the variants it records (:func:`pick_cached_variant`) with what
it recorded of their metadata.
"""

from __future__ import annotations

from .._models.record import Record
from .grammar import PYTHON_ABIS, as_variant
from .system import METAL_MIN_MACOS, mlx_installed

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from typing import Any

    from .._cache.layout import VariantIndex
    from .grammar import Variant
    from .system import SystemInfo

    # The devices a variant's metadata.json declares; None when it cannot be read.
    TargetOf = Callable[[str], "BuildTarget | None"]


_FREE_THREADED = (
    "a native build, and this Python is free-threaded: native builds load on it only "
    'when their name says abi3t or their metadata.json declares "free-threaded": true '
    "(use a Python built with the GIL)"
)


def check_compatible(variant: Variant, system: SystemInfo) -> str | None:
    """``None`` if ``variant`` loads on ``system``, else the reason it does not."""
    if variant.tier is None:
        return f"{variant.name!r} is not a variant name"
    if variant.framework == "mlx" and not mlx_installed():
        return "a build for MLX, which is not installed (pip install mlx)"
    if variant.backend is not None and variant.backend != system.backend:
        # Forcing the CPU backend is a load's choice, which not every caller offers: those
        # that do say so (forced_cpu_loads), in their own terms.
        return (
            f"built for {variant.backend_tag or variant.backend}, but this system uses "
            f"{system.backend_tag}"
        )
    if variant.arch is None:  # no compiled parts: noarch, universal, an SDK without
        return None
    if (variant.arch, variant.os) != (system.arch, system.os):
        return f"built for {variant.arch}-{variant.os}, this system is {system.arch}-{system.os}"
    return (
        _check_python(variant, system)
        or _check_framework(variant, system)
        or _check_backend_version(variant, system)
    )


def _check_python(variant: Variant, system: SystemInfo) -> str | None:
    assert variant.python is not None
    if variant.python > system.python:
        return "needs CPython {}.{} or later ({}), this is Python {}.{}".format(
            *variant.python, variant.python_abi, *system.python
        )
    return None


def _check_framework(variant: Variant, system: SystemInfo) -> str | None:
    if variant.tvm_ffi is not None:
        return _check_tvm_ffi(variant.tvm_ffi, system.tvm_ffi)
    if variant.torch is None:  # an SDK: no framework
        return None
    have, want = system.torch, variant.torch
    if variant.tier == "stable-abi" and want > have:
        return f"needs torch >= {want[0]}.{want[1]} (stable ABI), found {have[0]}.{have[1]}"
    if variant.tier == "exact" and want != have:
        return f"built for torch {want[0]}.{want[1]}, found {have[0]}.{have[1]}"
    if variant.abi is not None and system.abi is None:
        return f"tagged with the {variant.abi} C++ ABI, which only Linux builds carry"
    if variant.abi is not None and variant.abi != system.abi:
        return f"built with the {variant.abi} C++ ABI, this torch uses {system.abi}"
    return None


def _check_tvm_ffi(built: tuple[int, int], have: tuple[int, int] | None) -> str | None:
    if have is None:
        return "built against tvm-ffi {}.{}, which is not installed".format(*built)
    if built != have:
        return "built against tvm-ffi {}.{}, found {}.{}".format(*built, *have)
    return None


def _check_backend_version(variant: Variant, system: SystemInfo) -> str | None:
    built, have = variant.backend_version, system.runtime_version
    if variant.backend in ("cuda", "rocm") and built and have:
        if built[0] != have[0] or built[1] > have[1]:
            name = "CUDA" if variant.backend == "cuda" else "ROCm"
            return (
                f"built for {name} {built[0]}.{built[1]}, this torch has {name} "
                f"{have[0]}.{have[1]} (needs the same major and a minor at or below it)"
            )
        return None
    if variant.backend_tag is not None and built != have:
        return f"built for {variant.backend_tag}, this system has {system.backend_tag}"
    if variant.backend == "metal" and (system.macos or (0, 0)) < METAL_MIN_MACOS:
        found = "macOS {}.{}".format(*system.macos) if system.macos else "an unknown macOS"
        needed = "{}.{}".format(*METAL_MIN_MACOS)
        return f"Metal builds require macOS {needed} or later, this system runs {found}"
    return None


def preference_key(variant: Variant) -> tuple[object, ...]:
    """Sort key, best first: stable-ABI builds (newest torch first), exact builds (without
    a C++ ABI tag first), tvm-ffi builds, SDKs with compiled parts (for any backend last),
    noarch builds, ``torch-universal``, SDKs for one backend, other SDKs.

    Within those, the newest backend minor (CUDA 12.8 before 12.6) comes first, then
    abi3 before abi3t, then the newest CPython (a legacy name counts as 3.9); a tie left
    after all of that is broken by the name.
    """
    minor = -(variant.backend_version or (0, 0))[1]
    python = _python_key(variant)
    tier = variant.tier
    if tier == "stable-abi":
        assert variant.torch is not None
        rank: tuple[int, ...] = (0, -variant.torch[0], -variant.torch[1], minor, *python)
    elif tier in ("exact", "tvm-ffi"):
        rank = (1 if tier == "exact" else 2, 0, variant.abi is not None, minor, *python)
    elif tier == "sdk" and variant.python is not None:
        rank = (3, 0, 0, 1 if variant.backend is None else minor, *python)
    elif tier in ("noarch", "universal"):
        rank = (4, 0, 0, tier == "universal")
    else:  # an SDK without compiled parts; a name that does not parse, last
        rank = ((5 if variant.backend else 6) if tier else 7,)
    return (*rank, variant.name)


def compatible(names: Iterable[str], system: SystemInfo) -> list[Variant]:
    """The variants of ``names`` that ``system`` loads by their names, best first."""
    variants = (as_variant(name) for name in dict.fromkeys(names))
    return sorted((v for v in variants if check_compatible(v, system) is None), key=preference_key)


def _python_key(variant: Variant) -> tuple[int, ...]:
    """abi3 before abi3t, then the newest CPython first; nothing without compiled parts."""
    if variant.python is None or variant.python_abi is None:
        return ()
    return PYTHON_ABIS.index(variant.python_abi), -variant.python[0], -variant.python[1]


def needs_target(variant: Variant, system: SystemInfo) -> bool:
    """Whether an accepted ``variant`` fits ``system`` only if its ``metadata.json`` says so."""
    if system.free_threaded and variant.python_abi == "abi3":
        return True
    return variant.backend == system.backend and system.knows_device


def build_mismatch(variant: Variant, target: BuildTarget, system: SystemInfo) -> str | None:
    """Why the build ``variant``, declaring ``target``, does not run on ``system``; ``None``
    when it does. Reads what the device is (once) only when the build lists archs."""
    if system.free_threaded and variant.python_abi == "abi3" and not target.free_threaded:
        return _FREE_THREADED
    if not target.archs or target.backend != system.backend:
        return None
    from .archs import arch_mismatch  # a build that lists archs only
    from .device_arch import with_device

    device = with_device(system)
    return arch_mismatch(
        target,
        device.backend,
        cuda_capability=device.cuda_capability,
        rocm_arch=device.rocm_arch,
    )


def pick_cached_variant(
    index: VariantIndex, system: SystemInfo, cached_target: TargetOf | None = None
) -> str | None:
    """The variant the CDN would give ``system``, if the index knows enough to say.

    A candidate whose fit depends on its metadata is judged by the target the index
    records, else by ``cached_target`` (the metadata.json of a cached entry); when
    neither knows it, ``None``: ask the CDN.
    """

    def target_of(name: str) -> BuildTarget | None:
        return index.targets.get(name) or (cached_target(name) if cached_target else None)

    return _pick(index, system, target_of, device=True)


def pick_by_name(index: VariantIndex, system: SystemInfo) -> str | None:
    """:func:`pick_cached_variant`'s pick when the device takes no part in it: the names
    decide, with the metadata the index records where a build's fit depends on it.
    ``None`` when a build that lists device archs for ``system``'s backend comes up (the
    device decides) or its metadata is not recorded. The index records such a pick for
    the warm loads of ``system`` (by :attr:`~.system.SystemInfo.key`)."""
    return _pick(index, system, index.targets.get, device=False)


def _pick(
    index: VariantIndex,
    system: SystemInfo,
    target_of: TargetOf,
    *,
    device: bool,
) -> str | None:
    """The best variant of ``index`` that fits ``system``; ``None`` when it takes what
    is not known: a probe never made, a target not read, or (``device=False``) the
    device's archs."""
    for variant in _cached_candidates(index, system):
        if variant is None:
            return None  # never probed for this system: ask the CDN
        # A plain str: it is recorded in receipts and in LoadedKernel.
        name = str(variant)
        if not needs_target(variant, system):
            return name
        target = target_of(name)
        if target is None or (not device and target.archs and target.backend == system.backend):
            return None
        if build_mismatch(variant, target, system) is None:
            return name
    return None


def _cached_candidates(index: VariantIndex, system: SystemInfo) -> Iterator[Variant | None]:
    """The published variants ``system`` loads by name, best first; ``None`` in place of
    one that a probe never asked about, and nothing after it."""
    if index.complete:
        yield from compatible(sorted(index.present), system)
        return
    from .probing import candidate_names  # a version without variants.json only

    for name in candidate_names(system):
        if name in index.present:
            yield as_variant(name)
        elif name not in index.absent:
            yield None
            return


# What of a document is kept: a hostile one cannot make the recorded index large.
_MAX_ARCHS = 256
_MAX_ARCH_LENGTH = 64
# The builder's backend types, as this client names the backends (cann: Ascend NPUs).
_BACKEND_NAMES = {"cann": "npu"}


class BuildTarget(Record):
    """The devices one build declares it runs on.

    ``backend`` is the backend as this client names it (``cuda``, ``rocm``, ``npu``...),
    ``None`` when the document names none; ``archs`` the architectures listed (empty:
    none declared); ``free_threaded`` whether the build loads on a free-threaded Python.
    """

    backend: str | None = None
    archs: tuple[str, ...] = ()
    free_threaded: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "archs": list(self.archs),
            "free-threaded": self.free_threaded,
        }


def read_target(document: Mapping[str, Any]) -> BuildTarget:
    """The :class:`BuildTarget` a ``metadata.json`` document (a JSON object) declares.

    Lenient, as for every optional key of the document: a ``backend`` that is not an
    object, a ``type`` that is not a string, and archs that are not strings are left out.
    """
    backend = document.get("backend")
    if not isinstance(backend, dict):
        backend = {}
    kind = backend.get("type")
    name = kind.lower() if isinstance(kind, str) and kind.isascii() else None
    return BuildTarget(
        _BACKEND_NAMES.get(name, name) if name else None,
        _archs(backend.get("archs")),
        document.get("free-threaded") is True,
    )


def target_from_json(data: object) -> BuildTarget | None:
    """A target recorded by :meth:`BuildTarget.to_json`; ``None`` if ``data`` is not one."""
    if not isinstance(data, dict):
        return None
    backend = data.get("backend")
    return BuildTarget(
        backend if isinstance(backend, str) else None,
        _archs(data.get("archs")),
        data.get("free-threaded") is True,
    )


def _archs(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    archs = (a for a in value if isinstance(a, str) and 0 < len(a) <= _MAX_ARCH_LENGTH)
    return tuple(archs)[:_MAX_ARCHS]
