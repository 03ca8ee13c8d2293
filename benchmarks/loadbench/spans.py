"""Where a cold load's time goes: timing spans put around flashhub's own functions from
outside, in the child that measures the breakdown (:func:`loadbench.fresh.breakdown`).

Nothing in flashhub is instrumented for this. :func:`install` wraps the import system's
``_find_and_load`` (the outermost import of a module is the ``imports`` phase, the
kernel's own module aside: the load runs inside it) and,
as each of flashhub's modules is imported, a few of its functions: the documents, the
cache mutexes, the transfers, the writes, the commit; and ``os.fsync`` and
``os.fdatasync``, wherever they are called (``sync``). Time on the main thread goes to
the innermost phase open (exclusive: an import during a document fetch is ``imports``);
what the download threads do inside the ``transfers`` phase is summed per activity over
the threads. Garbage-collector pauses are a phase too, wherever they land: in a process
that has imported torch a full collection walks torch's objects and takes tens of ms.

Stdlib only, and nothing that a load imports: the child imports this module before the
load, so whatever it imported would be missing from the load's ``imports``.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# ``get_kernel`` imports the kernel as ``flashhub.<org>.<pkg>.v<N>``, and the cold load
# happens inside that import (the finder locates the kernel): it is no import phase.
KERNEL_MODULES = "flashhub."
# The phases, in the order they are printed.
PHASES = (
    "imports",
    "locks",
    "documents",
    "transfers",
    "commit: bytecode",
    "commit: records",
    "commit: rename",
    "sync",
    "kernel import",
    "gc pauses",
    "other",
)
# What the download threads do inside "transfers", summed over the threads.
THREAD_PARTS = ("open/create", "write + hash", "verify")
# Wraps a file's whole download; reported less the parts above (on the main thread, a
# single file's download, it is exclusive like every phase).
_WHOLE_FILE = "request + receive"
# Syncs made on other threads than the main one (the newer-version check's record),
# summed; the main thread's are its phase "sync".
SYNC_ELSEWHERE = "sync, other threads"


class Spans:
    """Exclusive time per phase on the main thread, and per part on the other threads."""

    def __init__(self) -> None:
        self.main = threading.main_thread()
        self.totals: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.threads: dict[str, float] = dict.fromkeys((*THREAD_PARTS, _WHOLE_FILE), 0.0)
        self.synced_elsewhere = 0.0
        self._stack: list[str] = ["other"]
        self._since = time.perf_counter()
        self._lock = threading.Lock()
        self._gc_started: float | None = None

    def _switch(self, now: float) -> None:
        phase = self._stack[-1]
        self.totals[phase] = self.totals.get(phase, 0.0) + now - self._since
        self._since = now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Charge the block's time on the main thread to ``name``; elsewhere, to the
        thread part ``name`` (when it is one)."""
        if threading.current_thread() is not self.main:
            start = time.perf_counter()
            try:
                yield
            finally:
                with self._lock:
                    if name in self.threads:
                        self.threads[name] += time.perf_counter() - start
                    elif name == "sync":
                        self.synced_elsewhere += time.perf_counter() - start
            return
        self._switch(time.perf_counter())
        self._stack.append(name)
        try:
            yield
        finally:
            self._switch(time.perf_counter())
            self._stack.pop()

    def on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._gc_started = now
            if threading.current_thread() is self.main:
                self._switch(now)
                self._stack.append("gc pauses")
            return
        if threading.current_thread() is self.main:
            self._switch(now)
            self._stack.pop()
        elif self._gc_started is not None:  # a pause on another thread stops this one too
            with self._lock:
                self.totals["gc pauses"] += now - self._gc_started

    def result(self) -> dict[str, float]:
        """Milliseconds per phase (main thread) and per thread part (``threads: ...``)."""
        self._switch(time.perf_counter())
        out = {name: seconds * 1e3 for name, seconds in self.totals.items()}
        parts = {name: self.threads[name] * 1e3 for name in THREAD_PARTS}
        parts[_WHOLE_FILE] = self.threads[_WHOLE_FILE] * 1e3 - sum(parts.values())
        out.update({f"threads: {name}": ms for name, ms in parts.items()})
        out[SYNC_ELSEWHERE] = self.synced_elsewhere * 1e3
        return out


def _wrap(spans: Spans, owner: Any, attr: str, phase: str) -> None:
    func: Callable[..., Any] = getattr(owner, attr)

    def timed(*args: Any, **kwargs: Any) -> Any:
        with spans.phase(phase):
            return func(*args, **kwargs)

    setattr(owner, attr, timed)


def _wrap_context(spans: Spans, owner: Any, attr: str, phase: str) -> None:
    """Wrap a function returning a context manager: its enter and exit are ``phase``."""
    func: Callable[..., Any] = getattr(owner, attr)

    @contextmanager
    def timed(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with spans.phase(phase):
            manager = func(*args, **kwargs)
            value = manager.__enter__()
        try:
            yield value
        except BaseException:
            with spans.phase(phase):
                if not manager.__exit__(*sys.exc_info()):
                    raise
        else:
            with spans.phase(phase):
                manager.__exit__(None, None, None)

    setattr(owner, attr, timed)


def _patch(spans: Spans, name: str, module: Any) -> None:
    """Wrap the functions of flashhub's module ``name`` that mark a phase."""
    if name == "flashhub_kernels._cache.mutex":
        _wrap_context(spans, module, "hold", "locks")
    elif name == "flashhub_kernels._network.transport":
        _wrap(spans, module.Fetcher, "get_document", "documents")
        _wrap(spans, module.Fetcher, "download_many", "transfers")
        _wrap(spans, module.Fetcher, "download", _WHOLE_FILE)
    elif name == "flashhub_kernels._network.hashing":
        writer = module.HashingWriter
        _wrap(spans, writer, "__init__", "open/create")
        _wrap(spans, writer, "write", "write + hash")
        _wrap(spans, writer, "hashes_to", "verify")
    elif name == "flashhub_kernels._cache.staging":  # where seal looks it up
        _wrap(spans, module, "compile_bytecode", "commit: bytecode")
    elif name == "flashhub_kernels._network.download":  # where the download looks it up
        _wrap(spans, module, "commit", "commit: rename")
    elif name == "flashhub_kernels._finder":
        _wrap(spans, module.KernelLoader, "exec_module", "kernel import")
    elif name == "flashhub_kernels._utils.filesystem":
        _wrap(spans, module, "write_atomic", "commit: records")


def install() -> Spans:
    """Start timing: imports, GC pauses and, once imported, flashhub's phases."""
    import importlib._bootstrap as bootstrap  # already imported: the import system itself

    spans = Spans()
    for sync in ("fsync", "fdatasync"):
        if hasattr(os, sync):
            _wrap(spans, os, sync, "sync")
    find_and_load = bootstrap._find_and_load
    depth = threading.local()
    patched: set[str] = set()

    def timed_find_and_load(name: str, import_: Any) -> Any:
        if name.startswith(KERNEL_MODULES):  # the load itself runs inside this import
            return find_and_load(name, import_)
        level = getattr(depth, "level", 0)
        depth.level = level + 1
        try:
            if level or threading.current_thread() is not spans.main:
                module = find_and_load(name, import_)
            else:
                with spans.phase("imports"):
                    module = find_and_load(name, import_)
        finally:
            depth.level = level
        if name.startswith("flashhub_kernels.") and name not in patched:
            patched.add(name)
            _patch(spans, name, module)
        return module

    bootstrap._find_and_load = timed_find_and_load
    gc.callbacks.append(spans.on_gc)
    return spans
