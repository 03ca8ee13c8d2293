"""Fetching from the CDN's mirrors: failover, parallel downloads, verification, Ctrl-C.

The cache and the import hook import this module only on the cold path, when something
must actually be downloaded. The mirrors themselves (``file://``, ``http(s)://``, or an
object store such as ``s3://``) live in :mod:`.mirrors`, :mod:`.http_mirror` and
:mod:`.fsspec_mirror`; this module decides which one to ask.

Failure policy, per path:
- a mirror that cannot serve it (:class:`~.mirrors.MirrorFailed`: connection errors,
  5xx after retries, 401/403/404 for a listed file, a stalled transfer) hands over to
  the next mirror, which continues a file from the bytes already received; a mirror
  that failed goes to the back of the list for the rest of the run; one that cannot
  be connected to is tried once while others remain, and asked last by the process
  for a while (:mod:`.reachability`);
- ``NotPublished`` (404 for a document) is an answer, and is given at once, unless
  another document lists it (a listed variant's manifest), or it is the ``.sig`` of a
  document a mirror served where a trusted key must vouch for it: then the next mirror
  is asked;
- bytes that do not hash to the manifest's digest, or a body longer than the size the
  manifest states or announced with another length (nothing past that size is
  written), are that mirror failing for the file: the bytes are discarded, the mirror
  goes to the back of the list, and the next mirror starts the file from scratch (the
  only mirror is asked once more: a proxy may have mangled them). A file no mirror
  serves intact is an :class:`IntegrityError` naming each mirror and its answer;
- without a size in the manifest, a file may not grow past ``FLASHHUB_MAX_FILE_BYTES``
  (a server sending an endless body cannot fill the disk): the mirror that tries
  counts as failed for the file, and the file starts over on the next.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from queue import Empty, SimpleQueue
from typing import Any, TypeVar

from .._config import Config
from .._models.record import Record
from .._utils.callers import warn_at_caller
from .._utils.logs import logger
from .._utils.threads import joined, soon, started
from .._utils.urls import is_loopback, redact_url
from ..errors import IntegrityError, LockMismatchError, ManifestError, RollbackError, TransportError
from .answers import Answers
from .hashing import HashingWriter, WrongSize
from .mirrors import (
    BadBytes,
    DownloadCancelled,
    FileMirror,
    Mirror,
    MirrorFailed,
    NotPublished,
    OverCap,
)
from .progress import NO_PROGRESS, Progress
from .reachability import MirrorPlan, reachable_first

T = TypeVar("T")

# Parallel downloads hide round trips: while one thread waits for the CDN, another
# works. With no round trip to hide (loopback, a mirror next door) many threads only
# contend for the GIL: on 2 cores, 8 threads fetched 200 small files from loopback about
# 40% slower than 2 did. So the pool is sized by how long the documents fetched just
# before waited for their answers: the wall time of the fetch less the CPU time the
# fetching thread spent on it, which on loopback is the server's time alone. A thread
# is added for each file's CPU time that fits in that wait (Little's law: 1 + wait / CPU
# time per file), within these bounds. At least 2: creating and writing a file waits on
# the disk, and the answer on the server, even on loopback, and a second thread fills
# those waits (200 small files from loopback, on a disk where a new file costs 150 us:
# 2 threads 228-241 ms against 1 thread's 258-281, for 10% more CPU time); a large
# file's transfer keeps one busy, and the small files go beside it. At the most 16: a
# CDN 20 ms away answers 200 small files in 13 rounds instead of the 25 that 8
# connections (a browser's or curl --parallel's usual count) take.
MIN_PARALLEL_FILES = 2
MAX_PARALLEL_FILES = 16
# The pool keeps a connection for each download thread, the documents' thread and the
# newer-version check's, so that none is opened only to be discarded.
POOL_SIZE = MAX_PARALLEL_FILES + 2
CPU_SECONDS_PER_FILE = 0.0005  # request, response, create, write, hash: a small file
# After Ctrl-C (or another exception that ends the wait), how long the workers get to
# stop at their next chunk before it is raised anyway (a worker blocked in a read is a
# daemon thread).
STOP_GRACE_SECONDS = 1.0
_warned_hosts: set[str] = set()
_warn_lock = threading.Lock()


class DownloadJob(Record):
    """One file of a variant to download."""

    relpath: str  # relative to <mirror>/<prefix>/
    dest: Path
    digest: bytes  # the raw sha256 the manifest lists
    size: int | None  # the size the manifest states, when it does


def warn_if_insecure(base_url: str) -> None:
    """Warn once per host about plain http to a host other than this machine.

    The warning points at the line that called into the library (a ``get_kernel(...)``
    call, an ``import flashhub...`` statement), wherever in the library it is raised.
    """
    parts = urllib.parse.urlsplit(base_url)
    host = parts.hostname or ""
    if parts.scheme != "http" or is_loopback(host):
        return
    with _warn_lock:
        if host in _warned_hosts:
            return
        _warned_hosts.add(host)
    warn_at_caller(
        f"fetching kernels over plain http from {host}: metadata.json carries the digests "
        "every file is checked against, so anyone on the path can swap kernels. Use https, "
        "or pin the kernel in a lock file."
    )


def open_mirrors(config: Config, *, pool_size: int) -> list[Mirror]:
    """The configured mirrors, in order; the ``http(s)://`` ones share one session
    whose pool keeps ``pool_size`` connections per host."""
    web = [url for url in config.cdn_urls if url.startswith(("http://", "https://"))]
    if web:
        # Imports requests (tens of milliseconds): only a run that goes to the network pays.
        from .http_mirror import HttpMirror
        from .session import new_session

        session = new_session(pool_size, (config.connect_timeout, config.read_timeout))
    mirrors: list[Mirror] = []
    for url in config.cdn_urls:
        if url.startswith("file://"):
            mirrors.append(FileMirror(url, config.prefix))
        elif url in web:
            mirrors.append(HttpMirror(url, config, session))
        else:  # an object store (s3://...): fsspec, imported only for it
            from .fsspec_mirror import FsspecMirror

            mirrors.append(FsspecMirror(url, config))
    return mirrors


class Fetcher:
    """Fetches paths relative to ``<mirror>/<prefix>/`` from the first mirror that answers.

    One fetcher is one download run: its HTTP session (when a mirror is remote) lives
    until :meth:`close`, and no fetch :meth:`soon` started outlives the run (the read for
    :class:`~.versions.NewerVersionNotice` is not one: no load waits for it).
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        for base in config.cdn_urls:
            warn_if_insecure(base)
        self._mirrors = reachable_first(open_mirrors(config, pool_size=POOL_SIZE))
        if config.trusted_keys:  # before the run's threads, which check signatures
            from .._signing.verification import prepare_checks

            prepare_checks()
        self._mirrors_lock = threading.Lock()
        self._wait = math.inf  # the shortest wait for a document's answer so far, in seconds
        self._sent_bad_bytes: set[Mirror] = set()  # mirrors that sent a file's bytes wrong
        self._started: list[Future[Any]] = []  # by soon(), for close() to wait for
        self.mirror_failures = 0  # how often a mirror failed and went to the back so far

    def soon(self, call: Callable[[], T]) -> Future[T]:
        """Start ``call()``, which fetches, on a thread of its own and return its future
        (:func:`~.._utils.threads.soon`); :meth:`close` waits for it to end."""
        future = soon(call)
        self._started.append(future)
        return future

    def close(self, *, wait: bool = True) -> None:
        """Close the mirrors, with ``wait`` once every fetch :meth:`soon` started has
        ended (whether or not anyone took its answer): a run's requests end with it."""
        while wait and self._started:
            self._started.pop().exception()  # waits; the error, if any, was no one's answer
        for mirror in self._mirrors:
            mirror.close()

    def get_bytes(self, relpath: str, *, limit: int) -> bytes:
        """Fetch a small document whole; raise :class:`~.mirrors.NotPublished` when it does
        not exist."""
        return self.get_document(relpath, limit=limit, parse=bytes)[0]

    def get_document(
        self, relpath: str, *, limit: int, parse: Callable[[bytes], T], listed: bool = False
    ) -> tuple[bytes, T]:
        """Fetch a small document whole and ``parse`` it; raise
        :class:`~.mirrors.NotPublished` when it does not exist.

        A mirror whose answer ``parse`` refuses failed for the document, and the next
        mirror is asked: :class:`ManifestError` (a captive portal's web page, an error
        page served with 200), :class:`RollbackError` (an edge serving an older copy) or
        :class:`LockMismatchError` (other content than a lock pins).
        So does a mirror without a ``listed`` document (one a synced mirror has: another
        document names it, or it is the due ``.sig`` of one a mirror served): that mirror
        is not fully synced. ``NotPublished`` comes then only when none has it.
        """
        start, cpu = time.perf_counter(), time.thread_time()
        missing: list[NotPublished] = []
        asked: list[Mirror] = []

        def fetch(mirror: Mirror) -> tuple[bytes, T]:
            asked.append(mirror)
            try:
                data = mirror.read_document(relpath, limit)
            except NotPublished as exc:
                if not listed:
                    raise
                missing.append(exc)
                raise MirrorFailed(f"{redact_url(str(exc))} does not exist") from None
            return data, parse(data)

        try:
            answer = self._from_mirrors(relpath, fetch)
        except TransportError:
            if missing and len(missing) == len(asked):
                raise missing[0] from None
            raise
        cpu = time.thread_time() - cpu
        self._wait = min(self._wait, max(0.0, time.perf_counter() - start - cpu))
        return answer

    def size(self, relpath: str) -> int | None:
        """The size of a published file, from the first mirror that states it.

        ``None`` when no mirror does: HEAD is optional on a static host. Only
        ``flashhub info`` asks.
        """
        for mirror in self._healthiest_first():
            size = mirror.size(relpath)
            if size is not None:
                return size
        return None

    def download(
        self,
        relpath: str,
        dest: Path,
        digest: bytes,
        progress: Progress = NO_PROGRESS,
        cancelled: threading.Event | None = None,
        *,
        size: int | None = None,
    ) -> int:
        """Fetch ``relpath`` into ``dest`` and verify it; return its size.

        A partial file already at ``dest`` (kept from an interrupted download) is
        continued. Bytes that fail the digest are deleted, not kept. ``size``, the
        manifest's size of the file, bounds the download; without it,
        ``config.max_file_bytes`` does. Setting ``cancelled`` stops the transfer at its
        next chunk.
        """
        cancelled = cancelled or threading.Event()
        writer = HashingWriter(dest, progress, expected_size=size, limit=self.config.max_file_bytes)
        try:
            if writer.size and writer.hashes_to(digest):
                return writer.size  # the kept part was the whole file
            if writer.limit is not None and writer.size >= writer.limit:
                writer.reset()  # as long as the file may be, and not it: start over
            if writer.size:
                logger.info(
                    "%s: continuing from byte %d, kept by an interrupted download",
                    relpath,
                    writer.size,
                )
            self._download_verified(relpath, writer, digest, cancelled)
        except IntegrityError:
            writer.close()
            dest.unlink(missing_ok=True)
            raise
        finally:
            writer.close()
        return writer.size

    def _download_verified(
        self, relpath: str, writer: HashingWriter, digest: bytes, cancelled: threading.Event
    ) -> None:
        """Fill ``writer`` with the bytes that hash to ``digest``, asking mirror after mirror.

        A mirror that fails hands the bytes it sent on to the next one, which continues
        them; one that sent bad bytes (a wrong digest or size) is the mirror failing for
        the file too, but its bytes are discarded first. When the bytes that failed were
        not all that mirror's (kept from an earlier run, or continued from another
        mirror), the digest cannot tell who is at fault: the same mirror is asked once
        more, from scratch, before the next one. So is the only mirror: a proxy may have
        mangled the bytes.
        """
        mirrors = self._healthiest_first()
        plan = MirrorPlan(mirrors, Answers(relpath))
        asked_afresh: set[Mirror] = set()
        while plan:
            mirror = plan.next()
            continued = writer.size > 0
            try:
                with plan.asking(mirror):
                    self._fetch_file(mirror, relpath, writer, digest, cancelled)
                return
            except MirrorFailed as exc:
                plan.failed(mirror, exc)
                if mirror in self._sent_bad_bytes:  # its bytes of this file are suspect too
                    writer.reset()
            except BadBytes as exc:
                writer.reset()
                plan.answers.bad_bytes(mirror, exc)
                if (continued or len(mirrors) == 1) and mirror not in asked_afresh:
                    asked_afresh.add(mirror)
                    plan.again(mirror)
                    continue
                if not continued:
                    self._sent_bad_bytes.add(mirror)
            self._demote(mirror)
        raise plan.answers.error()

    def _fetch_file(
        self,
        mirror: Mirror,
        relpath: str,
        writer: HashingWriter,
        digest: bytes,
        cancelled: threading.Event,
    ) -> None:
        """Continue the file from ``mirror`` and check its digest; :class:`BadBytes` if the
        bytes cannot be the file."""
        start = time.perf_counter()
        try:
            mirror.download(relpath, writer, cancelled)
        except WrongSize as exc:
            if writer.expected_size is not None:
                raise BadBytes(str(exc)) from None
            writer.reset()  # past the cap on a file of unknown size: the mirror failed
            raise OverCap(str(exc)) from None
        if not writer.hashes_to(digest):
            raise BadBytes(
                f"sha256 of the {writer.size} bytes received does not match metadata.json"
            )
        if logger.isEnabledFor(logging.INFO):  # the label is worked out anew each time
            logger.info(
                "downloaded %s from %s: %d bytes in %.2f s, sha256 verified",
                relpath,
                mirror.label,
                writer.size,
                time.perf_counter() - start,
            )

    def download_many(
        self,
        jobs: Sequence[DownloadJob],
        progress: Progress = NO_PROGRESS,
        on_done: Callable[[DownloadJob], None] = lambda job: None,
    ) -> int:
        """Download several files concurrently; return the total bytes.

        A few workers each take the next job until none is left, and call ``on_done``
        with each job whose file is complete and verified. The first error stops the
        others at their next chunk, and is raised. Ctrl-C, or another exception raised
        while the workers are waited for (a signal handler's: a timeout), does the same
        within about a second; the partial files stay where they are for the caller to
        keep.
        """
        if len(jobs) == 1:
            size = self._download_job(jobs[0], progress)
            on_done(jobs[0])
            return size
        queue = _largest_first(jobs)
        totals: list[int] = []
        errors: list[BaseException] = []
        cancelled = threading.Event()

        def work() -> None:
            total = 0
            try:
                while not cancelled.is_set():
                    job = queue.get_nowait()
                    total += self._download_job(job, progress, cancelled)
                    on_done(job)
            except Empty:
                pass
            except DownloadCancelled:
                return
            except BaseException as exc:
                errors.append(exc)
                cancelled.set()
                return
            totals.append(total)

        _run_workers(work, self._worker_count(len(jobs)), cancelled)
        if errors:
            raise errors[0]
        return sum(totals)

    def _worker_count(self, files: int) -> int:
        count = parallel_downloads(files, self._wait)
        logger.info(
            "%d files, %d at once (the documents waited %.2f ms for their answers)",
            files,
            count,
            self._wait * 1e3,
        )
        return count

    def _download_job(
        self, job: DownloadJob, progress: Progress, cancelled: threading.Event | None = None
    ) -> int:
        return self.download(job.relpath, job.dest, job.digest, progress, cancelled, size=job.size)

    # -- mirrors -------------------------------------------------------------------

    def _healthiest_first(self) -> list[Mirror]:
        with self._mirrors_lock:
            return list(self._mirrors)

    def _demote(self, mirror: Mirror) -> None:
        with self._mirrors_lock:
            self.mirror_failures += 1
            if mirror in self._mirrors:
                self._mirrors.remove(mirror)
                self._mirrors.append(mirror)

    def _from_mirrors(self, relpath: str, fetch: Callable[[Mirror], T]) -> T:
        plan = MirrorPlan(self._healthiest_first(), Answers(relpath))
        while plan:
            mirror = plan.next()
            try:
                with plan.asking(mirror):
                    return fetch(mirror)
            except MirrorFailed as exc:
                plan.failed(mirror, exc)
            except (ManifestError, RollbackError, LockMismatchError) as exc:
                plan.answers.refused(mirror, exc)
            self._demote(mirror)
        raise plan.answers.error()


