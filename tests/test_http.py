"""The HTTP client (``_http``) against real servers on 127.0.0.1: keep-alive, bodies,
retries, TLS verification, and https tunnelled through a proxy with ``CONNECT``."""

from __future__ import annotations

import base64
import contextlib
import email.utils
import http.client
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from cdn_server import reply
from flashhub_kernels._http import (
    DRAIN_LIMIT,
    MAX_RETRY_AFTER,
    WIRE_ERRORS,
    HttpClient,
    RequestFailed,
    Response,
    RetryPolicy,
    retry_after,
)

NO_BACKOFF = RetryPolicy(backoff_factor=0)


@dataclass(frozen=True)
class Seen:
    """One request as a server saw it."""

    command: str
    path: str
    headers: dict[str, str]


class Handler(BaseHTTPRequestHandler):
    """Answers every GET with the answer of its server (one handler per connection)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    @property
    def loopback(self) -> Server:
        return cast(Server, self.server)

    def do_GET(self) -> None:
        self.loopback.record(self)
        self.loopback.answer(self)

    def reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        reply(self, status, body, headers)


Answer = Callable[[Handler], None]


class Server(ThreadingHTTPServer):
    """A loopback server that counts the TCP connections it accepts and logs requests."""

    daemon_threads = True

    def __init__(
        self,
        answer: Answer,
        handler: type[BaseHTTPRequestHandler] = Handler,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
        self.answer = answer
        self.connections = 0
        self.seen: list[Seen] = []
        self._lock = threading.Lock()

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def url(self, path: str, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            self.connections += 1
        super().process_request(request, client_address)

    def record(self, handler: BaseHTTPRequestHandler) -> None:
        with self._lock:
            self.seen.append(Seen(handler.command, handler.path, dict(handler.headers)))


Serve = Callable[..., Server]
MakeClient = Callable[..., HttpClient]


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback servers are reached directly, whatever proxies this machine sets."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


@pytest.fixture
def serve() -> Iterator[Serve]:
    """Start servers on 127.0.0.1 (``serve(answer, handler=..., tls=...)``); stop them after."""
    servers: list[Server] = []

    def start(answer: Answer, **kwargs: Any) -> Server:
        server = Server(answer, **kwargs)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def make_client() -> Iterator[MakeClient]:
    """HttpClients built when the test asks (after it set the environment), closed after."""
    clients: list[HttpClient] = []

    def make(retry: RetryPolicy = NO_BACKOFF) -> HttpClient:
        client = HttpClient(connect_timeout=10, read_timeout=10, retry=retry)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def drain(response: Response, into: bytearray | None = None) -> bytes:
    """Read the body with ``read1`` until ``b""``, then release the response."""
    body = bytearray() if into is None else into
    while chunk := response.read1(1024):
        body += chunk
    response.release()
    return bytes(body)


def get(client: HttpClient, url: str) -> tuple[int, bytes]:
    response = client.request("GET", url)
    return response.status, drain(response)


def echo_path(handler: Handler) -> None:
    handler.reply(200, f"body of {handler.path}".encode())


def chunked(chunks: list[bytes], tail: bytes) -> Answer:
    """Send ``chunks`` with chunked transfer-encoding, then ``tail`` raw and hang up,
    unless ``tail`` is the terminating chunk."""

    def answer(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for chunk in chunks:
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        handler.wfile.write(tail)
        handler.close_connection = tail != b"0\r\n\r\n"

    return answer


# -- keep-alive and bodies ----------------------------------------------------------------


def test_sequential_requests_reuse_one_connection(serve: Serve, make_client: MakeClient) -> None:
    server = serve(echo_path)
    client = make_client()
    for i in range(10):
        assert get(client, server.url(f"/file{i}")) == (200, f"body of /file{i}".encode())
    assert server.connections == 1
    assert len(server.seen) == 10


def test_an_unread_short_body_keeps_the_connection_a_long_one_closes_it(
    serve: Serve, make_client: MakeClient
) -> None:
    def answer(handler: Handler) -> None:
        size = 100 if handler.path.startswith("/short") else DRAIN_LIMIT + 1
        handler.reply(404, b"x" * size)

    server = serve(answer)
    client = make_client()
    for path in ["/short1", "/short2", "/short3"]:
        client.request("GET", server.url(path)).release()  # the 404 page is never read
    assert server.connections == 1
    client.request("GET", server.url("/long")).release()  # on the kept connection: closes it
    client.request("GET", server.url("/short4")).release()
    assert server.connections == 2


def test_a_body_that_timed_out_is_not_drained_on_release(serve: Serve) -> None:
    sent_rest = threading.Event()

    def stall(handler: Handler) -> None:  # a short body: 10 bytes, a 2 s pause, the rest
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        handler.wfile.write(b"z" * 10)
        handler.wfile.flush()
        time.sleep(2)
        with contextlib.suppress(OSError):
            handler.wfile.write(b"z" * 990)
        sent_rest.set()

    server = serve(stall)
    client = HttpClient(connect_timeout=10, read_timeout=1, retry=NO_BACKOFF)
    response = client.request("GET", server.url("/stall"))
    with pytest.raises(WIRE_ERRORS):
        drain(response)  # times out after 1 s
    response.release()  # closes the connection; draining would wait for the other 990 bytes
    assert not sent_rest.is_set()
    client.close()


def test_stale_pooled_connection_is_replaced_at_once_without_a_retry(
    serve: Serve, make_client: MakeClient
) -> None:
    def hang_up_after_answer(handler: Handler) -> None:  # HTTP/1.1, no "Connection: close"
        echo_path(handler)
        handler.close_connection = True

    server = serve(hang_up_after_answer)
    client = make_client(RetryPolicy(errors=0, backoff_factor=0))
    for i in range(5):
        assert get(client, server.url(f"/file{i}")) == (200, f"body of /file{i}".encode())
    assert server.connections == 5
    assert [seen.path for seen in server.seen] == [f"/file{i}" for i in range(5)]


def test_chunked_body_is_read_whole_and_keeps_the_connection(
    serve: Serve, make_client: MakeClient
) -> None:
    chunks = [b"alpha", b"b" * 3000, b"gamma"]
    server = serve(chunked(chunks, b"0\r\n\r\n"))
    client = make_client()
    assert get(client, server.url("/a")) == (200, b"".join(chunks))
    assert get(client, server.url("/b")) == (200, b"".join(chunks))
    assert server.connections == 1


def test_chunked_body_cut_off_raises_a_wire_error(serve: Serve, make_client: MakeClient) -> None:
    server = serve(chunked([b"alpha", b"beta"], b"64\r\n" + b"x" * 10))  # 100 announced, 10 sent
    response = make_client().request("GET", server.url("/cut"))
    received = bytearray()
    with pytest.raises(WIRE_ERRORS):
        drain(response, received)
    response.release()
    assert bytes(received) == b"alphabeta" + b"x" * 10


def test_content_length_body_cut_short_raises_incomplete_read(
    serve: Serve, make_client: MakeClient
) -> None:
    def short_body(handler: Handler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "100")
        handler.end_headers()
        handler.wfile.write(b"y" * 10)
        handler.close_connection = True

    server = serve(short_body)
    response = make_client().request("GET", server.url("/short"))
    received = bytearray()
    with pytest.raises(http.client.IncompleteRead):
        drain(response, received)
    response.release()
    assert bytes(received) == b"y" * 10


# -- retries ------------------------------------------------------------------------------


def test_503_with_retry_after_is_retried_until_200(serve: Serve, make_client: MakeClient) -> None:
    statuses = iter([503, 503, 200])

    def answer(handler: Handler) -> None:
        status = next(statuses)
        headers = {"Retry-After": "0"} if status == 503 else {}
        handler.reply(status, b"ok" if status == 200 else b"busy", headers)

    server = serve(answer)
    assert get(make_client(), server.url("/x")) == (200, b"ok")
    assert len(server.seen) == 3


def test_persistent_503_returns_the_last_answer_when_retries_run_out(
    serve: Serve, make_client: MakeClient
) -> None:
    server = serve(lambda handler: handler.reply(503, b"busy"))
    client = make_client(RetryPolicy(statuses=2, backoff_factor=0))
    assert get(client, server.url("/x")) == (503, b"busy")
    assert len(server.seen) == 3


def test_connection_refused_raises_request_failed(make_client: MakeClient) -> None:
    with socket.socket() as probe:  # a port that nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(RetryPolicy(errors=1, backoff_factor=0))
    with pytest.raises(RequestFailed, match="ConnectionRefused"):
        client.request("GET", f"http://127.0.0.1:{port}/x")


def test_retry_after_reads_seconds() -> None:
    assert retry_after("3") == 3.0
    assert retry_after(" 0 ") == 0.0


def test_retry_after_reads_http_dates() -> None:
    assert retry_after(email.utils.formatdate(time.time() - 3600, usegmt=True)) == 0.0
    soon = retry_after(email.utils.formatdate(time.time() + 30, usegmt=True))
    assert soon is not None and 0.0 < soon <= 30.0


def test_retry_after_is_capped() -> None:
    assert retry_after("99999") == MAX_RETRY_AFTER
    assert retry_after(email.utils.formatdate(time.time() + 86400, usegmt=True)) == MAX_RETRY_AFTER


@pytest.mark.parametrize("value", [None, "", "soon", "1.5", "Someday, 99 Foo 2999", "\xb2"])
def test_retry_after_ignores_what_it_cannot_read(value: str | None) -> None:
    assert retry_after(value) is None


def test_backoff_starts_at_zero_then_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(backoff_factor=0.25, backoff_max=8.0)
    assert policy.backoff(0) == policy.backoff(1) == 0.0
    waits = [policy.backoff(retry) for retry in range(2, 8)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert policy.backoff(30) == 8.0


# -- TLS and CONNECT tunnels --------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for IP 127.0.0.1: (cert.pem, key.pem)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is not on PATH")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
def tls_server(serve: Serve, certificate: tuple[Path, Path]) -> Server:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return serve(echo_path, tls=context)


class TunnelProxy(BaseHTTPRequestHandler):
    """An http proxy that only tunnels: ``CONNECT``, then relay bytes both ways."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_CONNECT(self) -> None:
        cast(Server, self.server).record(self)
        host, port = self.path.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as upstream:
            self.send_response(200, "Connection established")
            self.end_headers()
            back = threading.Thread(target=relay, args=(upstream, self.connection), daemon=True)
            back.start()
            relay(self.connection, upstream)
            back.join(10)
        self.close_connection = True


