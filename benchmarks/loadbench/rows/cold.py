"""Cold loads against a download verified by hand (curl, then ``sha256sum -c``), curl,
``requests``, the 0.1.2 release and the requests floor: rows 1a-1d (one big file), 5 (its
peak RSS), 2a-2e (many small files; 2c the same, signed, against unsigned) and 7-7c (a
realistic variant). Every flashhub load runs in a
fresh interpreter (:mod:`loadbench.fresh`), and one more load per run, with timing
spans, gives the breakdown of its time printed with rows 1a, 2a and 7."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..baselines import SHA256_CHECK, curl_config, curl_file, requests_download
from ..bench import Bench
from ..common import MIB
from ..report import format_stat
from ..results import Row, Stat, median, ratio_row
from ..signed import NO_SIGNING, TRUSTED_KEYS_VAR
from ..spans import PHASES, SYNC_ELSEWHERE, THREAD_PARTS
from ..trees import REALISTIC_PY_BYTES, REALISTIC_PY_FILES, REALISTIC_SO, Kernel

# The targets (see the package docstring); printed with each row, never asserted.
TARGET_BIG_VS_CURL = 1.0
TARGET_SMALL_VS_CURL = 2.0
TARGET_REALISTIC_VS_CURL = 1.2
TARGET_RSS_MIB = 64.0
CURL_PARALLEL = ("--parallel", "--parallel-max", "8")
VERIFIED_NOTE = (
    "the baseline is a download verified by hand: one shell command, timed as a whole, "
    f"curl and then `{SHA256_CHECK}` in curl's output directory (SUMS, the files' hex "
    "sha256 digests at the paths curl writes, written before, untimed)"
)
CURL_K = "curl -s --create-dirs -K config"
NO_CURL = "curl baseline skipped: curl or sha256sum is not on PATH"
NO_RELEASE = "skipped: no --release-dir"
RELEASE = "0.1.2 (--release-dir), same fresh-interpreter load"
FLOOR = "requests floor: Session GETs + sha256, same fresh interpreter"
FLOOR_NOTE = (
    "the floor: in the same fresh interpreter, import requests, GET metadata.json on one "
    "Session, stream each file it lists to its path (iter_content(1 MiB)), sha256 on the "
    "way, compared with its digest; no variant choice, locks, staging, version check or "
    "import of the kernel. What any client on requests pays at least"
)

Measurements = dict[str, Callable[[], Any]]


def flashhub_measurements(bench: Bench, kernel: Kernel) -> Measurements:
    """The flashhub side of a cold row: this client's load, its breakdown, and the
    release's load where ``--release-dir`` names one."""
    measurements: Measurements = {
        "flashhub": lambda: bench.cold_load(kernel),
        "breakdown": lambda: bench.breakdown(kernel),
        "floor": lambda: bench.requests_floor(kernel),
    }
    if bench.args.release_dir is not None:
        measurements["release"] = lambda: bench.cold_load(kernel, release=True)
    return measurements


def breakdown_note(breakdowns: Sequence[Mapping[str, float]]) -> str:
    """The medians of :meth:`Bench.breakdown` results: main thread's phases, then what
    the download threads did, summed over them."""

    def ms(name: str) -> float:
        return median([b.get(name, 0.0) for b in breakdowns])

    # Syncing is printed even when nothing was synced: that is a result too.
    phases = [f"{name} {ms(name):.1f}" for name in PHASES if ms(name) >= 0.05 or name == "sync"]
    threads = [f"{name} {ms('threads: ' + name):.1f}" for name in THREAD_PARTS]
    return (
        f"breakdown of flashhub's time (ms, medians of {len(breakdowns)} more loads with "
        f"timing spans, wall {ms('wall'):.1f}): "
        + ", ".join(phases)
        + "; inside transfers, summed over the download threads: "
        + ", ".join(threads)
        + f"; {SYNC_ELSEWHERE} (the newer-version record, off the critical path) "
        + f"{ms(SYNC_ELSEWHERE):.1f}"
    )


def vs_release(
    key: str, name: str, ours: Stat, release: Sequence[Mapping[str, Any]] | None, limit: float
) -> Row:
    """flashhub against the release, judged by ``ours / release < limit`` (0: a reference)."""
    if release is None:
        return Row(key, name, "ms", ours, target=f"({NO_RELEASE})")
    row = Row(key, name, "ms", ours, RELEASE, load_ms(release))
    if not limit:
        row.target = "(reference)"
        return row
    row.target = f"< {limit:.2f}x"
    row.passed = row.ratio is not None and row.ratio < limit
    return row


