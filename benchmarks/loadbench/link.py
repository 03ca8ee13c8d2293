"""A slow link for the loopback server (rows 10): a round trip's delay before each
response, and one link of a fixed rate that every response body shares.

The server's handlers (:mod:`loadbench.servers`) call :meth:`Link.delay` after a request
is read, before the status line, and send every body through :meth:`Link.send`: each
chunk (``CHUNK_BYTES``, a small body whole) reserves the link for ``len(chunk) * 8 /
rate`` seconds from ``max(now - burst, next_free)``, then its writer sleeps until that
slot ends and writes it. Concurrent responses queue for the one link, so more
connections do not give more bandwidth. ``burst`` is one chunk's time on the link: a
writer that woke late, or spent its time reading the file, catches up by at most that
much (a token bucket of one chunk), so over any span the bytes sent exceed the link's
rate by one chunk at most, and a lone writer still reaches the rate. Headers are not
paced.
"""

from __future__ import annotations

import argparse
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import BinaryIO

CHUNK_BYTES = 64 * 1024


@dataclass
class Link:
    """One shared link of ``mbit`` Mbit/s, ``delay_ms`` before each response."""

    mbit: float
    delay_ms: float
    _next_free: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __str__(self) -> str:
        return f"{self.delay_ms:g} ms before each response, {self.mbit:g} Mbit/s shared"

    def seconds(self, size: int) -> float:
        """The time ``size`` bytes take on the link (its rate alone, no delay)."""
        return size * 8 / (self.mbit * 1e6)

    def least_seconds(self, size: int, delays: int = 1) -> float:
        """The least time a client needs for ``size`` bytes: the rate, and ``delays``
        responses one after the other (one: all requests sent at once)."""
        return self.seconds(size) + delays * self.delay_ms / 1e3

    def delay(self) -> None:
        """The round trip before a response: between the request and the status line."""
        time.sleep(self.delay_ms / 1e3)

    def _wait_for_slot(self, size: int) -> None:
        """Reserve the link for ``size`` bytes and sleep until the slot ends."""
        with self._lock:
            start = max(time.monotonic() - self.seconds(CHUNK_BYTES), self._next_free)
            self._next_free = end = start + self.seconds(size)
        # time.sleep, not a busy wait: Linux wakes a sleeper about 60 us late, a tenth of
        # a 64 KiB chunk's slot at 1 Gbit/s.
        time.sleep(max(0.0, end - time.monotonic()))

    def send(self, connection: socket.socket, body: bytes, head: bytes = b"") -> None:
        """Write ``head`` (unpaced) and ``body`` through the link: a body of at most
        ``CHUNK_BYTES`` goes out with its head in one write once its slot ends."""
        if len(body) <= CHUNK_BYTES:
            self._wait_for_slot(len(body))
            connection.sendall(head + body)
            return
        if head:
            connection.sendall(head)
        view = memoryview(body)
        for offset in range(0, len(body), CHUNK_BYTES):
            chunk = view[offset : offset + CHUNK_BYTES]
            self._wait_for_slot(len(chunk))
            connection.sendall(chunk)

    def send_file(self, connection: socket.socket, file: BinaryIO, length: int) -> None:
        """Write ``length`` bytes of ``file``, from its position, through the link."""
        while length > 0:
            chunk = file.read(min(CHUNK_BYTES, length))
            if not chunk:
                raise OSError(f"{file.name}: ended {length} bytes early")
            self._wait_for_slot(len(chunk))
            connection.sendall(chunk)
            length -= len(chunk)


def add_link_options(parser: argparse.ArgumentParser) -> None:
    """``--link-delay-ms`` and ``--link-mbit``: the paced server of rows 10."""
    parser.add_argument(
        "--link-delay-ms",
        type=float,
        default=20.0,
        help="slow-link rows: delay before each response, a round trip (default 20)",
    )
    parser.add_argument(
        "--link-mbit",
        type=float,
        default=1000.0,
        help="slow-link rows: the one link's rate that all responses share (default 1000)",
    )
