"""Fresh child processes with torch already imported, forked from a multiprocessing
fork server that imported it once.

A child starts with torch imported and nothing of flashhub's, runs one function (from
:mod:`loadbench.probes` or :mod:`loadbench.baselines`) and sends back its result. It also
imports the benchmark's entry script and this package (stdlib only, and none of it a
module that a load would import if torch has not).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from .common import CHILD_TIMEOUT_S

Call = tuple[Callable[..., Any], tuple[Any, ...]]


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """``os.environ[name] = value`` for the block, then as it was."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


class Children:
    """Fresh processes forked from a server process that has imported torch."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["torch"])
        # Start the fork server now, without torch's "Failed to initialize NumPy" warning.
        with _environ("PYTHONWARNINGS", "ignore:Failed to initialize NumPy"):
            forkserver.ensure_running()

    def run(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run ``func(*args)`` in a fresh child; return its result or raise its error."""
        return self.run_many([(func, args)])[0]

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Start every call in its own child at once; return their results in order."""
        started = [self._start(func, args) for func, args in calls]
        try:
            return [self._result(process, receiver) for process, receiver in started]
        finally:
            for process, _receiver in started:  # after a failure: do not leave any behind
                if process.is_alive():
                    process.kill()
                process.join()

    def _start(
        self, func: Callable[..., Any], args: tuple[Any, ...]
    ) -> tuple[BaseProcess, Connection]:
        receiver, sender = self.ctx.Pipe(duplex=False)
        process = self.ctx.Process(target=_child_main, args=(sender, func, args))
        process.start()
        sender.close()
        return process, receiver

    @staticmethod
    def _result(process: BaseProcess, receiver: Connection) -> Any:
        if not receiver.poll(CHILD_TIMEOUT_S):
            raise RuntimeError(f"a child gave no answer within {CHILD_TIMEOUT_S:.0f} s")
        try:
            status, value = receiver.recv()
        except EOFError:
            process.join(5)
            status, value = "error", f"the child died (exit code {process.exitcode})"
        if status != "ok":
            raise RuntimeError(f"child failed:\n{value}")
        return value


def _child_main(conn: Connection, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # Cache bytecode as a normal install does; the fork server inherits -B from this
    # interpreter when it was started with PYTHONDONTWRITEBYTECODE (see loadbench.cli).
    sys.dont_write_bytecode = False
    try:
        conn.send(("ok", func(*args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()
