"""Fetching from the CDN: http(s) over pooled keep-alive connections, and ``file://`` mirrors.

The cache and the import hook import this module only on the cold path, when something
must actually be downloaded.

Failure policy, per file:
- connection errors, 429 and 5xx are retried by :class:`~._http.HttpClient` with
  exponential backoff that honours ``Retry-After``; when they persist, the next mirror
  is tried, and a mirror that failed goes to the back of the list for the rest of the
  download;
- a body cut off mid-way (dropped connection, read timeout, short body) resumes with
  ``Range`` from the bytes already hashed; a ``200`` answer or a ``206`` at the wrong
  offset restarts the file from zero;
- 404 means "not published" and is answered at once (mirrors are meant to agree);
- bytes that do not hash to the manifest's digest are fetched once more from scratch
  (a proxy may have mangled them); a second mismatch is an :class:`IntegrityError`;
- redirects are followed only within the same scheme.
"""

from __future__ import annotations

import ipaddress
import math
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import TypeVar

from ._config import Config
from ._hashing import CHUNK_SIZE, HashingWriter
from ._http import RETRY_STATUSES, WIRE_ERRORS, HttpClient, RequestFailed, Response
from ._progress import ByteCounter
from .errors import IntegrityError, TransportError

T = TypeVar("T")

MAX_RESUMES = 5
MAX_REDIRECTS = 5
# Parallel downloads hide round trips: while one thread waits for the CDN, another
# works. With no round trip to hide (loopback, a mirror next door) extra threads only
# contend for the GIL: on 2 cores, 8 threads fetched 200 small files from loopback about
# 40% slower than 2 did. So the pool is sized by the round trip of the documents fetched
# just before (Little's law: 1 + round trip / CPU time per file), within these bounds.
MIN_PARALLEL_FILES = 2
MAX_PARALLEL_FILES = 8
CPU_SECONDS_PER_FILE = 0.0003  # request, response, create, write, hash: a small file
DownloadJob = tuple[str, Path, bytes]  # relative path, destination, expected sha256
_warned_hosts: set[str] = set()
_warn_lock = threading.Lock()


def _ignore(_n: int) -> None:
    pass


class NotPublished(Exception):
    """The CDN answered 404 (or the file is absent from a ``file://`` mirror)."""


