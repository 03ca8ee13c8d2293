"""A real static CDN on 127.0.0.1 for tests: files from a directory, Range, a request log,
and faults injected per path.

A fault is a function ``(handler, body) -> None`` that answers one request itself. Faults
queued for a path are used up one request at a time; after that the file is served
normally. The helpers at the bottom build the faults the tests need.

Options of :class:`CdnServer` make the whole server behave like a particular CDN: ``tls``
(https with the given server context), ``auth`` (an ``Authorization`` value every request
must carry, else 401), ``encoding`` (``gzip`` or ``deflate``: every file is sent
compressed with ``Content-Encoding``) and ``drop_reused=N`` (the first N requests that
arrive on a connection which already carried an answer are hung up on, unanswered: an
idle timeout firing just as the client reuses a pooled connection; counted in ``dropped``)
and ``portal`` (every GET answered ``200`` with this web page, as a captive portal does).
Without ``head`` the server answers ``HEAD`` with 501, as a CDN without it does; with
``head=True`` (settable on a running server) it answers with the file's length, unlogged.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import gzip
import re
import socket
import ssl
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from flashhub_kernels._variants.probing import UNIVERSAL
from support.trees import local_variant

Fault = Callable[["CdnHandler", bytes], None]


@dataclass
class LoggedRequest:
    method: str
    path: str
    range: str | None
    status: int
    at: float = field(default_factory=time.monotonic)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def authorization(self) -> str | None:
        return self.headers.get("Authorization")


@dataclass
class CdnServer:
    """Serve ``root`` at ``url``; ``requests`` logs everything, ``faults`` injects failures."""

    root: Path
    tls: ssl.SSLContext | None = None
    auth: str | None = None
    encoding: str | None = None
    drop_reused: int = 0
    head: bool = False
    portal: bytes | None = None
    requests: list[LoggedRequest] = field(default_factory=list)
    faults: dict[str, collections.deque[Fault]] = field(default_factory=dict)
    connections: int = 0  # TCP connections accepted (TLS or not)
    dropped: int = 0  # requests on a reused connection hung up on (``drop_reused``)
    _httpd: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)  # ends faults' pauses

    @property
    def port(self) -> int:
        assert self._httpd is not None
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (``https://`` with ``tls``)."""
        return self.url_for("127.0.0.1")

    def url_for(self, host: str, userinfo: str = "") -> str:
        """The base URL with another host name (``localhost``) and/or ``user:password@``."""
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://{userinfo}{'@' if userinfo else ''}{host}:{self.port}"

    def start(self) -> CdnServer:
        server = self

        class Handler(CdnHandler):
            cdn = server

        self.stopping.clear()
        self._httpd = _Server(("127.0.0.1", 0), Handler)
        self._httpd.cdn = self
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self.stopping.set()
            self._httpd.shutdown()
            self._httpd.hang_up()
            self._httpd.server_close()
            self._httpd = None

    def inject(self, path: str, *faults: Fault) -> None:
        """Answer the next ``len(faults)`` requests for ``path`` with ``faults``."""
        with self._lock:
            self.faults.setdefault("/" + path.lstrip("/"), collections.deque()).extend(faults)

    def log(self, request: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def count_connection(self) -> None:
        with self._lock:
            self.connections += 1

    def drop_reused_now(self) -> bool:
        """Whether to hang up on this request, which came on a reused connection."""
        with self._lock:
            if self.dropped >= self.drop_reused:
                return False
            self.dropped += 1
            return True

    def gets(self, suffix: str = "", *, missed_guesses: bool = True) -> list[str]:
        """Paths of the GET requests so far (ending in ``suffix``); without
        ``missed_guesses``, less those for a build the CDN does not have (404) of the
        manifests a cold load asks for beside variants.json on the chance that it has
        them (:func:`is_guess`), for a test that counts the others."""
        with self._lock:
            return [
                r.path
                for r in self.requests
                if r.method == "GET"
                and r.path.endswith(suffix)
                and (missed_guesses or r.status != 404 or not is_guess(r.path))
            ]

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()

    def next_fault(self, path: str) -> Fault | None:
        with self._lock:
            queue = self.faults.get(path)
            return queue.popleft() if queue else None


class _Server(ThreadingHTTPServer):
    """Counts connections; with ``cdn.tls``, shakes hands in the connection's own thread
    (a client that never finishes its handshake must not block the accept loop).
    :meth:`hang_up` ends the connections still open: a client's pooled keep-alive
    connection would otherwise keep its handler thread, and both sockets, to the end of
    the process, long after the test that opened it."""

    daemon_threads = True
    request_queue_size = 64  # as a CDN, many clients' connections at once
    cdn: CdnServer

    def server_activate(self) -> None:
        self.open_connections: set[socket.socket] = set()
        super().server_activate()

    def process_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        self.cdn.count_connection()
        super().process_request(request, client_address)

    def finish_request(self, request: socket.socket, client_address: object) -> None:  # type: ignore[override]
        if self.cdn.tls is not None:
            request.settimeout(10)
            try:
                request = self.cdn.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):  # the client refused our certificate, or left
                return
            request.settimeout(None)
        with self.cdn._lock:
            self.open_connections.add(request)
        try:
            super().finish_request(request, client_address)
        finally:
            with self.cdn._lock:
                self.open_connections.discard(request)
            request.close()

    def hang_up(self) -> None:
        """End every open connection; its handler reads end-of-file and returns."""
        with self.cdn._lock:
            connections = list(self.open_connections)
        for connection in connections:
            with contextlib.suppress(OSError):  # already closed by its handler
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: object, client_address: object) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, ssl.SSLError)):
            return  # the client hung up mid-answer: the tests cause that on purpose
        super().handle_error(request, client_address)  # type: ignore[arg-type]


