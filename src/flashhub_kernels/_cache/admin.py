"""Cache maintenance behind ``flashhub cache``: prune and clear entries.

Works on the layout documented in :mod:`flashhub_kernels._cache.layout`, with the
entries :mod:`.entries` lists and :mod:`.verify` re-hashes. Loading a kernel never needs
any of this.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .._cache_imports import TABLE_DIR
from .._constants import INDEX_NAME
from .._models.record import Record
from .._utils.filesystem import replaced_name
from .._variants.device_arch import GPU_RECORD_NAME
from .directories import cache_errors, remove_tree
from .entries import CacheEntry, entries_in, list_entries, version_dirs
from .layout import (
    PARTIAL_PREFIX,
    STAGING_PREFIX,
    TRASH_PREFIX,
    Cache,
)
from .mutex import download_mutex_dir, hold_if_free, index_mutex_files, mutex_mode
from .staging import evict, remove_stale_staging, unused
from .verify import ENTRY_RECORDS, verify_entry
from .versions_seen import VERSIONS_SEEN_NAME

if TYPE_CHECKING:
    from .._lockfiles.format import Lockfile

# A temporary file not modified for this long is no writer's: each is written in one go,
# in well under a second, and renamed or removed at once, except by a process killed.
TEMPORARY_IDLE_SECONDS = 3600


class PruneReport(Record):
    """What :func:`prune` removed: entries with the reason, leftover directories, and
    the temporary files of killed writers (``stale_files``), and the disk space the
    leftover directories took (``stale_bytes``); and what it left alone: version
    directories a download was in progress in (``busy``), and entries a running process
    imported (``in_use``)."""

    removed: list[tuple[CacheEntry, str]]
    stale: list[Path]
    busy: list[Path]
    in_use: list[Path]
    stale_files: list[Path]
    stale_bytes: int

    @property
    def bytes_freed(self) -> int:
        """The size of the entries removed, and the disk space of the leftovers."""
        return sum(entry.size for entry, _why in self.removed) + self.stale_bytes

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
    An intact entry that no key this process trusts vouches for is not broken: the users
    of a shared cache who trust its signer load it, and it stays.

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
            elif _evict_unused(entry, force=force):
                removed.append((entry, why))
            else:
                in_use.append(entry.path)
    stale, busy_now, stale_bytes = _remove_stale(cache)
    files = _remove_stale_temporaries(cache)
    _remove_unused_index_mutexes(cache)
    return PruneReport(removed, stale, sorted({*busy, *busy_now}), in_use, files, stale_bytes)


def _evict_unused(entry: CacheEntry, *, force: bool) -> bool:
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


# What a download leaves in its version directory: kept files, staging, trash.
_LEFT = (PARTIAL_PREFIX, STAGING_PREFIX, TRASH_PREFIX)


def _remove_stale(cache: Cache) -> tuple[list[Path], list[Path], int]:
    """Staging directories of dead processes on this host, trash, and the files kept from
    interrupted downloads (the next download of those entries starts from scratch).

    Returns what was removed, the version directories a download was busy in, and the
    disk space the removed directories took.
    """
    gone, busy, freed = [], [], 0
    for info, version_dir in version_dirs(cache):
        with _idle(cache, version_dir) as idle:
            if not idle:  # its partial files are being continued, its staging filled
                busy.append(version_dir)
                continue
            usage = {p: _disk_usage(p) for p in version_dir.iterdir() if p.name.startswith(_LEFT)}
            for partial in version_dir.glob(f"{PARTIAL_PREFIX}*"):
                remove_tree(partial)
            # Variant names hold no dots; the rest of a leftover's name is random, pid and host.
            variants = {
                p.name.removeprefix(STAGING_PREFIX).removeprefix(TRASH_PREFIX).split(".")[0]
                for p in usage
                if not p.name.startswith(PARTIAL_PREFIX)
            }
            for variant in sorted(variants):
                remove_stale_staging(cache, info, variant, idle=True)
            removed = [p for p in usage if not os.path.lexists(p)]
            gone += removed
            freed += sum(usage[p] for p in removed)
    return gone, busy, freed


def _disk_usage(path: Path) -> int:
    """The disk space the files under ``path`` take (their blocks: a file kept from an
    interrupted download may hold space reserved for the rest of it)."""
    used = 0
    for directory, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                used += os.lstat(os.path.join(directory, name)).st_blocks * 512
    return used


def _remove_stale_temporaries(cache: Cache) -> list[Path]:
    """Remove the temporary files that processes killed while replacing a small file of
    the cache left beside it (see ``write_atomic``): the record of the versions seen and
    of the GPUs, the import table's files, each version's variant index, and an entry's
    receipt and manifest. Only those of the cache's own names, and only once not modified
    for :data:`TEMPORARY_IDLE_SECONDS`: not every writer holds a mutex (the import table
    and the GPU record are written without one), so age alone tells a dead one.

    Returns what was removed.
    """
    places: list[tuple[Path, set[str] | None]] = [
        (cache.root, {VERSIONS_SEEN_NAME, GPU_RECORD_NAME}),
        (cache.root / TABLE_DIR, None),  # <module name>.json
        *((version_dir, {INDEX_NAME}) for _info, version_dir in version_dirs(cache)),
        *((entry.path, ENTRY_RECORDS) for entry in list_entries(cache)),
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

    Also removes the index mutex of each version the cache then holds nothing of, where
    no process holds it (every name a program asked for leaves one), and every row of
    the import table (the next import of a kept entry's name records it again).

    Only the cache layout's own directories and files are removed, so a cache root that
    was pointed at a directory holding other files keeps them.

    Raises:
        CacheError: the cache cannot be written.
    """
    removed, busy, in_use = [], [], []
    for info, version_dir in list(version_dirs(cache)):
        with _idle(cache, version_dir) as idle:
            if not idle:
                busy.append(version_dir)
                continue
            kept = False
            # Listed now, not before: an entry committed since is in use by its loader.
            for entry in entries_in(info, version_dir):
                if _evict_unused(entry, force=force):
                    removed.append(entry)
                else:
                    in_use.append(entry.path)
                    kept = True
            if not kept:
                remove_tree(version_dir)
    _remove_empty_dirs(cache.kernels_dir)
    _remove_unused_index_mutexes(cache)
    _remove_import_table(cache)
    return ClearReport(removed, busy, in_use)


