"""The cold path runs with Python's cyclic garbage collector paused.

``import torch`` leaves a full collection due: it creates a few hundred thousand
long-lived objects, and the collector's next pass over the oldest generation comes
after some ten thousand more have been allocated. That pass walks every object torch
made and takes 40-50 ms on a 2-core machine. The cold path allocates that many
(importing ``requests``, ``urllib3`` and ``filelock``, a response per file), so it would
take that pause in the middle of a download, at no gain: almost nothing it allocates
is cyclic garbage.

:func:`collection_paused` turns the collector off for the block and back on after it.
The pass that was due still runs, at the program's next allocations, as it would have
without the load. Where the blocks imported modules (the first cold load imports the
cold path's), what they allocated goes straight to the oldest generation, where
surviving two young collections would have put the modules, their classes and
functions: otherwise the first allocation after the pause runs a young collection over
all of it, 5-7 ms after a cold load, on its critical path. Blocks that import nothing
leave the young generations as they are: the garbage of a load that failed, and the
program's own cycles, are then freed by young collections, not kept until a full
collection that a program with torch imported may not run for hours.
Nested and concurrent blocks share one pause, and a collector the program had turned off
stays off. A child forked during a pause has none of the threads whose blocks hold it, so
it ends the pause at once, as their last block would have.

A pause lasts at most :data:`LONGEST_PAUSE`. A cold load takes well under that; one
that waits longer (a stalled CDN, another process's download of the same kernel, a slow
link) gains nothing worth a 50 ms collection, while the program's other threads may be
making cyclic garbage that only the collector frees: then the collector comes back on,
and the rest of the load runs with it.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .._utils.threads import started
from .._variants.system import free_threaded_build

LONGEST_PAUSE = 1.0  # seconds

_lock = threading.Lock()
_depth = 0  # blocks open, in every thread
_resume = False  # whether the collector was on when the first block began
_modules = 0  # how many modules were imported when the first block began
_deadline: threading.Timer | None = None  # ends a pause that lasts too long


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (see the module docstring)."""
    global _depth, _resume, _modules, _deadline
    with _lock:
        if _depth == 0:
            _resume, _modules = gc.isenabled(), len(sys.modules)
            gc.disable()
            _deadline = _start_deadline() if _resume else None
        _depth += 1
    try:
        yield
    finally:
        ended = _close_block()
        if ended is not None:
            ended.join()  # its thread gone once the load returns (it ends at once, cancelled)


def _close_block() -> threading.Timer | None:
    """Close a block; where it was the last one open, turn the collector back on, and
    return the pause's timer, cancelled."""
    global _depth, _deadline
    with _lock:
        _depth = max(0, _depth - 1)  # a child forked inside its own block: 0 already
        if _depth > 0:
            return None
        ended, _deadline = _deadline, None
        if ended is not None:
            ended.cancel()
        if _resume and not gc.isenabled():
            if len(sys.modules) > _modules:
                _age_young_objects()
            gc.enable()
        return ended


def _start_deadline() -> threading.Timer | None:
    """The timer that ends this pause at :data:`LONGEST_PAUSE`; ``None`` where no thread
    can be started (a process limit): the pause then lasts as long as the load."""
    deadline = threading.Timer(LONGEST_PAUSE, _end_long_pause)
    deadline.name, deadline.daemon = "flashhub-gc-pause", True
    return deadline if started(deadline) else None


def _end_long_pause() -> None:
    """The collector back on while the blocks that paused it are still open: not where
    this timer fired as its pause ended, and another pause, with a timer of its own, began."""
    with _lock:
        if _deadline is threading.current_thread():
            gc.enable()


def _after_fork_in_child() -> None:
    global _lock, _depth, _deadline
    _lock = threading.Lock()  # another thread may have held it at the fork
    _deadline = None  # its thread is not in the child
    if _depth:
        _depth = 0
        if _resume:
            gc.enable()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _age_young_objects() -> None:
    """Move every object of the young generations to the oldest, where the next full
    collection looks at it (``gc.freeze`` then ``gc.unfreeze``: two list splices).

    Not where objects are frozen already, which ``unfreeze`` would let go: the
    program's own (before a fork, say), or the few hundred CPython 3.12 freezes at
    start-up; nor on a free-threaded build, whose ``freeze`` walks the heap.
    """
    if gc.get_freeze_count() == 0 and not free_threaded_build():
        gc.freeze()
        gc.unfreeze()
