"""The library's threads (a load's, the pools of ``flashhub lock``, ``info`` and
``mirror``): they leave the process's signals to the program's threads.

The kernel hands a signal sent to the process (Ctrl-C, ``kill``, an alarm) to any of its
threads that does not block it, and Python runs the handler in the main thread only:
a signal another thread took does not wake the main thread from a sleep or a wait, so
Ctrl-C would go unheard until it woke. The library's threads block those signals.

A load's threads import nothing either: whatever they run is imported by the thread
that loads. A program may fork while they run (a DataLoader's workers, a server's), and a
module that one of them was importing then stays half imported in the child, its import
lock held by a thread the child does not have: the child's next import of it waits
forever.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

# The longest a wait of the loading thread for the library's threads lasts between two
# looks at the handlers Python has pending: a handler no signal woke the wait for (one
# `_thread.interrupt_main()` scheduled, or one for a signal another thread took) would
# otherwise run only once the work waited for ends, a stalled download's after minutes.
_HEARD_WITHIN_SECONDS = 0.25

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


@contextmanager
def _deaf() -> Iterator[None]:
    """Block the signals sent to the process in this thread, where the platform can block
    them, while the block runs: a thread started then starts with them blocked."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no such choice of thread
        yield
        return
    unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _FAULTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def started(thread: threading.Thread) -> bool:
    """Start ``thread`` with the signals sent to the process blocked in it (and in the
    threads it starts), where the platform can block them, and say whether it started.
    An interpreter that is exiting refuses new threads (Python 3.12 does from the end of
    the main thread, and in an atexit handler), and so does a process at its limit of
    threads: a load made then does the thread's work in its own thread."""
    try:
        with _deaf():
            thread.start()  # a new thread starts with the mask of the one starting it
    except RuntimeError:
        return False
    return True


def joined(thread: threading.Thread) -> None:
    """``thread.join()``, in slices between which the handler of an interrupt runs (see
    :data:`_HEARD_WITHIN_SECONDS`)."""
    while thread.is_alive():
        thread.join(_HEARD_WITHIN_SECONDS)


class _Awaited(Future[T]):
    """A future whose ``result()`` and ``exception()``, asked without a timeout, wait in
    slices, as :func:`joined` does."""

    def result(self, timeout: float | None = None) -> T:
        if timeout is None:
            self._wait_in_slices()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if timeout is None:
            self._wait_in_slices()
        return super().exception(timeout)

    def _wait_in_slices(self) -> None:
        while not wait([self], _HEARD_WITHIN_SECONDS).done:
            pass


class DeafThreadPool(ThreadPoolExecutor):
    """A :class:`~concurrent.futures.ThreadPoolExecutor` whose threads start as
    :func:`started` starts one."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with _deaf():  # submit() starts the threads, up to max_workers
            return super().submit(fn, *args, **kwargs)


def soon(call: Callable[[], T]) -> Future[T]:
    """Start ``call()`` on a daemon thread and return its future: ``result()`` returns
    what it returned or raises what it raised.

    A daemon thread, as the download workers are, so that one still waiting for an
    answer never holds up the interpreter's exit; a future whose result nobody asks for
    is simply dropped. Where no thread can start (see :func:`started`), the call is
    made before this returns.
    """
    future: Future[T] = _Awaited()

    def run() -> None:
        try:
            future.set_result(call())
        except BaseException as exc:  # handed to whoever asks for the result
            future.set_exception(exc)

    if not started(threading.Thread(target=run, name="flashhub-request", daemon=True)):
        run()  # no thread to be had: the call is made here and now
    return future
