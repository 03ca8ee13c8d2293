"""Answers from the cache alone, for ``FLASHHUB_OFFLINE=1``.

With the network off, the questions the CDN normally answers (which variants a version
publishes, what each one holds) are answered from what earlier loads recorded:

- ``variants-index.json`` of a version: the whole ``variants.json`` (``complete``), or
  which of the names probed for exist and which do not;
- a committed entry: its ``metadata.json`` and the receipt written when its files were
  verified, which records each file's size.

When the cache cannot answer, the functions here raise
:class:`~flashhub_kernels.errors.OfflineError` saying what is missing. None of them
imports the HTTP client.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from .._cache.layout import Cache, VariantIndex
from .._cache.receipt import read_receipt
from .._constants import MANIFEST_NAME
from .._models.manifest import Manifest, check_variant_segment, parse_metadata
from .._models.names import RepoInfo
from .._models.record import Record
from .._utils.filesystem import read_regular
from .._variants.choice import cached_targets, no_variant_error, unfit_error
from .._variants.compat import pick_cached_variant
from .._variants.probing import candidate_names
from .._variants.system import SystemInfo
from .._variants.verdicts import VariantAccepted, best_variant, judge_builds, judge_variants
from ..errors import (
    FlashhubError,
    IntegrityError,
    NoCompatibleVariantError,
    OfflineError,
    SignatureError,
)

_ONLINE_HINT = "unset FLASHHUB_OFFLINE"


def cached_copy_error(
    cache: Cache,
    candidates: Sequence[RepoInfo],
    system: SystemInfo,
    damaged: str | None,
    *,
    unsigned: bool,
) -> Exception:
    """Why an offline load of ``candidates`` (the CDN spellings of one kernel) on
    ``system`` finds no usable copy in the cache: the variants the cache records show
    that none fits (the error an online load raises), none is cached, one was
    ``damaged`` (modified after it was verified), or it is ``unsigned`` (no trusted key
    vouched for it when it was cached; ``damaged`` then says so)."""
    info = candidates[0]
    if unsigned:
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
    return _recorded_misfit(cache, candidates, system) or OfflineError(
        f"{info} is not in the cache and FLASHHUB_OFFLINE is set",
        hint=f"run `flashhub get {info.repo_id} --version {info.version}` with network access, "
        "or unset FLASHHUB_OFFLINE",
    )


def _recorded_misfit(
    cache: Cache, candidates: Sequence[RepoInfo], system: SystemInfo
) -> NoCompatibleVariantError | None:
    """The error for the first of ``candidates`` whose variant index the cache records
    when that index settles that none of its variants fits ``system``; ``None`` when it
    does not (a variant fits, or one this system could load was never probed for or has
    devices the cache does not record)."""
    for info in candidates:
        index = cache.read_index(info)
        if index is None:
            continue
        try:
            names = published_variants(cache, info, system)
        except OfflineError:
            return None
        except NoCompatibleVariantError as exc:
            return exc
        verdicts = judge_builds(judge_variants(names, system), system, cached_targets(cache, info))
        if best_variant(verdicts) is not None:
            return None
        published = names if index.complete else None
        return unfit_error(info, system, verdicts, published=published, recorded=True)
    return None


def _not_cached(info: RepoInfo, what: str) -> OfflineError:
    return OfflineError(
        f"the cache does not record {what} of {info}, and FLASHHUB_OFFLINE is set",
        hint=f"run `flashhub get {info.repo_id} --version {info.version}` with network "
        f"access first (it records them in the cache), or {_ONLINE_HINT}",
    )


def cached_index(cache: Cache, info: RepoInfo) -> VariantIndex:
    """The variant index the cache recorded for ``info``; :class:`OfflineError` if none."""
    index = cache.read_index(info)
    if index is None:
        raise _not_cached(info, "the published variants")
    return index


def published_variants(cache: Cache, info: RepoInfo, system: SystemInfo) -> list[str]:
    """The variant names the CDN would list for ``system``, sorted, from the cache.

    A recorded ``variants.json`` lists them all. A probed version lists the names
    ``system`` could load that exist, which the cache knows only once every one of
    them was probed.

    Raises:
        OfflineError: the cache does not know enough.
        NoCompatibleVariantError: the version has no ``variants.json`` and none of
            ``system``'s candidates exists.
    """
    index = cached_index(cache, info)
    if index.complete:
        return sorted(index.present)
    candidates = candidate_names(system)
    if any(name not in index.present and name not in index.absent for name in candidates):
        raise _not_cached(info, "every variant this system could load")
    present = sorted(name for name in candidates if name in index.present)
    if not present:
        raise no_variant_error(
            f"{info} has no variants.json and none of the variants this system can load "
            "is published (as recorded in the cache)",
            system,
            published=None,
        )
    return present


def has_variant(cache: Cache, info: RepoInfo, system: SystemInfo) -> bool:
    """Whether ``info`` publishes a variant ``system`` loads, as far as the cache records.

    Raises:
        OfflineError: the cache does not know.
    """
    index = cached_index(cache, info)
    if not index.complete and pick_cached_variant(index, system) is not None:
        return True  # a probe found one; the names it did not try do not matter
    try:
        names = published_variants(cache, info, system)
    except NoCompatibleVariantError:
        return False
    return any(isinstance(r, VariantAccepted) for r in judge_variants(names, system))


class CachedVariant(Record):
    """A cached entry's manifest, each file's size as recorded when it was verified, and
    the trusted key that vouched for it then (``None``: none was checked)."""

    manifest: Manifest
    sizes: dict[str, int]
    signer: str | None = None


def cached_variant(cache: Cache, info: RepoInfo, variant: str) -> CachedVariant | None:
    """The manifest and file sizes of a committed entry, or ``None`` if it is not cached."""
    try:
        check_variant_segment(variant)  # a name from the CDN: never made a path unchecked
    except ValueError:
        return None
    entry = cache.entry_dir(info, variant)
    cache.check_trusted(entry)
    receipt = read_receipt(entry)
    if receipt is None:
        return None
    try:
        data = read_regular(entry / MANIFEST_NAME)
        manifest = parse_metadata(data, source=f"{entry / MANIFEST_NAME}")
    except (OSError, FlashhubError):
        return None
    if manifest.content_hash != receipt.content_hash or set(receipt.files) != set(manifest.files):
        return None
    sizes = {path: size for path, (size, _mtime) in receipt.files.items()}
    return CachedVariant(manifest, sizes, receipt.signer)


def cached_variants(
    cache: Cache,
    info: RepoInfo,
    variants: Sequence[str],
    *,
    gettable: Collection[str] | None = None,
) -> dict[str, CachedVariant]:
    """:func:`cached_variant` of each of ``variants``; :class:`OfflineError` naming the
    ones the cache does not hold. ``gettable``: those of ``variants`` that ``flashhub
    get`` would cache on this machine (default: all), so that its hint suggests it only
    where it helps."""
    found = {name: cached_variant(cache, info, name) for name in variants}
    missing = [name for name, cached in found.items() if cached is None]
    if missing:
        named = ", ".join(repr(str(name)) for name in missing)  # a Variant's own repr says more
        helps = gettable is None or any(name in gettable for name in missing)
        raise OfflineError(
            f"the cache does not hold the metadata.json of {info} "
            f"{'variant' if len(missing) == 1 else 'variants'} {named}, "
            "and FLASHHUB_OFFLINE is set",
            hint=_get_hint(info) if helps else _DOWNLOAD_ALL_HINT,
        )
    return {name: cached for name, cached in found.items() if cached is not None}


def _get_hint(info: RepoInfo) -> str:
    return (
        f"run `flashhub get {info.repo_id} --version {info.version}` (this system's "
        "variant) with network access first, or `flashhub download --all-variants` (a "
        f"project's locked variants), or {_ONLINE_HINT}"
    )


# Other machines' variants: only a project's lock file gets them into this cache.
_DOWNLOAD_ALL_HINT = (
    "lock the kernel in a project (`flashhub lock`) and run `flashhub download "
    f"--all-variants` with network access first, to cache every variant it locks; or {_ONLINE_HINT}"
)


def indexed_versions(cache: Cache, repo_id: str) -> list[int]:
    """The versions of ``repo_id`` whose variant index the cache records, ascending."""
    repo_dir = cache.version_dir(RepoInfo(repo_id, 1)).parent
    versions = []
    for child in repo_dir.glob("v*") if repo_dir.is_dir() else []:
        number = child.name[1:]
        if number.isdigit() and not number.startswith("0"):
            info = RepoInfo(repo_id, int(number))
            if cache.version_dir(info) == child and cache.read_index(info) is not None:
                versions.append(info.version)
    return sorted(versions)
