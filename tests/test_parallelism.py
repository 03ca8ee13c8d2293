"""How many files are downloaded at once (``parallel_downloads``): sized by the wait for an
answer to hide (a document fetch's wall time less its thread's CPU time), within
MIN_PARALLEL_FILES..MAX_PARALLEL_FILES and never more than the files."""

from __future__ import annotations

import math
import threading
import time

import pytest

import flashhub_kernels as fk
from flashhub_kernels._network.transport import (
    CPU_SECONDS_PER_FILE,
    MAX_PARALLEL_FILES,
    MIN_PARALLEL_FILES,
    parallel_downloads,
)
from support.cdn_server import CdnHandler, CdnServer, Fault, delayed
from support.trees import kernel_files, write_variant

REPO = "acme/tensor-tricks"
VARIANT = "torch-universal"
# (files, wait in seconds, threads): the bounds, one file, and the waits between.
TABLE = [
    (1, 0.0, 1),
    (1, math.inf, 1),  # one file: one thread, however far the CDN
    (2, 0.0, MIN_PARALLEL_FILES),
    (200, 0.0, MIN_PARALLEL_FILES),  # nothing to hide: the fewest
    (200, 0.9 * CPU_SECONDS_PER_FILE, MIN_PARALLEL_FILES),  # no file's CPU time fits
    (200, CPU_SECONDS_PER_FILE, 2),
    (200, 2 * CPU_SECONDS_PER_FILE, 3),
    (200, 3.5 * CPU_SECONDS_PER_FILE, 4),  # 1 + whole files' CPU time in the wait
    (200, 0.01, MAX_PARALLEL_FILES),  # a distant CDN: the most
    (200, math.inf, MAX_PARALLEL_FILES),  # unmeasured: assume distant
    (5, 1.0, 5),  # never more threads than files
]


@pytest.mark.parametrize(("files", "wait", "threads"), TABLE)
def test_threads_for_files_and_wait(files: int, wait: float, threads: int) -> None:
    assert parallel_downloads(files, wait) == threads


def test_several_files_get_a_second_thread_even_from_loopback() -> None:
    """The disk's waits (creating, writing) and the server's are there to fill."""
    assert MIN_PARALLEL_FILES == 2
    assert parallel_downloads(11, 0.0) == 2
    assert parallel_downloads(1, 0.0) == 1  # nothing to put beside it


def test_an_unmeasured_wait_gets_the_most_threads_the_files_allow() -> None:
    assert parallel_downloads(200, math.inf) == MAX_PARALLEL_FILES
    assert parallel_downloads(MAX_PARALLEL_FILES - 1, math.inf) == MAX_PARALLEL_FILES - 1


def test_no_wait_gets_the_fewest_threads() -> None:
    assert parallel_downloads(200, 0.0) == MIN_PARALLEL_FILES


def test_a_longer_wait_never_gets_fewer_threads() -> None:
    steps = [i * CPU_SECONDS_PER_FILE / 4 for i in range(60)] + [0.01, 0.1, 1.0, math.inf]
    threads = [parallel_downloads(200, wait) for wait in steps]
    assert threads == sorted(threads)
    assert threads[0] == MIN_PARALLEL_FILES and threads[-1] == MAX_PARALLEL_FILES
    assert len(set(threads)) == MAX_PARALLEL_FILES - MIN_PARALLEL_FILES + 1  # every step taken


def test_a_distant_cdn_gets_the_most_downloads_at_once(cdn: CdnServer) -> None:
    """End to end: documents that wait long for their answers widen the pool for the files."""
    files = kernel_files("tensor_tricks", "wide")
    files.update({f"tensor_tricks/data/part{i}.bin": bytes([i]) * 100 for i in range(20)})
    write_variant(cdn.root, REPO, 1, VARIANT, files)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')
    base = f"kernels/{REPO}/v1"
    # 50 ms round trips: a CDN far away, as seen from the documents fetched first.
    cdn.inject(f"{base}/variants.json", delayed(0.05))
    cdn.inject(f"{base}/build/{VARIANT}/metadata.json", delayed(0.05))
    in_flight = InFlight()
    for relpath in files:
        cdn.inject(f"{base}/build/{VARIANT}/{relpath}", in_flight.slow_fault(0.2))

    assert fk.get_kernel(REPO, version=1).marker() == "wide"
    assert in_flight.most == MAX_PARALLEL_FILES


class InFlight:
    """Counts the file requests the server is answering at once."""

    def __init__(self) -> None:
        self.now = self.most = 0
        self._lock = threading.Lock()

    def slow_fault(self, seconds: float) -> Fault:
        def fault(handler: CdnHandler, body: bytes) -> None:
            with self._lock:
                self.now += 1
                self.most = max(self.most, self.now)
            time.sleep(seconds)
            with self._lock:
                self.now -= 1
            handler.send_file(body)

        return fault


def test_small_files_download_two_at_once_from_a_near_cdn(cdn: CdnServer) -> None:
    """End to end: loopback answers at once, and the files still download two at once,
    one beside the other's disk and server waits (here, a large one beside the small
    ones). (On a loaded machine loopback may answer slowly enough to earn a third: the
    exact sizing is ``parallel_downloads``'s, tested above.)"""
    files = kernel_files("tensor_tricks", "beside")
    files["tensor_tricks/weights.bin"] = bytes(range(256)) * (4 << 20 >> 8)
    files.update({f"tensor_tricks/data/part{i}.bin": bytes([i]) * 100 for i in range(5)})
    write_variant(cdn.root, REPO, 1, VARIANT, files, with_sizes=True)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')
    in_flight = InFlight()
    for relpath in files:
        cdn.inject(f"kernels/{REPO}/v1/build/{VARIANT}/{relpath}", in_flight.slow_fault(0.1))

    assert fk.get_kernel(REPO, version=1).marker() == "beside"
    assert in_flight.most >= 2
