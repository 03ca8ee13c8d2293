"""The rows of the table, one module per measurement: :data:`ROWS` lists the functions
that measure them, in the order they run, each with the numbers of the rows it measures
(``--rows`` picks by them). Each takes the :class:`loadbench.bench.Bench` and returns its
rows."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..bench import Bench
from ..results import Row
from .cold import row_big_file, row_realistic, row_small_files
from .crowd import row_crowd
from .import_cost import row_import_cost
from .peer import row_peer
from .slow_link import row_slow_link
from .startup import row_startup
from .warm import row_warm_import
from .zip_layout import row_zip_layout

ROWS: Sequence[tuple[tuple[int, ...], Callable[[Bench], list[Row]]]] = (
    ((1, 5), row_big_file),  # 1a-1d, 5
    ((2,), row_small_files),  # 2a-2e
    ((7,), row_realistic),  # 7-7c
    ((3,), row_warm_import),  # 3a-3f
    ((4,), row_crowd),  # 4a, 4b
    ((6,), row_startup),  # 6a-6c
    ((8,), row_import_cost),  # 8: after 3 and 6, which have compiled its imports' bytecode
    ((9,), row_peer),  # 9a-9d: against HF kernels
    ((10,), row_slow_link),  # 10a-10d
    ((11,), row_zip_layout),  # 11
)