def vs_floor(
    key: str, name: str, ours: Stat, floor: Sequence[Mapping[str, Any]], *, explain: bool = False
) -> Row:
    """flashhub against the requests floor (a reference row), with the floor's CPU time;
    ``explain``: with the note that says what the floor does."""
    cpu = median([load["cpu_seconds"] * 1e3 for load in floor])
    notes = [FLOOR_NOTE] if explain else []
    notes.append(f"floor CPU {cpu:.1f} ms user+sys")
    return Row(key, name, "ms", ours, FLOOR, load_ms(floor), "(reference)", notes=notes)


def mb_per_s(size: int, milliseconds: float) -> float:
    return size / milliseconds / 1e3


def load_ms(loads: Sequence[Mapping[str, Any]]) -> Stat:
    """Milliseconds of :meth:`Bench.cold_load` results."""
    return Stat.of([load["seconds"] * 1e3 for load in loads])


def cpu_per_request(loads: Sequence[Mapping[str, Any]]) -> str:
    """flashhub's CPU time per request over :meth:`Bench.cold_load` results (medians)."""
    per_request = median([load["cpu_seconds"] * 1e6 / max(1, load["requests"]) for load in loads])
    cpu_ms = median([load["cpu_seconds"] * 1e3 for load in loads])
    requests = median([load["requests"] for load in loads])
    libs = " ".join(loads[0]["libs"]) or "none"
    return (
        f"{per_request:.0f} us/request ({cpu_ms:.1f} ms user+sys over {requests:.0f} GETs, "
        f"including the import of these libraries by get_kernel: {libs})"
    )


def curl_cpu_per_request(runs: Sequence[Mapping[str, float]], requests: int) -> str:
    """A curl process's CPU time per request over :func:`curl_config` results."""
    cpu_ms = median([run["cpu_ms"] for run in runs])
    return f"{cpu_ms * 1e3 / requests:.0f} us/request ({cpu_ms:.1f} ms over {requests} GETs)"


# -- rows 1 and 5: one big file -----------------------------------------------------------


def row_big_file(bench: Bench) -> list[Row]:
    """Rows 1 and 5: cold load of one large file vs curl and requests; its peak RSS."""
    kernel = bench.trees.big
    weights = bench.url(f"{kernel.variant_path}/big_file/weights.bin")
    size = bench.args.size_mib * MIB
    measurements = flashhub_measurements(bench, kernel)
    measurements["requests"] = lambda: requests_download(bench, weights)
    if bench.curl:
        digest = kernel.files["big_file/weights.bin"]
        measurements["curl"] = lambda: curl_file(bench, weights, size, sha256=digest)
        measurements["plain curl"] = lambda: curl_file(bench, weights, size)
    results = bench.rounds(f"row 1: cold load of {bench.args.size_mib} MiB", measurements)
    name = f"cold load, 1 file of {bench.args.size_mib} MiB"
    ours = load_ms(results["flashhub"])
    versus_curl = _big_vs_curl(bench, name, ours, results.get("curl"), results.get("plain curl"))
    versus_curl.notes.append(breakdown_note(results["breakdown"]))
    release = vs_release("1c", name, ours, results.get("release"), 0)
    if release.baseline is not None:
        rate = mb_per_s(size, release.baseline.median)
        release.notes.append(f"{_flashhub_rate(bench, ours)}, 0.1.2 {rate:.0f} MB/s")
    return [
        versus_curl,
        _big_vs_requests(bench, name, ours, results["requests"]),
        release,
        vs_floor("1d", name, ours, results["floor"]),
        _big_rss(bench, results["flashhub"], results["requests"]),
    ]


def _flashhub_rate(bench: Bench, ours: Stat) -> str:
    return f"flashhub {mb_per_s(bench.args.size_mib * MIB, ours.median):.0f} MB/s"


def _big_vs_curl(
    bench: Bench, name: str, ours: Stat, curl: list[float] | None, plain: list[float] | None
) -> Row:
    row = Row("1a", name, "ms", ours, f"curl -s -o FILE && {SHA256_CHECK}")
    if curl is None or plain is None:
        row.notes.append(NO_CURL)
    else:
        row.baseline = Stat.of(curl)
        curl_rate = mb_per_s(bench.args.size_mib * MIB, row.baseline.median)
        row.notes += [
            VERIFIED_NOTE,
            f"{_flashhub_rate(bench, ours)}, curl + sha256sum {curl_rate:.0f} MB/s",
            _plain_curl("curl -s -o FILE", [{"ms": ms} for ms in plain]),
        ]
    return ratio_row(row, TARGET_BIG_VS_CURL)


