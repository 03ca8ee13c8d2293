"""Cache maintenance behind ``flashhub cache``: list, re-hash, prune and clear entries.

Works on the layout documented in :mod:`flashhub_kernels._cache.layout`. Loading a kernel
never needs any of this: the warm path trusts an entry's receipt (``stat`` only), and
:func:`verify_entry` is the full re-hash that the receipt stands in for.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from .._config import Config, get_config
from .._constants import INDEX_NAME, MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, RECEIPT_NAME
from .._lockfiles.format import Lockfile
from .._models.manifest import parse_metadata
from .._models.names import RepoInfo
from .._models.record import Record
from .._network.hashing import sha256_file
from .._signing.verification import verify_document
from .._utils.filesystem import replaced_name
from .._variants.device_arch import GPU_RECORD
from .._variants.grammar import is_variant_name
from ..errors import ManifestError, SignatureError
from .bytecode import compile_bytecode, stamp
from .imports import TABLE_DIR
from .layout import (
    PARTIAL_PREFIX,
    STAGING_PREFIX,
    TRASH_PREFIX,
    Cache,
)
from .mutex import download_mutex, hold_if_free, lock_mode
from .receipt import Receipt, read_receipt
from .staging import (
    cache_errors,
    evict,
    remove_stale_staging,
    remove_tree,
    unused,
    write_receipt,
)
from .trust import distrust, unreadable
from .versions_seen import RECORD_NAME

_VERSION_DIR = re.compile(r"v([1-9][0-9]{0,8})")
# A temporary file not modified for this long is no writer's: each is written in one go,
# in well under a second, and renamed or removed at once, except by a process killed.
TEMPORARY_IDLE_SECONDS = 3600


class CacheEntry(Record):
    """One cached variant. ``content_hash`` is ``None`` when it has no readable receipt;
    ``signer`` is the trusted key that vouched for it, if any."""

    info: RepoInfo
    variant: str
    path: Path
    content_hash: str | None
    files: int
    size: int
    signer: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "repo_id": self.info.repo_id,
            "version": self.info.version,
            "variant": self.variant,
            "path": str(self.path),
            "content_hash": self.content_hash,
            "files": self.files,
            "bytes": self.size,
            "signer": self.signer,
        }


def _version_dirs(cache: Cache) -> Iterator[tuple[RepoInfo, Path]]:
    """``kernels/<org>/<pkg>/v<N>`` directories whose names are valid; others are not ours."""
    for version_dir in sorted((cache.root / "kernels").glob("*/*/v*")):
        match = _VERSION_DIR.fullmatch(version_dir.name)
        if not match or not version_dir.is_dir() or version_dir.is_symlink():
            continue
        try:
            info = RepoInfo(
                f"{version_dir.parent.parent.name}/{version_dir.parent.name}", int(match[1])
            )
        except ValueError:
            continue
        yield info, version_dir


def _subdirs(version_dir: Path) -> list[Path]:
    """The directories in ``version_dir`` but staging, trash and lock directories."""
    return [
        child
        for child in sorted(version_dir.iterdir())
        if not child.name.startswith(".") and not child.is_symlink() and child.is_dir()
    ]


def _is_entry(path: Path) -> bool:
    """Whether ``path``, a directory in a version directory, is an entry: it is named as
    a variant, or holds the ``metadata.json`` every committed entry has. Anything else
    is not the cache's: a kernel that compiles code at run time may write beside its
    own entry (``v1/build/...``)."""
    return is_variant_name(path.name) or (path / MANIFEST_NAME).is_file()


def list_entries(cache: Cache) -> list[CacheEntry]:
    """Every committed entry, sorted by repo, version and variant."""
    entries = []
    for info, version_dir in _version_dirs(cache):
        for child in filter(_is_entry, _subdirs(version_dir)):
            receipt = read_receipt(child)
            sizes = [size for size, _mtime in receipt.files.values()] if receipt else []
            content_hash = receipt.content_hash if receipt else None
            signer = receipt.signer if receipt else None
            entries.append(
                CacheEntry(info, child.name, child, content_hash, len(sizes), sum(sizes), signer)
            )
    return entries


def foreign_dirs(cache: Cache) -> list[Path]:
    """The directories in version directories that are not entries (see
    :func:`_is_entry`): the cache commands leave them alone."""
    return [
        child
        for _info, version_dir in _version_dirs(cache)
        for child in _subdirs(version_dir)
        if not _is_entry(child)
    ]


def check_readable(cache: Cache) -> None:
    """Raise :func:`~.trust.unreadable`'s :class:`CacheError` for the first directory of
    ``kernels/<org>/<pkg>/v<N>`` that this user may not list: a cache another user made
    private, which the maintenance commands would otherwise fail on with a bare errno,
    or pass over as empty."""
    kernels = cache.root / "kernels"

    def refuse(exc: OSError) -> None:
        if isinstance(exc, PermissionError):
            raise unreadable(Path(str(exc.filename)), exc) from exc

    for directory, dirs, _files in os.walk(kernels, onerror=refuse):
        if len(Path(directory).relative_to(kernels).parts) == 3:
            dirs.clear()  # a version directory: its entries are read file by file


def untrusted_dirs(cache: Cache) -> list[tuple[Path, str]]:
    """Directories of the cache layout that a load would refuse to trust, and why:
    symlinks, and directories another user owns or may write."""
    kernels = cache.root / "kernels"
    levels = [[cache.root], [kernels], *(sorted(kernels.glob("*/" * n + "*")) for n in range(4))]
    found = []
    for path in (p for level in levels for p in level):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            continue  # variant indexes; files inside entries are checked by verify_entry
        why = distrust(st, shared=cache.shared, inside=path != cache.root)
        if why is not None:
            found.append((path, why))
    return found


class Verdict(Record):
    """What :func:`verify_entry` found.

    ``problem`` is why the entry fails, or ``None``. ``repairable``: every file holds
    the verified bytes, and only what the receipt records about them (size, mtime) or
    the bytecode compiled from them differs. ``repaired``: it was repaired, so it passes.
    """

    problem: str | None = None
    repairable: bool = False
    repaired: bool = False

    @property
    def ok(self) -> bool:
        return self.problem is None or self.repaired


def verify_entry(cache: Cache, entry: CacheEntry, *, repair: bool = False) -> Verdict:
    """Re-hash every file of ``entry`` against its ``metadata.json``, and its bytecode
    against the receipt.

    With ``repair``, an entry whose files re-hash right is repaired offline: damaged
    bytecode is compiled again from the verified sources and the receipt re-stamped
    with each file's size and mtime now (a copy of the cache that lost its modification
    times). Anything else is left for ``prune`` to remove and a load to fetch again.
    """
    verdict = _verify(cache, entry)
    if not (repair and verdict.repairable):
        return verdict
    # Under the entry's download mutex: a load that found it changed would replace it.
    with download_mutex(cache, entry.info, entry.variant), cache_errors(entry.path):
        verdict = _verify(cache, entry)  # again: it may have changed meanwhile
        receipt = read_receipt(entry.path)
        if not verdict.repairable or receipt is None:
            return verdict
        _restamp(cache, entry.path, receipt)
    return Verdict(verdict.problem, repairable=True, repaired=True)


def _verify(cache: Cache, entry: CacheEntry) -> Verdict:
    receipt = read_receipt(entry.path)
    if receipt is None:
        return Verdict("no receipt: the entry was never completely verified")
    try:
        manifest = parse_metadata(
            (entry.path / MANIFEST_NAME).read_bytes(), source=str(entry.path / MANIFEST_NAME)
        )
    except OSError:
        return Verdict(f"{MANIFEST_NAME} is missing")
    except ManifestError as exc:
        return Verdict(exc.message)
    if manifest.content_hash != receipt.content_hash:
        return Verdict(f"{MANIFEST_NAME} is not the manifest the entry was verified against")
    for relpath, digest in sorted(manifest.files.items()):
        path = entry.path / relpath
        if path.is_symlink() or not path.is_file():
            return Verdict(f"{relpath} is missing or not a regular file")
        if sha256_file(path) != digest:
            return Verdict(f"{relpath} does not match its sha256 in {MANIFEST_NAME}")
    signature = _signature_problem(entry, get_config())
    if signature is not None:
        return Verdict(signature)
    damaged = _damaged_bytecode(entry.path, receipt)
    if damaged:
        return Verdict(
            f"{damaged[0]} is not the bytecode compiled when the entry was verified",
            repairable=True,
        )
    changed = receipt.changed_file(entry.path)
    if changed is not None:
        # Intact bytes, but the warm path would not trust the entry and fetch it again.
        return Verdict(
            f"{changed} has another size or mtime than when it was verified", repairable=True
        )
    return Verdict()


def _damaged_bytecode(entry: Path, receipt: Receipt) -> list[str]:
    """The ``.pyc`` files of the receipt that are missing or hold other bytes."""
    damaged = []
    for relpath, (_size, _mtime, digest) in sorted(receipt.bytecode.items()):
        path = entry / relpath
        if path.is_symlink() or not path.is_file() or sha256_file(path).hex() != digest:
            damaged.append(relpath)
    return damaged


def _restamp(cache: Cache, entry: Path, receipt: Receipt) -> None:
    """Compile the damaged bytecode of a verified entry again, then record each file's
    size and mtime as they are now."""
    damaged = _damaged_bytecode(entry, receipt)
    bytecode = {path: record for path, record in receipt.bytecode.items() if path not in damaged}
    sources = []
    for relpath in damaged:
        (entry / relpath).unlink(missing_ok=True)
        source = importlib.util.source_from_cache(relpath)
        if importlib.util.cache_from_source(source) == relpath:
            sources.append(source)
        # else another Python's bytecode: it compiles its own from the source
    bytecode.update(compile_bytecode(entry, sources))
    write_receipt(
        entry,
        receipt._replace(
            files={path: stamp(entry / path) for path in receipt.files},
            bytecode={
                path: (*stamp(entry / path), digest) for path, (_s, _m, digest) in bytecode.items()
            },
        ),
    )


def _signature_problem(entry: CacheEntry, config: Config) -> str | None:
    """Why the trusted keys of ``config`` do not vouch for the entry's ``metadata.json``
    (checked again against the ``metadata.json.sig`` cached with it), or ``None``."""
    if not config.checks_signatures(entry.info.org):
        return None
    try:
        signature: bytes | None = (entry.path / MANIFEST_SIGNATURE_NAME).read_bytes()
    except FileNotFoundError:
        signature = None
    try:
        verify_document(
            kind="metadata",
            repo_id=entry.info.repo_id,
            version=entry.info.version,
            variant=entry.variant,
            data=(entry.path / MANIFEST_NAME).read_bytes(),
            sig_bytes=signature,
            keys=config.trusted_keys,
            org=entry.info.org,
            require=config.require_signatures,
        )
    except (OSError, SignatureError) as exc:
        return f"its signature does not check out: {exc}"
    return None


class PruneReport(Record):
    """What :func:`prune` removed: entries with the reason, leftover directories, and
    the temporary files of killed writers (``stale_files``); and what it left alone:
    version directories a download was in progress in (``busy``), and entries a running
    process imported (``in_use``)."""

    removed: list[tuple[CacheEntry, str]]
    stale: list[Path]
    busy: list[Path]
    in_use: list[Path]
    stale_files: list[Path]

    @property
    def bytes_freed(self) -> int:
        return sum(entry.size for entry, _why in self.removed)

    def to_dict(self) -> dict[str, object]:
        return {
            "removed": [{**entry.to_dict(), "reason": why} for entry, why in self.removed],
            "stale_directories": [str(path) for path in self.stale],
            "stale_files": [str(path) for path in self.stale_files],
            "skipped_busy": [str(path) for path in self.busy],
            "skipped_in_use": [str(path) for path in self.in_use],
            "bytes_freed": self.bytes_freed,
        }


def prune(cache: Cache, *, keep_locked: Lockfile | None = None, force: bool = False) -> PruneReport:
    """Remove entries that fail :func:`verify_entry`, and leftovers of dead downloads.

    With ``keep_locked``, also remove every entry that is not a variant the lock pins
    with exactly the content it pins. An entry a running process imported is left
    alone, unless ``force``.

    Raises:
        CacheError: the cache cannot be written.
    """
    removed, busy, in_use = [], [], []
    for entry in list_entries(cache):
        why = verify_entry(cache, entry).problem
        if why is None and keep_locked is not None:
            why = _unlocked_reason(entry, keep_locked)
        if why is None:
            continue
        with _idle(cache, entry.path.parent) as idle:
            if not idle:
                busy.append(entry.path.parent)
            elif _evict_unused(cache, entry, force=force):
                removed.append((entry, why))
            else:
                in_use.append(entry.path)
    stale, busy_now = _remove_stale(cache)
    files = _remove_stale_temporaries(cache)
    return PruneReport(removed, stale, sorted({*busy, *busy_now}), in_use, files)


def _evict_unused(cache: Cache, entry: CacheEntry, *, force: bool) -> bool:
    """Remove ``entry`` unless a running process uses it (or with ``force``); whether
    it was removed."""
    if force:
        evict(entry.path)
        return True
    with unused(entry.path) as free:
        if free:
            evict(entry.path)  # atomically: a reader sees the entry or nothing
        return free


def _unlocked_reason(entry: CacheEntry, lock: Lockfile) -> str | None:
    locked = lock.locked(entry.info)
    if locked is None:
        return f"{entry.info} is not in {lock.source}"
    pinned = locked.variants.get(entry.variant)
    if pinned is None:
        return f"{entry.info} variant {entry.variant} is not in {lock.source}"
    if pinned != entry.content_hash:
        return f"{entry.info} variant {entry.variant} is not the content {lock.source} pins"
    return None


def _remove_stale(cache: Cache) -> tuple[list[Path], list[Path]]:
    """Staging directories of dead processes on this host, trash, and the files kept from
    interrupted downloads (the next download of those entries starts from scratch).

    Returns what was removed, and the version directories a download was busy in.
    """
    gone, busy = [], []
    for info, version_dir in _version_dirs(cache):
        with _idle(cache, version_dir) as idle:
            if not idle:  # its partial files are being continued, its staging filled
                busy.append(version_dir)
                continue
            for partial in version_dir.glob(f"{PARTIAL_PREFIX}*"):
                remove_tree(partial)
                gone.append(partial)
            leftovers = [
                p
                for p in version_dir.iterdir()
                if p.name.startswith((STAGING_PREFIX, TRASH_PREFIX))
            ]
            # Variant names hold no dots; the rest of a leftover's name is random, pid and host.
            variants = {
                p.name.removeprefix(STAGING_PREFIX).removeprefix(TRASH_PREFIX).split(".")[0]
                for p in leftovers
            }
            for variant in sorted(variants):
                remove_stale_staging(cache, info, variant, idle=True)
            gone += [p for p in leftovers if not p.exists()]
    return gone, busy


def _remove_stale_temporaries(cache: Cache) -> list[Path]:
    """Remove the temporary files that processes killed while replacing a small file of
    the cache left beside it (see ``write_atomic``): the record of the versions seen and
    of the GPUs, the import table's files, each version's variant index, and an entry's
    receipt and manifest. Only those of the cache's own names, and only once not modified
    for :data:`TEMPORARY_IDLE_SECONDS`: not every writer holds a mutex (the import table
    and the GPU record are written without one), so age alone tells a dead one.

    Returns what was removed.
    """
    entry_files = {RECEIPT_NAME, MANIFEST_NAME, MANIFEST_SIGNATURE_NAME}
    places: list[tuple[Path, set[str] | None]] = [
        (cache.root, {RECORD_NAME, GPU_RECORD}),
        (cache.root / TABLE_DIR, None),  # <module name>.json
        *((version_dir, {INDEX_NAME}) for _info, version_dir in _version_dirs(cache)),
        *((entry.path, entry_files) for entry in list_entries(cache)),
    ]
    since = time.time() - TEMPORARY_IDLE_SECONDS
    gone = []
    for directory, names in places:
        if directory.is_symlink() or not directory.is_dir():
            continue
        for path in sorted(directory.iterdir()):
            target = replaced_name(path.name)
            if target is None or not (target in names if names else target.endswith(".json")):
                continue
            with cache_errors(path), contextlib.suppress(FileNotFoundError):
                st = path.lstat()
                if stat.S_ISREG(st.st_mode) and st.st_mtime < since:
                    path.unlink()
                    gone.append(path)
    return gone


class ClearReport(Record):
    """What :func:`clear` removed, and what it left alone: versions a process was
    downloading, and entries a running process imported."""

    removed: list[CacheEntry]
    busy: list[Path]
    in_use: list[Path]


def clear(cache: Cache, *, force: bool = False) -> ClearReport:
    """Remove every kernel from the cache, except versions a process is downloading and
    entries a running process imported (those too with ``force``).

    Only directories of the cache layout are removed, so a cache root that was pointed
    at a directory holding other files keeps them.

    Raises:
        CacheError: the cache cannot be written.
    """
    removed, busy, in_use = [], [], []
    entries = list_entries(cache)
    for _info, version_dir in list(_version_dirs(cache)):
        with _idle(cache, version_dir) as idle:
            if not idle:
                busy.append(version_dir)
                continue
            kept = False
            for entry in entries:
                if entry.path.parent != version_dir:
                    continue
                if _evict_unused(cache, entry, force=force):
                    removed.append(entry)
                else:
                    in_use.append(entry.path)
                    kept = True
            if not kept:
                remove_tree(version_dir)
    kernels = cache.root / "kernels"
    for directory in [*kernels.glob("*/*"), *kernels.glob("*"), kernels]:
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if empty
    return ClearReport(removed, busy, in_use)


@contextlib.contextmanager
def _idle(cache: Cache, version_dir: Path) -> Iterator[bool]:
    """Hold every download mutex of a version's entries, if no process holds one; yield
    whether it could. A download in progress keeps its staging files and partial files
    in the version directory: removing them would break it.

    Raises:
        CacheError: a lock cannot be taken (a read-only cache): not busy, unwritable.
    """
    lock_files = sorted((version_dir / ".locks").glob("*.lock"))
    with contextlib.ExitStack() as held:
        for lock_file in lock_files:
            if not held.enter_context(hold_if_free(lock_file, lock_mode(cache))):
                yield False
                return
        yield True
