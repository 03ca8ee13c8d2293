"""The results model: a :class:`Stat` of repeated measurements and a :class:`Row` of the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


def median(values: Sequence[float]) -> float:
    """The median (not ``statistics``: it imports ``decimal``, which flashhub's warm path
    imports too, and a child must not have it preloaded)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class Stat:
    """Median, min and max of repeated measurements, in the row's unit."""

    median: float
    min: float
    max: float
    values: tuple[float, ...]  # in the order measured (kept in the --json output)

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        return cls(median(values), min(values), max(values), tuple(values))


@dataclass
class Row:
    """One line of the table: flashhub against a baseline measured in the same run."""

    key: str
    name: str
    unit: str
    ours: Stat | None
    baseline_name: str = ""
    baseline: Stat | None = None
    target: str = ""
    passed: bool | None = None
    notes: list[str] = field(default_factory=list)
    text: str = ""  # shown instead of ``ours`` when the row is not a measurement
    has_ratio: bool = True  # False where a ratio would mean nothing (RSS growth)

    @property
    def ratio(self) -> float | None:
        if not self.has_ratio or self.ours is None or self.baseline is None:
            return None
        if self.baseline.median == 0:
            return None
        return self.ours.median / self.baseline.median


def ratio_row(row: Row, limit: float) -> Row:
    """Judge ``row`` by ``ratio <= limit`` (ratios are flashhub / baseline, lower is better)."""
    row.target = f"<= {limit:.2f}x"
    row.passed = None if row.ratio is None else row.ratio <= limit
    return row
