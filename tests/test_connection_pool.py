"""The session's transport adapter keeps each origin's connection pool for the run: every
file of a variant goes through one pool and one kept-alive connection, and a pool closed
since it was found is looked up afresh."""

from __future__ import annotations

import requests

from flashhub_kernels._session import PoolPerOrigin, new_session
from support.cdn_server import CdnServer


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
    session = new_session(pool_size=2)
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
    session = new_session(pool_size=2)
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
