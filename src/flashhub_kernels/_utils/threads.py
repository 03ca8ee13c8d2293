"""Work started on a thread of its own, for requests that wait for their answers together."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


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

    threading.Thread(target=run, name="flashhub-request", daemon=True).start()
    return future
