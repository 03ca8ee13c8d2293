"""Machines to resolve kernels as (``run_as``), and builds that load on them or not: for the
tests of the advice a load gives, from the library and from the command."""

from __future__ import annotations

import pytest

from flashhub_kernels import _variant_choice
from flashhub_kernels._variants import SystemInfo

CPU_MACHINE = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux")
CUDA_MACHINE = SystemInfo((2, 12), True, "cuda", "cu126", "x86_64", "linux")
CUDA_BUILD = "torch212-cxx11-cu126-x86_64-linux"  # loads on CUDA_MACHINE only
OLD_CUDA_BUILD = "torch212-cxx11-cu118-x86_64-linux"  # CUDA 11: loads on neither
CPU_BUILD = "torch212-cxx11-cpu-x86_64-linux"  # runs on CUDA_MACHINE with backend='cpu'


def run_as(monkeypatch: pytest.MonkeyPatch, system: SystemInfo) -> None:
    """Make this process resolve kernels as if its torch were ``system``."""
    monkeypatch.setattr(_variant_choice, "detect_system", lambda: system)
