"""The session's transport adapter keeps each origin's connection pool for the run: every
file of a variant goes through one pool and one kept-alive connection, and a pool closed
since it was found is looked up afresh."""

from __future__ import annotations

import requests

from flashhub_kernels._network.session import PoolPerOrigin, new_session
from support.cdn_server import CdnHandler, CdnServer, reply


def _get(session: requests.Session, url: str) -> bytes:
    response = session.get(url, timeout=5)
    response.raise_for_status()
    return response.content


def _adapter(session: requests.Session, url: str) -> PoolPerOrigin:
    adapter = session.get_adapter(url)
    assert isinstance(adapter, PoolPerOrigin)
    return adapter


def test_files_of_one_origin_share_a_pool_and_a_connection(cdn: CdnServer) -> None:
    for i in range(5):
        (cdn.root / f"f{i}.bin").write_bytes(bytes([i]) * 100)
    session = new_session(pool_size=2, timeouts=(10.0, 60.0))
    adapter = _adapter(session, cdn.url)
    request = requests.Request("GET", f"{cdn.url}/f0.bin").prepare()
    pool = adapter.get_connection_with_tls_context(request, True, {})

    assert [_get(session, f"{cdn.url}/f{i}.bin") for i in range(5)] == [
        bytes([i]) * 100 for i in range(5)
    ]
    other = requests.Request("GET", f"{cdn.url}/f4.bin?x=1").prepare()
    assert adapter.get_connection_with_tls_context(other, True, {}) is pool
    assert pool.num_connections == 1 and pool.num_requests == 5
    # Another route to the same origin (a proxy) is another pool.
    proxied = adapter.get_connection_with_tls_context(other, True, {"http": "http://127.0.0.1:9"})
    assert proxied is not pool
    session.close()


def test_a_closed_pool_is_looked_up_again(cdn: CdnServer) -> None:
    (cdn.root / "f.bin").write_bytes(b"x" * 10)
    session = new_session(pool_size=2, timeouts=(10.0, 60.0))
    adapter = _adapter(session, cdn.url)
    assert _get(session, f"{cdn.url}/f.bin") == b"x" * 10
    request = requests.Request("GET", f"{cdn.url}/f.bin").prepare()
    first = adapter.get_connection_with_tls_context(request, True, {})

    adapter.poolmanager.clear()  # the manager forgets it (as when it evicts a pool) ...
    first.close()  # ... and it is closed

    assert _get(session, f"{cdn.url}/f.bin") == b"x" * 10
    again = adapter.get_connection_with_tls_context(request, True, {})
    assert again is not first and again.pool is not None
    session.close()


def test_a_request_carries_two_headers_and_the_path_alone(cdn: CdnServer) -> None:
    (cdn.root / "dir").mkdir()
    (cdn.root / "dir" / "f.bin").write_bytes(b"x" * 10)
    session = new_session(pool_size=1, timeouts=(10.0, 60.0))

    assert _get(session, f"{cdn.url}/dir/f.bin?v=1") == b"x" * 10

    [logged] = cdn.requests
    assert logged.path == "/dir/f.bin?v=1"  # the target, not the whole URL (no proxy)
    assert {name.lower() for name in logged.headers} == {"host", "user-agent", "accept-encoding"}
    assert logged.headers["Accept-Encoding"] == "identity"
    assert logged.headers["User-Agent"].startswith("flashhub-kernels/")
    session.close()


def test_cookies_a_response_sets_are_still_parsed(cdn: CdnServer) -> None:
    (cdn.root / "f.bin").write_bytes(b"x" * 10)

    def with_cookie(handler: CdnHandler, body: bytes) -> None:
        reply(handler, 200, body, {"Set-Cookie": "edge=abc; Path=/"})

    cdn.inject("/f.bin", with_cookie)
    session = new_session(pool_size=1, timeouts=(10.0, 60.0))
    with_one = session.get(f"{cdn.url}/f.bin", timeout=5)
    without = session.get(f"{cdn.url}/f.bin", timeout=5)

    assert with_one.cookies.get("edge") == "abc" and with_one.content == b"x" * 10
    assert len(without.cookies) == 0 and without.content == b"x" * 10
    assert without.status_code == 200 and without.reason == "OK"
    assert without.url == f"{cdn.url}/f.bin" and without.connection is _adapter(session, cdn.url)
    session.close()
