"""Where the bytes come from: one mirror of the CDN tree, behind one small interface.

A :class:`Mirror` serves paths relative to ``<base>/<prefix>/``. Three kinds exist,
one per kind of URL: :class:`FileMirror` for a ``file://`` tree on disk (here),
``HttpMirror`` for ``http(s)://`` (in :mod:`.http_mirror`, which imports ``requests``: a
process that only reads a local mirror never imports it) and ``FsspecMirror`` for an
object store such as ``s3://bucket/prefix`` (in :mod:`.fsspec_mirror`, which imports
fsspec, the ``s3`` extra). The fetcher above (:mod:`.transport`) opens
the mirrors, fails over between them and runs downloads in parallel; a mirror only
moves bytes.

A mirror answers in five ways besides success:

- :class:`NotPublished`: the document is not there (404, or no such file). For an
  optional document (``variants.json``, a probed ``metadata.json``) that is an answer;
- :class:`MirrorFailed`: this mirror cannot serve the path now (connection failure,
  5xx after retries, 401/403/404 for a file a manifest lists, a stalled transfer);
  the next mirror may. :class:`Unreachable` is a connection that could not be made,
  :class:`AccessDenied` the 401/403 case, :class:`UntrustedCertificate` a certificate
  that no trusted CA signed;
- :class:`~.hashing.WrongSize`: the file is longer than its size in the manifest, or
  than ``FLASHHUB_MAX_FILE_BYTES`` when the manifest states none, or the mirror announces
  another length; the fetcher decides what that means;
- :class:`BadBytes`: what the mirror sent cannot be the file, whatever its length (a web
  page served in its stead); the fetcher raises it too, for bytes that fail the digest;
- an :class:`~flashhub_kernels.errors.FlashhubError`: a problem no other mirror can fix
  (a full disk). Bytes that fail their digest are the fetcher's to judge.
"""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .._utils.ctrl_c import stop_after_ctrl_c
from .._utils.filesystem import open_regular
from .._utils.hashing import CHUNK_SIZE
from .._utils.urls import file_url_path, redact_url
from .hashing import INTEGRITY_HINT, HashingWriter


class NotPublished(Exception):
    """The mirror has no such document (HTTP 404, or no such file on disk)."""


