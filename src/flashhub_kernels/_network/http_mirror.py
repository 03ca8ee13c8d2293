"""An ``http(s)://`` mirror: streaming GETs on a shared ``requests`` session.

Per file, beyond what the session's retry policy does (connection errors and 429/5xx,
with backoff and ``Retry-After``):

- a body cut off mid-way (dropped connection, read timeout, short body) resumes with
  ``Range`` from the bytes already written; a ``200`` answer, or a ``206`` at another
  offset, restarts the file from zero. A ``206`` holding only part of the rest (its
  ``Content-Range`` ends before the file does: an edge that caps the size of a range)
  is kept, and the rest asked for after it; a total of ``*`` is the size the manifest
  states (without one, the part is taken for the rest, and the digest judges).
  :class:`~.stall_guard.Resumes` counts the tries, and says where a server that
  ignores ``Range`` made each start over;
- a ``Content-Length`` that cannot complete the file (not the rest of the size the
  manifest states, or past ``FLASHHUB_MAX_FILE_BYTES``) is refused before the body
  is read, and a body is never written past that size (``WrongSize``);
- a transfer slower than 1 KiB/s on average over ``FLASHHUB_READ_TIMEOUT`` seconds is
  cut (``stall_guard``: a server trickling bytes never trips a read timeout), and the
  mirror counts as failed for the file; headers that trickle are cut at their deadline
  (``header_deadline``);
- 401, 403 and 404 for a file a manifest lists mean this mirror is incomplete or
  closed to us: the next mirror is tried. A 401 or 403 (for a document too) is
  :class:`AccessDenied`, so the error can point at the credentials;
- bytes arrive decoded when the object is stored with ``Content-Encoding`` (gzip,
  deflate), so the digest is checked over what lands on disk. Such a body cannot be
  resumed byte-exactly, so a break restarts it. A body in an encoding urllib3 cannot
  decode here (``br`` or ``zstd`` without their packages) fails the mirror, named,
  rather than reaching the digest check or the JSON parser still encoded.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from typing import Literal

import requests
import requests.adapters
import requests.cookies
import requests.hooks
from urllib3.exceptions import ConnectTimeoutError

from .._config import CDN_URL_HINT, Config, config_error
from .._models.names import is_digits
from .._utils.hashing import CHUNK_SIZE
from .._utils.logs import logger
from .._utils.urls import redact_queries, redact_text, redact_url, split_url
from .answers import listed_404_hint, not_modified, other_host_hint, redirect_loop, web_page
from .certificates import untrusted_certificate_hint
from .hashing import HashingWriter, WrongSize
from .mirrors import (
    AccessDenied,
    Mirror,
    MirrorFailed,
    NotPublished,
    ProxyFailed,
    Unreachable,
    UntrustedCertificate,
    stop_if,
    stopped_by,
)
from .session import (
    BODY_ERRORS,
    RETRY_STATUSES,
    DowngradeRefused,
    netrc_problem,
    proxy_of,
    route_for,
    unwaited_retry_after,
)
from .stall_guard import MAX_RESUMES, Resumes, StallGuard, decoding_read

_DENIED_STATUSES = frozenset({401, 403})
_NO_HEAD = frozenset({405, 501})  # Method Not Allowed, Not Implemented: for every file
_OBJECT_AT = re.compile(r"<[^<>]* object at 0x[0-9a-f]+>: ")
# A URL that requests' prepare_url would leave as it is: an http(s) URL of printable
# ASCII with nothing to quote or encode (the mirror's base URL was prepared once, and the
# paths below it are quoted where they are made); any other is prepared in full. The
# path is runs of safe characters between escapes: matched a run at a time, not a
# character at a time through an alternation (23 k instructions a URL, against 5 k).
_SAFE = "[A-Za-z0-9._~!$&'()*+,;=:@/-]*"
_PLAIN_URL = re.compile(rf"https?://[a-z0-9.:\[\]-]+(?:/{_SAFE}(?:%[0-9A-Fa-f]{{2}}{_SAFE})*)?")
_CONTENT_RANGE = re.compile(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19}|\*)")  # *: total unknown
# How one GET of a file ended: the file is complete; the body broke or ended short of
# the file after continuing it where it stood (a 206 at the offset); or any other break
# or restart.
_Outcome = Literal["done", "resumed", "failed"]


class HttpMirror(Mirror):
    """A CDN mirror reached over http(s), on the session shared by the run's mirrors."""

    def __init__(self, base_url: str, config: Config, session: requests.Session) -> None:
        self._route = route_for(base_url)
        super().__init__(self._route.base_url, config.prefix)
        self._session = session
        self._timeout = (config.connect_timeout, config.read_timeout)
        self._stall_window = config.read_timeout
        # What Session.get would work out for every request (the session's headers and
        # hooks merged in, the credentials encoded), worked out once: each GET copies it
        # and sets its URL. That merging was 15% of the CPU of a 10 KiB GET.
        try:
            self._template = session.prepare_request(
                requests.Request("GET", self.base_url, auth=self._route.auth)
            )
        except requests.exceptions.InvalidURL as exc:  # a host IDNA cannot encode, a blank
            raise config_error(
                f"CDN URL {redact_url(base_url)!r} has a host requests cannot use: "
                + redact_text(str(exc), self._route.secrets),
                hint=CDN_URL_HINT,
            ) from None
        # Until the mirror answers with a redirect, GETs go straight to the session's
        # transport adapter: Session.send would look for redirects and cookies to follow
        # and dispatch the response hooks, which only a redirect needs (10% of the CPU of
        # a 10 KiB GET). After the first redirect, every GET takes the session's way.
        self._adapter: requests.adapters.BaseAdapter | None = session.get_adapter(self.base_url)
        self._verify = True if session.verify is None else session.verify
        self._answers_head = True  # until it says it does not (501, 405)

    @property
    def via(self) -> str | None:
        return self._route.proxy

    def read_document(self, relpath: str, limit: int) -> bytes:
        url = self.url(relpath)
        for _attempt in range(MAX_RESUMES + 1):
            with self._get(url) as response:
                if response.status_code == 404:
                    raise NotPublished(url)
                self._check_status(response)
                try:
                    return self._read_body(response, limit)
                except BODY_ERRORS:
                    continue  # the body broke off: read it again
        raise MirrorFailed(f"the connection broke {MAX_RESUMES + 1} times in the body")

    def download(self, relpath: str, writer: HashingWriter, cancelled: threading.Event) -> None:
        url = self.url(relpath)
        # The loop ends: a try not counted added bytes at the stall guard's rate or
        # better, and the writer takes no more than the file's size or the cap.
        resumes = Resumes()
        while resumes.left():
            offset, started = writer.size, time.monotonic()
            with stopped_by(cancelled):
                outcome = self._attempt(url, writer, cancelled, resumes)
            if outcome == "done":
                return
            elapsed = time.monotonic() - started
            moved = writer.size - offset
            next_try = resumes.ended(failed=outcome == "failed", nbytes=moved, seconds=elapsed)
            logger.info("%s stopped at byte %d; %s", url, writer.size, next_try)
        raise resumes.failure()

    def close(self) -> None:
        self._session.close()  # shared: closing it twice is harmless

    def size(self, relpath: str) -> int | None:
        if not self._answers_head:
            return None
        try:
            response = self._session.head(
                self.url(relpath),
                timeout=self._timeout,
                auth=self._route.auth,
                proxies=self._route.proxies,
                allow_redirects=True,
            )
        except (requests.RequestException, ValueError):
            return None
        if response.status_code in _NO_HEAD:  # a static host may not do HEAD at all
            self._answers_head = False
        length = _content_length(response)
        return length if response.status_code == 200 else None

    # -- one request ------------------------------------------------------------------

    def _attempt(
        self, url: str, writer: HashingWriter, cancelled: threading.Event, resumes: Resumes
    ) -> _Outcome:
        """Ask for the rest of the file (all of it when nothing is written) and stream it.

        Once ``cancelled`` is set, it neither asks nor touches the file again, though it
        was waiting for an answer or a read when the run stopped: the file may then be
        kept for a later load, or be that load's own.
        """
        offset = writer.size
        stop_if(cancelled)
        with self._get(url, {"Range": f"bytes={offset}-"} if offset else {}) as response:
            stop_if(cancelled)
            status = response.status_code
            if status == 416 and offset:  # the kept part is longer than the file
                writer.reset()
                return "failed"
            if status == 404:
                raise MirrorFailed(
                    f"HTTP 404 {response.reason} for a file its manifest lists "
                    "(a mirror not fully synced)",
                    hint=listed_404_hint("the kernel's version"),
                )
            self._check_status(response, " for a file its manifest lists")
            if offset:
                resumes.answered(url, status)
            resumed = bool(offset) and _continues_at(response, offset)
            if offset and not resumed:
                writer.reset()  # a full body, or the wrong part: start over
                if status != 200:
                    return "failed"
            part = _short_part(response, writer.expected_size) if resumed else None
            end = _check_length(response, writer, part)
            try:
                self._stream(response, writer, cancelled, end)
                return "done" if part is None else "resumed"
            except BODY_ERRORS:
                stop_if(cancelled)
                if _encoded(response):
                    writer.reset()  # decoded offsets are not the stored object's
                return "resumed" if resumed else "failed"

    def _get(self, url: str, headers: dict[str, str] | None = None) -> requests.Response:
        """Send a GET whose body the caller streams; connection problems are MirrorFailed."""
        request = self._template.copy()
        if _PLAIN_URL.fullmatch(url):
            request.url = url  # what prepare_url would make of it, at a tenth of the cost
        else:
            request.prepare_url(url, None)
        if headers:
            request.headers.update(headers)
        try:
            return self._send(request)
        except requests.exceptions.TooManyRedirects as exc:
            last = exc.response
            hops = [url] if last is None else [*(r.url for r in last.history), last.url]
            raise redirect_loop(hops) from None
        except DowngradeRefused as exc:
            raise MirrorFailed(str(exc)) from None
        except requests.exceptions.ProxyError as exc:
            hop = exc.request.url if exc.request is not None and exc.request.url else url
            raise ProxyFailed(f"the proxy {proxy_of(hop)} failed: {self._reason(exc)}") from None
        except requests.exceptions.SSLError as exc:
            failed = f"TLS failed: {self._reason(exc)}"
            hint = untrusted_certificate_hint(_innermost(exc), self._verify)
            if hint is not None:
                raise UntrustedCertificate(failed, hint=hint) from None
            raise MirrorFailed(failed) from None
        except (requests.RequestException, ValueError) as exc:
            # ValueError: a malformed redirect (a bad port, a non-ASCII Location).
            if isinstance(_innermost(exc), ConnectTimeoutError):  # refused ones too
                raise Unreachable(self._reason(exc)) from None
            raise MirrorFailed(self._reason(exc)) from None

    def _send(self, request: requests.PreparedRequest) -> requests.Response:
        """The response to ``request``, its body not yet read, redirects followed."""
        if self._adapter is None:
            return self._session.send(
                request, stream=True, timeout=self._timeout, proxies=self._route.proxies
            )
        response = self._adapter.send(
            request,
            stream=True,
            timeout=self._timeout,
            verify=self._verify,
            proxies=self._route.proxies,
        )
        if not response.is_redirect:
            return response
        self._adapter = None  # this mirror redirects: the session sends its GETs from now on
        return self._follow(request, response)

    def _follow(
        self, request: requests.PreparedRequest, response: requests.Response
    ) -> requests.Response:
        """What ``Session.send`` does with the redirect ``response`` to ``request``: the
        response hooks (the refusal of https -> http), the cookies, then the redirects."""
        # requests' stubs leave these two untyped, and type verify= as a bool (a CA bundle
        # path is documented too).
        response = requests.hooks.dispatch_hook(  # type: ignore[no-untyped-call]
            "response", request.hooks, response
        )
        requests.cookies.extract_cookies_to_jar(  # type: ignore[no-untyped-call]
            self._session.cookies, request, response.raw
        )
        hops = self._session.resolve_redirects(
            response,
            request,
            stream=True,
            timeout=self._timeout,
            verify=self._verify,  # type: ignore[arg-type]
            proxies=self._route.proxies,
        )
        history: list[requests.Response] = [response, *hops]
        final = history.pop()
        final.history = history
        return final

    def _check_status(self, response: requests.Response, what: str = "") -> None:
        status = response.status_code
        if status in (200, 206):
            _check_encoding(response)
            return
        if status in _DENIED_STATUSES:
            raise self._denied(response, f"HTTP {status} {response.reason}{what}")
        if status == 304:
            raise not_modified(response.reason)
        failed = f"HTTP {status} {response.reason}"
        if status not in RETRY_STATUSES:
            raise MirrorFailed(failed)
        raise unwaited_retry_after(response, failed) or MirrorFailed(f"{failed} after retries")

    def _denied(self, response: requests.Response, failed: str) -> AccessDenied:
        """The refusal ``response`` is (``failed`` says it). After redirects it names the
        URL that answered; where that is another origin, which gets only its own netrc
        entry (never the URL's credentials), the hint says so."""
        # requests' stubs leave should_strip_auth untyped.
        elsewhere: bool = self._session.should_strip_auth(  # type: ignore[no-untyped-call]
            self.base_url, response.url
        )
        if response.history:
            failed += f" from {redact_queries(redact_url(response.url))}, redirected there"
        # The netrc file matters only where the URL's credentials are not sent.
        unread = elsewhere or self._route.auth is None
        problem = netrc_problem(response.url) if unread else None
        host = split_url(response.url).hostname if elsewhere else None
        return AccessDenied(failed, netrc_problem=problem, hint=host and other_host_hint(host))

    def _read_body(self, response: requests.Response, limit: int) -> bytes:
        """The body of ``response``, read no further than the chunk that takes it past
        ``limit`` bytes: the caller reports the size."""
        body = bytearray()
        guard = StallGuard(self._stall_window, time.monotonic())
        read1 = _reader(response, guard)
        while chunk := read1(CHUNK_SIZE):
            guard.check(len(chunk))
            body += chunk
            if len(body) > limit:
                break
        return bytes(body)

    def _stream(
        self,
        response: requests.Response,
        writer: HashingWriter,
        cancelled: threading.Event,
        end: int | None,
    ) -> None:
        """Write the body to ``writer``; with ``end``, the size the file has once the
        announced length is in, no read is made past it (urllib3 hands the connection
        back to the pool with the last byte, and a read to learn that the body has
        ended would cost as much as a small file's other reads)."""
        # read1 hands over what the socket has (up to CHUNK_SIZE), so a broken transfer
        # keeps every byte received and resumes exactly there.
        guard = StallGuard(self._stall_window, time.monotonic())
        read1 = _reader(response, guard)
        while (end is None or writer.size < end) and (chunk := read1(CHUNK_SIZE)):
            stop_if(cancelled)
            writer.write(chunk)
            guard.check(len(chunk))

    def _reason(self, exc: BaseException) -> str:
        """The innermost cause of a requests error, short, with no credentials."""
        text = _OBJECT_AT.sub("", _message_of(_innermost(exc)))
        return redact_text(text, self._route.secrets)


