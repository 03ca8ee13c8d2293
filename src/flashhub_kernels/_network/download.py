"""The cold path: from the CDN's documents to a verified entry in the cache.

:func:`fetch_kernel` chooses the variant under the version's index mutex
(:func:`chosen_variant`): by the index the cache records when it knows enough, else by
what one process fetches and records for every other: the version's ``variants.json``
(or a probe of the candidates' ``metadata.json``) and, where the device matters, the
``metadata.json`` of the candidates up to the one taken (:class:`ManifestReader`). Then
:func:`make_entry`, under the entry's download mutex, reuses what another process
committed meanwhile, else checks the manifest, downloads every file into staging,
verified as it streams, and renames the entry into place.
"""

from __future__ import annotations

import functools
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import NamedTuple, NoReturn

from .._cache.bytecode import compile_bytecode, sources_to_compile
from .._cache.layout import Cache, Receipt, VariantIndex
from .._cache.mutex import download_mutex, index_mutex
from .._cache.staging import (
    adopt_partials,
    cache_errors,
    commit,
    ensure_dir,
    evict,
    keep_partials,
    new_staging,
    record_index,
    record_signer,
    remove_stale_staging,
    remove_tree,
    seal,
)
from .._cache.versions_seen import check_newest
from .._config import Config
from .._constants import MANIFEST_NAME
from .._models.kernel_dir import KernelDir, cached_kernel
from .._models.kernel_metadata import read_kernel_metadata
from .._models.manifest import Manifest
from .._models.names import RepoInfo
from .._utils.callers import warn_at_caller
from .._utils.urls import redact_url
from .._variants.archs import BuildTarget, read_target
from .._variants.choice import choose_variant, no_variant_error
from .._variants.compat import build_mismatch, needs_target, pick_cached_variant
from .._variants.grammar import as_variant
from .._variants.probing import candidate_names
from .._variants.system import SystemInfo
from .._variants.verdicts import best_variant, judge_builds, judge_variants
from ..errors import (
    FlashhubError,
    KernelNotFoundError,
    LockMismatchError,
    ManifestError,
    NewerVersionWarning,
    NoCompatibleVariantError,
    SignatureError,
    TransportError,
)
from .documents import (
    ManifestDocument,
    NotPublished,
    get_listed_manifest,
    get_manifest,
    get_variant_names,
    get_versions,
    variant_path,
)
from .progress import progress_bar
from .transport import DownloadJob, Fetcher

logger = logging.getLogger("flashhub_kernels")


class CommittedEntry(NamedTuple):
    """A verified cache entry, and whether this call downloaded it (rather than finding
    it complete, committed by another process while this one waited for the lock)."""

    path: Path
    downloaded: bool
    signer: str | None = None  # the trusted key that vouched for it, if one was checked


def fetch_kernel(
    cache: Cache, system: SystemInfo, candidates: Sequence[RepoInfo], config: Config
) -> KernelDir:
    """Download the variant ``system`` loads of the first candidate the CDN publishes."""
    with remote(config) as fetcher:
        not_found: KernelNotFoundError | None = None
        for info in candidates:
            # Only a load that downloads checks (not every waiter for a download), and it
            # reads versions.json beside its files, not after them.
            notice = NewerVersionNotice(fetcher, info)
            with ExitStack() as held:
                try:
                    choice = held.enter_context(chosen_variant(cache, fetcher, info, system))
                except KernelNotFoundError as exc:
                    not_found = not_found or exc
                    continue
                entry = make_entry(
                    cache,
                    fetcher,
                    info,
                    choice.variant,
                    document=choice.document,
                    on_download=notice.start,
                ).path
            notice.finish()
            receipt = cache.read_receipt(entry)
            assert receipt is not None, "a committed entry has its receipt"
            return cached_kernel(entry, info, choice.variant, receipt)
    assert not_found is not None
    raise not_found


@contextmanager
def remote(config: Config) -> Iterator[Fetcher]:
    """A :class:`Fetcher` for the configured mirrors, closed on exit."""
    fetcher = Fetcher(config)
    try:
        yield fetcher
    finally:
        fetcher.close()