class CdnHandler(BaseHTTPRequestHandler):
    cdn: CdnServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle's algorithm the body would wait
    # for the client's delayed ACK of the headers, 40 ms a response on Linux.
    disable_nagle_algorithm = True
    answered = 0  # requests answered on this connection (one handler per connection)

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.answered and self.cdn.drop_reused_now():
            self.close_connection = True  # no answer at all: the client sees the socket close
            return
        self.answered += 1
        path = self.path.split("?")[0]
        if self.cdn.auth is not None and self.headers.get("Authorization") != self.cdn.auth:
            self.send_simple(401, b"unauthorized", {"WWW-Authenticate": 'Basic realm="cdn"'})
            return
        if self.cdn.portal is not None:
            self.send_simple(200, self.cdn.portal, {"Content-Type": "text/html"})
            return
        file = self.cdn.root / path.lstrip("/")
        body = file.read_bytes() if file.is_file() else None
        fault = self.cdn.next_fault(path)
        if fault is not None:
            fault(self, body or b"")
            return
        if body is None:
            self.send_simple(404, b"not found")
            return
        self.send_file(body)

    def do_HEAD(self) -> None:
        file = self.cdn.root / self.path.split("?")[0].lstrip("/")
        status = (200 if file.is_file() else 404) if self.cdn.head else 501
        self.cdn.log(LoggedRequest("HEAD", self.path, None, status, headers=dict(self.headers)))
        if not self.cdn.head:  # what BaseHTTPRequestHandler answers a method it lacks
            self.send_error(HTTPStatus.NOT_IMPLEMENTED, f"Unsupported method ({self.command!r})")
            return
        self.send_response(status)
        self.send_header("Content-Length", str(file.stat().st_size if file.is_file() else 0))
        self.end_headers()

    def do_CONNECT(self) -> None:
        """A proxy's part, played only by a fault injected for the target ``host:port``
        (a proxy that answers CONNECT badly); a CDN otherwise refuses to tunnel."""
        fault = self.cdn.next_fault("/" + self.path)
        if fault is None:
            self.send_simple(HTTPStatus.METHOD_NOT_ALLOWED, b"not a proxy")
            return
        fault(self, b"")

    def pause(self, seconds: float) -> None:
        """Wait ``seconds``, or until the server stops: a fault's wait must not keep its
        connection open after the test that injected it."""
        self.cdn.stopping.wait(seconds)

    def record(self, status: int) -> None:
        self.cdn.log(
            LoggedRequest(
                self.command,
                self.path,
                self.headers.get("Range"),
                status,
                headers=dict(self.headers),
            )
        )

    def send_simple(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.record(status)
        reply(self, status, body, headers)

    def send_file(self, body: bytes, *, range_start: int | None = None) -> None:
        """Serve ``body``, honouring ``Range: bytes=N-`` unless ``range_start`` overrides it.

        With ``encoding``, the whole file is sent compressed and ``Range`` is ignored.
        """
        if self.cdn.encoding is not None:
            encoded = encode(body, self.cdn.encoding)
            self.send_simple(200, encoded, {"Content-Encoding": self.cdn.encoding})
            return
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        start = range_start if range_start is not None else (int(match.group(1)) if match else None)
        if start is None:
            self.send_simple(200, body)
            return
        part = body[start:]
        self.send_simple(206, part, {"Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"})

    def send_head_then(
        self, status: int, length: int, payload: bytes, headers: dict[str, str] | None = None
    ) -> None:
        """Announce ``length`` bytes (with ``headers``), send ``payload`` (possibly fewer or
        more), then hang up."""
        self.record(status)
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(length))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
        self.close_connection = True