def relay(source: socket.socket, sink: socket.socket) -> None:
    """Copy bytes from ``source`` to ``sink`` until either side closes."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def trust_only(monkeypatch: pytest.MonkeyPatch, cert: Path | None) -> None:
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    if cert is not None:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(cert))


def test_https_trusts_the_requests_ca_bundle(
    tls_server: Server,
    certificate: tuple[Path, Path],
    make_client: MakeClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trust_only(monkeypatch, certificate[0])
    assert get(make_client(), tls_server.url("/x", "https")) == (200, b"body of /x")


def test_https_rejects_an_untrusted_certificate(
    tls_server: Server, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    trust_only(monkeypatch, None)
    with pytest.raises(RequestFailed, match="certificate"):
        make_client().request("GET", tls_server.url("/x", "https"))
    assert tls_server.seen == []


@pytest.fixture
def tunnel_proxy(
    serve: Serve, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> Server:
    """A tunnelling proxy set as ``https_proxy`` (with credentials); the test cert trusted."""
    proxy = serve(echo_path, handler=TunnelProxy)
    trust_only(monkeypatch, certificate[0])
    monkeypatch.setenv("https_proxy", f"http://user:p%40ss@127.0.0.1:{proxy.port}")
    return proxy


def test_https_is_tunnelled_through_an_http_proxy_with_credentials(
    tunnel_proxy: Server, tls_server: Server, make_client: MakeClient
) -> None:
    client = make_client()
    assert get(client, tls_server.url("/x", "https")) == (200, b"body of /x")
    assert get(client, tls_server.url("/y", "https")) == (200, b"body of /y")
    token = base64.b64encode(b"user:p@ss").decode()
    [connect] = tunnel_proxy.seen  # one tunnel, kept alive for the second request
    assert (connect.command, connect.path) == ("CONNECT", f"127.0.0.1:{tls_server.port}")
    assert connect.headers.get("Proxy-Authorization") == f"Basic {token}"
    assert [seen.path for seen in tls_server.seen] == ["/x", "/y"]


def test_proxy_credentials_are_not_sent_to_the_server_behind_a_tunnel(
    tunnel_proxy: Server, tls_server: Server, make_client: MakeClient
) -> None:
    assert get(make_client(), tls_server.url("/x", "https")) == (200, b"body of /x")
    assert "Proxy-Authorization" in tunnel_proxy.seen[0].headers
    assert [seen.headers.get("Proxy-Authorization") for seen in tls_server.seen] == [None]


def test_an_https_proxy_cannot_tunnel_https(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("https_proxy", "https://127.0.0.1:9")
    with pytest.raises(RequestFailed, match="cannot tunnel"):
        make_client().request("GET", "https://127.0.0.1:9/x")