class ManifestReader:
    """The devices variants of ``info`` declare, for :func:`choose_variant`: what the
    index records, else the ``metadata.json`` of a cached entry, else the CDN's, each
    fetched at most once and kept (:attr:`documents`, which starts with those a probe
    fetched) for the download that follows.

    :meth:`record` adds ``index`` and what was read to the cache's index, so that a warm
    load passes over the variants that do not fit without asking again.
    """

    def __init__(
        self,
        cache: Cache,
        fetcher: Fetcher,
        info: RepoInfo,
        index: VariantIndex | None = None,
        documents: Mapping[str, ManifestDocument] | None = None,
    ) -> None:
        self.cache, self.fetcher, self.info = cache, fetcher, info
        self.index = index or VariantIndex(False, frozenset())
        self.known = dict(self.index.targets)
        self.documents = dict(documents or {})
        self.read: dict[str, BuildTarget] = {}

    def target(self, variant: str) -> BuildTarget:
        target = self.known.get(variant) or self.cache.read_target(self.info, variant)
        if target is None:
            document = get_listed_manifest(self.fetcher, self.info, variant)
            self.documents[variant] = document
            target = read_target(document.manifest.document)
        self.known[variant] = self.read[variant] = target
        return target

    def record(self) -> None:
        if self.read or self.index.present:
            targets = {**self.index.targets, **self.read}
            record_index(self.cache, self.info, self.index._replace(targets=targets))


# How many other versions an error looks through for one with a build for this system.
_VERSIONS_LOOKED_AT = 8


def with_fitting_version(
    error: NoCompatibleVariantError, fetcher: Fetcher, info: RepoInfo, system: SystemInfo
) -> NoCompatibleVariantError:
    """``error``, advising the newest other published version with a build for ``system``
    when there is one (among the newest few)."""
    versions = [v for v in published_versions(fetcher, info.repo_id) or [] if v != info.version]
    try:
        fitting = newest_fitting_version(fetcher, info.repo_id, versions, system)
    except FlashhubError:  # the CDN fails to say: the error stands as it is
        fitting = None
    if fitting is None:
        return error
    other = RepoInfo(info.repo_id, fitting)
    return NoCompatibleVariantError(
        f"{error.message}\n{other} is the newest published version with a build for it",
        hint=f"load version={fitting} ({other.module_name()}); or {error.hint}",
        cli_hint=f"pass --version {fitting}; or {error.cli_hint or error.hint}",
    )


def newest_fitting_version(
    fetcher: Fetcher,
    repo_id: str,
    versions: Sequence[int],
    system: SystemInfo,
    *,
    unlisted_fits: bool = False,
) -> int | None:
    """The newest of ``versions`` whose ``variants.json`` lists a build ``system`` loads,
    judged as a load judges it; ``None`` when none of the newest few does.

    A version without ``variants.json`` counts as having one if ``unlisted_fits`` (only a
    probe could tell).
    """
    for version in sorted(versions, reverse=True)[:_VERSIONS_LOOKED_AT]:
        info = RepoInfo(repo_id, version)
        try:
            names = get_variant_names(fetcher, info)
        except NotPublished:
            if unlisted_fits:
                return version
            continue
        reader = ManifestReader(Cache.from_config(fetcher.config), fetcher, info)
        if best_variant(judge_builds(judge_variants(names, system), system, reader.target)):
            return version
    return None


# -- the variant index -------------------------------------------------------------------


