"""Write-and-hash: the one place bytes from the network become bytes on disk."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from ._progress import ByteCounter
from .errors import IntegrityError

CHUNK_SIZE = 1 << 20  # large reads: fewer syscalls, and hashlib drops the GIL above 2 KiB


class HashingWriter:
    """Append bytes to a new file while hashing them, so no second pass is needed.

    The file is created exclusively and never through a symlink. :meth:`reset` starts
    over (a server that ignored a ``Range`` request sends the whole body again).
    """

    def __init__(self, path: Path, on_bytes: ByteCounter | None = None) -> None:
        self.path = path
        self._on_bytes = on_bytes
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        self._file = os.fdopen(os.open(path, flags, 0o644), "wb", buffering=0)
        self._hash = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes) -> None:
        self._hash.update(chunk)
        self._file.write(chunk)
        self.size += len(chunk)
        if self._on_bytes is not None:
            self._on_bytes(len(chunk))

    def reset(self) -> None:
        self._file.seek(0)
        self._file.truncate()
        self._hash = hashlib.sha256()
        self.size = 0

    def close(self) -> None:
        self._file.close()

    def verify(self, expected: bytes, *, source: str) -> None:
        """Raise :class:`IntegrityError` unless the bytes written hash to ``expected``."""
        if self._hash.digest() != expected:
            raise IntegrityError(
                f"{source}: sha256 of the {self.size} bytes received does not match "
                "metadata.json; the file was not kept",
                hint="retry; if it persists the CDN serves tampered or stale files, report it",
            )


def sha256_file(path: Path) -> bytes:
    """Hash a file on disk in large chunks (``flashhub cache verify``)."""
    hasher = hashlib.sha256()
    with open(path, "rb", buffering=0) as file:
        while chunk := file.read(CHUNK_SIZE):
            hasher.update(chunk)
    return hasher.digest()
