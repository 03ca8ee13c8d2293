"""Filling the cache with what a lock pins (``flashhub download``), each variant checked.

The download path of lock files: :func:`~flashhub_kernels.get_locked_kernel` comes here
for a variant the cache lacks; :func:`~flashhub_kernels.load_kernel` never does.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from .._cache.layout import Cache
from .._cache.mutex import download_mutex, index_mutex
from .._cache.staging import record_index
from .._config import Config, get_config
from .._models.record import Record
from .._network.choosing import ManifestReader
from .._network.documents import get_variant_list
from .._network.download import make_entry
from .._network.mirrors import NotPublished
from .._network.transport import remote
from .._utils.escaping import escape_controls
from .._variants.choice import cached_targets
from .._variants.named_system import target_system
from ..errors import FlashhubError, LockMismatchError, NoCompatibleVariantError, OfflineError
from .cache_check import cached_entry, lock_index, locked_variant, picked_from_lock

if TYPE_CHECKING:
    from .._cache.layout import VariantIndex
    from .._network.documents import ManifestDocument
    from .._network.transport import Fetcher
    from .._variants.compat import TargetOf
    from .._variants.system import SystemInfo
    from .format import LockedKernel, Lockfile


class LockedDownload(Record):
    """What :func:`download_locked` did for one locked kernel variant.

    ``status`` is ``"cached"``, ``"downloaded"`` or ``"failed"`` (then ``failure`` is
    why; ``variant`` is ``None`` when no locked variant fits this system).
    """

    repo_id: str
    version: int
    variant: str | None
    status: str
    path: Path | None = None
    failure: FlashhubError | None = None

    @property
    def error(self) -> str | None:
        """Why it failed, with a hint; ``None`` unless it did."""
        return None if self.failure is None else str(self.failure)

    @property
    def cli_error(self) -> str | None:
        """:attr:`error` in the ``flashhub`` command's words (its options in the hint)."""
        if self.failure is None:
            return None
        hint = self.failure.cli_hint or self.failure.hint
        return f"{self.failure.message}\n  hint: {hint}" if hint else self.failure.message

    def to_dict(self) -> dict[str, object]:
        """What ``flashhub download --json`` prints of it."""
        return {
            "repo_id": self.repo_id,
            "version": self.version,
            "variant": self.variant,
            "status": self.status,
            "path": str(self.path) if self.path else None,
            "error": self.cli_error,
        }


def _variant_to_download(locked: LockedKernel, system: SystemInfo, target_of: TargetOf) -> str:
    """:func:`~.cache_check.locked_variant`, with what a download can do when no locked
    variant fits ``system`` (forcing a backend is a load's choice, not a download's)."""
    try:
        return locked_variant(locked, system, target_of)
    except NoCompatibleVariantError as exc:
        raise NoCompatibleVariantError(
            exc.message,
            hint="download every variant the lock pins with all_variants=True, or lock a "
            "variant for this system",
            cli_hint="pass --all-variants to download every variant the lock pins, or lock "
            "a variant for this system",
        ) from None


def download_locked(
    lock: Lockfile,
    *,
    all_variants: bool = False,
    system: SystemInfo | None = None,
) -> list[LockedDownload]:
    """Put every locked kernel into the cache, each checked against the lock.

    Downloads the variant this system (or ``system``, another machine's: see
    :func:`~flashhub_kernels._variants.named_system.system_from_variant`) loads, or with
    ``all_variants`` every locked variant (to bake a cache for several targets). A
    failure is reported in its result and the other kernels are still downloaded.
    Offline (``FLASHHUB_OFFLINE``), every such variant must already be cached as locked:
    each is reported ``cached``, else an :class:`OfflineError` names those that are not.
    """
    config = get_config()
    cache = Cache.from_config(config)
    system = None if all_variants else system or target_system(None)
    if config.offline:
        return _cached_as_locked(cache, lock, system)
    results: list[LockedDownload] = []
    with remote(config) as fetcher:
        for locked in lock.all_kernels():
            results += _download_kernel(cache, fetcher, locked, system)
    return results


def _cached_as_locked(
    cache: Cache, lock: Lockfile, system: SystemInfo | None
) -> list[LockedDownload]:
    """Offline: the locked variants a download would fetch, all found in the cache with
    the locked content; else an :class:`OfflineError` naming those that are not."""
    results, missing = [], []
    for locked in lock.all_kernels():
        cached = cached_targets(cache, locked.info)
        variants = (
            sorted(locked.variants)
            if system is None
            else [_variant_to_download(locked, system, cached)]
        )
        for variant in variants:
            entry, why = cached_entry(cache, locked, variant)
            if entry is None:
                missing.append(f"{locked.info} {variant}: {why}")
            else:
                results.append(
                    LockedDownload(locked.repo_id, locked.version, variant, "cached", entry)
                )
    if missing:
        raise OfflineError(
            "downloading locked kernels needs the network, and FLASHHUB_OFFLINE is set; "
            "not cached as locked:\n  " + "\n  ".join(missing),
            hint="unset FLASHHUB_OFFLINE",
        )
    return results