def fetch_index(
    fetcher: Fetcher,
    info: RepoInfo,
    system: SystemInfo,
    *,
    probe_all: bool = False,
    documents: dict[str, ManifestDocument] | None = None,
) -> VariantIndex:
    """What ``info`` publishes: ``variants.json``, or a probe of ``system``'s candidates.

    Probing stops at the first hit that fits ``system`` unless ``probe_all`` (used to
    list variants); the devices each hit declares are recorded where they matter, and
    its manifest is kept in ``documents``, when given, for the download that follows.
    """
    try:
        return VariantIndex(True, frozenset(get_variant_names(fetcher, info)))
    except NotPublished as exc:
        tried = redact_url(str(exc))  # the mirror's URL of variants.json
    present: set[str] = set()
    absent: set[str] = set()
    targets: dict[str, BuildTarget] = {}
    for name in candidate_names(system):
        try:
            document = get_manifest(fetcher, info, name)
        except NotPublished:
            absent.add(name)
            continue
        present.add(name)
        if documents is not None:
            documents[name] = document
        variant = as_variant(name)
        if needs_target(variant, system):
            targets[name] = read_target(document.manifest.document)
            if build_mismatch(variant, targets[name], system) is not None:
                continue  # for other devices: probe on
        if not probe_all:
            break
    if not present:
        _raise_not_published(fetcher, info, system, absent, tried)
    return VariantIndex(False, frozenset(present), frozenset(absent), targets)


class Choice(NamedTuple):
    """The variant a load takes, and its manifest when choosing fetched it."""

    variant: str
    document: ManifestDocument | None


@contextmanager
def chosen_variant(
    cache: Cache, fetcher: Fetcher, info: RepoInfo, system: SystemInfo
) -> Iterator[Choice]:
    """The variant of ``info`` that ``system`` loads, chosen by one process at a time
    (under the version's index mutex); the block holds that variant's download mutex.

    A process that fetched the variant's manifest to choose it takes the download mutex
    before it lets the index mutex go: the others, which choose by what it recorded,
    wait for its download rather than fetch that manifest again. A process that fetched
    nothing of it waits for the download mutex without holding up the others.
    """
    with ExitStack() as held:
        try:
            with index_mutex(cache, info):
                choice = _choose(cache, fetcher, info, system)
                if choice.document is not None:
                    held.enter_context(download_mutex(cache, info, choice.variant))
        except NoCompatibleVariantError as exc:  # advised without holding up the others
            raise with_fitting_version(exc, fetcher, info, system) from None
        if choice.document is None:
            held.enter_context(download_mutex(cache, info, choice.variant))
        yield choice


def _choose(cache: Cache, fetcher: Fetcher, info: RepoInfo, system: SystemInfo) -> Choice:
    """The variant ``system`` loads, by the index the cache records when it knows enough
    to say (what another process fetched), else by what this process fetches: the
    index, unless the recorded one is ``variants.json`` already, and the devices the
    candidates declare, which it records for the others. Under the index mutex.
    """
    recorded = cache.read_index(info)
    cached = functools.partial(cache.read_target, info)
    picked = pick_cached_variant(recorded, system, cached) if recorded is not None else None
    if picked is not None:
        logger.info("%s: variant %s, as the cache records", info, picked)
        return Choice(picked, None)
    documents: dict[str, ManifestDocument] = {}
    index = (
        recorded
        if recorded is not None and recorded.complete
        else fetch_index(fetcher, info, system, documents=documents)
    )
    reader = ManifestReader(cache, fetcher, info, index, documents)
    try:
        variant = choose_variant(index, info, system, reader.target)
    finally:
        reader.record()
    logger.info(
        "%s: variant %s, the best of %s for %s",
        info,
        variant,
        "variants.json" if index.complete else "the variants probed",
        system.describe(),
    )
    return Choice(variant, reader.documents.get(variant))


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


# -- versions.json -----------------------------------------------------------------------


def published_versions(fetcher: Fetcher, repo_id: str) -> list[int] | None:
    """The repo's ``versions.json``, or ``None`` when it has none."""
    try:
        return get_versions(fetcher, repo_id)
    except NotPublished:
        return None


# Repos whose versions.json this process has read for the newer-version notice.
_version_checked: set[str] = set()
_version_checked_lock = threading.Lock()


