"""Proxies from the environment (``http_proxy``, ``no_proxy``), as requests would honour them."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import flashhub_kernels as fk
from cdn_server import CdnServer
from trees import write_kernel

REPO = "acme/tensor-tricks"


class _ForwardProxy(BaseHTTPRequestHandler):
    """A forward proxy for plain http: relays absolute-URI requests and logs them."""

    seen: list[str]

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(self.path) as upstream:
                status, body = upstream.status, upstream.read()
        except urllib.error.HTTPError as error:
            status, body = error.code, error.read()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def proxy() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_ForwardProxy,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def _set_proxy(monkeypatch: pytest.MonkeyPatch, url: str, no_proxy: str = "") -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", url)
    if no_proxy:
        monkeypatch.setenv("no_proxy", no_proxy)


def test_downloads_go_through_the_http_proxy(
    cdn: CdnServer, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    _set_proxy(monkeypatch, url)
    write_kernel(cdn.root, REPO, 1)
    assert fk.get_kernel(REPO, version=1).marker().startswith(REPO)
    assert len(seen) == 6 and all(path.startswith(cdn.url) for path in seen)
    assert sorted(cdn.gets()) == sorted(path.removeprefix(cdn.url) for path in seen)


def test_no_proxy_bypasses_it(
    cdn: CdnServer, proxy: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, seen = proxy
    _set_proxy(monkeypatch, url, no_proxy="127.0.0.1")
    write_kernel(cdn.root, REPO, 1)
    assert fk.get_kernel(REPO, version=1).marker().startswith(REPO)
    assert seen == [] and len(cdn.gets()) == 6
