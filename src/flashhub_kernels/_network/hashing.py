"""Write-and-hash: the one place bytes from the network become bytes on disk."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import queue
import stat
import threading
from pathlib import Path

from .._utils.hashing import CHUNK_SIZE
from .._utils.reserve import reserve
from .._utils.threads import started
from ..errors import CacheError
from .progress import NO_PROGRESS, Progress

# Past this many bytes a file is hashed on a worker thread, overlapping the hash with
# receiving and writing (hashlib releases the GIL, so the two run on separate cores).
# Small files are hashed inline: a thread would cost more than it saves.
BACKGROUND_HASH_AFTER = 4 << 20
# Chunks in flight to the hashing thread: bounds memory to about 16 MiB per file.
_QUEUE_DEPTH = 16
INTEGRITY_HINT = "retry; if it persists the CDN serves tampered or stale files, report it"


class WrongSize(Exception):
    """A body that cannot be the file: longer than its limit, or announced at another
    length than the file's known size. Nothing past the limit was written."""


class _Sha256:
    """A sha256 that can move its updates onto a worker thread midway."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] | None = None
        self._worker: threading.Thread | None = None

    def update(self, chunk: bytes) -> None:
        if self._queue is None:
            self._hash.update(chunk)
        else:
            self._queue.put(chunk)

    def go_background(self) -> None:
        if self._queue is None:
            self._queue = queue.Queue(maxsize=_QUEUE_DEPTH)
            self._worker = threading.Thread(target=self._drain, name="flashhub-sha256", daemon=True)
            if not started(self._worker):  # no thread to be had: the hash stays inline
                self._queue = self._worker = None

    def _drain(self) -> None:
        assert self._queue is not None
        while (chunk := self._queue.get()) is not None:
            self._hash.update(chunk)

    def stop(self) -> None:
        """Wait until every queued chunk is hashed; the hash stays inline afterwards."""
        if self._queue is not None and self._worker is not None:
            self._queue.put(None)
            self._worker.join()
            self._queue = self._worker = None

    def peek(self) -> bytes:
        """The digest of what was hashed so far; hashing may go on afterwards."""
        self.stop()
        return self._hash.copy().digest()


class HashingWriter:
    """Append bytes to a file while hashing them, so no second pass is needed.

    The file is never opened through a symlink, nor written while another name links to
    it (a hard link from outside the cache) or while another user owns it: such a file
    is replaced by a new, empty one.
    If it already holds the first part of
    the download (kept from an interrupted run), those bytes are hashed first and the
    writer continues after them; :meth:`reset` starts over from nothing (a server that
    ignored a ``Range`` request sends the whole body again).

    The file never grows past ``limit`` bytes: a chunk that would take it further is
    refused whole with :class:`WrongSize`. ``expected_size`` is the file's size when
    the manifest states it (it is then the limit too); mirrors :meth:`announce` the
    length of a body before reading it.

    ``progress`` hears of every byte written (and taken back by :meth:`reset`), and,
    when the manifest states no size, of the file's total: the kept part's size, then
    what an answer announces.

    With ``expected_size``, the disk space still missing is reserved before any byte is
    fetched (see ``.reserve``): a cache without room for the file is a
    :class:`CacheError` at once.
    """

    def __init__(
        self,
        path: Path,
        progress: Progress = NO_PROGRESS,
        *,
        expected_size: int | None = None,
        limit: int | None = None,
    ) -> None:
        self.path = path
        self._progress = progress
        self._announced_total = 0  # what progress was told this file's total is
        self.expected_size = expected_size
        self.limit = expected_size if expected_size is not None else limit
        self._hash = _Sha256()
        self.size = 0
        self._fd: int | None = None
        try:
            self._fd, new = _open_own(path)
            while not new and (chunk := os.read(self._fd, CHUNK_SIZE)):  # a kept partial
                self._hash.update(chunk)
                self.size += len(chunk)
            self._reserve()
        except OSError as exc:
            self.close()
            raise CacheError.cannot_write(exc, path) from exc
        if self.size:
            progress.advance(self.size)
            if expected_size is None:  # part of the total, though no answer may announce it
                progress.expect(self.size)
                self._announced_total = self.size

    def _reserve(self) -> None:
        """Reserve the disk space the rest of a file of known size needs."""
        if self.expected_size is not None and self._fd is not None:
            reserve(self._fd, self.size, self.expected_size - self.size)

    def hashes_to(self, expected: bytes) -> bool:
        """Whether the bytes written so far already hash to ``expected``."""
        return self._hash.peek() == expected

    def write(self, chunk: bytes) -> None:
        """Append ``chunk`` and hash it; :class:`WrongSize` if it would pass the limit."""
        assert self._fd is not None, "write after close"
        if self.limit is not None and self.size + len(chunk) > self.limit:
            raise WrongSize(self._past_limit())
        self._hash.update(chunk)
        view = memoryview(chunk)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:  # not a network error: retrying the download cannot help
            raise CacheError.cannot_write(exc, self.path) from exc
        self.size += len(chunk)
        if self.size > BACKGROUND_HASH_AFTER:
            self._hash.go_background()
        self._progress.advance(len(chunk))

    def _past_limit(self) -> str:
        if self.expected_size is not None:
            return f"the body runs past the {self.expected_size} bytes metadata.json lists"
        return f"the body runs past {self.limit} bytes, the limit FLASHHUB_MAX_FILE_BYTES sets"

    def announce(self, length: int) -> None:
        """A body of ``length`` bytes is about to be written from here on.

        Raises :class:`WrongSize` unless it can complete the file: the rest of its known
        size exactly, or within the limit. Otherwise the file's total is now known, for
        the progress bar.
        """
        self._check_announced(length)
        total = self.size + length
        if self.expected_size is None and total != self._announced_total:
            self._progress.expect(total - self._announced_total)
            self._announced_total = total

    def _check_announced(self, length: int) -> None:
        remaining = None if self.limit is None else self.limit - self.size
        if self.expected_size is not None and length != remaining:
            raise WrongSize(
                f"the answer announces {length} bytes from byte {self.size}, but "
                f"metadata.json lists {self.expected_size} bytes in all"
            )
        if remaining is not None and length > remaining:
            raise WrongSize(
                f"the answer announces {length} bytes from byte {self.size}, past "
                f"{self.limit} bytes, the limit FLASHHUB_MAX_FILE_BYTES sets"
            )

    def reset(self) -> None:
        assert self._fd is not None, "reset after close"
        self._hash.stop()
        os.ftruncate(self._fd, 0)  # which frees the reserved space too
        os.lseek(self._fd, 0, os.SEEK_SET)
        self._hash = _Sha256()
        if self.size:
            self._progress.advance(-self.size)
        self.size = 0
        try:
            self._reserve()
        except OSError as exc:
            raise CacheError.cannot_write(exc, self.path) from exc

    def close(self) -> None:
        """Close the file (idempotent) once every queued chunk is hashed. A file left
        short of its size gives back the space reserved for the rest: it may be kept
        for a later download to continue, or never be."""
        self._hash.stop()
        if self._fd is not None:
            if self.expected_size is not None and self.size < self.expected_size:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self.size)  # frees the blocks past its end
            os.close(self._fd)
            self._fd = None


def _open_own(path: Path) -> tuple[int, bool]:
    """Open ``path`` to read and append, created if missing; a symlink, a file with more
    than one link, not a regular file, or another user's is unlinked first, so the bytes
    written, and any ``ftruncate``, reach no file but this one, and its owner cannot
    rewrite it once verified. Also whether the file is new (empty).

    Checked on the open file: in a cache a group shares, a member may swap a kept file
    after the checks made on its name."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:  # the usual case, a file not there yet: nothing to look at or to read
        return os.open(path, flags | os.O_EXCL, 0o644), True
    except FileExistsError:
        pass
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:  # ELOOP: O_NOFOLLOW met a symlink, which is not ours
            raise
    else:
        st = os.fstat(fd)
        if st.st_nlink == 1 and stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return fd, False
        os.close(fd)
    os.unlink(path)
    return os.open(path, flags | os.O_EXCL, 0o644), True