class _MirrorFailed(Exception):
    """This mirror could not serve the file; the next one may."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def warn_if_insecure(base_url: str) -> None:
    """Warn once per host about plain http to a host other than this machine."""
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme != "http" or _is_loopback(host):
        return
    with _warn_lock:
        if host in _warned_hosts:
            return
        _warned_hosts.add(host)
    warnings.warn(
        f"fetching kernels over plain http from {host}: metadata.json carries the digests "
        "every file is checked against, so anyone on the path can swap kernels. Use https, "
        "or pin the kernel in a lock file.",
        stacklevel=3,
    )


class Fetcher:
    """Fetches paths relative to ``<mirror>/<prefix>/`` from the first mirror that answers."""

    def __init__(self, config: Config) -> None:
        self.config = config
        for base in config.cdn_urls:
            warn_if_insecure(base)
        self.http = HttpClient(config.connect_timeout, config.read_timeout)
        self._mirrors = list(config.cdn_urls)
        self._mirrors_lock = threading.Lock()
        self._round_trip = math.inf  # the fastest small document fetch so far, in seconds

    def close(self) -> None:
        self.http.close()

    def urls(self, relpath: str) -> list[tuple[str, str]]:
        """``(mirror, url)`` pairs for ``relpath``, healthiest mirror first."""
        prefix = f"{self.config.prefix}/" if self.config.prefix else ""
        with self._mirrors_lock:
            return [(base, f"{base}/{prefix}{relpath}") for base in self._mirrors]

    def get_bytes(self, relpath: str, *, limit: int) -> bytes:
        """Fetch a small document whole; raise :class:`NotPublished` on 404."""
        start = time.perf_counter()
        data = self._from_mirrors(relpath, lambda url: self._read_small(url, limit))
        self._round_trip = min(self._round_trip, time.perf_counter() - start)
        return data

    def size(self, relpath: str) -> int | None:
        """The size of a published file (``HEAD``), from the first mirror that states it.

        ``None`` when no mirror does: manifests carry no sizes, and HEAD is optional on a
        static host. Only ``flashhub info`` asks.
        """
        for _base, url in self.urls(relpath):
            if url.startswith("file://"):
                path = _file_url_path(url)
                if path.is_file():
                    return path.stat().st_size
                continue
            try:
                response = self.http.request("HEAD", url)
            except RequestFailed:
                continue
            response.release()
            length = response.headers.get("Content-Length", "")
            if response.status == 200 and length.isdigit():
                return int(length)
        return None

    def download(
        self, relpath: str, dest: Path, digest: bytes, on_bytes: ByteCounter = _ignore
    ) -> int:
        """Stream ``relpath`` into the new file ``dest``, verifying it; return its size."""

        def fetch(url: str) -> int:
            return self._download_verified(url, dest, digest, on_bytes)

        try:
            return self._from_mirrors(relpath, fetch)
        except IntegrityError:
            return self._from_mirrors(relpath, fetch)  # once more, from scratch

    def download_many(self, jobs: list[DownloadJob], on_bytes: ByteCounter = _ignore) -> int:
        """Download several files concurrently; return the total bytes.

        A few workers each take the next job until none is left (one hand-off per
        worker, not per file). The first error stops the others after their current
        file, and is raised.
        """
        if len(jobs) == 1:
            return self.download(*jobs[0], on_bytes)
        queue: SimpleQueue[DownloadJob] = SimpleQueue()
        for job in jobs:
            queue.put(job)
        failed = threading.Event()

        def work() -> int:
            total = 0
            try:
                while not failed.is_set():
                    total += self.download(*queue.get_nowait(), on_bytes)
            except Empty:
                pass
            except BaseException:
                failed.set()
                raise
            return total

        workers = parallel_downloads(len(jobs), self._round_trip)
        with ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(work) for _ in range(workers)]
            return sum(future.result() for future in futures)

    def _from_mirrors(self, relpath: str, fetch: Callable[[str], T]) -> T:
        failures: list[str] = []
        for base, url in self.urls(relpath):
            try:
                return fetch(url)
            except _MirrorFailed as exc:
                failures.append(f"{url}: {exc}")
                self._demote(base)
        raise TransportError(
            f"could not fetch {relpath!r} from any CDN mirror:\n  " + "\n  ".join(failures),
            hint="check the network and FLASHHUB_CDN_URL (comma-separate several mirrors), "
            "or set FLASHHUB_OFFLINE=1 to use only what is cached",
        )

    def _demote(self, base: str) -> None:
        with self._mirrors_lock:
            if base in self._mirrors:
                self._mirrors.remove(base)
                self._mirrors.append(base)

    # -- one mirror ------------------------------------------------------------------

    def _read_small(self, url: str, limit: int) -> bytes:
        if url.startswith("file://"):
            try:
                with open(_file_url_path(url), "rb") as file:
                    return file.read(limit + 1)
            except FileNotFoundError:
                raise NotPublished(url) from None
            except OSError as exc:
                raise _MirrorFailed(str(exc)) from None
        for _attempt in range(MAX_RESUMES + 1):
            try:
                with self._get(url, {}) as response:
                    body = bytearray()
                    for chunk in _body(response):
                        body += chunk
                        if len(body) > limit:  # the caller reports the size; stop reading
                            break
                    return bytes(body)
            except WIRE_ERRORS:  # the body broke off: read it again
                continue
        raise _MirrorFailed(f"the connection broke {MAX_RESUMES + 1} times in the body")

    def _download_verified(self, url: str, dest: Path, digest: bytes, on_bytes: ByteCounter) -> int:
        writer = HashingWriter(dest, on_bytes)
        try:
            if url.startswith("file://"):
                _copy_file(url, writer)
            else:
                self._stream_with_resume(url, writer)
            writer.close()
            writer.verify(digest, source=url)
        except BaseException:
            writer.close()
            dest.unlink(missing_ok=True)
            raise
        return writer.size

    def _stream_with_resume(self, url: str, writer: HashingWriter) -> None:
        for _attempt in range(MAX_RESUMES + 1):
            headers = {"Range": f"bytes={writer.size}-"} if writer.size else {}
            try:
                with self._get(url, headers) as response:
                    if writer.size and not _resumes_at(response, writer.size):
                        writer.reset()  # a full body, or the wrong part: start over
                        if response.status != 200:
                            continue
                    for chunk in _body(response):
                        writer.write(chunk)
                    return
            except WIRE_ERRORS:
                continue  # the body broke off: resume from writer.size
        raise _MirrorFailed(f"the transfer broke off {MAX_RESUMES + 1} times")

    @contextmanager
    def _get(self, url: str, headers: dict[str, str]) -> Iterator[Response]:
        """A successful response whose body the caller streams, then releases.

        A fully read response gives its connection back to the pool; anything else
        (an error, a body left unread) closes the connection.
        """
        response = self._follow_redirects(url, headers)
        try:
            if response.status == 404:
                raise NotPublished(url)
            if response.status in RETRY_STATUSES:
                raise _MirrorFailed(f"HTTP {response.status} after retries")
            if response.status not in (200, 206):
                raise TransportError(
                    f"{url} answered HTTP {response.status} {response.reason}",
                    hint="check FLASHHUB_CDN_URL and FLASHHUB_CDN_PREFIX, and access rights",
                )
            yield response
        finally:
            response.release()

    def _follow_redirects(self, url: str, headers: dict[str, str]) -> Response:
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                response = self.http.request("GET", current, headers)
            except RequestFailed as exc:
                raise _MirrorFailed(str(exc)) from None
            location = response.redirect_location()
            if not location:
                return response
            response.release()
            target = urllib.parse.urljoin(current, location)
            if urllib.parse.urlsplit(target).scheme != urllib.parse.urlsplit(url).scheme:
                raise TransportError(
                    f"{url} redirected to {target}, another scheme; refused",
                    hint="fix the CDN's redirect, or point FLASHHUB_CDN_URL at the final URL",
                )
            current = target
        raise _MirrorFailed(f"more than {MAX_REDIRECTS} redirects")


def parallel_downloads(files: int, round_trip: float) -> int:
    """Threads to download ``files`` files: enough to hide a ``round_trip`` (seconds)."""
    if math.isinf(round_trip):  # nothing measured yet: assume a distant CDN
        wanted = MAX_PARALLEL_FILES
    else:
        wanted = 1 + math.ceil(round_trip / CPU_SECONDS_PER_FILE)
    return max(1, min(files, MAX_PARALLEL_FILES, max(MIN_PARALLEL_FILES, wanted)))


def _body(response: Response) -> Iterator[bytes]:
    """The body as it arrives: ``read1`` hands over what the socket has (up to 1 MiB),
    so a broken transfer keeps every byte received and resumes exactly there."""
    while chunk := response.read1(CHUNK_SIZE):
        yield chunk


def _resumes_at(response: Response, offset: int) -> bool:
    """Whether a response to ``Range: bytes=<offset>-`` really starts at ``offset``."""
    content_range = response.headers.get("Content-Range", "")
    start = content_range.removeprefix("bytes ").split("-")[0]
    return response.status == 206 and start == str(offset)


def _file_url_path(url: str) -> Path:
    return Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))


def _copy_file(url: str, writer: HashingWriter) -> None:
    try:
        with open(_file_url_path(url), "rb", buffering=0) as source:
            while chunk := source.read(CHUNK_SIZE):
                writer.write(chunk)
    except FileNotFoundError:
        raise NotPublished(url) from None
    except OSError as exc:
        raise _MirrorFailed(str(exc)) from None
