"""Run the ``flashhub`` command in this process, as a shell would run it, for the tests.

In-process rather than ``python -m flashhub_kernels``: most commands detect the system,
which imports torch, and a fresh interpreter pays a second or more for that on every
call. The command gets its own environment, working directory, an empty standard input
(no terminal, as in CI) and captured output; the process-wide settings it may change
(``configure()`` overrides) are reset afterwards. Tests about the process itself (the
console scripts, start-up time) still start one.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flashhub_kernels._config import reset_config
from flashhub_kernels.cli import main


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
    out, err = io.StringIO(), io.StringIO()
    with (
        _environment(env or {}),
        _working_directory(cwd),
        _no_input(),
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        code = main([str(arg) for arg in args])
    reset_config()
    return CliResult(code, out.getvalue(), err.getvalue())


def ok_json(result: CliResult) -> Any:
    """The JSON document a successful command printed."""
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


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
