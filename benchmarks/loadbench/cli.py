"""The command line: ``python benchmarks/bench_load.py [options]`` parses its options
here, builds the trees, starts the server and the fork server, measures every row of
:data:`loadbench.rows.ROWS` and prints the report (and writes ``--json``)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import string
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .bench import Bench
from .children import Children
from .common import log
from .fresh import release_version
from .link import Link, add_link_options
from .machine import machine_facts
from .peer import HF_KERNELS, HfVenv, default_venv, hf_venv
from .report import json_document, report
from .results import Row
from .rows import ROWS
from .servers import HANDLERS, serve
from .trees import build_trees

DESCRIPTION = "Kernel loading against the limits of this machine."


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--size-mib", type=int, default=512, help="size of the big file")
    parser.add_argument(
        "--realistic-mib", type=int, default=128, help="size of the .so in the realistic variant"
    )
    parser.add_argument("--small-files", type=int, default=200, help="files in the small variant")
    parser.add_argument("--runs", type=int, default=5, help="runs per row (median, min, max)")
    parser.add_argument("--procs", type=int, default=16, help="concurrent processes in row 4")
    parser.add_argument(
        "--crowded-kernels", type=int, default=1000, help="other kernels in the cache of row 3d"
    )
    parser.add_argument(
        "--release-dir",
        type=Path,
        metavar="DIR",
        help="a directory holding the 0.1.2 release to compare with (pip install --no-deps "
        "--target DIR flashhub-kernels==0.1.2); without it, its rows are skipped",
    )
    parser.add_argument(
        "--server",
        choices=HANDLERS,
        default="stdlib",
        help="the loopback server's request handler (default: the standard library's)",
    )
    parser.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="skip each row's untimed warm-up round (for a quick check that it runs)",
    )
    parser.add_argument(
        "--hf-venv",
        type=Path,
        metavar="DIR",
        help=f"the venv of HF kernels {HF_KERNELS} for rows 9, installed there if it is not "
        f"(default: {default_venv()})",
    )
    parser.add_argument(
        "--no-hf", dest="hf", action="store_false", help="skip rows 9 (against HF kernels)"
    )
    add_link_options(parser)
    parser.add_argument(
        "--rows",
        type=row_numbers,
        metavar="N,N,...",
        help="measure only these rows, by number (e.g. 10,11; default: every row)",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    known = sorted({number for numbers, _measure in ROWS for number in numbers})
    if args.rows is not None and (unknown := set(args.rows) - set(known)):
        parser.error(f"--rows: no row {sorted(unknown)} (rows: {','.join(map(str, known))})")
    if args.release_dir is not None and release_version(args.release_dir) is None:
        parser.error(f"--release-dir {args.release_dir}: no flashhub-kernels installed there")
    counts = (args.size_mib, args.realistic_mib, args.runs, args.procs, args.crowded_kernels)
    if min(counts) < 1 or args.small_files < 2:
        parser.error("sizes and counts must be positive (--small-files at least 2)")
    if args.link_mbit <= 0 or args.link_delay_ms < 0:
        parser.error("--link-mbit must be positive, --link-delay-ms at least 0")
    return args


def row_numbers(text: str) -> tuple[int, ...]:
    """The ``--rows`` list: row numbers, comma-separated."""
    try:
        return tuple(sorted({int(number) for number in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of numbers: {text}") from None


def peer(args: argparse.Namespace) -> HfVenv | str:
    """HF kernels for rows 9 (installed on the first run), or why they are skipped."""
    if not args.hf:
        return "--no-hf"
    if args.rows is not None and 9 not in args.rows:
        return "not among --rows"
    return hf_venv(args.hf_venv)


def measure(args: argparse.Namespace, work: Path, curl: str | None, hf: HfVenv | str) -> list[Row]:
    """Every row (of ``--rows``), measured against trees and servers set up under ``work``:
    the loopback server, and the same tree over a slow link (rows 10)."""
    log(f"writing the CDN trees under {work}")
    trees = build_trees(work, args.size_mib, args.small_files, args.realistic_mib)
    log("starting the fork server (imports torch once)")
    children = Children()
    link = Link(args.link_mbit, args.link_delay_ms)
    with serve(trees.cdn, args.server) as server, serve(trees.cdn, args.server, link) as paced:
        bench = Bench(args, trees, server, children, work / "scratch", curl, hf, link_server=paced)
        chosen = [
            rows for numbers, rows in ROWS if args.rows is None or set(args.rows) & set(numbers)
        ]
        return [row for measure_rows in chosen for row in measure_rows(bench)]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Without bytecode caching every import compiles from source (flashhub's own modules
    # in an editable install, and every kernel), which no normal install does.
    no_bytecode = os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None
    curl = shutil.which("curl") if shutil.which("sha256sum") else None
    if curl is None:
        log("curl or sha256sum is not on PATH: the curl baselines are skipped")
    hf = peer(args)
    with tempfile.TemporaryDirectory(prefix="flashhub-bench-") as tmp:
        work = Path(tmp)
        facts = machine_facts(work, args.server, args.release_dir)
        facts["HF kernels (rows 9)"] = hf.describe() if isinstance(hf, HfVenv) else f"skipped: {hf}"
        if no_bytecode:
            facts["bytecode"] = "PYTHONDONTWRITEBYTECODE dropped for the measured processes"
        load_before = os.getloadavg()[0]
        rows = measure(args, work, curl, hf)
    facts["load before the run"] = (
        f"{load_before:.2f} (1-minute load average: other processes on these cores add noise)"
    )
    rows.sort(key=lambda row: (int(row.key.rstrip(string.ascii_lowercase)), row.key))
    print(report(rows, facts, args), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(json_document(rows, facts, args), indent=2) + "\n")
    return 0