def _download_kernel(
    cache: Cache, fetcher: Fetcher, locked: LockedKernel, system: SystemInfo | None
) -> list[LockedDownload]:
    with index_mutex(cache, locked.info):  # chosen as a load chooses: one at a time
        recorded = cache.read_index(locked.info)
        reader = ManifestReader(cache, fetcher, locked.info, recorded)
        try:
            index = _confirmed(fetcher, locked, lock_index(locked, system), recorded)
            if system is None:
                variants = sorted(locked.variants)
            else:
                picked_from_lock(locked, system, recorded, reader.target)  # as a load checks
                variants = [_variant_to_download(locked, system, reader.target)]
        except FlashhubError as exc:
            return [LockedDownload(locked.repo_id, locked.version, None, "failed", failure=exc)]
        finally:
            reader.record()  # the variants passed over: a load there passes over them too
    results = [
        _download_variant(cache, fetcher, locked, variant, reader.documents.get(variant))
        for variant in variants
    ]
    if index is not None:  # offline loads pick their variant from it, asking no CDN
        with index_mutex(cache, locked.info):
            record_index(cache, locked.info, index)
    return results


def _confirmed(
    fetcher: Fetcher, locked: LockedKernel, index: VariantIndex, recorded: VariantIndex | None
) -> VariantIndex | None:
    """``index``, the lock's whole list of the version's variants, as the CDN's
    ``variants.json`` confirms it, before the cache records it as that list, which every
    later load of the version chooses from: a lock an unreviewed change wrote could
    otherwise set it for everyone who shares the cache. ``None`` (nothing to record)
    where the CDN has no ``variants.json`` for it. A list the cache records already is
    kept (a record only adds knowledge), and a probed lock's names are what a probe finds.

    Raises:
        LockMismatchError: the CDN lists other variants than the lock.
    """
    if not index.complete or (recorded is not None and recorded.complete):
        return index
    try:
        names, proof = get_variant_list(fetcher, locked.info)
    except NotPublished:  # withdrawn: its files' downloads say so
        return None
    if frozenset(names) != index.present:
        listed = ", ".join(map(escape_controls, sorted(names)))
        raise LockMismatchError(
            f"{locked.info}: the lock pins the variants {', '.join(sorted(index.present))}, "
            f"but the CDN's variants.json lists {listed}"
        )
    return index._replace(proof=proof)


def _download_variant(
    cache: Cache,
    fetcher: Fetcher,
    locked: LockedKernel,
    variant: str,
    document: ManifestDocument | None,
) -> LockedDownload:
    def result(
        status: str, path: Path | None = None, failure: FlashhubError | None = None
    ) -> LockedDownload:
        return LockedDownload(locked.repo_id, locked.version, variant, status, path, failure)

    entry, _why = cached_entry(cache, locked, variant)
    if entry is not None:
        return result("cached", entry)
    try:
        return result("downloaded", fetch_locked(cache, fetcher, locked, variant, document))
    except FlashhubError as exc:
        return result("failed", failure=exc)


def fetch_locked_variants(
    config: Config, cache: Cache, wanted: Iterable[tuple[LockedKernel, str]]
) -> None:
    """Download each ``(locked kernel, variant)`` of ``wanted``, as :func:`fetch_locked` does."""
    with remote(config) as fetcher:
        for locked, variant in wanted:
            fetch_locked(cache, fetcher, locked, variant)


def fetch_locked(
    cache: Cache,
    fetcher: Fetcher,
    locked: LockedKernel,
    variant: str,
    document: ManifestDocument | None = None,
) -> Path:
    """Download a locked variant into the cache; raise unless it holds the locked bytes.

    The manifest (``document`` when choosing the variant fetched it already) is checked
    against the lock before any file is fetched: a CDN object changed after locking is
    caught even when its ``metadata.json`` was changed to match. So is, once it is
    cached, a ``kernel-depends`` the lock does not pin (a :class:`LockMismatchError`).
    """
    with download_mutex(cache, locked.info, variant):
        entry = make_entry(
            cache,
            fetcher,
            locked.info,
            variant,
            expected_hash=locked.variants[variant],
            expected_signer=locked.signers.get(variant),
            document=document,
        )
    _, why = cached_entry(cache, locked, variant)  # what the content hash does not pin
    if why:
        raise LockMismatchError(f"{locked.info} variant {variant}: {why}")
    return entry
