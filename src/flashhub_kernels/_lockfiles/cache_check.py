"""The cache checked against a lock: the locked variant a system loads, and its entry.

No network here: loading what a lock pins from the cache (:func:`~flashhub_kernels.load_kernel`)
needs nothing more. A cache entry's receipt records the content hash of the manifest
its files were verified against, so comparing it with the lock pins every byte without
re-hashing.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .._cache.layout import Cache, VariantIndex
from .._cache.receipt import cached_kernel, read_receipt
from .._cache.staging import merge_indexes
from .._config import get_config
from .._constants import MANIFEST_NAME
from .._loading.kernel_deps import requirements
from .._models.kernel_dir import KernelDir
from .._models.kernel_metadata import read_kernel_metadata
from .._utils.escaping import escape_controls
from .._variants.choice import choose_variant
from .._variants.compat import pick_cached_variant
from .._variants.grammar import as_variant
from .._variants.probing import candidate_names
from .._variants.verdicts import (
    VariantAccepted,
    best_variant,
    describe_system,
    format_trace,
    judge_builds,
    judge_variants,
)
from ..errors import LockfileError, NoCompatibleVariantError
from .project import VARIANT_OPTIONS

if TYPE_CHECKING:
    from .._models.names import RepoInfo
    from .._variants.compat import TargetOf
    from .._variants.system import SystemInfo
    from .format import LockedKernel

# What settles a probed lock that lacks a variant the CDN publishes: locking again probes
# for every variant this machine loads, and keeps those named.
RELOCK_HINT = (
    "re-run `flashhub lock` on this machine; to keep other machines' variants locked, "
    f"name them with {VARIANT_OPTIONS}"
)


def unpinned_message(info: RepoInfo, variants: Iterable[str]) -> str:
    """Why a lock of ``info``, probed, cannot stand for the CDN: it lacks ``variants``,
    which the CDN publishes (as the cache records)."""
    names = ", ".join(map(escape_controls, sorted(variants)))
    return (
        f"{info} publishes {names}, which the lock does not pin: without variants.json, "
        "a lock holds the variants `flashhub lock` found where it ran (this one was made "
        "on another machine or edited, or the variant was published since)"
    )


def locked_variant(
    locked: LockedKernel, system: SystemInfo, target_of: TargetOf | None = None
) -> str:
    """The locked variant ``system`` loads: the one the CDN's ``variants.json`` gives it,
    or for a probed version the first locked one in the order a probe asks for them.
    ``target_of`` reads the devices a variant declares (see ``judge_builds``)."""
    if not locked.probed:
        published = VariantIndex(True, frozenset(locked.variants))
        return choose_variant(published, locked.info, system, target_of)
    read = target_of or _unknown_target
    in_probe_order = [
        VariantAccepted(as_variant(name))
        for name in candidate_names(system)
        if name in locked.variants
    ]
    chosen = best_variant(judge_builds(in_probe_order, system, read))
    if chosen is not None:
        return chosen
    verdicts = judge_variants(sorted(locked.variants), system)
    trace = format_trace(judge_builds(verdicts, system, read, first_fit=False))
    raise NoCompatibleVariantError(
        f"{locked.info} has no variants.json, and none of the variants the lock pins for it "
        f"fits this system ({describe_system(system)}):\n{trace}",
        hint=RELOCK_HINT,
    )


def _unknown_target(variant: str) -> None:
    """What a lock alone knows of the devices a variant declares: nothing."""
    return None


def lock_index(locked: LockedKernel, system: SystemInfo | None) -> VariantIndex:
    """What the lock tells the cache about the variants of the locked version.

    A published lock holds the whole ``variants.json``. A probed one holds variants that
    exist; for ``system``, the names a probe would ask for before its locked variant are
    recorded as absent, so that the warm path, and so the import hook, picks the locked
    variant. On the machine that locked, those names were probed and are absent indeed;
    elsewhere the lock stands for the CDN.
    """
    present = frozenset(locked.variants)
    if not locked.probed:
        return VariantIndex(True, present)
    if system is None:
        return VariantIndex(False, present)
    candidates = candidate_names(system)
    before = candidates[: candidates.index(locked_variant(locked, system))]
    return VariantIndex(False, present, frozenset(before))


def picked_from_lock(
    locked: LockedKernel,
    system: SystemInfo,
    recorded: VariantIndex | None,
    target_of: TargetOf | None,
) -> tuple[VariantIndex, str | None]:
    """The cache's ``recorded`` index of the locked version with what the lock adds to
    it, and the variant the import hook picks for ``system`` from that (``None``: it
    would ask the CDN); ``target_of`` as for :func:`locked_variant`.

    Raises:
        LockfileError: the lock is probed and lacks the variant picked.
    """
    added = lock_index(locked, system)
    index = added if recorded is None else merge_indexes(recorded, added)
    picked = pick_cached_variant(index, system, target_of)
    if locked.probed and picked is not None and picked not in locked.variants:
        raise LockfileError(unpinned_message(locked.info, [picked]), hint=RELOCK_HINT)
    return index, picked


def cached_entry(cache: Cache, locked: LockedKernel, variant: str) -> tuple[Path | None, str]:
    """The cache entry of a locked variant if :func:`cached_kernel_dir` takes it; else why not."""
    kernel_dir, why = cached_kernel_dir(cache, locked, variant)
    return (None if kernel_dir is None else kernel_dir.entry), why


def cached_kernel_dir(
    cache: Cache, locked: LockedKernel, variant: str
) -> tuple[KernelDir | None, str]:
    """The kernel to import from the cache entry of a locked variant if the entry holds
    the locked bytes, vouched for as the lock says, and its manifest depends on no kernel
    the lock does not pin; else why not."""
    entry = cache.entry_dir(locked.info, variant)
    receipt = read_receipt(entry)
    if receipt is None:
        return None, "it is not in the cache"
    expected = locked.variants[variant]
    if receipt.content_hash != expected:
        return None, f"the cached copy is {receipt.content_hash}, the lock pins {expected}"
    changed = receipt.changed_file(entry)
    if changed is not None:
        return None, (
            f"{entry / changed} was modified after it was verified (a copy of the cache that "
            "only lost its modification times is re-stamped, offline, by `flashhub cache "
            "verify --repair`)"
        )
    signer = locked.signers.get(variant)
    if not get_config().accepts_signer(locked.info.org, receipt.signer, locked=signer):
        vouching = _signer_cached_with(entry, locked, variant, receipt.content_hash)
        if vouching is None:
            cached = receipt.signer or "no key (a process checking no signature cached it)"
            return (
                None,
                f"the cached copy is vouched for by {cached}, the lock by {signer or 'no key'}",
            )
        receipt = receipt._replace(signer=vouching)
    kernel_dir = cached_kernel(entry, locked.info, variant, receipt)
    unpinned = _unpinned_dependencies(locked, kernel_dir)
    if unpinned:
        return (
            None,
            f"its metadata.json depends on {', '.join(unpinned)}, which the lock does not pin",
        )
    return kernel_dir, ""


def _signer_cached_with(
    entry: Path, locked: LockedKernel, variant: str, content_hash: str
) -> str | None:
    """The key, accepted for the locked ``variant`` (the lock's signer, where it records
    one), whose signature the ``.sig`` cached in ``entry`` holds; ``None`` when none is.
    An entry that a process trusting another key cached loads as locked, offline too."""
    from .._signing.verification import cached_signer  # and cryptography, for this entry

    config, locked_signer = get_config(), locked.signers.get(variant)
    keys = [k for k in config.trusted_keys if locked_signer in (None, k.key_id)]
    signer = cached_signer(entry, locked.info, variant, content_hash, keys)
    accepted = config.accepts_signer(locked.info.org, signer, locked=locked_signer)
    return signer if signer is not None and accepted else None


def _unpinned_dependencies(locked: LockedKernel, kernel_dir: KernelDir) -> list[str]:
    """The kernels ``kernel_dir``'s ``metadata.json`` loads first that the lock does not pin
    among ``locked``'s dependencies. The content hash pins the files a manifest lists, not
    its ``kernel-depends``: a manifest changed after locking could otherwise run any
    kernel before the locked one."""
    requires = requirements(kernel_dir)
    if not requires:
        return []
    source = f"{kernel_dir.entry}/{MANIFEST_NAME}"
    pinned = {dep.info for dep in locked.dependencies}
    depends = read_kernel_metadata(requires, source=source).kernel_depends
    return [str(dep) for dep in depends if dep.info not in pinned]
