"""The cache as ``flashhub cache list`` (``ls``) shows it: the cached versions of each
kernel with their variants, their size, and when their files were last read and last
written, as Hugging Face's ``kernels cache ls`` lists a cache."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from .._constants import RECEIPT_NAME
from .._models.names import RepoInfo
from .._models.record import Record
from .entries import CacheEntry, list_entries
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
    """The newest access time of the files in ``entry`` but its receipt (which listing the
    cache reads), and the newest modification time of ``entry`` and its files; with no
    other file, the entry's modification time for both."""
    accessed, modified = [], [os.lstat(entry).st_mtime]
    for directory, _dirs, files in os.walk(entry):
        for name in files:
            try:
                st = os.lstat(os.path.join(directory, name))
            except OSError:  # removed meanwhile
                continue
            modified.append(st.st_mtime)
            if name != RECEIPT_NAME or directory != str(entry):
                accessed.append(st.st_atime)
    return max(accessed, default=modified[0]), max(modified)
