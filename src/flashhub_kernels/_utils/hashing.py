"""The sha256 of a file on disk (the cache's checks, the publisher, a local kernel's
digest), and the size of the reads that hash or copy a file. It imports nothing but
``hashlib``."""

from __future__ import annotations

import hashlib

TYPE_CHECKING = False  # not typing's: importing it would cost more than this module
if TYPE_CHECKING:
    from pathlib import Path

CHUNK_SIZE = 1 << 20  # large reads: fewer syscalls, and hashlib drops the GIL above 2 KiB


def sha256_file(path: Path) -> bytes:
    """Hash a file on disk in large chunks (``flashhub cache verify``)."""
    hasher = hashlib.sha256()
    with open(path, "rb", buffering=0) as file:
        while chunk := file.read(CHUNK_SIZE):
            hasher.update(chunk)
    return hasher.digest()