class NewerVersionNotice:
    """Warns (:class:`NewerVersionWarning`) when ``versions.json`` lists a version newer
    than ``info``'s, for a load that downloads: :meth:`start` reads it on a thread of its
    own while the files download, :meth:`finish` waits for it and warns, on the thread
    that loads (the warning points at the caller's line).

    At most one request per repo and process, and so at most one warning; none with
    ``FLASHHUB_NO_VERSION_CHECK``. A missing or malformed ``versions.json``, or a CDN
    that fails to serve it, says nothing: the load itself has succeeded.
    """

    def __init__(self, fetcher: Fetcher, info: RepoInfo) -> None:
        self._fetcher, self._info = fetcher, info
        self._newest: int | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self._fetcher.config.version_check:
            return
        with _version_checked_lock:
            if self._info.repo_id in _version_checked:
                return
            _version_checked.add(self._info.repo_id)
        self._thread = threading.Thread(target=self._read_versions, daemon=True)
        self._thread.start()

    def _read_versions(self) -> None:
        repo_id = self._info.repo_id
        try:
            versions = published_versions(self._fetcher, repo_id)
            if versions:
                check_newest(Cache.from_config(self._fetcher.config), repo_id, versions)
                self._newest = versions[-1]
        except Exception:  # best effort: a CDN that fails to serve it, or the run's end
            # A load that failed does not wait for this thread, and closes the session
            # under it: whatever that raises here is no news for anyone.
            return

    def finish(self) -> None:
        if self._thread is None:
            return
        self._thread.join()
        self._thread = None
        info = self._info
        if self._newest is None or self._newest <= info.version:
            return
        newer = RepoInfo(info.repo_id, self._newest)
        warn_at_caller(
            f"{info.repo_id} v{newer.version} is published; this process loads v{info.version}. "
            f"To use it, load get_kernel({info.repo_id!r}, version={newer.version}) or import "
            f"{newer.module_name()}, after checking what changed. "
            "FLASHHUB_NO_VERSION_CHECK=1 turns this check off.",
            NewerVersionWarning,
        )


def with_version(fetcher: Fetcher, repo_id: str, version: int | None) -> RepoInfo:
    """``RepoInfo`` for ``version``, or for the newest one in ``versions.json``.

    Raises:
        RollbackError: that ``versions.json`` ends below a version this machine has seen
            listed (see :mod:`._versions_seen`).
    """
    if version is not None:
        return RepoInfo(repo_id, version)
    RepoInfo(repo_id, 1)  # validate the repo id before any request
    try:
        versions = get_versions(fetcher, repo_id)
    except NotPublished as exc:
        why = f"has no versions.json on the CDN ({redact_url(str(exc))} does not exist)"
    else:
        if versions:
            check_newest(Cache.from_config(fetcher.config), repo_id, versions)
            return RepoInfo(repo_id, versions[-1])
        why = "lists no versions in its versions.json"
    check = "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX"
    doubled = doubled_prefix_hint(fetcher.config)
    raise KernelNotFoundError(
        f"{repo_id} {why}, so its newest version is unknown",
        hint=doubled or f"{check}; or pass version= if it is published without versions.json",
        cli_hint=doubled or f"{check}; or pass --version N if it is published without one",
    )


# -- the entry ---------------------------------------------------------------------------


def make_entry(
    cache: Cache,
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    *,
    expected_hash: str | None = None,
    expected_signer: str | None = None,
    document: ManifestDocument | None = None,
    on_download: Callable[[], None] | None = None,
) -> CommittedEntry:
    """Make ``cache.entry_dir(info, variant)`` a verified entry; the caller holds its
    download mutex.

    With ``expected_hash`` and ``expected_signer`` (a lock file's pins), an entry verified
    against other content is replaced, and a manifest with another content hash or signer
    is refused before any file is fetched. ``document`` is the variant's manifest when
    choosing it fetched it already. ``on_download`` is called when this call is about to
    download the files (it found no entry it could reuse).
    """
    entry = cache.entry_dir(info, variant)
    receipt = _intact_receipt(cache, entry, info)
    if (
        receipt is not None
        and expected_hash in (None, receipt.content_hash)
        and fetcher.config.accepts_signer(info.org, receipt.signer, locked=expected_signer)
    ):
        return CommittedEntry(entry, False, receipt.signer)  # another process finished it
    document = checked_manifest(
        fetcher, info, variant, expected_hash, expected_signer, document=document
    )
    if receipt is not None and receipt.content_hash == document.manifest.content_hash:
        # Intact, cached before a key was trusted, and vouched for now: keep the files.
        record_signer(entry, receipt, document)
        return CommittedEntry(entry, False, document.signer)
    with cache_errors():
        evict(entry)
        remove_stale_staging(cache, info, variant)
    if on_download is not None:
        on_download()
    _download_and_commit(cache, fetcher, info, variant, document)
    return CommittedEntry(entry, True, document.signer)


