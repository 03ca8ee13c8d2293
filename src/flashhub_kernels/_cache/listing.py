"""The cache as ``flashhub cache list`` (``ls``) shows it: the cached versions of each
kernel with their variants, their size, and when their files were last read and last
written, as Hugging Face's ``kernels cache ls`` lists a cache."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from .._models.names import RepoInfo
from .._models.record import Record
from .admin import CacheEntry, list_entries
from .layout import Cache


class CachedVersion(Record):
    """A cached kernel version: its entries (one per variant, sorted by name), and the
    newest access and modification time of their files (seconds since the epoch)."""

    info: RepoInfo
    entries: tuple[CacheEntry, ...]
    last_accessed: float
    last_modified: float

    @property
    def size(self) -> int:
        return sum(entry.size for entry in self.entries)


def cached_versions(cache: Cache) -> list[CachedVersion]:
    """Every version with a committed entry, sorted by repo and version."""
    versions = []
    for info, group in itertools.groupby(list_entries(cache), key=lambda entry: entry.info):
        entries = tuple(group)
        times = [_times(entry.path) for entry in entries]
        versions.append(
            CachedVersion(
                info,
                entries,
                max(accessed for accessed, _ in times),
                max(modified for _, modified in times),
            )
        )
    return versions


def _times(entry: Path) -> tuple[float, float]:
    """The newest access and modification time of ``entry`` and the files in it."""
    stats = [os.lstat(entry)]
    for directory, _dirs, files in os.walk(entry):
        for name in files:
            try:
                stats.append(os.lstat(os.path.join(directory, name)))
            except OSError:  # removed meanwhile
                continue
    return max(st.st_atime for st in stats), max(st.st_mtime for st in stats)
