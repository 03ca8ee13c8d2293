"""The stall guard: a transfer whose bytes come too slowly for too long fails its mirror.

A read timeout ends a wait for bytes that never come, not a server that trickles them,
a byte just inside the timeout each time; the guard, as curl's ``--speed-limit`` over a
``--speed-time`` of the read timeout, ends that too.

It judges the bytes each read hands over. A read of an encoded body (``gzip``) goes on
reading until some bytes decode, and a header's comment decodes to nothing, however long
it is: one such read may itself take no longer than the window (:func:`decoding_read`).

The guard's rate also judges a file's tries (:class:`Resumes`): a resume that moves the
file on at that rate or better does not count against those a mirror is given.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from .._utils.logs import logger
from .answers import compressed_keeping_length, range_ignored
from .header_deadline import in_time
from .mirrors import MirrorFailed
from .session import BODY_ERRORS

MIN_BYTES_PER_SECOND = 1024  # curl's --speed-limit, over a --speed-time of the read timeout
MAX_RESUMES = 5


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


class Resumes:
    """The tries of one download of a file from one mirror, in this process.

    ``MAX_RESUMES + 1`` tries that get nowhere fail the mirror; a resume that moves the
    file on at no less than ``MIN_BYTES_PER_SECOND`` does not count, so a server that
    hangs up every few kilobytes but honours ``Range`` still delivers the file. It also
    knows whether the server answered the last request for the rest (``Range``) with
    the whole file: each try then starts over, which the log and the failure say.
    """

    def __init__(self) -> None:
        self._fruitless = 0
        self._ignored_range = False

    def left(self) -> bool:
        """Whether the mirror gets another try."""
        return self._fruitless <= MAX_RESUMES

    def answered(self, url: str, status: int) -> None:
        """Note the answer (``status``) to a request for the rest of the file at ``url``:
        a ``200`` is the whole file again, which starts it over (logged)."""
        self._ignored_range = status == 200
        if self._ignored_range:
            logger.info(
                "%s: the server answered the request for the rest with 200, ignoring "
                "Range: the download starts over from byte 0",
                url,
            )

    def ended(self, *, failed: bool, nbytes: int, seconds: float) -> str:
        """Count a try that ended short of the file, ``failed`` (broken off having not
        continued it, or restarted) or having added ``nbytes`` in ``seconds``; what the
        next try does, for the log."""
        if failed or not (nbytes > 0 and nbytes >= MIN_BYTES_PER_SECOND * seconds):
            self._fruitless += 1
        if self._ignored_range:
            return "asking for the rest again, though the server ignored Range last time"
        return "asking for the rest from there"

    def failure(self) -> MirrorFailed:
        """The error once no try is left."""
        broke_off = (
            f"the transfer broke off {MAX_RESUMES + 1} times (not counting resumes that "
            "moved it on)"
        )
        return range_ignored(broke_off) if self._ignored_range else MirrorFailed(broke_off)
