"""HTTP/1.1 on the standard library's ``http.client``: keep-alive pools, retries, proxies.

Why not ``requests`` or urllib3: loading a variant of many small files is bound by the
CPU spent per request, and both add layers over ``http.client`` (a ``Session.get`` cost
about 780 us of CPU per 10 KiB file on loopback, a urllib3 request about 160 us, this
client about 110 us, bare ``http.client`` about 90 us), and importing urllib3 costs
about 15 ms of every cold start, while torch has already imported ``http.client`` and
``ssl``. What those libraries would add for a
static CDN is here:

- a pool of idle keep-alive connections per server, and a stale one retried at once;
- a connect timeout and a read timeout (for every wait on the socket);
- retries with exponential backoff for connection errors and 429/5xx, honouring
  ``Retry-After``;
- proxies from ``*_proxy`` / ``no_proxy``: plain http goes through the proxy, https is
  tunnelled through it with ``CONNECT``;
- TLS verified against the system store, or ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE``
  (``SSL_CERT_FILE`` works through OpenSSL itself).
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import os
import ssl
import threading
import time
import urllib.parse
import urllib.request
from typing import NamedTuple

POOL_SIZE = 16  # idle connections kept per server: the parallel downloads, with room
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
DRAIN_LIMIT = 64 << 10  # an unread body up to this size is read to keep its connection
MAX_RETRY_AFTER = 60.0  # seconds: a longer Retry-After is waited for this long
USER_AGENT = "flashhub-kernels"
# What can break a request or a body on the wire: resets, timeouts, TLS errors
# (all OSError) and malformed or cut-off HTTP (HTTPException).
WIRE_ERRORS = (OSError, http.client.HTTPException)

Connection = http.client.HTTPConnection  # or its subclass HTTPSConnection


class RequestFailed(Exception):
    """No response came back, after every retry; the message says why."""


class RetryPolicy(NamedTuple):
    """How often a request that got no usable answer is sent again, and after how long."""

    errors: int = 2  # refused, reset or timed out before a response
    statuses: int = 4  # answers with a status in RETRY_STATUSES
    backoff_factor: float = 0.25
    backoff_max: float = 8.0

    def backoff(self, retry: int) -> float:
        """Seconds before the ``retry``-th retry: none before the first, then doubling."""
        if retry <= 1:
            return 0.0
        return min(self.backoff_max, self.backoff_factor * 2.0 ** (retry - 1))


def retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (seconds or an HTTP date), capped."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # isdigit alone accepts "²"
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


class Route(NamedTuple):
    """Where a request goes: the server to connect to and what to ask it for."""

    server: tuple[str, str, int]  # scheme, host, port of the connection's other end
    target: str  # the request target: path and query, or the whole URL for a proxy
    headers: tuple[tuple[str, str], ...] = ()  # sent with every request (a proxy's auth)
    tunnel: tuple[str, int] | None = None  # host, port to CONNECT to through a proxy (https)
    tunnel_headers: tuple[tuple[str, str], ...] = ()  # sent with CONNECT (a proxy's auth)


class Response:
    """A response whose body is streamed with :meth:`read1`, then :meth:`release`-d.

    A body read to its end gives the connection back to the pool, and so does a short
    one left unread (a 404 page, say: it is read and dropped, which is cheaper than a new
    connection, above all a TLS one). A longer body left unread closes the connection:
    the next request could not be sent on it.
    """

    def __init__(self, raw: http.client.HTTPResponse, conn: Connection, pool: _Pool) -> None:
        self._raw, self._conn, self._pool = raw, conn, pool
        self.status = raw.status
        self.reason = raw.reason
        self.headers = raw.headers
        self._complete = False

    def read1(self, size: int) -> bytes:
        """Up to ``size`` bytes, as they arrive; ``b""`` at the end of the body.

        Raises:
            http.client.IncompleteRead: the connection ended before the announced length.
        """
        chunk = self._raw.read1(size)
        if not chunk and size:
            if self._raw.length:  # Content-Length promised more than came
                raise http.client.IncompleteRead(b"", self._raw.length)
            self._complete = True
        return chunk

    def redirect_location(self) -> str | None:
        return self.headers.get("Location") if self.status in REDIRECT_STATUSES else None

    def release(self) -> None:
        """Done with the response: keep its connection if the body is (or can be) read."""
        if not self._raw.will_close and self._finish_body():
            self._raw.close()  # closes the response's file object, not the socket
            self._pool.put(self._conn)
        else:
            self._conn.close()

    def _finish_body(self) -> bool:
        """Whether the body has been read to its end, reading a short remainder if needed."""
        remaining = self._raw.length
        if self._complete or remaining == 0:
            return True
        if remaining is None or remaining > DRAIN_LIMIT:
            return False
        try:
            self._raw.read()
        except WIRE_ERRORS:
            return False
        return True


class _Pool:
    """Idle keep-alive connections to one server."""

    def __init__(self) -> None:
        self._idle: list[Connection] = []
        self._lock = threading.Lock()

    def get(self) -> Connection | None:
        with self._lock:
            return self._idle.pop() if self._idle else None

    def put(self, conn: Connection) -> None:
        with self._lock:
            if len(self._idle) < POOL_SIZE:
                self._idle.append(conn)
                return
        conn.close()

    def clear(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class HttpClient:
    """GET and HEAD over pooled keep-alive connections, with retries. Thread-safe."""

    def __init__(
        self, connect_timeout: float, read_timeout: float, retry: RetryPolicy | None = None
    ) -> None:
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._retry = retry or RetryPolicy()
        self._proxies = urllib.request.getproxies_environment()
        self._pools: dict[tuple[tuple[str, str, int], tuple[str, int] | None], _Pool] = {}
        self._lock = threading.Lock()
        self._tls: ssl.SSLContext | None = None

    def request(self, method: str, url: str, headers: dict[str, str] | None = None) -> Response:
        """Send one request and return the response with its body unread.

        Connection errors and 429/5xx answers are retried with backoff; the last
        429/5xx answer is returned when the retries run out.

        Raises:
            RequestFailed: no response after every retry (or a TLS or proxy error).
        """
        route = self._route(urllib.parse.urlsplit(url))
        all_headers = {"User-Agent": USER_AGENT, **dict(route.headers), **(headers or {})}
        errors = statuses = 0
        while True:
            try:
                response = self._send(route, method, all_headers)
            except ssl.SSLCertVerificationError as exc:
                raise RequestFailed(f"TLS certificate not trusted: {exc}") from None
            except WIRE_ERRORS as exc:
                errors += 1
                if errors > self._retry.errors:
                    raise RequestFailed(f"{type(exc).__name__}: {exc}") from None
                time.sleep(self._retry.backoff(errors + statuses))
                continue
            if response.status not in RETRY_STATUSES or statuses >= self._retry.statuses:
                return response
            statuses += 1
            wait = retry_after(response.headers.get("Retry-After"))
            response.release()
            time.sleep(self._retry.backoff(errors + statuses) if wait is None else wait)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.clear()

    # -- one attempt -------------------------------------------------------------------

    def _send(self, route: Route, method: str, headers: dict[str, str]) -> Response:
        pool = self._pool(route)
        conn = pool.get()
        if conn is not None:
            try:
                return self._exchange(conn, pool, route, method, headers)
            except WIRE_ERRORS:
                pass  # the server closed the idle connection: try a fresh one at once
        conn = self._connect(route)
        return self._exchange(conn, pool, route, method, headers)

    def _exchange(
        self, conn: Connection, pool: _Pool, route: Route, method: str, headers: dict[str, str]
    ) -> Response:
        try:
            conn.request(method, route.target, headers=headers)
            return Response(conn.getresponse(), conn, pool)
        except BaseException:
            conn.close()
            raise

    def _connect(self, route: Route) -> Connection:
        scheme, host, port = route.server
        conn: Connection
        if scheme == "https" or route.tunnel:  # a tunnel carries https: TLS inside CONNECT
            conn = http.client.HTTPSConnection(
                host, port, timeout=self._connect_timeout, context=self._tls_context()
            )
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self._connect_timeout)
        if route.tunnel:
            conn.set_tunnel(*route.tunnel, headers=dict(route.tunnel_headers))
        try:
            conn.connect()  # now, so that reads get their own timeout
            assert conn.sock is not None
            conn.sock.settimeout(self._read_timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    def _tls_context(self) -> ssl.SSLContext:
        with self._lock:
            if self._tls is None:
                self._tls = ssl.create_default_context(cafile=_ca_bundle())
            return self._tls

    def _pool(self, route: Route) -> _Pool:
        key = (route.server, route.tunnel)
        with self._lock:
            pool = self._pools.get(key)
            if pool is None:
                pool = self._pools[key] = _Pool()
            return pool

    # -- where a URL goes ---------------------------------------------------------------

    def _route(self, parts: urllib.parse.SplitResult) -> Route:
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RequestFailed(f"not an http(s) URL: {parts.geturl()}")
        origin = (parts.scheme, parts.hostname, parts.port or _default_port(parts.scheme))
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        proxy = self._proxy_for(parts)
        if proxy is None:
            return Route(origin, path)
        server, auth = _proxy_server(proxy)
        if parts.scheme == "http":  # the proxy forwards the request: it gets the whole URL
            return Route(server, parts.geturl(), headers=auth)
        if server[0] == "https":
            raise RequestFailed(
                f"the https proxy {proxy} cannot tunnel https; use an http:// proxy URL"
            )
        # https: a CONNECT tunnel to the origin, with TLS inside; the proxy's credentials go
        # with CONNECT only, never to the origin.
        return Route(server, path, tunnel=(origin[1], origin[2]), tunnel_headers=auth)

    def _proxy_for(self, parts: urllib.parse.SplitResult) -> str | None:
        """The proxy for this URL, unless ``no_proxy`` (or the OS settings) exempts its host."""
        proxy = self._proxies.get(parts.scheme) or self._proxies.get("all")
        if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
            return None
        return proxy


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _proxy_server(proxy: str) -> tuple[tuple[str, str, int], tuple[tuple[str, str], ...]]:
    """The proxy's (scheme, host, port), and the header that authenticates to it."""
    parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    scheme = parts.scheme or "http"
    server = (scheme, parts.hostname or "", parts.port or _default_port(scheme))
    if parts.username is None:
        return server, ()
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return server, (("Proxy-Authorization", f"Basic {token}"),)


def _ca_bundle() -> str | None:
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or None
