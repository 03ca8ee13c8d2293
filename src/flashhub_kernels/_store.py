"""From a kernel reference to a verified variant directory on disk.

:func:`obtain_kernel` has two paths:

- warm (here): the cache's variant index picks the variant, the entry's receipt vouches
  for its files (``stat`` only); no network, and no HTTP or download module is imported;
- cold (:mod:`._download`): fetch ``variants.json`` (or probe), pick the variant, then
  under the entry's download lock fetch every file into staging, verify, and rename
  into place.

The variant choice itself (:func:`choose_variant`, :func:`pick_cached_variant`) is pure
and shared by both paths, lock files and the offline answers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from ._cache import Cache, VariantIndex, mark_in_use
from ._config import Config, get_config
from ._kernel_dir import NATIVE_SUFFIXES, KernelDir
from ._names import RepoInfo
from ._variants import (
    SystemInfo,
    VariantAccepted,
    VariantVerdict,
    build_variant_name,
    candidate_names,
    detect_system,
    format_trace,
    gpu_torch_needed,
    judge_variants,
    with_backend,
)
from .errors import IntegrityError, NoCompatibleVariantError, OfflineError, SignatureError

logger = logging.getLogger("flashhub_kernels")


def package_dir_of(entry: Path, py_pkg: str) -> Path:
    """The directory of a verified entry that is imported as the kernel.

    That is ``<py_pkg>/`` when the variant ships it, else the entry itself: a flattened
    build, whose files (``__init__.py``, ``_ops.py``, ...) lie directly in the variant
    directory. A build with both layouts loads from ``<py_pkg>/``.
    """
    package = entry / py_pkg
    return package if (package / "__init__.py").is_file() else entry


def cached_kernel(
    entry: Path,
    info: RepoInfo,
    variant: str,
    files: Mapping[str, tuple[int, int]],
    signer: str | None,
) -> KernelDir:
    """The kernel in a verified entry, whose receipt lists ``files`` (path -> size, mtime)."""
    natives = tuple((rel, sz) for rel, (sz, _) in files.items() if rel.endswith(NATIVE_SUFFIXES))
    return KernelDir(package_dir_of(entry, info.py_pkg), info, variant, entry, signer, natives)


def target_system(backend: str | None) -> SystemInfo:
    """This machine, or this machine as if it ran ``backend``."""
    system = detect_system()
    return with_backend(system, backend) if backend else system


def obtain_kernel(
    candidates: Sequence[RepoInfo], *, backend: str | None = None, config: Config | None = None
) -> KernelDir:
    """Return a verified cache entry for the first candidate that exists, downloading it if needed.

    ``candidates`` are the CDN spellings a module name may stand for (see
    :func:`~flashhub_kernels._names.cdn_name_candidates`), tried in order.
    """
    config = config or get_config()
    cache, system = Cache.from_config(config), target_system(backend)
    damaged: str | None = None
    for info in candidates:
        hit, problem = _warm_lookup(cache, info, system, config)
        if hit is not None:
            return hit
        damaged = damaged or problem
    if config.offline:
        raise _offline_error(candidates[0], damaged)
    # Imported here so that warm loads never import the download path's modules.
    from ._download import fetch_kernel

    return fetch_kernel(cache, system, candidates, config)


def use_kernel(candidates: Sequence[RepoInfo], *, backend: str | None = None) -> KernelDir:
    """:func:`obtain_kernel` for an import: the entry is marked in use for the rest of
    the process, so that ``flashhub cache clear`` and ``prune`` leave it alone."""
    target = obtain_kernel(candidates, backend=backend)
    assert target.entry is not None, "the store gives cache entries"
    if not mark_in_use(target.entry):  # removed by `cache clear` meanwhile: fetch it again
        target = obtain_kernel(candidates, backend=backend)
        assert target.entry is not None
        mark_in_use(target.entry)
    return target


# Why a warm load passes over an entry that is intact but vouched for by no trusted key.
_UNSIGNED_ENTRY = "no trusted key vouched for it when it was cached"


def _offline_error(info: RepoInfo, damaged: str | None) -> Exception:
    if damaged == _UNSIGNED_ENTRY:
        return SignatureError(
            f"the cached copy of {info} cannot be used offline: {damaged}",
            hint="unset FLASHHUB_OFFLINE once, so that its signature is checked",
        )
    if damaged:
        return IntegrityError(
            f"the cached copy of {info} was modified after it was verified ({damaged})",
            hint="run `flashhub cache verify --repair`: offline, it re-stamps an entry whose "
            "files are intact (a copy that lost its modification times) and recompiles its "
            "bytecode; otherwise unset FLASHHUB_OFFLINE so that it is fetched again",
        )
    return OfflineError(
        f"{info} is not in the cache and FLASHHUB_OFFLINE is set",
        hint=f"run `flashhub get {info.repo_id} --version {info.version}` with network access, "
        "or unset FLASHHUB_OFFLINE",
    )


# -- warm path -------------------------------------------------------------------------


def _warm_lookup(
    cache: Cache, info: RepoInfo, system: SystemInfo, config: Config
) -> tuple[KernelDir | None, str | None]:
    """A verified entry, or ``None`` and (when an entry is unfit) why.

    An entry that no trusted key vouched for (cached before the key was configured) is
    unfit while signatures are checked: the cold path verifies it once.
    """
    index = cache.read_index(info)
    variant = pick_cached_variant(index, system) if index else None
    if variant is None:
        return None, None
    entry = cache.entry_dir(info, variant)
    cache.check_entry(entry)  # read_index checked the directories above it
    receipt = cache.read_receipt(entry)
    if receipt is None:
        return None, None
    changed = receipt.changed_file(entry)
    if changed is not None:
        return None, f"{entry / changed} differs from its receipt"
    if not config.accepts_signer(info.org, receipt.signer):
        return None, _UNSIGNED_ENTRY
    return cached_kernel(entry, info, variant, receipt.files, receipt.signer), None


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
