"""The rows of the table, one module per measurement: :data:`ROWS` lists the functions
that measure them, in the order they run. Each takes the :class:`loadbench.bench.Bench`
and returns its rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..bench import Bench
from ..results import Row
from .cold import row_big_file, row_realistic, row_small_files
from .crowd import row_crowd
from .import_cost import row_import_cost
from .startup import row_startup
from .warm import row_warm_import

ROWS: Sequence[Callable[[Bench], list[Row]]] = (
    row_big_file,  # 1a, 1b, 5
    row_small_files,  # 2a, 2b, 2c
    row_realistic,  # 7
    row_warm_import,  # 3a-3f
    row_crowd,  # 4a, 4b
    row_startup,  # 6a-6c
    row_import_cost,  # 8: after 3 and 6, which have compiled its imports' bytecode
)
