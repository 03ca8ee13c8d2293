"""A failed cold load of a kernel module, shared with the threads that waited for it.

An import runs under its module's import lock. The threads of a process that import one
kernel module at once wait for that lock; when the load fails, each would get the lock in
turn, find no module and load the kernel again: a failing download repeated once per
thread, one after the other. Instead, the thread whose load fails hands its error to the
threads waiting for the lock at that moment, and each of them raises it without loading.
A thread that starts waiting after the failure loads afresh: a retry is a new attempt.

Each waiting thread gets a copy of the error (same type, message, hint and cause), not the
object the failing thread raises: the threads raise at once, and one object would collect
the frames of all of them in its one traceback. Only the library's own errors are shared
(:class:`~flashhub_kernels.errors.FlashhubError`, which copy whole); anything else (a
Ctrl-C, say) concerns the thread it happened in, and the waiting threads load afresh.

Python has no public view of who waits for an import lock: its bookkeeping for deadlock
detection (``importlib._bootstrap._blocking_on``) says, a dict of thread ids to the lock
each waits for (to a weak reference to a list of them, from Python 3.12). Where it is not
found, no error is shared and the threads load one after another, as they did.
"""

from __future__ import annotations

import _thread
import copy
import importlib._bootstrap
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import FlashhubError

_lock = _thread.allocate_lock()
# Thread id -> the module whose failed import it waited for, and its copy of the error.
_handed: dict[int, tuple[str, FlashhubError]] = {}


@contextmanager
def shared_with_waiters(module_name: str | None) -> Iterator[None]:
    """Run a cold load for the import of ``module_name`` (none: not for an import).

    Raises the error of the failed load of ``module_name`` that this thread waited for,
    if so; else runs the block, whose error, if it fails, goes to the threads waiting
    for the import of ``module_name`` now.
    """
    if module_name is None:
        yield
        return
    with _lock:
        handed = _handed.pop(_thread.get_ident(), None)
    if handed is not None and handed[0] == module_name:
        raise handed[1]
    try:
        yield
    except FlashhubError as exc:
        _hand_over(module_name, exc)
        raise


def _hand_over(module_name: str, exc: FlashhubError) -> None:
    """Give a copy of ``exc`` to each thread waiting for the import lock of ``module_name``."""
    waiting = _waiting_for(module_name)
    with _lock:
        for thread_id in waiting:
            _handed[thread_id] = (module_name, _copy(exc))


def _copy(exc: FlashhubError) -> FlashhubError:
    """``exc`` as another thread raises it: a copy, chained as ``exc`` is, no traceback."""
    twin = copy.copy(exc)  # by FlashhubError.__reduce__, which keeps every attribute
    twin.__cause__, twin.__context__ = exc.__cause__, exc.__context__
    twin.__suppress_context__ = exc.__suppress_context__
    return twin


def _waiting_for(module_name: str) -> list[int]:
    """The ids of the threads waiting for the import lock of ``module_name``."""
    ref = getattr(importlib._bootstrap, "_module_locks", {}).get(module_name)
    lock = ref() if ref is not None else None
    blocking_on = getattr(importlib._bootstrap, "_blocking_on", None)
    waits = getattr(blocking_on, "data", blocking_on)  # from Python 3.12: weak references
    if lock is None or not isinstance(waits, dict):
        return []
    waiting = []
    for thread_id, on in list(waits.items()):
        if isinstance(on, weakref.ref):
            on = on()
        if on is lock or (isinstance(on, list) and lock in on):
            waiting.append(thread_id)
    return waiting
