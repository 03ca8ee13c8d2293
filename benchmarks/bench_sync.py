"""What syncing a kernel's files to disk would cost: the durability a cold load does not buy.

    python benchmarks/bench_sync.py [--files 200] [--size-kib 10] [--runs 7] [--dir DIR]

Writes ``--files`` files of ``--size-kib`` KiB into a fresh directory under ``--dir``
(default: the temporary directory), as a cold load writes a variant's files, once per
way of syncing them, interleaved run by run, and prints the median, min and max
milliseconds of each. docs/performance.md ("What each guarantee costs") quotes it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

# How each way ends a file (given its descriptor) and the whole tree (given its directory).
WAYS: dict[str, tuple[Callable[[int], None] | None, str | None]] = {
    "no sync": (None, None),
    "one fsync of a receipt": (None, "receipt"),
    "fsync of the directory": (None, "directory"),
    "fdatasync of every file": (os.fdatasync, "directory"),
    "fsync of every file": (os.fsync, "directory"),
}


def write_tree(where: Path, files: int, data: bytes, way: str) -> float:
    """Milliseconds to write the tree ``way`` says (see :data:`WAYS`)."""
    per_file, at_end = WAYS[way]
    start = time.perf_counter()
    for i in range(files):
        fd = os.open(where / f"part_{i:04d}.bin", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data)
        if per_file is not None:
            per_file(fd)
        os.close(fd)
    if at_end == "receipt":
        fd = os.open(where / "receipt.json", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"{}" * 4096)
        os.fsync(fd)
        os.close(fd)
    elif at_end == "directory":
        fd = os.open(where, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return (time.perf_counter() - start) * 1e3


def median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--size-kib", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (a disk's dir)")
    args = parser.parse_args(argv)
    data = os.urandom(args.size_kib * 1024)
    names = list(WAYS)
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="flashhub-sync-") as tmp:
        for run in range(args.runs):
            shift = run % len(names)
            for name in names[shift:] + names[:shift]:
                where = Path(tmp) / f"{run}-{names.index(name)}"
                where.mkdir()
                os.sync()  # the writeback of the previous tree does not land in this one
                times[name].append(write_tree(where, args.files, data, name))
                shutil.rmtree(where)
    print(f"{args.files} files of {args.size_kib} KiB, {args.runs} runs, under {tmp}:")
    for name in names:
        values = times[name]
        print(f"  {name:26s} {median(values):8.1f} ms [{min(values):.1f}-{max(values):.1f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
