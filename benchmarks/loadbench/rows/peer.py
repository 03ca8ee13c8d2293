"""Rows 9a-9d: flashhub against Hugging Face kernels 0.19.1 (HF, :mod:`loadbench.peer`),
both loading the realistic variant of row 7 and the small files of row 2, each in fresh
interpreters: cold (9a, 9b: empty caches, flashhub from the run's CDN, HF from the run's
Hub) and warm (9c, 9d: caches filled by one cold load, online as a user runs them)."""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

from ..bench import Bench, settle
from ..fresh import fresh_load
from ..peer import BRANCH, HfVenv, HubSide, hf_load
from ..results import Row, median, ratio_row
from ..trees import REALISTIC_PY_FILES, Kernel
from .cold import load_ms

# The targets (see the package docstring); printed with each row, never asserted.
TARGET_COLD_VS_HF = 0.25
TARGET_WARM_VS_HF = 0.03

COLD_METHOD = (
    "each load a fresh interpreter that imports torch, then times the call: flashhub "
    "get_kernel(repo, version=1) from the run's CDN into an empty cache; HF "
    f"get_kernel(repo, revision={BRANCH!r}, trust_remote_code=True) from the run's loopback "
    "Hub (tests/support/hub_server.py: the same files, a kernel builder's metadata.json, "
    f"branch {BRANCH}) with HF_HOME empty, HF_ENDPOINT at the Hub, telemetry off. "
    f"revision={BRANCH!r} asks the Hub for the branch's commit (version=1 lists the refs "
    "instead: one request either way); trust_remote_code=True because the run's org is no "
    "trusted publisher (for one, a default call asks the Hub for the org's overview too)"
)
WARM_METHOD = (
    "the same calls in fresh interpreters, each side's cache filled by one cold load "
    "before the runs; HF online, as by default: it asks the Hub for the revision and the "
    "list of build variants before it loads from its cache"
)
Loads = Sequence[Mapping[str, Any]]


def row_peer(bench: Bench) -> list[Row]:
    """Rows 9a-9d: cold and warm loads of flashhub and HF, the realistic variant and the
    small files."""
    realistic, small = bench.trees.realistic, bench.trees.small
    kernels = {
        ("9a", "9c"): (
            realistic,
            f"realistic variant: {bench.args.realistic_mib} MiB .so + "
            f"{len(REALISTIC_PY_FILES)} .py files",
        ),
        ("9b", "9d"): (small, f"{len(small.files)} files of 10 KiB"),
    }
    if isinstance(bench.peer, str):
        return [
            row for keys, (_, what) in kernels.items() for row in _skipped(keys, what, bench.peer)
        ]
    with HubSide.serving(bench.trees.cdn, [kernel for kernel, _ in kernels.values()]) as hub:
        return [
            row
            for keys, (kernel, what) in kernels.items()
            for row in _versus_hf(bench, bench.peer, hub, kernel, keys, what)
        ]


def _names(what: str) -> tuple[str, str]:
    return f"cold load vs HF kernels, {what}", f"warm get_kernel vs HF kernels, {what}"


def _skipped(keys: tuple[str, str], what: str, reason: str) -> list[Row]:
    return [
        Row(key, name, "ms", None, target=f"(skipped: {reason})", notes=[f"skipped: {reason}"])
        for key, name in zip(keys, _names(what), strict=True)
    ]


class _Caches:
    """The warm caches of one kernel: flashhub's and HF's, each filled by one cold load."""

    def __init__(self, bench: Bench, venv: HfVenv, hub: HubSide, kernel: Kernel) -> None:
        self.bench, self.venv, self.hub, self.kernel = bench, venv, hub, kernel
        self.flashhub = bench.fresh_dir("warm-cache")
        self.hf = bench.fresh_dir("hf-warm-home")
        fresh_load(bench.env(self.flashhub), kernel.repo_id, bench.client)
        hf_load(venv, hub, self.hf, kernel.repo_id)

    def flashhub_warm(self) -> dict[str, Any]:
        settle()
        self.bench.server.reset()
        result = fresh_load(self.bench.env(self.flashhub), self.kernel.repo_id, self.bench.client)
        result["requests"] = sum(self.bench.server.gets().values())
        return result

    def hf_warm(self) -> dict[str, Any]:
        settle()
        return hf_load(self.venv, self.hub, self.hf, self.kernel.repo_id)

    def hf_cold(self) -> dict[str, Any]:
        home = self.bench.fresh_dir("hf-home")
        settle()
        result = hf_load(self.venv, self.hub, home, self.kernel.repo_id)
        self.bench.discard(home)
        return result

    def discard(self) -> None:
        self.bench.discard(self.flashhub)
        self.bench.discard(self.hf)


def _versus_hf(
    bench: Bench, venv: HfVenv, hub: HubSide, kernel: Kernel, keys: tuple[str, str], what: str
) -> list[Row]:
    try:
        caches = _Caches(bench, venv, hub, kernel)
    except RuntimeError as failed:  # HF could not load it: say why, as a skipped row
        lines = [line for line in str(failed).splitlines() if line.strip()]
        return _skipped(keys, what, f"HF's first load failed: {lines[-1] if lines else '?'}")
    results = bench.rounds(
        f"row 9: flashhub and HF kernels {venv.kernels}, {what}",
        {
            "flashhub cold": lambda: bench.cold_load(kernel),
            "hf cold": caches.hf_cold,
            "flashhub warm": caches.flashhub_warm,
            "hf warm": caches.hf_warm,
        },
    )
    caches.discard()
    cold_name, warm_name = _names(what)
    call = f"HF kernels {venv.kernels} get_kernel(revision={BRANCH!r}), fresh interpreter"
    cold = Row(keys[0], cold_name, "ms", load_ms(results["flashhub cold"]), call)
    cold.baseline = load_ms(results["hf cold"])
    cold.notes += _notes(results["flashhub cold"], results["hf cold"], "cold")
    if keys[0] == "9a":
        cold.notes.insert(0, COLD_METHOD)
    warm = Row(keys[1], warm_name, "ms", load_ms(results["flashhub warm"]), f"{call}, warm")
    warm.baseline = load_ms(results["hf warm"])
    warm.notes += _notes(results["flashhub warm"], results["hf warm"], "warm")
    if keys[1] == "9c":
        warm.notes.insert(0, WARM_METHOD)
    return [ratio_row(cold, TARGET_COLD_VS_HF), ratio_row(warm, TARGET_WARM_VS_HF)]


def _notes(ours: Loads, hf: Loads, kind: str) -> list[str]:
    """What each side's loads asked their server, and their CPU time (medians)."""
    kinds: collections.Counter[str] = collections.Counter()
    for load in hf:
        kinds.update(load["requests"])
    hf_requests = median([sum(load["requests"].values()) for load in hf])
    per_kind = ", ".join(f"{count / len(hf):g} {name}" for name, count in sorted(kinds.items()))
    flashhub_requests = median([load["requests"] for load in ours])
    cpu = median([load["cpu_seconds"] * 1e3 for load in ours])
    hf_cpu = median([load["cpu_seconds"] * 1e3 for load in hf])
    return [
        f"{kind}: requests per load: HF {hf_requests:g} to the Hub ({per_kind}); "
        f"flashhub {flashhub_requests:g} GETs to the CDN",
        f"{kind}: CPU user+sys during the load: flashhub {cpu:.1f} ms, HF {hf_cpu:.1f} ms",
    ]
