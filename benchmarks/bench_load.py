"""Kernel loading against the limits of this machine: the one command of the benchmark.

    python benchmarks/bench_load.py [--size-mib 512] [--realistic-mib 128]
                                    [--small-files 200] [--runs 5] [--procs 16]
                                    [--crowded-kernels 1000] [--json OUT]
                                    [--rows 1,2,7,3,4,6,8,9] [--no-hf | --hf-venv DIR]

The benchmark is the package beside this file, ``loadbench`` (its docstring lists the
rows and their targets; docs/performance.md says what they mean); this script runs it.
Python puts this file's directory first on ``sys.path``, so ``loadbench`` imports as a
top-level package, here and in the children the benchmark forks, which import this
script again as ``__mp_main__`` (hence the import at the top, outside the guard).
"""

from __future__ import annotations

import sys

from loadbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
