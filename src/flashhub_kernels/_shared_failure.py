"""A failed cold load of a kernel module, shared with the threads that waited for it.

An import runs under its module's import lock. The threads of a process that import one
kernel module at once wait for that lock; when the load fails, each would get the lock in
turn, find no module and load the kernel again: a failing download repeated once per
thread, one after the other. Instead, a thread that gets the lock the failed load held
raises that load's error without loading. Python keeps a module's import lock while a
thread holds it or waits for it, and makes a new one for the next import after that: a
thread that imports the module once the waiting is over (a retry) loads afresh.

Each thread raises a copy of the error (same type, message, hint and cause), not the
object the failing thread raised: the threads raise at once, and one object would collect
the frames of all of them in its one traceback. Only the library's own errors are shared
(:class:`~flashhub_kernels.errors.FlashhubError`, which copy whole); anything else (a
Ctrl-C, say) concerns the thread it happened in, and the waiting threads load afresh.

Python has no public view of the import locks: the module's lock is read from
``importlib._bootstrap._module_locks`` (a dict of weak references from Python 3.10 to
3.13 at least). Where it is not found, no error is shared and the threads load one after
another, as they did.
"""

from __future__ import annotations

import copy
import importlib._bootstrap
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from .errors import FlashhubError

# Module name -> the import lock its failed load held, and a copy of the load's error.
_failed: dict[str, tuple[weakref.ref[object], FlashhubError]] = {}


@contextmanager
def shared_with_waiters(module_name: str | None) -> Iterator[None]:
    """Run a cold load for the import of ``module_name`` (none: not for an import).

    Raises the error of the failed load of ``module_name`` whose import lock this import
    holds now, if there was one; else runs the block, and records its error, if it fails,
    for the threads waiting for that lock.
    """
    # A weak reference: the tracebacks through here must not keep the lock for good.
    lock_ref = _import_lock(module_name) if module_name is not None else None
    if lock_ref is None:
        yield
        return
    assert module_name is not None
    failed = _failed.get(module_name)
    if failed is not None and failed[0] == lock_ref:  # the same lock, while it lives
        raise _copy(failed[1])
    try:
        yield
    except FlashhubError as exc:
        _failed[module_name] = (lock_ref, _copy(exc))
        raise
    _failed.pop(module_name, None)


def _import_lock(module_name: str) -> weakref.ref[object] | None:
    """Python's weak reference to the import lock of ``module_name``, which this thread
    holds as it imports it."""
    locks = getattr(importlib._bootstrap, "_module_locks", None)
    lock = locks.get(module_name) if isinstance(locks, dict) else None
    return lock if isinstance(lock, weakref.ref) and lock() is not None else None


def _copy(exc: FlashhubError) -> FlashhubError:
    """``exc`` as another thread raises it: a copy, chained as ``exc`` is, no traceback."""
    twin = copy.copy(exc)  # by FlashhubError.__reduce__, which keeps every attribute
    twin.__cause__, twin.__context__ = exc.__cause__, exc.__context__
    twin.__suppress_context__ = exc.__suppress_context__
    return twin
