"""How many files are downloaded at once (``parallel_downloads``): sized by the round trip
to hide, within MIN_PARALLEL_FILES..MAX_PARALLEL_FILES and never more than the files."""

from __future__ import annotations

import math

import pytest

from flashhub_kernels._transport import (
    CPU_SECONDS_PER_FILE,
    MAX_PARALLEL_FILES,
    MIN_PARALLEL_FILES,
    parallel_downloads,
)

ROUND_TRIPS = [0.0, CPU_SECONDS_PER_FILE / 2, CPU_SECONDS_PER_FILE, 0.001, 0.01, 0.1, 1.0, math.inf]


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
@pytest.mark.parametrize("files", [1, 2, 3, 7, 8, 9, 200])
def test_stays_within_the_bounds_and_the_files(files: int, round_trip: float) -> None:
    threads = parallel_downloads(files, round_trip)
    assert min(files, MIN_PARALLEL_FILES) <= threads <= min(files, MAX_PARALLEL_FILES)


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
def test_one_file_gets_one_thread(round_trip: float) -> None:
    assert parallel_downloads(1, round_trip) == 1


def test_an_unmeasured_round_trip_gets_the_most_threads_the_files_allow() -> None:
    assert parallel_downloads(200, math.inf) == MAX_PARALLEL_FILES
    assert parallel_downloads(MAX_PARALLEL_FILES - 1, math.inf) == MAX_PARALLEL_FILES - 1


def test_no_round_trip_gets_the_fewest_threads() -> None:
    assert parallel_downloads(200, 0.0) == MIN_PARALLEL_FILES


def test_a_longer_round_trip_never_gets_fewer_threads() -> None:
    steps = [i * CPU_SECONDS_PER_FILE / 4 for i in range(60)] + [0.01, 0.1, 1.0, math.inf]
    threads = [parallel_downloads(200, round_trip) for round_trip in steps]
    assert threads == sorted(threads)
    assert threads[0] == MIN_PARALLEL_FILES and threads[-1] == MAX_PARALLEL_FILES
    assert len(set(threads)) == MAX_PARALLEL_FILES - MIN_PARALLEL_FILES + 1  # every step taken
