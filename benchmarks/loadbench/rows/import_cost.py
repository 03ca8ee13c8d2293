"""Row 8: what flashhub adds to a program's imports, each measured in a fresh interpreter.

Three ``python -c`` programs, interleaved run by run, time their own imports with
``time.perf_counter``, so the interpreter's start-up and exit are left out:

(a) ``import torch`` alone;
(b) ``import torch``, then ``import flashhub`` and the first, warm ``import
    flashhub.bench.warm_import.v1`` (the warm cache of row 3, ``FLASHHUB_OFFLINE=1``);
(c) ``import torch``, then the same package, ``import warm_import``, from a plain
    directory on ``sys.path``.

(b) and (c) time their ``import torch`` apart from what follows it, so (b) - (a) and
(c) - (a) are what follows it, measured directly. The overhead, ((b) - (a)) - ((c) - (a))
from the medians, is what flashhub adds over a plain import of the same package; it is
reported in ms and as a share of (a). A note says how much library code (b) imports:
its modules and their lines, which a change to the warm path moves before any timing does.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import NamedTuple

from ..bench import Bench
from ..common import environ_without_flashhub
from ..report import format_stat
from ..results import Row, Stat
from ..trees import WARM_PACKAGE

# The targets (see the package docstring); printed with the row, never asserted.
TARGET_SHARE_OF_TORCH = 0.5  # percent of (a), the time of `import torch`
TARGET_IDEAL_MS = 3.0
PROGRAM = """\
import os, sys, time
start = time.perf_counter()
import torch
torch_done = time.perf_counter()
{setup}
before = time.perf_counter()
{imports}
after = time.perf_counter()
{check}
print((torch_done - start) * 1e3, (after - before) * 1e3, flush=True)
os._exit(0)  # torch's teardown is slow (a third of a second) and not measured
"""


class ImportTimes(NamedTuple):
    """Milliseconds of one program's ``import torch`` and of the imports after it."""

    torch_ms: float
    then_ms: float


def _imports(module: str, setup: str = "pass", first: str = "") -> str:
    """A program whose timed imports are ``first`` and ``import module``, and which checks,
    untimed, that ``module`` is the warm kernel's package (its ``add``), not an empty one."""
    return PROGRAM.format(
        setup=setup, imports=f"{first}import {module}", check=f"sys.modules[{module!r}].add"
    )


def programs(module: str, plain_dir: str) -> dict[str, str]:
    """The programs (a), (b) and (c), by the name of their side."""
    return {
        "torch": PROGRAM.format(setup="pass", imports="pass", check="pass"),
        "flashhub": _imports(module, first="import flashhub\n"),
        "plain": _imports(WARM_PACKAGE, setup=f"sys.path.insert(0, {plain_dir!r})"),
    }


def import_times(program: str, env: Mapping[str, str]) -> ImportTimes:
    """Run ``program`` in a fresh interpreter and read the times it prints."""
    argv = [sys.executable, "-c", program]
    done = subprocess.run(argv, env=env, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"an import-cost program failed:\n{program}\n{done.stderr}")
    torch_ms, then_ms = (float(word) for word in done.stdout.split())
    return ImportTimes(torch_ms, then_ms)


# After (b)'s imports: the library's modules it added, and their lines.
SIZE_PROGRAM = """\
import sys, torch
before = set(sys.modules)
import flashhub, {module}
ours = [m for m in set(sys.modules) - before if m == "flashhub" or m.startswith("flashhub_kernels")]
files = [sys.modules[m].__file__ for m in ours]
print(len(files), sum(len(open(f).read().splitlines()) for f in files))
"""


def warm_path_size(module: str, env: Mapping[str, str]) -> tuple[int, int]:
    """The library modules, and their lines, that (b) imports besides the kernel."""
    argv = [sys.executable, "-c", SIZE_PROGRAM.format(module=module)]
    done = subprocess.run(argv, env=env, check=True, capture_output=True, text=True)
    modules, lines = (int(word) for word in done.stdout.split())
    return modules, lines


def row_import_cost(bench: Bench) -> list[Row]:
    """Row 8: ``import flashhub`` and a warm kernel import, over a plain import, in ms and
    as a share of ``import torch``."""
    env = {
        **environ_without_flashhub(),
        **bench.env(bench.warm_cache()),
        "FLASHHUB_OFFLINE": "1",  # the cache must answer: a cold load would fail, not hide
    }
    measurements: dict[str, Callable[[], ImportTimes]] = {
        side: partial(import_times, program, env)
        for side, program in programs(bench.trees.warm.module, str(bench.trees.plain_dir)).items()
    }
    # No warm-up round: rows 3 and 6 have run these imports, bytecode compiled, already.
    results = bench.rounds("row 8: import cost, fresh interpreters", measurements, warm_up=False)
    row = _cost_row(bench.trees.warm.module, results)
    modules, lines = warm_path_size(bench.trees.warm.module, env)
    row.notes.append(f"(b) imports {modules} library modules, {lines:,} lines, besides the kernel")
    return [row]


def _then(times: Sequence[ImportTimes]) -> Stat:
    return Stat.of([t.then_ms for t in times])


def _cost_row(module: str, results: Mapping[str, Sequence[ImportTimes]]) -> Row:
    torch = Stat.of([t.torch_ms for t in results["torch"]])
    ours, plain = _then(results["flashhub"]), _then(results["plain"])
    overhead = ours.median - plain.median
    share = overhead / torch.median * 100
    return Row(
        "8",
        "import cost: flashhub over a plain import, warm",
        "ms",
        ours,
        f"import {WARM_PACKAGE} from a plain dir, after torch",
        plain,
        target=f"<= {TARGET_SHARE_OF_TORCH:.2f}% of import torch, ideally < "
        f"{TARGET_IDEAL_MS:.0f} ms",
        passed=share <= TARGET_SHARE_OF_TORCH,
        notes=[_sides_note(module, torch, ours, plain), _overhead_note(torch, ours, plain)],
        text=f"+{overhead:.2f} ms = {share:.2f}% of import torch",
        has_ratio=False,
    )


def _sides_note(module: str, torch: Stat, ours: Stat, plain: Stat) -> str:
    """(a), (b) and (c), each median [min-max]."""
    return (
        "a fresh `python -c` per measurement, timed inside with time.perf_counter: "
        f"(a) import torch alone {format_stat(torch, 'ms')}; after their own import torch, "
        f"(b) import flashhub + import {module} (cache warm, FLASHHUB_OFFLINE=1) "
        f"{format_stat(ours, 'ms')}, (c) import {WARM_PACKAGE} from a plain dir on sys.path "
        f"{format_stat(plain, 'ms')}"
    )


def _overhead_note(torch: Stat, ours: Stat, plain: Stat) -> str:
    """The overhead worked out, against both targets."""
    overhead = ours.median - plain.median
    limit_ms = torch.median * TARGET_SHARE_OF_TORCH / 100
    ideal = "met" if overhead < TARGET_IDEAL_MS else "not met"
    return (
        f"overhead ((b) - (a)) - ((c) - (a)) = {ours.median:.2f} - {plain.median:.2f} = "
        f"{overhead:.2f} ms, {overhead / torch.median * 100:.2f}% of import torch "
        f"({torch.median:.0f} ms); target <= {TARGET_SHARE_OF_TORCH:.1f}% of it "
        f"({limit_ms:.1f} ms here), ideally < {TARGET_IDEAL_MS:.0f} ms ({ideal})"
    )
