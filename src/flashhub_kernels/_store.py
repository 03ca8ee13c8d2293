"""From a kernel reference to a verified variant directory on disk.

This is the one module that composes names, variants, manifests, cache and transport.
:func:`resolve` has two paths:

- warm: the cache's variant index picks the variant, the entry's receipt vouches for
  its files (``stat`` only); no network, and no HTTP library is even imported;
- cold: fetch ``variants.json`` (or probe), pick the variant, then under the entry's
  file lock download every file into staging, verify, and rename into place.
"""

from __future__ import annotations

import logging
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from ._cache import Cache, VariantIndex, cache_errors, ensure_dir, remove_tree
from ._callers import warn_at_caller
from ._config import Config, get_config
from ._manifest import (
    MANIFEST_NAME,
    MAX_DOCUMENT_BYTES,
    Manifest,
    parse_metadata,
    parse_variants,
    parse_versions,
)
from ._names import RepoInfo
from ._progress import progress_bar
from ._text import escape_controls
from ._urls import redact_url
from ._variants import (
    SystemInfo,
    VariantAccepted,
    VariantResolution,
    build_variant_name,
    candidate_names,
    detect_system,
    format_trace,
    resolve_variants,
    with_backend,
)
from .errors import (
    FlashhubError,
    IntegrityError,
    KernelNotFoundError,
    LockMismatchError,
    ManifestError,
    NewerVersionWarning,
    NoCompatibleVariantError,
    OfflineError,
    TransportError,
)

logger = logging.getLogger("flashhub_kernels")

if TYPE_CHECKING:
    from ._transport import Fetcher


class CommittedEntry(NamedTuple):
    """A verified cache entry, and whether this call downloaded it (rather than finding
    it complete, committed by another process while this one waited for the lock)."""

    path: Path
    downloaded: bool


class ResolvedKernel(NamedTuple):
    """A verified variant of a kernel in the cache, and the directory imported from it."""

    info: RepoInfo
    variant: str
    entry: Path
    package_dir: Path


def package_dir_of(entry: Path, py_pkg: str) -> Path:
    """The directory of a verified entry that is imported as the kernel.

    That is ``<py_pkg>/`` when the variant ships it, else the entry itself: a flattened
    build, whose files (``__init__.py``, ``_ops.py``, ...) lie directly in the variant
    directory. A build with both layouts loads from ``<py_pkg>/``.
    """
    package = entry / py_pkg
    return package if (package / "__init__.py").is_file() else entry


def target_system(backend: str | None) -> SystemInfo:
    """This machine, or this machine as if it ran ``backend``."""
    system = detect_system()
    return with_backend(system, backend) if backend else system


def resolve(
    candidates: Sequence[RepoInfo], *, backend: str | None = None, config: Config | None = None
) -> ResolvedKernel:
    """Return a verified cache entry for the first candidate that exists, downloading it if needed.

    ``candidates`` are the CDN spellings a module name may stand for (see
    :func:`~flashhub_kernels._names.cdn_name_candidates`), tried in order.
    """
    config = config or get_config()
    cache, system = Cache.from_config(config), target_system(backend)
    damaged: str | None = None
    for info in candidates:
        hit, problem = _warm_lookup(cache, info, system)
        if hit is not None:
            return hit
        damaged = damaged or problem
    if config.offline:
        raise _offline_error(candidates[0], damaged)
    with remote(config) as fetcher:
        not_found: KernelNotFoundError | None = None
        for info in candidates:
            try:
                index = shared_index(cache, fetcher, info, system)
            except KernelNotFoundError as exc:
                not_found = not_found or exc
                continue
            variant = choose_variant(index, info, system)
            logger.info(
                "%s: variant %s, the best of %s for %s",
                info,
                variant,
                "variants.json" if index.complete else "the variants probed",
                system.describe(),
            )
            entry, downloaded = download_entry(cache, fetcher, info, variant)
            if downloaded and config.version_check:  # not by every waiter for a download
                notice_newer_version(fetcher, info)
            return ResolvedKernel(info, variant, entry, package_dir_of(entry, info.py_pkg))
    assert not_found is not None
    raise not_found


def _offline_error(info: RepoInfo, damaged: str | None) -> Exception:
    if damaged:
        return IntegrityError(
            f"the cached copy of {info} was modified after it was verified ({damaged})",
            hint="unset FLASHHUB_OFFLINE so it can be fetched again "
            "(`flashhub cache verify` checks the whole cache)",
        )
    return OfflineError(
        f"{info} is not in the cache and FLASHHUB_OFFLINE is set",
        hint=f"run `flashhub get {info.repo_id} --version {info.version}` with network access, "
        "or unset FLASHHUB_OFFLINE",
    )


# -- warm path -------------------------------------------------------------------------