def _message_of(reason: BaseException) -> str:
    """What ``reason`` says; of urllib3's connect timeout, whose arguments are the
    connection (shown with its memory address) and the message, the message alone."""
    if isinstance(reason, ConnectTimeoutError) and len(reason.args) == 2:
        return str(reason.args[1])
    return str(reason) or type(reason).__name__


def _innermost(exc: BaseException) -> BaseException:
    """The exception a requests error wraps, through urllib3's (``MaxRetryError``, and
    ``ProxyError``, whose arguments are a message and the error it wraps)."""
    reason = exc
    while reason.args:
        inner = (
            getattr(reason, "original_error", None)
            or getattr(reason.args[0], "reason", None)
            or reason.args[0]
        )
        if not isinstance(inner, Exception) or inner is reason:
            break
        reason = inner
    return reason


def _reader(response: requests.Response, guard: StallGuard) -> Callable[[int], bytes]:
    """``read1`` of the body: decoding it where it is encoded, each read then within the
    guard's window (see :func:`~.stall_guard.decoding_read`)."""
    if _encoded(response):
        return decoding_read(response.raw, guard)
    return functools.partial(response.raw.read1, decode_content=False)


def _encoded(response: requests.Response) -> bool:
    """Whether the body is sent encoded (``Content-Encoding`` other than ``identity``).

    Only then are its bytes read through urllib3's decoder: with nothing to decode, the
    decoder's buffer would copy every read that is not exactly ``CHUNK_SIZE`` long.
    """
    return response.headers.get("Content-Encoding", "identity") != "identity"


