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
without the load; a load adds no collection and removes none. Nested and concurrent
blocks share one pause, and a collector the program had turned off stays off.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0  # blocks open, in every thread
_resume = False  # whether the collector was on when the first block began


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for the block (see the module docstring)."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