def _warm_lookup(
    cache: Cache, info: RepoInfo, system: SystemInfo
) -> tuple[ResolvedKernel | None, str | None]:
    """A verified entry, or ``None`` and (when an entry was damaged) what changed."""
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
    return ResolvedKernel(info, variant, entry, package_dir_of(entry, info.py_pkg)), None


def pick_cached_variant(index: VariantIndex, system: SystemInfo) -> str | None:
    """The variant the CDN would give ``system``, if the index knows enough to say."""
    if index.complete:
        return best_variant(resolve_variants(sorted(index.present), system))
    for name in candidate_names(system):
        if name in index.present:
            return name
        if name not in index.absent:
            return None  # never probed for this system: ask the CDN
    return None


def best_variant(resolutions: Sequence[VariantResolution]) -> str | None:
    """The preferred accepted variant of a :func:`resolve_variants` result, if any."""
    first = resolutions[0] if resolutions else None
    # A plain str: it is recorded in receipts and in LoadedKernel.
    return str(first.variant) if isinstance(first, VariantAccepted) else None


# -- cold path -------------------------------------------------------------------------


@contextmanager
def remote(config: Config) -> Iterator[Fetcher]:
    """A :class:`Fetcher` for the configured mirrors; imports the HTTP client on first use."""
    from ._transport import Fetcher

    fetcher = Fetcher(config)
    try:
        yield fetcher
    finally:
        fetcher.close()


def fetch_index(
    fetcher: Fetcher, info: RepoInfo, system: SystemInfo, *, probe_all: bool = False
) -> VariantIndex:
    """What ``info`` publishes: ``variants.json``, or a probe of ``system``'s candidates.

    Probing stops at the first hit unless ``probe_all`` (used to list variants).
    """
    from ._transport import NotPublished

    try:
        data = fetcher.get_bytes(f"{info.cdn_path}/variants.json", limit=MAX_DOCUMENT_BYTES)
        return VariantIndex(True, frozenset(parse_variants(data, source=f"{info}/variants.json")))
    except NotPublished as exc:
        tried = redact_url(str(exc))  # the mirror's URL of variants.json
    present: set[str] = set()
    absent: set[str] = set()
    for name in candidate_names(system):
        try:
            fetcher.get_bytes(variant_path(info, name, MANIFEST_NAME), limit=MAX_DOCUMENT_BYTES)
        except NotPublished:
            absent.add(name)
            continue
        present.add(name)
        if not probe_all:
            break
    if not present:
        _raise_not_published(fetcher, info, system, absent, tried)
    return VariantIndex(False, frozenset(present), frozenset(absent))


def shared_index(
    cache: Cache, fetcher: Fetcher, info: RepoInfo, system: SystemInfo
) -> VariantIndex:
    """The version's variant index, fetched by one process and recorded for all.

    Processes that wait for the lock find the index recorded and make no request.
    """
    with cache.index_lock(info):
        index = cache.read_index(info)
        if index is None or pick_cached_variant(index, system) is None:
            index = cache.record_index(info, fetch_index(fetcher, info, system))
        return index


def _raise_not_published(
    fetcher: Fetcher, info: RepoInfo, system: SystemInfo, probed: set[str], tried: str
) -> NoReturn:
    """Raise why nothing was found for ``info``; ``tried`` is the URL of its variants.json."""
    versions = published_versions(fetcher, info.repo_id)
    if versions is not None and info.version in versions:
        raise no_variant_error(
            f"{info} has no variants.json and none of the variants this system can load "
            f"is published (probed: {', '.join(sorted(probed))})",
            system,
            published=None,
        )
    listed = f"; published versions: {', '.join(map(str, versions))}" if versions else ""
    message = f"{info} was not found on the CDN: {tried} does not exist{listed}"
    doubled = doubled_prefix_hint(fetcher.config)
    if doubled is None and versions:
        raise KernelNotFoundError(
            message,
            hint=f"use a published version; the newest is v{versions[-1]}",
            cli_hint=f"pass a published version, e.g. --version {versions[-1]} (the newest)",
        )
    raise KernelNotFoundError(
        message, hint=doubled or "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX"
    )