def _check_encoding(response: requests.Response) -> None:
    """Refuse a body whose ``Content-Encoding`` urllib3 would not decode: it passes
    through an encoding it has no decoder for (an object stored compressed with brotli,
    say), which a digest or a JSON parser would then blame on the CDN's content; and it
    decodes a list item by item, taking an item it has no decoder for as deflate
    (``identity, gzip`` from an edge that re-encodes). A value whose every item is empty
    or ``identity`` names no encoding: the body is taken as it is."""
    value = response.headers.get("Content-Encoding", "identity")
    items = [e.strip().lower() for e in value.split(",")]
    decoders = response.raw.CONTENT_DECODERS
    if all(e in ("", "identity") for e in items) or value.lower() in decoders:
        return
    if "," in value and all(e in decoders for e in items):
        return  # urllib3 undoes each in turn
    raise MirrorFailed(
        f"the body came with Content-Encoding: {value}, which cannot be decoded here "
        "(the request asked for identity); serve the files as they are, or gzip-encoded"
    )


def _content_length(response: requests.Response) -> int | None:
    """The ``Content-Length`` header as a number, or ``None`` when absent or unreadable."""
    length = response.headers.get("Content-Length", "")
    # Past 19 digits it is no size a file has; int() would also refuse thousands of them.
    if is_digits(length) and len(length) <= 19:
        return int(length)
    return None


