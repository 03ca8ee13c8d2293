"""Run the ``flashhub`` command (and ``flashhub-kernel-load``) in this process, as a shell
would run it, for the tests.

In-process rather than ``python -m flashhub_kernels``: most commands detect the system,
which imports torch, and a fresh interpreter pays a second or more for that on every
call. The command gets its own environment, working directory, an empty standard input
(no terminal, as in CI) and captured output; the process-wide settings it may change
(``configure()`` overrides) are reset afterwards. Tests about the process itself (the
console scripts, ``python -m flashhub_kernels`` and its exit status, start-up time, what
a fresh interpreter imports) still start one (:func:`flashhub_process`); those that only
want the command in a process of its own fork one (:func:`flashhub_child`).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flashhub_kernels._config import overrides
from flashhub_kernels.cli import kernel_load_main, main
from support.preloaded import run_code


@dataclass(frozen=True)
class CliResult:
    """What a command returned and printed (the fields of ``subprocess.CompletedProcess``
    that the tests read)."""

    returncode: int
    stdout: str
    stderr: str


def flashhub(
    *args: str | Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> CliResult:
    """``flashhub ARGS`` with this test's environment, plus ``env``, in ``cwd``."""
    return _run(main, args, env, cwd)


def flashhub_kernel_load(
    *args: str | Path, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> CliResult:
    """``flashhub-kernel-load ARGS``, the 0.1.2 script, as :func:`flashhub` runs its command."""
    return _run(kernel_load_main, args, env, cwd)


def _run(
    entry: Callable[[list[str]], int],
    args: tuple[str | Path, ...],
    env: Mapping[str, str] | None,
    cwd: Path | None,
) -> CliResult:
    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(env or {}),
        _working_directory(cwd),
        _no_input(),
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        code = entry([str(arg) for arg in args])
    overrides.clear()
    return CliResult(code, out.getvalue(), err.getvalue())


def flashhub_process(*args: str | Path, env: Mapping[str, str] | None = None) -> CliResult:
    """``flashhub ARGS`` run as a user runs it: the installed console script, in a process
    of its own, with this test's environment plus ``env``."""
    script = Path(sys.executable).with_name("flashhub")
    result = subprocess.run(
        [script, *map(str, args)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return CliResult(result.returncode, result.stdout, result.stderr)


# What a command says where its stdout is a full disk (flashhub_on_a_full_disk).
UNWRITTEN_OUTPUT = [
    "error: could not write the output (stdout): No space left on device",
    "  hint: free space where the output goes, or send it elsewhere (check the redirection)",
]


def flashhub_on_a_full_disk(*args: str | Path, unbuffered: bool = False) -> CliResult:
    """``flashhub ARGS > /dev/full`` (a device that every write fails on: no space left)
    run as ``python -m flashhub_kernels``, in a process of its own with this test's
    environment: its stdout buffered, as a file's is, or with ``unbuffered`` written at
    each print (``PYTHONUNBUFFERED``), as output longer than the buffer is. Skips the test
    where the system has no /dev/full."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full, a device whose every write fails as a full disk does")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "flashhub_kernels", *map(str, args)],
            env={**env, "PYTHONUNBUFFERED": "1"} if unbuffered else env,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    return CliResult(result.returncode, "", result.stderr)


# `python -m flashhub_kernels ARGS` as the interpreter runs it, for a child of
# support.preloaded (ARGS: the child's arguments): the command in a process of its own.
PYTHON_M_FLASHHUB = """
import runpy, sys
sys.argv[0] = "flashhub"
runpy.run_module("flashhub_kernels", run_name="__main__", alter_sys=True)
"""

# `python -m flashhub_kernels.cli ARGS`, the 0.1.2 script as that release also ran it, likewise.
PYTHON_M_KERNEL_LOAD = """
import runpy, sys
sys.argv[0] = "flashhub-kernel-load"
runpy.run_module("flashhub_kernels.cli", run_name="__main__", alter_sys=True)
"""


def flashhub_child(*args: str | Path, env: Mapping[str, str] | None = None) -> CliResult:
    """``flashhub ARGS`` in a process of its own, forked with torch imported
    (``support.preloaded``) and run as ``python -m flashhub_kernels`` runs it, with this
    test's environment plus ``env``: where the command's process is wanted, not the start
    of the console script's."""
    child_env = {**os.environ, **(env or {})}
    result = run_code(PYTHON_M_FLASHHUB, *map(str, args), env=child_env)
    return CliResult(result.returncode, result.stdout, result.stderr)


# Run first by root, the process gives up root's right to override permissions (what
# `setpriv --bounding-set=-dac_override,-dac_read_search,-fowner` starts one without).
WITHOUT_OVERRIDE = """
def _without_override():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # capability version 3, this process
    sets = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: capabilities 0-31, 32-63
    if libc.capget(header, sets):
        raise OSError(ctypes.get_errno(), "capget")
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        sets[0] &= ~(1 << capability)  # effective
        sets[1] &= ~(1 << capability)  # permitted
    if libc.capset(header, sets):
        raise OSError(ctypes.get_errno(), "capset")
_without_override()
del _without_override
"""


def unprivileged(
    code: str, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` in a process of its own (with this test's environment,
    plus ``env``), which cannot write where a directory is read-only: a process running
    as root can, so it runs without root's right to override permissions."""
    first = WITHOUT_OVERRIDE if os.geteuid() == 0 else ""
    return run_code(first + code, *args, env={**os.environ, **(env or {})})


def flashhub_unprivileged(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """``flashhub ARGS`` in a process of its own, as :func:`unprivileged` runs it."""
    return unprivileged(PYTHON_M_FLASHHUB, *map(str, args))


def ok_json(result: CliResult) -> Any:
    """The JSON document a successful command printed."""
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


OFFLINE = {"FLASHHUB_OFFLINE": "1"}


def refused_offline(result: CliResult, *phrases: str) -> None:
    """The command failed offline with an error and a hint in CLI terms, no traceback, and
    each of ``phrases`` in its message."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    assert "FLASHHUB_OFFLINE" in result.stderr and "  hint: " in result.stderr
    assert "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in result.stderr


@contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.update(extra)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextmanager
def _working_directory(path: Path | None) -> Iterator[None]:
    before = Path.cwd()
    if path is not None:
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


@contextmanager
def _no_input() -> Iterator[None]:
    saved = sys.stdin
    sys.stdin = io.StringIO("")
    try:
        yield
    finally:
        sys.stdin = saved
