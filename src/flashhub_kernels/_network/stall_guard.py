"""The stall guard: a transfer whose bytes come too slowly for too long fails its mirror.

A read timeout ends a wait for bytes that never come, not a server that trickles them,
a byte just inside the timeout each time; the guard, as curl's ``--speed-limit`` over a
``--speed-time`` of the read timeout, ends that too.

It judges the bytes each read hands over. A read of an encoded body (``gzip``) goes on
reading until some bytes decode, and a header's comment decodes to nothing, however long
it is: one such read may itself take no longer than the window (:func:`decoding_read`).
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from .answers import compressed_keeping_length
from .header_deadline import in_time
from .mirrors import MirrorFailed
from .session import BODY_ERRORS

MIN_BYTES_PER_SECOND = 1024  # curl's --speed-limit, over a --speed-time of the read timeout


class StallGuard:
    """Tells when a transfer has averaged under ``MIN_BYTES_PER_SECOND`` for ``window`` s.

    It keeps a few (time, bytes) samples, a quarter of a second apart, reaching back
    just over one window, and compares the bytes received since the oldest with the
    minimum rate. One guards one response's body, from its headers on: the wait for an
    answer (a ``Retry-After`` included) is the read timeout's, the header deadline's and
    the retries' business. The window is the read timeout, the longest a read waits: a
    longer time between two reads is the process's (stopped by Ctrl-Z or a debugger),
    not the server's, and is left out.
    """

    SAMPLE_EVERY = 0.25

    def __init__(self, window: float, now: float) -> None:
        self.window = window
        self._received = 0
        self._samples: deque[tuple[float, int]] = deque([(now, 0)])
        self._last = now

    def stalled(self, nbytes: int, now: float) -> bool:
        """Count ``nbytes`` received at ``now``; whether the transfer is too slow."""
        self._received += nbytes
        if (gap := now - self._last) > self.window:
            self._samples = deque((then + gap, received) for then, received in self._samples)
        self._last = now
        samples = self._samples
        if now - samples[-1][0] >= self.SAMPLE_EVERY:
            samples.append((now, self._received))
        while len(samples) > 1 and samples[1][0] <= now - self.window:
            samples.popleft()
        since, received_then = samples[0]
        elapsed = now - since
        return elapsed >= self.window and self._received - received_then < (
            MIN_BYTES_PER_SECOND * elapsed
        )

    def check(self, nbytes: int) -> None:
        """Count ``nbytes`` received now; raise :class:`MirrorFailed` if the transfer is
        too slow."""
        if self.stalled(nbytes, time.monotonic()):
            raise self.failure()

    def failure(self) -> MirrorFailed:
        """The error of a transfer too slow."""
        return MirrorFailed(
            f"stalled: under {MIN_BYTES_PER_SECOND // 1024} KiB/s for "
            f"{self.window:g} s (FLASHHUB_READ_TIMEOUT)"
        )


def decoding_read(raw: Any, guard: StallGuard) -> Callable[[int], bytes]:
    """``raw.read1`` of an encoded body, each read given ``guard``'s window: past it, the
    body's socket is cut (through a duplicate of its descriptor: the connection has
    handed its socket to the response), and the error is the guard's.

    A body that stops (cut so, or broken off) once it has decoded to exactly as many
    bytes as its ``Content-Length`` announced, fewer of them received, was compressed
    by an edge that kept the length of the body it compressed: the error says so
    (:func:`~.answers.compressed_keeping_length`), where it would blame a stall."""
    decoded = 0

    def read(amt: int) -> bytes:
        nonlocal decoded
        try:
            data = _read_in_window(raw, guard, amt)
        except (MirrorFailed, *BODY_ERRORS):
            announced = raw.headers.get("Content-Length", "").strip()
            if announced == str(decoded) and decoded > raw.tell():
                encoding = raw.headers.get("Content-Encoding", "")
                raise compressed_keeping_length(encoding, decoded, raw.tell()) from None
            raise
        decoded += len(data)
        return data

    return read


def _read_in_window(raw: Any, guard: StallGuard, amt: int) -> bytes:
    """``raw.read1(amt)``, decoded, within ``guard``'s window."""
    try:
        fd = os.dup(raw.fileno())
    except (AttributeError, OSError):  # no socket left: the body is in, read at once
        return bytes(raw.read1(amt, decode_content=True))
    with socket.socket(fileno=fd) as sock:
        data: bytes = in_time(
            guard.window,
            SimpleNamespace(sock=sock),
            lambda: raw.read1(amt, decode_content=True),
            lambda _window: guard.failure(),
        )
    return data
