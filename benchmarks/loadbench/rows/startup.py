"""Row 6: interpreter start-up, ``python -c "import flashhub_kernels"`` (6a) and
``flashhub --help`` (6b) against ``python -c pass``, and the libraries that
``import flashhub_kernels, flashhub`` pull in (6c)."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path

from ..baselines import time_command
from ..bench import Bench
from ..common import HTTP_LIBS, LOCK_LIBS, environ_without_flashhub
from ..results import Row, Stat

# The target (see the package docstring); printed with the row, never asserted.
TARGET_HELP_MS = 150.0
# Neither import may bring in torch, an HTTP library or a file-lock library.
WATCHED = ("torch", *HTTP_LIBS, *LOCK_LIBS)
IMPORT_CHECK = (
    "import sys, flashhub_kernels, flashhub\n"
    f"print(' '.join(m for m in {WATCHED!r} if m in sys.modules))"
)
BARE = 'python -c "pass"'


def row_startup(bench: Bench) -> list[Row]:
    """Row 6: interpreter start-up costs, and what ``import flashhub_kernels`` pulls in."""
    env = environ_without_flashhub()
    python = sys.executable
    cli = shutil.which("flashhub", path=str(Path(python).parent)) or shutil.which("flashhub")
    commands = {
        "pass": [python, "-c", "pass"],
        "import": [python, "-c", "import flashhub_kernels"],
    }
    if cli:
        commands["help"] = [cli, "--help"]
    results = bench.rounds(
        "row 6: start-up times",
        {key: functools.partial(time_command, argv, env) for key, argv in commands.items()},
        runs=max(bench.args.runs, 10),  # cheap and noisy: more samples
    )
    bare = Stat.of(results["pass"])
    imports = Stat.of(results["import"])
    import_row = Row(
        "6a", 'python -c "import flashhub_kernels"', "ms", imports, BARE, bare, target="(reference)"
    )
    help_row = _help(results["help"], bare) if cli else _no_help()
    return [import_row, help_row, _imported_libs(env)]


def _help(help_ms: list[float], bare: Stat) -> Row:
    ours = Stat.of(help_ms)
    target, passed = f"< {TARGET_HELP_MS:.0f} ms", ours.median < TARGET_HELP_MS
    return Row("6b", "flashhub --help", "ms", ours, BARE, bare, target, passed)


def _no_help() -> Row:
    return Row("6b", "flashhub --help", "ms", None, target="(skipped: no script)")


def _imported_libs(env: dict[str, str]) -> Row:
    """6c: which watched libraries a fresh ``import flashhub_kernels, flashhub`` imports."""
    found = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    note = (
        f"in a fresh interpreter: which of {', '.join(WATCHED)} are in sys.modules after "
        "import flashhub_kernels, flashhub"
    )
    return Row(
        "6c",
        "torch/HTTP/lock libs imported by import flashhub(_kernels)",
        "",
        None,
        target="none",
        passed=not found,
        text=found or "none",
        notes=[note],
    )
