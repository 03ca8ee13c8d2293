"""The cold path: from the CDN's documents to a verified entry in the cache.

:func:`fetch_kernel` takes each candidate in turn: the variant this system loads is
chosen under the version's index mutex (:mod:`~flashhub_kernels._network.choosing`, which reads the
version's ``variants.json`` or probes without it: :mod:`.variant_index`); then
:func:`make_entry`, under the entry's download mutex, reuses what another process
committed meanwhile, else checks the manifest, downloads every file into staging,
verified as it streams, and renames the entry into place. A load that downloads also
reads ``versions.json`` meanwhile, for the notice of a newer version
(:mod:`.versions`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from .._cache.bytecode import compile_bytecode, sources_to_compile
from .._cache.directories import cache_errors, ensure_dir, remove_tree
from .._cache.layout import Cache
from .._cache.receipt import Receipt, cached_kernel, read_receipt
from .._cache.staging import (
    adopt_partials,
    commit,
    evict,
    keep_partials,
    new_staging,
    record_signer,
    remove_stale_staging,
    seal,
    unused,
)
from .._config import Config
from .._models.kernel_dir import NATIVE_SUFFIXES, KernelDir
from .._models.kernel_metadata import KernelMetadata, read_kernel_metadata
from .._models.manifest import Manifest, manifest_source
from .._models.names import RepoInfo
from .._utils.elf import missing_bytes
from .._utils.file_names import check_cached_names
from .._utils.logs import logger
from .._variants.system import SystemInfo
from ..errors import (
    CacheError,
    IntegrityError,
    KernelNotFoundError,
    ManifestError,
    SignatureError,
    TransportError,
)
from .choosing import chosen_variant
from .documents import ManifestDocument, get_listed_manifest, variant_path
from .progress import progress_bar
from .transport import DownloadJob, Fetcher, remote
from .versions import NewerVersionNotice


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
                )
            notice.finish()
            receipt = read_receipt(entry)
            assert receipt is not None, "a committed entry has its receipt"
            return cached_kernel(entry, info, choice.variant, receipt)
    assert not_found is not None
    raise not_found


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
) -> Path:
    """Make ``cache.entry_dir(info, variant)`` a verified entry, and return it; the caller
    holds its download mutex.

    With ``expected_hash`` and ``expected_signer`` (a lock file's pins), an entry verified
    against other content is replaced, and a manifest with another content hash or signer
    is refused before any file is fetched. ``document`` is the variant's manifest when
    choosing it fetched it already. ``on_download`` is called when this call is about to
    download the files (it found no entry it could reuse).
    """
    entry = cache.entry_dir(info, variant)
    receipt = _intact_receipt(entry, info)
    if (
        receipt is not None
        and expected_hash in (None, receipt.content_hash)
        and fetcher.config.accepts_signer(info.org, receipt.signer, locked=expected_signer)
    ):
        return entry  # another process finished it
    document = checked_manifest(
        fetcher, info, variant, expected_hash, expected_signer, document=document
    )
    check_cached_names(document.manifest.files, f"{info} variant {variant}")
    if receipt is not None and receipt.content_hash == document.manifest.content_hash:
        # Intact, cached before a key was trusted, and vouched for now: keep the files.
        record_signer(entry, receipt, document)
        return entry
    with cache_errors(entry), unused(entry) as free:
        if receipt is not None and not free:  # intact, of other content
            raise _in_use_error(entry, receipt, document)
        evict(entry)
        remove_stale_staging(cache, info, variant, keep=document.manifest.files)
    if on_download is not None:
        on_download()
    _download_and_commit(cache, fetcher, info, variant, document)
    return entry


def _in_use_error(entry: Path, receipt: Receipt, document: ManifestDocument) -> CacheError:
    """The error for an intact entry of other content than ``document`` that a running
    process imported: replaced beneath it, its next submodule import (or a reload) would
    run files it never verified."""
    return CacheError(
        f"{entry} holds content {receipt.content_hash}, not the {document.manifest.content_hash} "
        "this load needs, and a running process uses it: it is not replaced beneath it",
        hint="load again once the processes that use it have exited, or give this one a "
        "cache of its own (FLASHHUB_CACHE_DIR)",
    )


def _intact_receipt(entry: Path, info: RepoInfo) -> Receipt | None:
    """The receipt of ``entry`` if every file is as it was verified, else ``None``."""
    receipt = read_receipt(entry)
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

    A mirror whose manifest holds other content than ``expected_hash`` fails for it, and
    the next mirror's is taken (its files then come from a mirror whose bytes verify
    against it); a :class:`LockMismatchError` names each mirror's content when none
    serves the pinned one.

    ``document`` is used instead of fetching it again when it was fetched already, holds
    the expected content, and is vouched for by the expected signer, if any.
    """
    if document is None or not _pinned(document, expected_hash, expected_signer):
        document = get_listed_manifest(
            fetcher, info, variant, prefer_signer=expected_signer, expected_hash=expected_hash
        )
    manifest = document.manifest
    source = manifest_source(info, variant)
    metadata = read_kernel_metadata(manifest.document, source=source)
    _check_has_package(manifest, metadata, info.py_pkg, source)
    checked = fetcher.config.checks_signatures(info.org)
    if checked and expected_signer is not None and document.signer != expected_signer:
        raise SignatureError(
            f"{info} variant {variant} is signed by the key {document.signer}, but the lock "
            f"records the signer {expected_signer}; nothing was fetched",
            hint="if the publisher rotated its key, run `flashhub lock` again; otherwise "
            "report it to the kernel's publisher",
        )
    return document


def _pinned(
    document: ManifestDocument, expected_hash: str | None, expected_signer: str | None
) -> bool:
    """Whether ``document`` holds the content a lock pins, vouched for by the key it records."""
    content_pinned = expected_hash in (None, document.manifest.content_hash)
    return content_pinned and expected_signer in (None, document.signer)


def _download_and_commit(
    cache: Cache,
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    document: ManifestDocument,
) -> None:
    """Download every file ``document`` lists into staging, verified, then commit the entry.

    Continues what an interrupted download kept, and keeps what this one received if it
    is interrupted (Ctrl-C, ``sys.exit()`` in a SIGTERM handler) or every mirror fails.
    """
    manifest = document.manifest
    with cache_errors(cache.version_dir(info)):
        staging = new_staging(cache, info, variant)
    try:
        jobs = _staged_jobs(cache, staging, info, variant, manifest)
        compiled = _download_compiling(fetcher, jobs, staging, info, variant, manifest)
        _check_natives_whole(staging, info, variant, manifest)
        with cache_errors(staging):
            seal(staging, document, manifest.files, compiled, shared=cache.shared)
            commit(staging, cache.entry_dir(info, variant))
    except BaseException as exc:
        if isinstance(exc, TransportError) or not isinstance(exc, Exception):
            # Not an Exception: the load was ended from outside it (Ctrl-C, a signal
            # handler's sys.exit() or timeout), and the bytes that arrived are good.
            keep_partials(cache, staging, info, variant, manifest.files)
        if isinstance(exc, KeyboardInterrupt):
            raise KeyboardInterrupt(
                f"the download of {info} {variant} was interrupted; what arrived is kept, "
                "and the next load continues from there"
            ) from None
        raise
    finally:
        remove_tree(staging)  # a no-op after a successful commit


def _staged_jobs(
    cache: Cache, staging: Path, info: RepoInfo, variant: str, manifest: Manifest
) -> list[DownloadJob]:
    """The jobs that download the files of ``manifest`` into ``staging``, after it took
    what an interrupted download kept and holds the directories of the files."""
    with cache_errors(staging):
        adopt_partials(cache, staging, info, variant, manifest.files)
        for directory in {posixpath.dirname(relpath) for relpath in manifest.files}:
            ensure_dir(staging / directory)
    return [
        DownloadJob(
            variant_path(info, variant, relpath),
            staging / relpath,
            digest,
            manifest.size_of(relpath),
        )
        for relpath, digest in manifest.files.items()
    ]


def _download_compiling(
    fetcher: Fetcher,
    jobs: list[DownloadJob],
    staging: Path,
    info: RepoInfo,
    variant: str,
    manifest: Manifest,
) -> dict[str, dict[str, tuple[int, int, str]]]:
    """Run ``jobs`` under a progress bar, and return the bytecode compiled from the
    Python files among them (see :func:`compile_bytecode`), by file."""
    total = sum(manifest.sizes.values()) if manifest.sizes is not None else None
    bar = progress_bar(f"{info} {variant}", enabled=fetcher.config.progress_bars, total=total)
    # Each Python file is compiled by the thread that fetched it, as soon as it is
    # verified: beside the transfers still running, not after the last of them.
    sources = {
        variant_path(info, variant, relpath): relpath
        for relpath in sources_to_compile(set(manifest.files))
    }
    compiled: dict[str, dict[str, tuple[int, int, str]]] = {}

    def compile_source(job: DownloadJob) -> None:
        if (source := sources.get(job.relpath)) is not None:
            compiled[source] = compile_bytecode(staging, [source])

    with bar as progress:
        fetcher.download_many(jobs, progress, on_done=compile_source)
    return compiled


def _check_natives_whole(staging: Path, info: RepoInfo, variant: str, manifest: Manifest) -> None:
    """Refuse a variant whose native library is cut short, though it matches its digest
    (it was published so): the dynamic loader would crash the process loading it."""
    for relpath in sorted(manifest.files):
        if not relpath.endswith(NATIVE_SUFFIXES):
            continue
        with cache_errors(staging / relpath):
            short = missing_bytes(staging / relpath)
        if short is not None:
            needed, size = short
            raise IntegrityError(
                f"{info} {variant}: the native library {relpath} is truncated ({size} bytes; "
                f"its ELF headers need {needed}); loading it would crash the process",
                hint="the build was published broken (the file matches the digest its "
                "metadata.json lists): report it to the kernel's publisher, and load another "
                "version meanwhile",
            )


def _check_has_package(
    manifest: Manifest, metadata: KernelMetadata, py_pkg: str, source: str
) -> None:
    """Refuse a variant that holds no importable package, before any of its files is
    fetched: a build of files that lists neither ``<py_pkg>/__init__.py`` nor a top-level
    ``__init__.py`` (a flattened build), a ``"zip"`` build that does not list its archive."""
    archive = metadata.archive
    if archive is not None and archive not in manifest.files:
        raise ManifestError(
            f'{source} says "build-layout": "zip" but does not list {archive}, the archive '
            "that holds the package",
            hint="a zip build's archive is named after the id in its metadata.json; report "
            "it to the kernel's publisher",
        )
    if archive is None and not {f"{py_pkg}/__init__.py", "__init__.py"} & manifest.files.keys():
        raise ManifestError(
            f"{source} lists neither {py_pkg}/__init__.py nor a top-level __init__.py, so the "
            "variant holds no importable package",
            hint="the package directory must be named after the repo with '-' -> '_', "
            "or the package's files must lie directly in the variant directory",
        )