def doubled_prefix_hint(config: Config) -> str | None:
    """The fix when a CDN URL already ends with the prefix, which every path appends again.

    ``FLASHHUB_CDN_URL=https://host/kernels`` with the default prefix ``kernels`` asks for
    ``https://host/kernels/kernels/...``: nothing is found, and the URL alone shows why.
    """
    if not config.prefix:
        return None
    for url in config.cdn_urls:
        if urllib.parse.urlsplit(url).path.rstrip("/").endswith(f"/{config.prefix}"):
            return (
                f"FLASHHUB_CDN_URL already ends with /{config.prefix} and FLASHHUB_CDN_PREFIX "
                "adds it again: drop one"
            )
    return None


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
        return NoCompatibleVariantError(message, hint=wanted)
    if published is None:
        return NoCompatibleVariantError(
            message,
            hint=f"{wanted}; or pass backend='cpu' to look for a CPU build",
            cli_hint=f"{wanted}; or pass --backend cpu to look for a CPU build",
        )
    cpu_build = best_variant(resolve_variants(published, with_backend(system, "cpu")))
    if cpu_build is None:
        return NoCompatibleVariantError(message, hint=wanted)
    return NoCompatibleVariantError(
        message,
        hint=f"pass backend='cpu' to run the CPU build {cpu_build} instead, or {wanted}",
        cli_hint=f"pass --backend cpu to use the CPU build {cpu_build} instead, or {wanted}",
    )


def published_versions(fetcher: Fetcher, repo_id: str) -> list[int] | None:
    """The repo's ``versions.json``, or ``None`` when it has none."""
    from ._transport import NotPublished

    try:
        return _fetch_versions(fetcher, repo_id)
    except NotPublished:
        return None


def _fetch_versions(fetcher: Fetcher, repo_id: str) -> list[int]:
    """The repo's ``versions.json``; :class:`NotPublished` (its text the URL) if absent."""
    data = fetcher.get_bytes(f"{repo_id}/versions.json", limit=MAX_DOCUMENT_BYTES)
    return parse_versions(data, source=f"{repo_id}/versions.json")


# Repos whose versions.json this process has read for the newer-version notice.
_version_checked: set[str] = set()
_version_checked_lock = threading.Lock()


def notice_newer_version(fetcher: Fetcher, info: RepoInfo) -> None:
    """Warn (:class:`NewerVersionWarning`) when ``versions.json`` lists a version newer
    than ``info``'s; called by a load that had to download.

    At most one request per repo and process, and so at most one warning. A missing or
    malformed ``versions.json``, or a CDN that fails to serve it, says nothing: the load
    itself has succeeded.
    """
    with _version_checked_lock:
        if info.repo_id in _version_checked:
            return
        _version_checked.add(info.repo_id)
    try:
        versions = published_versions(fetcher, info.repo_id)
    except FlashhubError:
        return
    if not versions or versions[-1] <= info.version:
        return
    newer = RepoInfo(info.repo_id, versions[-1])
    warn_at_caller(
        f"{info.repo_id} v{newer.version} is published; this process loads v{info.version}. "
        f"To use it, load get_kernel({info.repo_id!r}, version={newer.version}) or import "
        f"{newer.module_name()}, after checking what changed. "
        "FLASHHUB_NO_VERSION_CHECK=1 turns this check off.",
        NewerVersionWarning,
    )


def with_version(fetcher: Fetcher, repo_id: str, version: int | None) -> RepoInfo:
    """``RepoInfo`` for ``version``, or for the newest one in ``versions.json``."""
    from ._transport import NotPublished

    if version is not None:
        return RepoInfo(repo_id, version)
    RepoInfo(repo_id, 1)  # validate the repo id before any request
    try:
        versions = _fetch_versions(fetcher, repo_id)
    except NotPublished as exc:
        why = f"has no versions.json on the CDN ({redact_url(str(exc))} does not exist)"
    else:
        if versions:
            return RepoInfo(repo_id, versions[-1])
        why = "lists no versions in its versions.json"
    check = "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX"
    doubled = doubled_prefix_hint(fetcher.config)
    raise KernelNotFoundError(
        f"{repo_id} {why}, so its newest version is unknown",
        hint=doubled or f"{check}; or pass version= if it is published without versions.json",
        cli_hint=doubled or f"{check}; or pass --version N if it is published without one",
    )


def choose_variant(index: VariantIndex, info: RepoInfo, system: SystemInfo) -> str:
    """The best published variant for ``system``, or the full rejection trace."""
    if not index.complete:
        chosen = pick_cached_variant(index, system)
        assert chosen is not None, "fetch_index probes until it finds a variant"
        return chosen
    published = sorted(index.present)
    resolutions = resolve_variants(published, system)
    chosen = best_variant(resolutions)
    if chosen is None:
        raise no_variant_error(
            f"{info} has no variant for this system ({system.describe()}). "
            f"Published variants:\n{format_trace(resolutions)}",
            system,
            published=published,
        )
    return chosen


def variant_path(info: RepoInfo, variant: str, relpath: str) -> str:
    return f"{info.cdn_path}/build/{variant}/{urllib.parse.quote(relpath)}"


