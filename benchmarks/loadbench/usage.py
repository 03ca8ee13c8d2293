"""What a process used: CPU time (user + system) and peak RSS growth, read from the kernel."""

from __future__ import annotations

import resource
import sys
from pathlib import Path
from typing import Any


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """User + system CPU time of this process (every thread) or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise KeyError(field_name)


def _ru_maxrss_kib() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS


class PeakRss:
    """Peak RSS growth from now on: VmHWM reset through clear_refs, else ru_maxrss."""

    def __init__(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self.method = "VmHWM after resetting it with /proc/self/clear_refs"
        except OSError:
            self.method = "ru_maxrss (a lifetime peak: the growth is an upper bound)"
        self.before_kib = self._now_kib()

    def _now_kib(self) -> int:
        try:
            return _status_kib("VmRSS")
        except (OSError, KeyError):
            return _ru_maxrss_kib()

    def _peak_kib(self) -> int:
        if self.method.startswith("VmHWM"):
            return _status_kib("VmHWM")
        return _ru_maxrss_kib()

    def result(self) -> dict[str, Any]:
        return {
            "rss_before_mib": self.before_kib / 1024,
            "rss_growth_mib": max(0, self._peak_kib() - self.before_kib) / 1024,
            "rss_method": self.method,
        }