def _intact_receipt(cache: Cache, entry: Path, info: RepoInfo) -> Receipt | None:
    """The receipt of ``entry`` if every file is as it was verified, else ``None``."""
    receipt = cache.read_receipt(entry)
    if receipt is not None and receipt.changed_file(entry) is not None:
        logger.info(
            "%s: the cached entry %s changed after it was verified; fetching it again",
            info,
            entry,
        )
        return None
    return receipt


def checked_manifest(
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    expected_hash: str | None = None,
    expected_signer: str | None = None,
    *,
    document: ManifestDocument | None = None,
) -> ManifestDocument:
    """The manifest of a listed variant, refused before any file is fetched when it holds
    no importable package, has malformed builder fields (``kernel-depends``, ...), or
    differs from a lock file's pins (``expected_hash``; and ``expected_signer`` while
    signatures are checked).

    ``document`` is used instead of fetching it again when it was fetched already and
    vouched for by the expected signer, if any.
    """
    if document is None or expected_signer not in (None, document.signer):
        document = get_listed_manifest(fetcher, info, variant, prefer_signer=expected_signer)
    manifest = document.manifest
    _check_has_package(manifest, info, variant)
    read_kernel_metadata(manifest.document, source=f"{info}/build/{variant}/{MANIFEST_NAME}")
    if expected_hash is not None and manifest.content_hash != expected_hash:
        raise LockMismatchError(
            f"{info} variant {variant}: the CDN serves content {manifest.content_hash}, "
            f"but the lock pins {expected_hash}; nothing was fetched",
            hint="a published version must not change: report it to the publisher, or "
            "run `flashhub lock` again if you trust the new content",
        )
    checked = fetcher.config.checks_signatures(info.org)
    if checked and expected_signer is not None and document.signer != expected_signer:
        raise SignatureError(
            f"{info} variant {variant} is signed by the key {document.signer}, but the lock "
            f"records the signer {expected_signer}; nothing was fetched",
            hint="if the publisher rotated its key, run `flashhub lock` again; otherwise "
            "report it to the kernel's publisher",
        )
    return document


def _download_and_commit(
    cache: Cache,
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    document: ManifestDocument,
) -> None:
    """Download every file of ``manifest`` into staging, verified, then commit the entry.

    Continues what an interrupted download kept, and keeps what this one received if it
    is interrupted (Ctrl-C) or every mirror fails.
    """
    manifest = document.manifest
    with cache_errors():
        staging = new_staging(cache, info, variant)
    try:
        with cache_errors():
            adopt_partials(cache, staging, info, variant, manifest.files)
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
        # Each Python file is compiled by the thread that fetched it, as soon as it is
        # verified: beside the transfers still running, not after the last of them.
        sources = {
            staging / relpath: relpath for relpath in sources_to_compile(set(manifest.files))
        }
        compiled: dict[str, dict[str, tuple[int, int, str]]] = {}

        def compile_source(job: DownloadJob) -> None:
            if (source := sources.get(job.dest)) is not None:
                compiled[source] = compile_bytecode(staging, [source])

        with bar as progress:
            fetcher.download_many(jobs, progress, on_done=compile_source)
        with cache_errors():
            seal(staging, document, manifest.files, compiled)
            commit(staging, cache.entry_dir(info, variant))
    except KeyboardInterrupt:
        keep_partials(cache, staging, info, variant, manifest.files)
        raise KeyboardInterrupt(
            f"the download of {info} {variant} was interrupted; what arrived is kept, "
            "and the next load continues from there"
        ) from None
    except TransportError:
        keep_partials(cache, staging, info, variant, manifest.files)
        raise
    finally:
        remove_tree(staging)  # a no-op after a successful commit


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