class MirrorFailed(Exception):
    """This mirror could not serve the path; the message says what it answered, and
    ``hint``, where the answer shows it, what to do about it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class Unreachable(MirrorFailed):
    """The mirror could not be connected to: the connection timed out or was refused, or
    its host name did not resolve."""


class AccessDenied(MirrorFailed):
    """The mirror answered 401 or 403: it wants credentials, or refused the ones sent.

    ``netrc_problem`` says why the netrc file gave none, when it exists and cannot be
    used (requests ignores such a file without a word). ``hint`` says where this kind
    of mirror takes credentials from, when that is not the URL or netrc (an object
    store's).
    """

    def __init__(
        self, message: str, *, netrc_problem: str | None = None, hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.netrc_problem = netrc_problem


class UntrustedCertificate(MirrorFailed):
    """The mirror's TLS certificate is signed by no CA this client trusts; ``hint`` says
    which CA bundle it was checked against, and how to trust that CA."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(message, hint=hint)


class ProxyFailed(MirrorFailed):
    """The proxy a request went through (the mirror's, or a redirect's) failed it."""


class OverCap(MirrorFailed):
    """The mirror sent more of a file of unknown size than ``FLASHHUB_MAX_FILE_BYTES``."""


class BadBytes(Exception):
    """A mirror sent bytes that cannot be the file: they fail its digest, or its size in
    the manifest, or are a web page. The mirror failed for the file, and its bytes are
    not kept; ``hint`` says what to do."""

    def __init__(self, message: str, *, hint: str = INTEGRITY_HINT) -> None:
        super().__init__(message)
        self.hint = hint


class DownloadCancelled(Exception):
    """Another download of the run failed or was interrupted: stop this one."""


def stop_if(cancelled: threading.Event) -> None:
    """Raise :class:`DownloadCancelled` once the run has stopped this download, and
    ``KeyboardInterrupt`` once Ctrl-C has ended the program's main thread
    (:func:`~.._utils.ctrl_c.stop_after_ctrl_c`): stopped as Ctrl-C stops a download,
    it keeps what arrived for the next run."""
    if cancelled.is_set():
        raise DownloadCancelled
    stop_after_ctrl_c("downloading")


# How long a wait between two tries of a request lasts between two looks at whether its
# download was stopped.
_STOP_CHECK_SECONDS = 0.25
_download = threading.local()  # what stops the download this thread runs (see stopped_by)


@contextmanager
def stopped_by(cancelled: threading.Event) -> Iterator[None]:
    """While the block runs, a wait of this thread's before a request is sent again
    (:func:`wait_to_retry`) ends as :func:`stop_if` says once ``cancelled`` is set:
    urllib3 waits and retries inside its own call, where the download cannot look."""
    _download.cancelled = cancelled
    try:
        yield
    finally:
        del _download.cancelled


def wait_to_retry(seconds: float) -> None:
    """Wait ``seconds`` before a request is sent again, stopping as :func:`stop_if` says
    once the download this thread runs (see :func:`stopped_by`) was stopped, or Ctrl-C
    ended the program: a program that carried on after Ctrl-C sends nothing more for the
    load it interrupted, though the CDN asked for a minute's wait."""
    cancelled: threading.Event = getattr(_download, "cancelled", None) or threading.Event()
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        cancelled.wait(min(left, _STOP_CHECK_SECONDS))
        stop_if(cancelled)


def write_chunks(
    chunks: Iterable[bytes], writer: HashingWriter, cancelled: threading.Event
) -> None:
    """Write ``chunks`` into ``writer`` until they end, or stop as :func:`stop_if` says."""
    for chunk in chunks:
        stop_if(cancelled)
        writer.write(chunk)


class Mirror(ABC):
    """One copy of the CDN tree."""

    def __init__(self, base_url: str, prefix: str) -> None:
        self.base_url = base_url
        self._prefix = f"{prefix}/" if prefix else ""

    @property
    def label(self) -> str:
        """The base URL as shown to people: credentials redacted."""
        return redact_url(self.base_url)

    def url(self, relpath: str) -> str:
        return f"{self.base_url}/{self._prefix}{relpath}"

    @property
    def via(self) -> str | None:
        """The proxy in the way, if any (credentials redacted)."""
        return None

    @abstractmethod
    def read_document(self, relpath: str, limit: int) -> bytes:
        """A small document, whole; at most ``limit + 1`` bytes are read.

        Raises:
            NotPublished: it does not exist.
            MirrorFailed: the mirror could not answer.
        """

    @abstractmethod
    def download(self, relpath: str, writer: HashingWriter, cancelled: threading.Event) -> None:
        """Append the file's bytes from ``writer.size`` on; the caller verifies them.

        Stops with :class:`DownloadCancelled` soon after ``cancelled`` is set.

        Raises:
            MirrorFailed: the mirror could not serve the file (a missing listed file too).
            WrongSize: the size the mirror states for the file, or the bytes it sends,
                do not fit ``writer.expected_size`` or ``writer.limit``; nothing past the
                limit is written (see :class:`~.hashing.HashingWriter`).
            BadBytes: what it sends cannot be the file for another reason.
        """

    @abstractmethod
    def size(self, relpath: str) -> int | None:
        """The published file's size, or ``None`` when the mirror does not say."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; the mirror is not used afterwards."""


class FileMirror(Mirror):
    """A CDN tree on a local or mounted file system (``file://``)."""

    def _path(self, relpath: str) -> Path:
        return file_url_path(self.url(relpath))

    def read_document(self, relpath: str, limit: int) -> bytes:
        try:
            with open_regular(self._path(relpath)) as file:
                return file.read(limit + 1)
        except FileNotFoundError:
            raise NotPublished(self.url(relpath)) from None
        except OSError as exc:
            raise MirrorFailed(exc.strerror or str(exc)) from None

    def download(self, relpath: str, writer: HashingWriter, cancelled: threading.Event) -> None:
        try:
            with open_regular(self._path(relpath), buffering=0) as source:
                writer.announce(os.fstat(source.fileno()).st_size - writer.size)
                source.seek(writer.size)
                write_chunks(iter(lambda: source.read(CHUNK_SIZE), b""), writer, cancelled)
        except FileNotFoundError:
            raise MirrorFailed("the file its manifest lists is missing") from None
        except OSError as exc:
            raise MirrorFailed(exc.strerror or str(exc)) from None

    def size(self, relpath: str) -> int | None:
        path = self._path(relpath)
        return path.stat().st_size if path.is_file() else None

    def close(self) -> None:
        pass  # files are opened and closed per read