def is_guess(path: str) -> bool:
    """Whether the URL ``path`` is the manifest (or its ``.sig``) of a build a cold load
    asks for beside variants.json: this machine's exact build, or torch-universal."""
    return any(f"/build/{name}/metadata.json" in path for name in (local_variant(), UNIVERSAL))


def reply(
    handler: BaseHTTPRequestHandler, status: int, body: bytes, headers: dict[str, str] | None = None
) -> None:
    """Answer with ``status`` and ``body`` (and ``headers``), its length announced."""
    handler.send_response(status)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def compression_bomb(inflated: int) -> bytes:
    """A gzip body of about ``inflated / 1000`` bytes that inflates to ``inflated`` bytes
    of zeros (a whole number of MiB): one compressed MiB, repeated (a full flush makes
    each copy stand alone), then the trailer of the whole."""
    mib = 1 << 20
    assert inflated % mib == 0
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    header = compressor.compress(b"")
    block = compressor.compress(bytes(mib)) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(inflated // mib):
        crc = zlib.crc32(bytes(mib), crc)
    last = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS).flush()  # an empty final block
    trailer = struct.pack("<II", crc, inflated & 0xFFFFFFFF)
    return header + block * (inflated // mib) + last + trailer


def encode(body: bytes, encoding: str) -> bytes:
    """``body`` as a server sends it with ``Content-Encoding: gzip`` or ``deflate`` (zlib)."""
    if encoding == "gzip":
        return gzip.compress(body)
    if encoding == "deflate":
        return zlib.compress(body)
    raise ValueError(f"unknown encoding {encoding!r}")


def basic_auth(user: str, password: str) -> str:
    """The ``Authorization`` value of HTTP Basic auth."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# -- faults ---------------------------------------------------------------------------------


def status(code: int, retry_after: float | str | None = None) -> Fault:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else {}
    return lambda handler, _body: handler.send_simple(code, b"fault", headers)


def drop_after(n: int) -> Fault:
    """Send the headers of the full file, ``n`` bytes of it, then close the connection."""
    return lambda handler, body: handler.send_head_then(200, len(body), body[:n])


def tampered(offset: int = 0) -> Fault:
    def fault(handler: CdnHandler, body: bytes) -> None:
        flipped = bytearray(body)
        flipped[offset] ^= 0xFF
        handler.send_simple(200, bytes(flipped))

    return fault


def stall(seconds: float, *, after: int = 1, started: threading.Event | None = None) -> Fault:
    """Send ``after`` bytes of the body, then nothing for ``seconds``, then hang up."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:after])
        handler.wfile.flush()
        if started is not None:
            started.set()
        handler.pause(seconds)
        handler.close_connection = True

    return fault


def delayed(seconds: float, started: threading.Event | None = None) -> Fault:
    """Serve the file normally, but only after ``seconds``; set ``started`` on arrival."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        if started is not None:
            started.set()
        handler.pause(seconds)
        handler.send_file(body)

    return fault


def long_body(extra: bytes = b"JUNK" * 64) -> Fault:
    """Announce the true length but send ``extra`` bytes after the body."""
    return lambda handler, body: handler.send_head_then(200, len(body), body + extra)


def wrong_range() -> Fault:
    """Answer a ``Range`` request with ``206`` from byte 0 (a broken cache in between)."""
    return lambda handler, body: handler.send_file(body, range_start=0)


def redirect(location: str, body: bytes = b"", headers: dict[str, str] | None = None) -> Fault:
    """A ``302`` to ``location``, with ``body`` (and ``headers``: ``Content-Encoding``)."""
    return lambda handler, _body: handler.send_simple(
        302, body, {"Location": location, **(headers or {})}
    )


def unannounced_long_body(extra: bytes = b"JUNK") -> Fault:
    """No Content-Length: the body ends when the connection closes, with junk appended."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(body + extra)
        handler.wfile.flush()
        handler.close_connection = True

    return fault


def held(started: threading.Event, release: threading.Event) -> Fault:
    """Set ``started`` on arrival, then serve the file once ``release`` is set."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        started.set()
        release.wait(60)
        handler.send_file(body)

    return fault


def stalled(started: threading.Event, release: threading.Event) -> Fault:
    """Send the headers and the first byte of the body, set ``started``, then send the
    rest once ``release`` is set (by the test; after ten minutes at the latest): an answer
    that stalls for as long as the test wants, whatever the client's read timeout."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body[:1])
        handler.wfile.flush()
        started.set()
        release.wait(600)
        handler.wfile.write(body[1:])

    return fault


def trickle(interval: float = 0.5, *, limit: float = 30.0) -> Fault:
    """Announce the whole file, then send one byte every ``interval`` seconds (for at most
    ``limit`` seconds, or until the client hangs up): alive, but hopelessly slow."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.close_connection = True
        deadline = time.monotonic() + limit
        try:
            for offset in range(len(body)):
                if time.monotonic() > deadline:
                    return
                handler.wfile.write(body[offset : offset + 1])
                handler.wfile.flush()
                handler.pause(interval)
        except OSError:
            pass

    return fault


def trickled_headers(
    interval: float = 0.5,
    *,
    limit: float = 30.0,
    hung_up: threading.Event | None = None,
    opening: bytes = b"HTTP/1.1 200 OK\r\nX-Padding: ",
) -> Fault:
    """Send ``opening`` (the status line and a header's name), then the rest one byte every
    ``interval`` seconds (for at most ``limit`` seconds, or until the client hangs up,
    which sets ``hung_up``): the headers never end, and no read waits long enough to time
    out. With ``opening=b"HTTP/1.1 "``, the status line itself never ends."""

    def fault(handler: CdnHandler, _body: bytes) -> None:
        handler.record(200)
        handler.close_connection = True
        deadline = time.monotonic() + limit
        try:
            handler.wfile.write(opening)
            while time.monotonic() < deadline:
                handler.wfile.flush()
                handler.pause(interval)
                handler.wfile.write(b"x")
        except OSError:
            if hung_up is not None:
                hung_up.set()

    return fault


CONNECTED = b"HTTP/1.1 200 Connection established\r\n"
# A server's first TLS record, opened: 16 KiB holding a ServerHello of 16 KiB less its header.
SERVER_HELLO_OPENING = b"\x16\x03\x03\x40\x00" + b"\x02\x00\x3f\xfc"


def trickled_handshake(
    interval: float = 0.5, *, limit: float = 30.0, hung_up: threading.Event | None = None
) -> Fault:
    """For CONNECT: open the tunnel at once, then play a server behind it whose TLS
    handshake never ends: once the client's hello comes through, send the opening of a
    ServerHello and the rest as :func:`trickled_headers` sends headers."""
    trickle = trickled_headers(interval, limit=limit, hung_up=hung_up, opening=SERVER_HELLO_OPENING)

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.wfile.write(CONNECTED + b"\r\n")
        handler.wfile.flush()
        handler.rfile.read1(1 << 16)  # the client's hello, never answered in full
        trickle(handler, body)

    return fault


def chunked(chunk_size: int = 64 << 10, *, cut_after: int | None = None) -> Fault:
    """Send the file with ``Transfer-Encoding: chunked``; with ``cut_after``, hang up in
    the middle of the chunk holding that byte (the terminating chunk never comes)."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for start in range(0, len(body), chunk_size):
            chunk = body[start : start + chunk_size]
            if cut_after is not None and start + len(chunk) > cut_after:
                handler.wfile.write(b"%x\r\n%s" % (len(chunk), chunk[: cut_after - start]))
                handler.wfile.flush()
                handler.close_connection = True
                return
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        handler.wfile.write(b"0\r\n\r\n")

    return fault


def raw_redirect(location: bytes) -> Fault:
    """A ``302`` whose ``Location`` is ``location`` byte for byte (say, non-ASCII bytes in
    latin-1 or UTF-8), as a misconfigured server sends it."""

    def fault(handler: CdnHandler, _body: bytes) -> None:
        handler.record(302)
        handler.wfile.write(
            b"HTTP/1.1 302 Found\r\nLocation: " + location + b"\r\nContent-Length: 0\r\n\r\n"
        )
        handler.wfile.flush()

    return fault


def drop_every(n: int) -> Fault:
    """Honour ``Range: bytes=N-`` (``206`` from byte N), announce the rest of the file, send
    ``n`` bytes of it, then hang up. Inject it once per request it should answer."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        match = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", ""))
        start = int(match.group(1)) if match else 0
        status = 206 if match else 200
        headers = {"Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"} if match else {}
        handler.record(status)
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body) - start))
        handler.end_headers()
        handler.wfile.write(body[start : start + n])
        handler.wfile.flush()
        handler.close_connection = True

    return fault


def capped_range(cap: int, *, total: str | None = None) -> Fault:
    """Answer ``Range: bytes=N-`` with a ``206`` of at most ``cap`` bytes from byte N, its
    ``Content-Range`` saying so (a gateway that caps the size of a range), with ``total``
    for the file's size (``*``: unknown, as a gateway streaming the file may say); a
    request without ``Range`` gets the whole file. Inject it once per request it should
    answer."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        match = re.fullmatch(r"bytes=(\d+)-", handler.headers.get("Range", ""))
        if match is None:
            handler.send_file(body)
            return
        start = int(match.group(1))
        part = body[start : start + cap]
        content_range = f"bytes {start}-{start + len(part) - 1}/{total or len(body)}"
        handler.send_simple(206, part, {"Content-Range": content_range})

    return fault


def not_modified() -> Fault:
    """A ``304 Not Modified`` (with an ``ETag``, and no body, as a 304 has), whatever the
    request asked: a caching edge that answers one to requests without a condition."""

    def fault(handler: CdnHandler, _body: bytes) -> None:
        handler.record(304)
        handler.send_response(304)
        handler.send_header("ETag", '"edge-copy"')
        handler.end_headers()

    return fault


def compressed_keeping_length(*, hang_up: bool = False) -> Fault:
    """The file gzip-encoded, with ``Content-Encoding: gzip`` and the ``Content-Length`` of
    the file as it is (more than is sent): a caching edge that compresses a body and keeps
    its original length. The connection then stays open, as such an edge keeps it, or
    with ``hang_up``, is closed."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.send_head_then(200, len(body), encode(body, "gzip"), {"Content-Encoding": "gzip"})
        handler.close_connection = hang_up

    return fault


def web_page(page: bytes) -> Fault:
    """A ``200`` holding ``page`` as ``text/html``, whatever was asked for: an edge or a
    proxy serving its error page (or a login page) in place of the file."""
    return lambda handler, _body: handler.send_simple(
        200, page, {"Content-Type": "text/html; charset=utf-8"}
    )


def other_file(data: bytes) -> Fault:
    """Serve ``data`` in place of the file, honestly announced and honouring ``Range``: a
    mirror holding another build of the file."""
    return lambda handler, _body: handler.send_file(data)


def endless(*, limit: int = 1 << 30, status: int = 200, location: str | None = None) -> Fault:
    """A ``200`` (or ``status``, to ``location``) with no ``Content-Length`` whose body
    never ends: zeros until the client hangs up (or ``limit`` bytes, so a broken client
    cannot keep the test server busy)."""

    def fault(handler: CdnHandler, _body: bytes) -> None:
        handler.record(status)
        handler.send_response(status)
        if location is not None:
            handler.send_header("Location", location)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.close_connection = True
        block = bytes(64 << 10)
        try:
            for _ in range(limit // len(block)):
                handler.wfile.write(block)
        except OSError:
            pass  # the client hung up, as it should

    return fault


def slowly(seconds: float, pieces: int = 8) -> Fault:
    """Serve the file honestly (length announced, ``Range`` ignored), in ``pieces`` parts
    spread over ``seconds``: a download long enough for a progress bar to appear."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        step = -(-len(body) // pieces)
        for start in range(0, len(body), step):
            handler.pause(seconds / pieces)
            handler.wfile.write(body[start : start + step])
            handler.wfile.flush()

    return fault