def _plain_curl(command: str, runs: Sequence[Mapping[str, float]]) -> str:
    """The note on the same curl without the check (a reference)."""
    return f"the same without the check, `{command}` alone: {format_stat(_curl_ms(runs), 'ms')}"


def _big_vs_requests(
    bench: Bench, name: str, ours: Stat, plain: Sequence[Mapping[str, Any]]
) -> Row:
    baseline = load_ms(plain)
    plain_rate = mb_per_s(bench.args.size_mib * MIB, baseline.median)
    note = f"{_flashhub_rate(bench, ours)}, requests {plain_rate:.0f} MB/s"
    label = "requests iter_content(1 MiB), no hash"
    return Row("1b", name, "ms", ours, label, baseline, "(reference)", notes=[note])


def _big_rss(
    bench: Bench, ours: Sequence[Mapping[str, Any]], plain: Sequence[Mapping[str, Any]]
) -> Row:
    growth = Stat.of([r["rss_growth_mib"] for r in ours])
    before = Stat.of([r["rss_before_mib"] for r in ours]).median
    note = (
        f"peak RSS during get_kernel minus RSS just before it ({before:.0f} MiB, torch "
        f"imported), in the row-1a loads; peak = {ours[0]['rss_method']}"
    )
    return Row(
        "5",
        f"peak RSS growth, cold load of {bench.args.size_mib} MiB",
        "MiB",
        growth,
        "requests download, same measure",
        Stat.of([r["rss_growth_mib"] for r in plain]),
        target=f"< {TARGET_RSS_MIB:.0f} MiB (max)",
        passed=growth.max < TARGET_RSS_MIB,
        notes=[note],
        has_ratio=False,
    )


# -- row 2: many small files ----------------------------------------------------------------


def row_small_files(bench: Bench) -> list[Row]:
    """Row 2: cold load of many small files vs one curl process fetching the same URLs
    and ``sha256sum -c`` of them (2a), curl alone with 8 transfers at once (2b);
    and signed, with its key trusted, vs unsigned (2c)."""
    kernel = bench.trees.small
    count = len(kernel.files)
    measurements = flashhub_measurements(bench, kernel)
    if bench.trees.trusted_key is not None:
        measurements["signed"] = lambda: bench.cold_load(kernel, signed=True)
    if bench.curl:
        measurements["sequential"] = lambda: curl_config(bench, kernel, verify=True)
        measurements["plain"] = lambda: curl_config(bench, kernel)
        measurements["parallel"] = lambda: curl_config(bench, kernel, CURL_PARALLEL)
    results = bench.rounds(f"row 2: cold load of {count} small files", measurements)

    name = f"cold load, {count} files of 10 KiB"
    ours = load_ms(results["flashhub"])
    signed = signed_row("2c", name, results["flashhub"], results.get("signed"), "2a")
    cpu = "client CPU (user+sys of the loading process, during get_kernel): flashhub " + (
        cpu_per_request(results["flashhub"])
    )
    release = vs_release("2d", name, ours, results.get("release"), 0)
    if release.baseline is not None:
        release.notes.append(f"0.1.2 CPU {cpu_per_request(results['release'])}")
    breakdown = breakdown_note(results["breakdown"])
    floor = vs_floor("2e", name, ours, results["floor"], explain=True)
    if not bench.curl:
        row = Row("2a", name, "ms", ours, f"{CURL_K} && {SHA256_CHECK}", target="(skipped)")
        row.notes += [NO_CURL, cpu, breakdown]
        return [row, signed, release, floor]
    sequential = _small_vs_sequential(name, ours, results["sequential"], count, cpu)
    sequential.notes.append(_plain_curl(CURL_K, results["plain"]))
    sequential.notes.append(breakdown)
    parallel = _small_vs_parallel(name, ours, results["parallel"], count)
    return [sequential, parallel, signed, release, floor]


def _curl_ms(runs: Sequence[Mapping[str, float]]) -> Stat:
    return Stat.of([run["ms"] for run in runs])


