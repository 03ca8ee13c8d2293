"""Rows 10a-10e: cold loads over a slow link. The same tree, served by a second loopback
server that waits a round trip before each response and sends every body through one
shared link (:mod:`loadbench.link`, ``--link-delay-ms``, ``--link-mbit``): the realistic
variant (10a, 10c; as row 7) and the small-files kernel (10b, 10d; as row 2), each
against one ``curl --parallel`` process fetching the same URLs (10a, 10b) and against the
0.1.2 release (10c, 10d); the small files signed, with the key trusted, against
unsigned (10e, as row 2c: the round trips a signature check adds); and the warm
kernel's 3 files from a version without ``variants.json``, which the client probes
for, against the same files listed (10f). Where the loopback
rows measure a client's work per byte and per file, these measure its round trips: what
it waits for before the first byte of a file."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..baselines import curl_config
from ..bench import Bench
from ..probes import child_probing
from ..results import Row, Stat, median, ratio_row
from ..trees import REALISTIC_PY_FILES, VARIANT, Kernel
from .cold import (
    CURL_PARALLEL,
    NO_CURL,
    Measurements,
    breakdown_note,
    load_ms,
    signed_row,
    vs_release,
)

TARGET_VS_CURL = 1.0
TARGET_VS_RELEASE = 1.0  # faster than the release it replaces
CURL_LABEL = "curl -s --create-dirs --parallel --parallel-max 8 -K config"
CURL_CONNECTIONS = 8  # --parallel-max


def row_slow_link(bench: Bench) -> list[Row]:
    """Rows 10a-10d: the realistic variant and the small files over the slow link, against
    curl --parallel and the 0.1.2 release."""
    slow = bench.over_link()
    mib = bench.args.realistic_mib
    realistic = _over_link(
        slow,
        bench.trees.realistic,
        ("10a", "10c"),
        f"realistic variant: {mib} MiB .so + {len(REALISTIC_PY_FILES)} .py files",
    )
    count = len(bench.trees.small.files)
    small = _over_link(
        slow, bench.trees.small, ("10b", "10d", "10e"), f"{count} files of 10 KiB", signed=True
    )
    return [*realistic, *small, _unlisted(slow)]


def _unlisted(slow: Bench) -> Row:
    """10f: a version without variants.json, probed, against one with it."""
    unlisted, listed = slow.trees.unlisted, slow.trees.warm
    results = slow.rounds(
        "row 10f: a version without variants.json over a slow link",
        {"unlisted": lambda: slow.cold_load(unlisted), "listed": lambda: slow.cold_load(listed)},
    )
    candidates, at_once = slow.children.run(child_probing)
    notes = [
        f"the {len(unlisted.files)} files of the warm kernel, published without variants.json: "
        f"the client probes the metadata.json of the {candidates} variant names this system "
        f"could load, best first, {at_once} at a time ({VARIANT} is the last); GETs "
        f"per load: unlisted {_gets(results['unlisted'])}, listed {_gets(results['listed'])}",
    ]
    return Row(
        "10f",
        f"cold load over a slow link, {len(unlisted.files)} files, no variants.json (probed)",
        "ms",
        load_ms(results["unlisted"]),
        "the same files, variants.json published",
        load_ms(results["listed"]),
        "(reference)",
        notes=notes,
    )


def _over_link(
    slow: Bench, kernel: Kernel, keys: tuple[str, ...], what: str, *, signed: bool = False
) -> list[Row]:
    """The rows of one kernel: against curl --parallel, against the release, and with
    ``signed``, signed against unsigned (keys in that order)."""
    measurements: Measurements = {
        "flashhub": lambda: slow.cold_load(kernel),
        "breakdown": lambda: slow.breakdown(kernel),
    }
    if signed and slow.trees.trusted_key is not None:
        measurements["signed"] = lambda: slow.cold_load(kernel, signed=True)
    if slow.args.release_dir is not None:
        measurements["release"] = lambda: slow.cold_load(kernel, release=True)
    if slow.curl:
        measurements["curl"] = lambda: curl_config(slow, kernel, CURL_PARALLEL)
    results = slow.rounds(f"row {keys[0]}-{keys[1]}: {what} over a slow link", measurements)

    name = f"cold load over a slow link, {what}"
    ours = load_ms(results["flashhub"])
    versus_curl = Row(keys[0], name, "ms", ours, CURL_LABEL)
    if "curl" in results:
        versus_curl.baseline = Stat.of([run["ms"] for run in results["curl"]])
    else:
        versus_curl.notes.append(NO_CURL)
    versus_curl.notes += [
        _link_note(slow, kernel, results["flashhub"]),
        breakdown_note(results["breakdown"]),
    ]
    release = vs_release(keys[1], name, ours, results.get("release"), TARGET_VS_RELEASE)
    if "release" in results:
        release.notes.append(f"GETs per load: 0.1.2 {_gets(results['release'])}")
    rows = [ratio_row(versus_curl, TARGET_VS_CURL), release]
    if signed:
        unsigned = results["flashhub"]
        rows.append(signed_row(keys[2], name, unsigned, results.get("signed"), keys[0]))
    return rows


def _link_note(slow: Bench, kernel: Kernel, ours: Sequence[Mapping[str, Any]]) -> str:
    """What the link is, the GETs of a load, and the least time the link allows."""
    link = slow.server.link
    assert link is not None, "the slow-link rows run against the paced server"
    size = sum(slow.server.size(path) for path in kernel.file_paths())
    count = len(kernel.files)
    # HTTP/1.1 without pipelining: a connection waits one delay per response.
    waves = -(-count // CURL_CONNECTIONS)
    return (
        f"the loopback server ({slow.server.handler} handler) paced: {link}; GETs per load: "
        f"flashhub {_gets(ours)}, curl {count}; the least time the link allows for the "
        f"variant's files: {size} bytes at {link.mbit:g} Mbit/s + one delay = "
        f"{link.least_seconds(size) * 1e3:.1f} ms; on {CURL_CONNECTIONS} connections (as "
        f"curl's), one response at a time on each: the bytes + {waves} delays = "
        f"{link.least_seconds(size, waves) * 1e3:.1f} ms"
    )


def _gets(loads: Sequence[Mapping[str, Any]]) -> str:
    return f"{median([load['requests'] for load in loads]):.0f}"