def _check_length(
    response: requests.Response, writer: HashingWriter, part: tuple[int, int] | None
) -> int | None:
    """Refuse, before reading it, a body whose announced length cannot complete the file
    (a web page, an edge's or a portal's, named so); return the file's size once the body
    is in, when the answer announces its length.

    For a ``part`` of the rest (see :func:`_short_part`), the file's total size is
    checked as the whole rest's length would be, and the part's end is returned."""
    if part is not None:
        end, total = part
        writer.announce(total - writer.size)
        return end
    if _encoded(response):
        return None  # the length of the encoded bytes, not of the file
    length = _content_length(response)
    if length is None:
        return None
    try:
        writer.announce(length)
    except WrongSize as exc:
        media_type = response.headers.get("Content-Type", "").partition(";")[0]
        if writer.expected_size is not None and media_type.strip().lower() == "text/html":
            raise web_page(str(exc)) from None
        raise
    return writer.size + length


def _short_part(response: requests.Response, size: int | None) -> tuple[int, int] | None:
    """For a ``206`` continuing the file, whose ``Content-Range: bytes N-M/TOTAL`` ends
    before the file does (and agrees with its ``Content-Length``, if any): the size the
    file has once the part is in (M + 1), and TOTAL. ``None`` for the whole rest, and
    for a range that says otherwise: the answer is then checked as the whole rest.

    A TOTAL of ``*`` (unknown to the server) is the file's ``size``, where the manifest
    states it; without one, the part is taken for the whole rest, and the digest judges."""
    match = _CONTENT_RANGE.fullmatch(response.headers.get("Content-Range", ""))
    if match is None:
        return None
    start, last = int(match[1]), int(match[2])
    total = size if match[3] == "*" else int(match[3])
    length = _content_length(response)
    if total is None or not start <= last < total - 1 or length not in (None, last + 1 - start):
        return None
    return last + 1, total


def _continues_at(response: requests.Response, offset: int) -> bool:
    """Whether a response to ``Range: bytes=<offset>-`` is the rest of the same bytes."""
    content_range = response.headers.get("Content-Range", "")
    start = content_range.removeprefix("bytes ").split("-")[0]
    encoded = _encoded(response)
    return response.status_code == 206 and start == str(offset) and not encoded
