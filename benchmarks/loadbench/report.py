"""What the benchmark prints: the header, one table of the rows (medians, spread, ratios,
targets and pass/FAIL) and their notes; and the same as a JSON document for ``--json``."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .results import Row, Stat

HEADER = ("row", "measured", "flashhub", "baseline", "baseline value", "ratio", "target", "result")


def _num(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_stat(stat: Stat | None, unit: str) -> str:
    """``median unit [min-max]`` (no spread for a single value), or ``-``."""
    if stat is None:
        return "-"
    spread = f"[{_num(stat.min)}-{_num(stat.max)}]" if len(stat.values) > 1 else ""
    return " ".join(part for part in (_num(stat.median), unit, spread) if part)


def _result(passed: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "-"}[passed]


def _cells(row: Row) -> tuple[str, ...]:
    ratio = row.ratio
    return (
        row.key,
        row.name,
        row.text or format_stat(row.ours, row.unit),
        row.baseline_name or "-",
        format_stat(row.baseline, row.unit),
        f"{ratio:.2f}x" if ratio is not None else "-",
        row.target or "-",
        _result(row.passed),
    )


def format_table(rows: Sequence[Row]) -> list[str]:
    cells = [HEADER, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def format_args(args: argparse.Namespace) -> str:
    return (
        f"--size-mib {args.size_mib} --realistic-mib {args.realistic_mib} "
        f"--small-files {args.small_files} --runs {args.runs} --procs {args.procs} "
        f"--crowded-kernels {args.crowded_kernels} --server {args.server} "
        f"--link-delay-ms {args.link_delay_ms:g} --link-mbit {args.link_mbit:g}"
        + (f" --rows {','.join(map(str, args.rows))}" if args.rows else "")
        + (f" --release-dir {args.release_dir}" if args.release_dir else "")
        + ("" if args.warm_up else " --no-warm-up")
        + (f" --hf-venv {args.hf_venv}" if args.hf_venv else "")
        + ("" if args.hf else " --no-hf")
    )


def report(rows: Sequence[Row], facts: Mapping[str, str], args: argparse.Namespace) -> str:
    out = [
        "flashhub-kernels load benchmark (benchmarks/bench_load.py)",
        f"args: {format_args(args)}",
        *(f"{key}: {value}" for key, value in facts.items()),
        "",
        "values: median [min-max] over the runs; ratio = flashhub / baseline medians "
        "(time or size: lower is better); targets: see benchmarks/loadbench/__init__.py",
        "",
        *format_table(rows),
        "",
        "notes:",
    ]
    out += [f"  {row.key}: {note}" for row in rows for note in row.notes]
    return "\n".join(out)


def json_document(
    rows: Sequence[Row], facts: Mapping[str, str], args: argparse.Namespace
) -> dict[str, Any]:
    """The ``--json`` output: the machine, the arguments and every row with its runs."""
    return {
        "machine": dict(facts),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "rows": [asdict(row) | {"ratio": row.ratio} for row in rows],
    }