def download_entry(
    cache: Cache,
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    *,
    expected_hash: str | None = None,
) -> CommittedEntry:
    """Make ``cache.entry_dir(info, variant)`` a verified entry; one downloader at a time.

    With ``expected_hash`` (a lock file's pin), an entry verified against other content
    is replaced, and a manifest with another content hash is refused before any file
    is fetched.
    """
    entry = cache.entry_dir(info, variant)
    with cache.download_lock(info, variant):
        receipt = cache.read_receipt(entry)
        if (
            receipt is not None
            and receipt.changed_file(entry) is None
            and expected_hash in (None, receipt.content_hash)
        ):
            return CommittedEntry(entry, downloaded=False)  # another process finished it
        if receipt is not None:
            logger.info(
                "%s: the cached entry %s changed after it was verified; fetching it again",
                info,
                entry,
            )
        with cache_errors():
            cache.evict(entry)
            cache.remove_stale_staging(info, variant)
        manifest_bytes, manifest = fetch_manifest(fetcher, info, variant)
        _check_has_package(manifest, info, variant)
        if expected_hash is not None and manifest.content_hash != expected_hash:
            raise LockMismatchError(
                f"{info} variant {variant}: the CDN serves content {manifest.content_hash}, "
                f"but the lock pins {expected_hash}; nothing was fetched",
                hint="a published version must not change: report it to the publisher, or "
                "run `flashhub lock` again if you trust the new content",
            )
        _download_and_commit(cache, fetcher, info, variant, manifest, manifest_bytes)
    return CommittedEntry(entry, downloaded=True)


def _download_and_commit(
    cache: Cache,
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    manifest: Manifest,
    manifest_bytes: bytes,
) -> None:
    """Download every file of ``manifest`` into staging, verified, then commit the entry.

    Continues what an interrupted download kept, and keeps what this one received if it
    is interrupted (Ctrl-C) or every mirror fails.
    """
    from ._transport import DownloadJob  # the cold path's modules: warm loads skip them

    with cache_errors():
        staging = cache.new_staging(info, variant)
    try:
        with cache_errors():
            cache.adopt_partials(staging, info, variant, manifest.files)
            jobs = [
                DownloadJob(
                    variant_path(info, variant, relpath),
                    staging / relpath,
                    digest,
                    manifest.size_of(relpath),
                )
                for relpath, digest in manifest.files.items()
            ]
            for directory in {job.dest.parent for job in jobs}:
                ensure_dir(directory)
        total = sum(manifest.sizes.values()) if manifest.sizes is not None else None
        bar = progress_bar(f"{info} {variant}", enabled=fetcher.config.progress_bars, total=total)
        with bar as progress:
            fetcher.download_many(jobs, progress)
        with cache_errors():
            cache.seal(staging, manifest_bytes, manifest.content_hash, manifest.files)
            cache.commit(staging, cache.entry_dir(info, variant))
    except KeyboardInterrupt:
        cache.keep_partials(staging, info, variant, manifest.files)
        raise KeyboardInterrupt(
            f"the download of {info} {variant} was interrupted; what arrived is kept, "
            "and the next load continues from there"
        ) from None
    except TransportError:
        cache.keep_partials(staging, info, variant, manifest.files)
        raise
    finally:
        remove_tree(staging)  # a no-op after a successful commit


def fetch_manifest(fetcher: Fetcher, info: RepoInfo, variant: str) -> tuple[bytes, Manifest]:
    """The ``metadata.json`` of a variant that ``variants.json`` (or a probe) found: its
    exact bytes, and the validated manifest."""
    from ._transport import NotPublished  # the cold path's modules: warm loads skip them

    try:
        data = fetcher.get_bytes(
            variant_path(info, variant, MANIFEST_NAME), limit=MAX_DOCUMENT_BYTES
        )
    except NotPublished as exc:
        raise TransportError(
            f"{info} lists variant {escape_controls(variant)}, but "
            f"{redact_url(str(exc))} does not exist",
            hint="the CDN is incomplete: report it to the kernel's publisher, or add a "
            "complete mirror to FLASHHUB_CDN_URL",
        ) from None
    source = f"{info}/build/{escape_controls(variant)}/{MANIFEST_NAME}"
    return data, parse_metadata(data, source=source)


def _check_has_package(manifest: Manifest, info: RepoInfo, variant: str) -> None:
    """Refuse a variant with neither ``<py_pkg>/__init__.py`` nor a top-level ``__init__.py``
    (a flattened build), before any of its files is fetched."""
    if f"{info.py_pkg}/__init__.py" not in manifest.files and "__init__.py" not in manifest.files:
        raise ManifestError(
            f"{info}/build/{variant}/metadata.json lists neither {info.py_pkg}/__init__.py "
            "nor a top-level __init__.py, so the variant holds no importable package",
            hint="the package directory must be named after the repo with '-' -> '_', "
            "or the package's files must lie directly in the variant directory",
        )
