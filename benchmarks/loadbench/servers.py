"""The loopback CDN: a static-file HTTP server on 127.0.0.1 that counts GETs per path.

``with serve(trees.cdn) as server:`` starts it on a free port (``server.url``) in a thread
of this process; ``server.gets()`` and ``server.reset()`` read and clear the GET counts.

Two request handlers, both HTTP/1.1 keep-alive with ``TCP_NODELAY`` and ``Range: bytes=N-``:
``stdlib`` (the default) is the standard library's ``SimpleHTTPRequestHandler`` with
``Range`` added, the server a user would start with ``python -m http.server``; ``lean``
parses requests itself and sends bodies with ``sendfile(2)``, at about a tenth of the
CPU per request (see :class:`CdnServer`), for measuring the clients alone.

With a :class:`loadbench.link.Link` (the slow-link rows), either handler waits the
link's delay before each response and sends bodies through the link, paced: the lean
handler then writes them instead of using sendfile.
"""

from __future__ import annotations

import collections
import functools
import os
import re
import socket
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from .link import Link

HANDLERS = ("stdlib", "lean")
_RANGE = re.compile(r"bytes=(\d+)-")


class CdnServer(ThreadingHTTPServer):
    """Static files from ``root``: keep-alive, ``Range: bytes=N-``, GET counts.

    With the ``lean`` handler (:class:`CdnHandler`), the tree is fixed before the server
    starts, so every file is looked up once, here, and files up to ``INLINE_BYTES`` are
    held in memory and sent with their headers in one write; larger ones by sendfile. With
    its lean request parsing this cuts the server's CPU time per small response from ~470
    us (the ``stdlib`` handler, :class:`StdlibHandler`) to ~40 us on the machine of
    docs/performance.md.
    """

    daemon_threads = True
    request_queue_size = 512  # 16 processes x 8 connections may arrive at once
    INLINE_BYTES = 256 * 1024

    def __init__(self, root: Path, handler: str = "stdlib", link: Link | None = None) -> None:
        if handler == "stdlib":
            handler_class: Any = functools.partial(StdlibHandler, directory=str(root))
        else:
            handler_class = CdnHandler
        super().__init__(("127.0.0.1", 0), handler_class)
        self.handler = handler
        self.link = link  # None: unpaced, at loopback speed
        self.files: dict[str, tuple[Path, int, bytes | None]] = {}
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            size = path.stat().st_size
            inline = path.read_bytes() if size <= self.INLINE_BYTES else None
            self.files["/" + path.relative_to(root).as_posix()] = (path, size, inline)
        self._gets: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def size(self, url_path: str) -> int:
        """Bytes of the file served at ``url_path``."""
        return self.files[url_path][1]

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hung up: normal
            super().handle_error(request, client_address)

    def count(self, path: str) -> None:
        with self._lock:
            self._gets[path] += 1

    def gets(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(self._gets)

    def reset(self) -> None:
        with self._lock:
            self._gets.clear()


def _no_delay(connection: socket.socket) -> None:
    # Large bodies go out as headers then the body: without this, Nagle's algorithm and
    # the client's delayed ACK could hold the second write back for 40 ms.
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class StdlibHandler(SimpleHTTPRequestHandler):
    """The standard library's static-file handler, HTTP/1.1, with ``Range: bytes=N-``
    and a GET count; its logging is silenced."""

    server: CdnServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        _no_delay(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.count(urllib.parse.unquote(self.path.split("?", 1)[0]))
        if self.server.link is not None:
            self.server.link.delay()
        super().do_GET()

    def copyfile(self, source: Any, outputfile: Any) -> None:
        link = self.server.link
        if link is None:
            super().copyfile(source, outputfile)
            return
        length = os.fstat(source.fileno()).st_size - source.tell()
        link.send_file(self.connection, source, length)

    def send_head(self) -> IO[bytes] | None:
        match = _RANGE.fullmatch(self.headers.get("Range", ""))
        if match is None:
            return super().send_head()  # type: ignore[no-any-return]
        path = self.translate_path(self.path)
        try:
            body = open(path, "rb")  # noqa: SIM115 (do_GET copies it, then closes it)
        except OSError:
            self.send_error(HTTPStatus.NOT_FOUND, "File not found")
            return None
        size, start = os.fstat(body.fileno()).st_size, int(match.group(1))
        if start > size:
            body.close()
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        body.seek(start)
        self.send_response(HTTPStatus.PARTIAL_CONTENT)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        return body


class CdnHandler(BaseHTTPRequestHandler):
    """The ``lean`` handler. GET only. Parses the request line and headers itself: the
    stdlib's email-based header parser costs about as much per request as curl spends on
    a whole request."""

    server: CdnServer
    protocol_version = "HTTP/1.1"  # keep-alive: handle() loops until close_connection

    def setup(self) -> None:
        super().setup()
        _no_delay(self.connection)

    def handle_one_request(self) -> None:
        parts = self.rfile.readline(65537).split()
        if len(parts) != 3:
            self.close_connection = True
            return
        headers = self._read_headers()
        self.close_connection = headers.get(b"connection", b"").lower() == b"close"
        if parts[0] != b"GET":
            self._send(405, b"", close=True)
            return
        url_path = urllib.parse.unquote(parts[1].decode("latin-1").split("?", 1)[0])
        self.server.count(url_path)
        if self.server.link is not None:
            self.server.link.delay()
        self._serve(url_path, headers.get(b"range", b"").decode("latin-1"))

    def _read_headers(self) -> dict[bytes, bytes]:
        """The request's headers up to the blank line, names lower-cased."""
        headers: dict[bytes, bytes] = {}
        while (line := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return headers

    def _serve(self, url_path: str, range_header: str) -> None:
        found = self.server.files.get(url_path)
        if found is None:
            self._send(404, b"")
            return
        path, size, inline = found
        match = _RANGE.fullmatch(range_header)
        start = int(match.group(1)) if match else 0
        if start > size:
            self._send(416, b"", f"Content-Range: bytes */{size}\r\n")
            return
        extra = f"Content-Range: bytes {start}-{size - 1}/{size}\r\n" if match else ""
        status = 206 if match else 200
        if inline is not None:
            self._send(status, inline[start:], extra)
            return
        self._send(status, b"", extra, length=size - start)
        with open(path, "rb") as body:
            if self.server.link is not None:
                body.seek(start)
                self.server.link.send_file(self.connection, body, size - start)
            elif size > start:
                self.connection.sendfile(body, start, size - start)

    def _send(
        self,
        status: int,
        body: bytes,
        extra: str = "",
        *,
        length: int | None = None,
        close: bool = False,
    ) -> None:
        """Status line, headers and ``body`` in one write (``length`` if the body follows)."""
        reason = self.responses.get(status, ("",))[0]
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n{extra}"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        if self.server.link is not None and body:
            self.server.link.send(self.connection, body, head.encode("latin-1"))
        else:
            self.connection.sendall(head.encode("latin-1") + body)


@contextmanager
def serve(root: Path, handler: str = "stdlib", link: Link | None = None) -> Iterator[CdnServer]:
    """Serve ``root`` from a thread of this process until the block ends, with the
    request handler ``handler`` (one of :data:`HANDLERS`), paced by ``link`` if given."""
    server = CdnServer(root, handler, link)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