def _small_vs_sequential(
    name: str, ours: Stat, sequential: Sequence[Mapping[str, float]], count: int, cpu: str
) -> Row:
    notes = [
        f"{VERIFIED_NOTE}; curl is one process fetching the same URLs",
        f"{cpu}; curl -K and sha256sum {curl_cpu_per_request(sequential, count)}",
    ]
    baseline = _curl_ms(sequential)
    row = Row("2a", name, "ms", ours, f"{CURL_K} && {SHA256_CHECK}", baseline, notes=notes)
    return ratio_row(row, TARGET_SMALL_VS_CURL)


def _small_vs_parallel(
    name: str, ours: Stat, parallel: Sequence[Mapping[str, float]], count: int
) -> Row:
    notes = [
        "curl with 8 transfers at once, no check: a stricter comparison, not a target",
        f"curl --parallel CPU: {curl_cpu_per_request(parallel, count)}",
    ]
    label = "curl -s --create-dirs --parallel-max 8 -K config"
    return Row("2b", name, "ms", ours, label, _curl_ms(parallel), "(reference)", notes=notes)


def signed_row(
    key: str,
    name: str,
    unsigned: Sequence[Mapping[str, Any]],
    signed: Sequence[Mapping[str, Any]] | None,
    unsigned_key: str,
) -> Row:
    """Row ``key``: what verifying signatures adds to the cold load of row
    ``unsigned_key`` (``signed`` None: the run signed nothing)."""
    name += ", signed, key trusted"
    if signed is None:
        return Row(key, name, "ms", None, target=f"({NO_SIGNING})")
    notes = [
        f"the {unsigned_key} load of the kernel signed, with {TRUSTED_KEYS_VAR} set to the "
        "run's key: it fetches each document's .sig beside it and verifies their Ed25519 "
        f"signatures before any file; GETs per load: "
        f"{median([load['requests'] for load in signed]):.0f} against "
        f"{median([load['requests'] for load in unsigned]):.0f} unsigned",
        f"client CPU: signed {cpu_per_request(signed)}; unsigned {cpu_per_request(unsigned)}",
    ]
    baseline = f"the same load, unsigned, no key ({unsigned_key})"
    return Row(
        key, name, "ms", load_ms(signed), baseline, load_ms(unsigned), "(reference)", notes=notes
    )


# -- row 7: a realistic variant ---------------------------------------------------------------


def row_realistic(bench: Bench) -> list[Row]:
    """Row 7: cold load of a realistic variant (one .so, 10 Python files) vs ``curl -K``
    followed by ``sha256sum -c``."""
    kernel = bench.trees.realistic
    mib = bench.args.realistic_mib
    count = len(kernel.files)
    measurements = flashhub_measurements(bench, kernel)
    if bench.curl:
        measurements["curl"] = lambda: curl_config(bench, kernel, verify=True)
        measurements["plain curl"] = lambda: curl_config(bench, kernel)
    results = bench.rounds(f"row 7: cold load of a realistic variant ({mib} MiB)", measurements)

    ours = results["flashhub"]
    size = sum(bench.server.size(path) for path in kernel.file_paths())
    name = f"cold load, realistic variant: {mib} MiB .so + {len(REALISTIC_PY_FILES)} .py files"
    row = Row("7", name, "ms", load_ms(ours), f"{CURL_K} && {SHA256_CHECK}")
    row.notes.append(
        f"package realistic/: {REALISTIC_SO} ({mib} MiB of random bytes) and "
        f"{len(REALISTIC_PY_FILES)} Python files of about {REALISTIC_PY_BYTES // 1024} KiB "
        f"(__init__.py among them); curl fetches the same {count} URLs, "
        "one url/output pair each in its config"
    )
    rate = f"flashhub {mb_per_s(size, row.ours.median):.0f} MB/s" if row.ours else ""
    cpu = f"flashhub CPU {cpu_per_request(ours)}"
    if bench.curl:
        curl = results["curl"]
        row.baseline = _curl_ms(curl)
        row.notes.append(VERIFIED_NOTE)
        row.notes.append(_plain_curl(CURL_K, results["plain curl"]))
        rate += f", curl + sha256sum {mb_per_s(size, row.baseline.median):.0f} MB/s"
        row.notes.append(rate)
        row.notes.append(f"{cpu}; curl + sha256sum CPU {curl_cpu_per_request(curl, count)}")
    else:
        row.notes += [NO_CURL, f"{rate}; {cpu}"]
    row.notes.append(breakdown_note(results["breakdown"]))
    assert row.ours is not None
    release = vs_release("7b", name, row.ours, results.get("release"), 0)
    floor = vs_floor("7c", name, row.ours, results["floor"])
    return [ratio_row(row, TARGET_REALISTIC_VS_CURL), release, floor]
