"""The benchmark's slow link (benchmarks/loadbench/link.py): the loopback server waits a
round trip before each response, and every body, on any connection, goes through one
link of a fixed rate.

These are bounds on the mechanism, not timings of anything: a response cannot come back
before its delay, and the bytes sent over any span cannot exceed what the rate allows
(plus the one chunk a writer may catch up by). A slow machine only makes the times
longer, which these bounds allow; a link paced per connection, or no delay, fails them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from loadbench.link import CHUNK_BYTES, Link
from loadbench.servers import CdnServer, serve

MBIT = 80.0  # 10 MB/s: 2.5 MiB take about a quarter of a second
DELAY_MS = 30.0
BIG_BYTES = 640 * 1024  # sent in chunks from the file (above the lean handler's inline size)
BIG_FILES = 4
SMALL_BYTES = 10 * 1024  # one write, with its headers


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("link")


@pytest.fixture(scope="module")
def tree(root: Path) -> dict[str, bytes]:
    """The files served from ``root``, by URL path."""
    files = {f"/big_{i}.bin": os.urandom(BIG_BYTES) for i in range(BIG_FILES)}
    files["/small.bin"] = os.urandom(SMALL_BYTES)
    for url_path, data in files.items():
        (root / url_path.lstrip("/")).write_bytes(data)
    return files


@pytest.fixture(params=["stdlib", "lean"])
def server(
    request: pytest.FixtureRequest, root: Path, tree: dict[str, bytes]
) -> Iterator[CdnServer]:
    """The paced server over ``tree``, with each request handler."""
    with serve(root, request.param, Link(MBIT, DELAY_MS)) as paced:
        yield paced


def least_seconds(sizes: list[int], responses: int) -> float:
    """The least time the link allows for bodies of ``sizes``: the bytes at the rate, less
    the first chunk of each response (a writer after an idle link sends one at once)."""
    paced = sum(sizes) - responses * CHUNK_BYTES
    return max(0, paced) * 8 / (MBIT * 1e6)


def fetch(session: requests.Session, url: str, expected: bytes, seconds: list[float]) -> None:
    start = time.perf_counter()
    response = session.get(url, timeout=30)
    seconds.append(time.perf_counter() - start)
    response.raise_for_status()
    assert response.content == expected


def test_one_connection_waits_the_delay_per_response_and_keeps_to_the_rate(
    server: CdnServer, tree: dict[str, bytes]
) -> None:
    seconds: list[float] = []
    start = time.perf_counter()
    with requests.Session() as session:
        for url_path, data in tree.items():
            fetch(session, server.url + url_path, data, seconds)
    elapsed = time.perf_counter() - start
    assert all(took >= DELAY_MS / 1e3 for took in seconds), seconds
    sizes = [len(data) for data in tree.values()]
    assert elapsed >= len(tree) * DELAY_MS / 1e3 + least_seconds(sizes, len(tree))


def test_concurrent_connections_share_one_link(server: CdnServer, tree: dict[str, bytes]) -> None:
    big = {url_path: data for url_path, data in tree.items() if url_path.startswith("/big")}
    seconds: list[float] = []
    errors: list[BaseException] = []

    def one(url_path: str) -> None:
        try:
            with requests.Session() as session:
                fetch(session, server.url + url_path, big[url_path], seconds)
        except BaseException as exc:  # reported below, from the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(url_path,)) for url_path in big]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    assert not errors, errors
    assert all(took >= DELAY_MS / 1e3 for took in seconds), seconds
    # One link of MBIT for all: four connections take as long as the four bodies at that
    # rate (3.6 times as long as one body), which a link per connection would not.
    assert elapsed >= DELAY_MS / 1e3 + least_seconds([BIG_BYTES] * BIG_FILES, BIG_FILES)


def test_a_range_request_gets_the_tail_through_the_link(
    server: CdnServer, tree: dict[str, bytes]
) -> None:
    data = tree["/big_0.bin"]
    start = time.perf_counter()
    response = requests.get(server.url + "/big_0.bin", headers={"Range": "bytes=1000-"}, timeout=30)
    elapsed = time.perf_counter() - start
    assert response.status_code == 206 and response.content == data[1000:]
    assert elapsed >= DELAY_MS / 1e3 + least_seconds([len(data) - 1000], 1)