@contextmanager
def remote(config: Config) -> Iterator[Fetcher]:
    """A :class:`Fetcher` for the configured mirrors, closed on exit: once its requests
    have ended, unless an interrupt (Ctrl-C) ends the block."""
    fetcher = Fetcher(config)
    try:
        yield fetcher
    except BaseException as exc:
        fetcher.close(wait=isinstance(exc, Exception))
        raise
    fetcher.close()


def _largest_first(jobs: Sequence[DownloadJob]) -> SimpleQueue[DownloadJob]:
    """The jobs queued largest first (where the manifest states sizes): the longest
    transfer starts at once, and the small files fill the other threads beside it."""
    queue: SimpleQueue[DownloadJob] = SimpleQueue()
    for job in sorted(jobs, key=lambda job: -(job.size or 0)):
        queue.put(job)
    return queue


def _run_workers(work: Callable[[], None], count: int, cancelled: threading.Event) -> None:
    """Run ``work`` in ``count`` threads and wait for them all. Ctrl-C, or another exception
    raised while waiting, sets ``cancelled`` and leaves the threads
    :data:`STOP_GRACE_SECONDS` to stop before it propagates."""
    # Daemon threads, not a ThreadPoolExecutor: after Ctrl-C a worker blocked in a
    # read must not keep the interpreter from exiting until its read times out.
    workers = [
        threading.Thread(target=work, name=f"flashhub-download-{n}", daemon=True)
        for n in range(count)
    ]
    try:
        # Inside: Ctrl-C while a worker starts must stop those already running.
        running = list(itertools.takewhile(started, workers))
        if not running:
            work()  # no thread to be had: this one does the work
        for worker in running:
            joined(worker)
    except BaseException:
        cancelled.set()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for worker in filter(threading.Thread.is_alive, workers):
            worker.join(max(0.0, deadline - time.monotonic()))
        raise


def parallel_downloads(files: int, wait: float) -> int:
    """Threads to download ``files`` files: enough to hide a ``wait`` (seconds) for each
    answer, an infinite one (nothing measured yet) taken for a distant CDN."""
    whole_files = (
        MAX_PARALLEL_FILES if math.isinf(wait) else math.floor(wait / CPU_SECONDS_PER_FILE)
    )
    wanted = 1 + whole_files
    return max(1, min(files, MAX_PARALLEL_FILES, max(MIN_PARALLEL_FILES, wanted)))
