"""Threads a load starts: daemon threads that leave the process's signals to the program's.

The kernel hands a signal sent to the process (Ctrl-C, ``kill``, an alarm) to any of its
threads that does not block it, and Python runs the handler in the main thread only:
a signal another thread took does not wake the main thread from a sleep or a wait, so
Ctrl-C would go unheard until it woke. The threads of a load block those signals.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

# Raised in the thread whose fault caused it, and never blocked: a blocked one kills.
_FAULTS = {
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGABRT,
    signal.SIGTRAP,
    signal.SIGSYS,
}


def start_deaf(thread: threading.Thread) -> None:
    """Start ``thread`` with the signals sent to the process blocked in it (and in the
    threads it starts), where the platform can block them."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no such choice of thread
        thread.start()
        return
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _FAULTS)
    try:
        thread.start()  # a new thread starts with the mask of the one starting it
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def soon(call: Callable[[], T]) -> Future[T]:
    """Start ``call()`` on a daemon thread and return its future: ``result()`` returns
    what it returned or raises what it raised.

    A daemon thread, as the download workers are, so that one still waiting for an
    answer never holds up the interpreter's exit; a future whose result nobody asks for
    is simply dropped.
    """
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # handed to whoever asks for the result
            future.set_exception(exc)

    start_deaf(threading.Thread(target=run, name="flashhub-request", daemon=True))
    return future
