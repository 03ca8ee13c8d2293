"""Row 4: ``--procs`` processes cold-load one kernel at once: their wall time (4a) and the
GETs per file the server saw (4b: single flight, one GET each)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..bench import Bench, settle
from ..probes import child_crowd_load
from ..results import Row, Stat
from ..trees import PREFIX


def row_crowd(bench: Bench) -> list[Row]:
    """Row 4: ``--procs`` processes cold-load one kernel at once; single flight per file."""
    results = bench.rounds(
        f"row 4: {bench.args.procs} processes at once",
        {
            "crowd": lambda: crowd_load(bench),
            "single": lambda: bench.cold_load(bench.trees.crowd)["seconds"] * 1e3,
        },
    )
    return [_wall(bench, results["crowd"], results["single"]), _gets(bench, results["crowd"])]


def crowd_load(bench: Bench) -> dict[str, Any]:
    """One run: ``--procs`` children start a cold ``get_kernel`` together at a barrier, into
    one fresh cache; their wall time and the GETs the server saw."""
    kernel, procs = bench.trees.crowd, bench.args.procs
    cache = bench.fresh_dir("crowd-cache")
    barrier = bench.children.ctx.Barrier(procs)
    settle()
    bench.server.reset()
    call = (child_crowd_load, (bench.env(cache), kernel.repo_id, barrier))
    results = bench.children.run_many([call] * procs)
    gets = bench.server.gets()
    bench.discard(cache)
    metadata = f"{kernel.variant_path}/metadata.json"
    variants = f"/{PREFIX}/{kernel.repo_id}/v1/variants.json"
    return {
        "wall_ms": (max(r["end"] for r in results) - min(r["start"] for r in results)) * 1e3,
        "max_gets": max(gets[path] for path in kernel.file_paths()),
        "docs": (gets[metadata], gets[variants]),
    }


def _wall(bench: Bench, crowds: Sequence[Mapping[str, Any]], single: Sequence[float]) -> Row:
    note = (
        f"kernel of {len(bench.trees.crowd.files)} files ({bench.args.size_mib} MiB + 10 KiB "
        "files); children start together at a barrier; wall = last end - first start"
    )
    wall = Stat.of([c["wall_ms"] for c in crowds])
    name = f"{bench.args.procs} processes cold-load at once: wall"
    baseline = "1 process, same kernel"
    return Row("4a", name, "ms", wall, baseline, Stat.of(single), "(reference)", notes=[note])


def _gets(bench: Bench, crowds: Sequence[Mapping[str, Any]]) -> Row:
    note = "max over the variant's files; GETs of (metadata.json, variants.json) per run: " + (
        ", ".join(f"({m}, {v})" for m, v in (c["docs"] for c in crowds))
    )
    return Row(
        "4b",
        f"{bench.args.procs} processes at once: GETs per file",
        "GET",
        Stat.of([c["max_gets"] for c in crowds]),
        target="== 1 per file",
        passed=max(c["max_gets"] for c in crowds) == 1,
        notes=[note],
    )
