"""An object store mirror (``s3://bucket/prefix``, or another object store fsspec opens).

It reads through :class:`~.object_store.Store`, which imports fsspec (the ``s3`` extra):
only a download run with such a mirror imports it. Per file:

- the object is read from the bytes already written on (a partial download kept by an
  interrupted run, or what a failed mirror sent), in ranged reads of
  :data:`~.object_store.BLOCK_SIZE` bytes, so a large file never sits in memory;
- an object whose size cannot complete the file (not the rest of the size the manifest
  states, or past ``FLASHHUB_MAX_FILE_BYTES``) is refused before its bytes are read
  (``WrongSize``), as an ``http(s)://`` mirror refuses a ``Content-Length``;
- a missing object is :class:`NotPublished` for a document, and the mirror failing for
  a file a manifest lists; access refused (or no credentials found) is
  :class:`AccessDenied`, whose message names the bucket and the credentials' source.

The client's timeouts apply to S3 requests; botocore retries throttled and failed
requests as it always does.
"""

from __future__ import annotations

import threading
import urllib.parse

from .._config import Config
from ..errors import TransportError
from .hashing import HashingWriter
from .mirrors import AccessDenied, Mirror, MirrorFailed, NotPublished, write_chunks
from .object_store import ObjectMissing, Store, StoreError


class FsspecMirror(Mirror):
    """A CDN tree in an object store, read with fsspec."""

    def __init__(self, base_url: str, config: Config) -> None:
        super().__init__(base_url, config.prefix)
        try:
            self._store = Store(
                self.url(""), timeouts=(config.connect_timeout, config.read_timeout)
            )
        except StoreError as exc:  # no other mirror installs a package
            raise TransportError(str(exc), hint=exc.hint) from None

    def read_document(self, relpath: str, limit: int) -> bytes:
        try:
            return self._store.read(_key(relpath), limit)
        except ObjectMissing:
            raise NotPublished(self.url(relpath)) from None
        except StoreError as exc:
            raise _failed(exc) from None

    def download(self, relpath: str, writer: HashingWriter, cancelled: threading.Event) -> None:
        try:
            with self._store.reader(_key(relpath)) as source:
                if source.size is not None:
                    if writer.size > source.size:
                        writer.reset()  # the part kept is longer than the object: start over
                    writer.announce(source.size - writer.size)
                write_chunks(source.chunks(writer.size), writer, cancelled)
        except ObjectMissing:
            raise MirrorFailed("the file its manifest lists is missing") from None
        except StoreError as exc:
            raise _failed(exc) from None

    def size(self, relpath: str) -> int | None:
        try:
            return self._store.size(_key(relpath))
        except (ObjectMissing, StoreError):
            return None

    def close(self) -> None:
        pass  # fsspec keeps its connections for the process; nothing is held per run


def _key(relpath: str) -> str:
    """The object key of a CDN path: the fetcher asks for paths as a URL spells them
    (``configs/a b.json`` is ``configs/a%20b.json``), and the publisher wrote the keys as
    the files are named."""
    return urllib.parse.unquote(relpath)


def _failed(exc: StoreError) -> MirrorFailed:
    if exc.denied:
        return AccessDenied(str(exc), hint=exc.hint)
    return MirrorFailed(str(exc))
