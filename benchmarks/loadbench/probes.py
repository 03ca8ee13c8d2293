"""The flashhub side of the measurements: functions that run in a fresh child
(:class:`loadbench.children.Children`) and time one load or import there.

Each takes the ``FLASHHUB_*`` environment to use, imports flashhub only once it is set,
and returns plain data (it is sent back through a pipe).
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .common import CHILD_TIMEOUT_S, CRYPTO_LIBS, HTTP_LIBS, LOCK_LIBS
from .results import median
from .usage import PeakRss, cpu_seconds


def use_env(env: Mapping[str, str]) -> None:
    """Replace every ``FLASHHUB_*`` variable of this process by those of ``env``."""
    for name in [n for n in os.environ if n.startswith("FLASHHUB_")]:
        del os.environ[name]
    os.environ.update(env)


def watched_libs(imported: set[str]) -> list[str]:
    """The HTTP, lock and crypto libraries among the module names ``imported``."""
    return [name for name in (*HTTP_LIBS, *LOCK_LIBS, *CRYPTO_LIBS) if name in imported]


def child_get_kernel(env: Mapping[str, str], repo_id: str) -> dict[str, Any]:
    """A cold (or warm) ``get_kernel``: the call alone is timed, with the CPU time (user +
    system, every thread of the child) it took, the watched libraries it imported (a
    one-off cost inside that CPU time) and its peak RSS growth."""
    use_env(env)
    import flashhub_kernels

    before = set(sys.modules)
    rss = PeakRss()
    cpu = cpu_seconds()
    start = time.perf_counter()
    flashhub_kernels.get_kernel(repo_id, version=1)
    seconds = time.perf_counter() - start
    cpu = cpu_seconds() - cpu
    libs = watched_libs(set(sys.modules) - before)
    return {"seconds": seconds, "cpu_seconds": cpu, "libs": libs, **rss.result()}


def child_warm_libs(env: Mapping[str, str], module: str, repo_id: str) -> list[str]:
    """The watched libraries that warm loads import: ``import flashhub``, the first
    import of ``module`` through the hook and a ``get_kernel`` (cache already warm)."""
    use_env(env)
    before = set(sys.modules)
    import flashhub  # noqa: F401
    import flashhub_kernels

    importlib.import_module(module)
    flashhub_kernels.get_kernel(repo_id, version=1)
    return watched_libs(set(sys.modules) - before)


def child_probing() -> tuple[int, int]:
    """How many variant names this system probes for on a version without
    ``variants.json``, and how many at a time."""
    from flashhub_kernels._network.variant_index import PROBES_AT_ONCE
    from flashhub_kernels._variants.probing import candidate_names
    from flashhub_kernels._variants.system import this_system

    return len(candidate_names(this_system())), PROBES_AT_ONCE


def child_crowd_load(env: Mapping[str, str], repo_id: str, barrier: Any) -> dict[str, float]:
    """One of ``--procs`` processes that start ``get_kernel`` together at a barrier."""
    use_env(env)
    import flashhub_kernels

    barrier.wait(timeout=CHILD_TIMEOUT_S)
    start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes
    flashhub_kernels.get_kernel(repo_id, version=1)
    return {"start": start, "end": time.monotonic()}


def _forget(module: str) -> None:
    """Drop ``module`` and its submodules, so the next import creates it afresh."""
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        del sys.modules[name]


def child_first_import(env: Mapping[str, str], module: str, plain_dir: str | None) -> float:
    """Microseconds of the first import of ``module`` in this process (cache already warm);
    with ``plain_dir`` first on ``sys.path`` where given (the plain-directory baseline)."""
    use_env(env)
    import flashhub  # noqa: F401  (the import hook, as user code has it)

    if plain_dir is not None:
        sys.path.insert(0, plain_dir)
    start = time.perf_counter()
    importlib.import_module(module)
    return (time.perf_counter() - start) * 1e6


def child_reimports(
    env: Mapping[str, str], modules: Sequence[str], plain_dir: str, count: int
) -> dict[str, float]:
    """Median microseconds of re-importing each module ``count`` times, interleaved."""
    use_env(env)
    import flashhub  # noqa: F401

    sys.path.insert(0, plain_dir)
    for module in modules:  # first imports (the warm path proper) are row 3a
        importlib.import_module(module)
    samples: dict[str, list[float]] = {module: [] for module in modules}
    for _ in range(count):
        for module in modules:
            _forget(module)
            start = time.perf_counter()
            importlib.import_module(module)
            samples[module].append((time.perf_counter() - start) * 1e6)
    return {module: median(values) for module, values in samples.items()}