def _remove_import_table(cache: Cache) -> None:
    """Remove the rows of the import table: each names an entry that is gone now, or one
    kept in use, which the next import of its name finds by the full lookup and records
    again. Its own ``<module name>.json`` files only, not a directory a symlink makes it."""
    table = cache.root / TABLE_DIR
    if table.is_symlink() or not table.is_dir():
        return
    for path in table.iterdir():
        if path.suffix == ".json" and not path.is_symlink() and path.is_file():
            with cache_errors(path), contextlib.suppress(FileNotFoundError):
                path.unlink()


def _remove_unused_index_mutexes(cache: Cache) -> None:
    """Remove the index mutex of each version the cache holds nothing of, where no process
    holds it: every name a program asked for leaves one, a name that does not exist too."""
    for path, version_dir in index_mutex_files(cache):
        linked = any(parent.is_symlink() for parent in path.parents[:2])  # not ours to clean
        if linked or os.path.lexists(version_dir):
            continue
        with hold_if_free(path, mutex_mode(cache)) as free:
            if free:  # one waiting for it meanwhile then opens it anew (filelock retries)
                path.unlink(missing_ok=True)
    _remove_empty_dirs(cache.locks_dir)


def _remove_empty_dirs(top: Path) -> None:
    """Remove ``top`` and the directories two levels below it that are empty."""
    for directory in [*top.glob("*/*"), *top.glob("*"), top]:
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if empty


@contextlib.contextmanager
def _idle(cache: Cache, version_dir: Path) -> Iterator[bool]:
    """Hold every download mutex of a version's entries, if no process holds one; yield
    whether it could. A download in progress keeps its staging files and partial files
    in the version directory: removing them would break it.

    Raises:
        CacheError: a lock cannot be taken (a read-only cache): not busy, unwritable.
    """
    mutex_files = sorted(download_mutex_dir(version_dir).glob("*.lock"))
    with contextlib.ExitStack() as held:
        for mutex_file in mutex_files:
            if not held.enter_context(hold_if_free(mutex_file, mutex_mode(cache))):
                yield False
                return
        yield True
