"""Entry points of the ``flashhub`` command line and the legacy ``flashhub-kernel-load`` script."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ._exit import EXIT_INTERRUPTED

if TYPE_CHECKING:
    from collections.abc import Callable


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub`` and ``python -m flashhub_kernels``; returns the exit code."""

    def command_line() -> int:
        from ._command_line import run_command_line

        return run_command_line(argv)

    return _ended_by_ctrl_c_quietly(command_line)


def kernel_load_main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub-kernel-load REPO --version N [...]``; returns the exit code."""

    def script() -> int:
        from .kernel_load import kernel_load_main as script_main

        return script_main(argv)

    return _ended_by_ctrl_c_quietly(script)


def _ended_by_ctrl_c_quietly(entry: Callable[[], int]) -> int:
    """Run ``entry``; Ctrl-C ends it with one line and status 130 from its first line on,
    also while it imports its modules and builds its parser, which is why this module
    imports nothing of them before."""
    try:
        return entry()
    except KeyboardInterrupt:
        if sys.stderr is not None:  # closed (`2>&-`), and not yet pointed at the null device
            print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
