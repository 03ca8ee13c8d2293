"""Machines to resolve kernels as (``run_as``), and builds that load on them or not: for the
tests of the advice a load gives, from the library and from the command.

A test whose expectation is that of a machine with a CPU-only torch (the variant a load
takes, a rejection's reason, a hint, what a lock holds) runs as this machine with a
CPU-only torch (``run_as_cpu_only``; in a child process, ``CPU_ONLY_CHILD`` first), so it
judges the same on a CUDA build of torch, with or without a GPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from flashhub_kernels._variants import system as _system
from flashhub_kernels._variants.system import SystemInfo, detect_system, with_backend

CPU_MACHINE = SystemInfo((2, 13), True, "cpu", "cpu", "x86_64", "linux")
CUDA_MACHINE = SystemInfo((2, 12), True, "cuda", "cu126", "x86_64", "linux")
CUDA_BUILD = "torch212-cxx11-cu126-x86_64-linux"  # loads on CUDA_MACHINE only
OLD_CUDA_BUILD = "torch212-cxx11-cu118-x86_64-linux"  # CUDA 11: loads on neither
CPU_BUILD = "torch212-cxx11-cpu-x86_64-linux"  # runs on CUDA_MACHINE with backend='cpu'

# The code a child process runs first to resolve kernels as ``run_as_cpu_only`` does.
CPU_ONLY_CHILD = (
    "from flashhub_kernels._variants import system as _system\n"
    "_detect = _system.detect_system\n"
    "_system.detect_system = lambda: _system.with_backend(_detect(), 'cpu')\n"
)


def run_as(monkeypatch: pytest.MonkeyPatch, system: SystemInfo) -> None:
    """Make this process resolve kernels as if its torch were ``system``."""
    monkeypatch.setattr(_system, "detect_system", lambda: system)


def run_as_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this process resolve kernels as this machine would with a CPU-only build of
    its torch (the same version, ABI and arch), which loads ``trees.cpu_variant()``."""
    run_as(monkeypatch, with_backend(detect_system(), "cpu"))


def python_310_without_tomli() -> str | None:
    """A Python 3.10 that has no ``tomli`` (on ``PATH``, or installed by pyenv), if any."""
    pyenv = Path(os.environ.get("PYENV_ROOT", "~/.pyenv")).expanduser()
    found = [shutil.which("python3.10"), *map(str, pyenv.glob("versions/3.10*/bin/python"))]
    check = "import importlib.util as u; print(u.find_spec('tomli') is None)"
    for python in filter(None, found):
        answer = subprocess.run([python, "-c", check], capture_output=True, text=True, check=False)
        if answer.stdout.strip() == "True":
            return python
    return None
