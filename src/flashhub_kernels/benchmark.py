"""``Benchmark``: a small base class for timing kernel workloads (a 0.1.2 public name, at
the module path of 0.1.2 and of Hugging Face kernels: ``flashhub_kernels.benchmark``)."""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from ._models.record import Record


class BenchmarkResult(Record):
    """Wall times of one ``benchmark_*`` method, in seconds."""

    name: str
    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)


class Benchmark:
    """Subclass, then define ``setup()`` and any number of ``benchmark_<name>()`` methods.

    :meth:`run` calls ``setup`` before each workload (``setup_<name>()`` instead, where
    the class defines one), runs it ``warmup`` times untimed, then ``iterations`` times
    timed. Once the workloads have initialized CUDA, the device is synchronised around
    each timed call so asynchronous kernels are measured in full; a benchmark that never
    uses the GPU creates no CUDA context.

    The attributes of Hugging Face kernels' ``Benchmark`` are there too: ``device``
    (``"cpu"`` unless set), ``seed`` (when set, ``random`` and torch are seeded with it
    before each workload's setup), and ``kernel`` and ``out`` (``None`` until set;
    ``Benchmark(kernel)`` sets ``kernel``, as in 0.1.2). A
    ``verify_<name>()`` method returns the expected output: the workload runs once and
    must leave ``self.out`` close to it (``torch.allclose``, ``atol=1e-2``), or
    :meth:`run` raises ``RuntimeError``.

    Example::

        class Argmax(Benchmark):
            def setup(self):
                self.kernel = get_kernel("sdq/audio-codebook-primitives", version=1)
                self.logits = torch.randn(8, 2048, dtype=torch.bfloat16)
                ...

            def benchmark_decode_step(self):
                self.kernel.delayed_codebook_argmax_embed_bf16(self.logits, ...)

        for result in Argmax().run():
            print(result.name, result.median)
    """

    warmup: int = 3
    iterations: int = 10
    seed: int | None = None
    device: str = "cpu"

    def __init__(self, kernel: Any = None) -> None:
        self.kernel: Any = kernel
        self.out: Any = None

    def setup(self) -> None:
        """Prepare inputs; called before each workload."""

    def workloads(self) -> dict[str, Callable[[], object]]:
        """The ``benchmark_*`` methods by name (without the prefix), in alphabetical order."""
        names = [n for n in dir(type(self)) if n.startswith("benchmark_")]
        return {n.removeprefix("benchmark_"): getattr(self, n) for n in names}

    def run(self) -> list[BenchmarkResult]:
        """Time every workload; return one result per workload."""
        if self.iterations < 1 or self.warmup < 0:
            raise ValueError("iterations must be >= 1 and warmup >= 0")
        results = []
        for name, workload in self.workloads().items():
            if self.seed is not None:
                _seed(self.seed)
            getattr(self, f"setup_{name}", self.setup)()
            verify = getattr(self, f"verify_{name}", None)
            if verify is not None:
                self._verify(name, workload, verify)
            for _ in range(self.warmup):
                workload()
            times = []
            for _ in range(self.iterations):
                _synchronize()
                start = time.perf_counter()
                workload()
                _synchronize()
                times.append(time.perf_counter() - start)
            results.append(BenchmarkResult(name, tuple(times)))
        return results

    def _verify(self, name: str, workload: Callable[[], object], verify: Callable[[], Any]) -> None:
        workload()
        _synchronize()
        expected = verify()
        import torch

        if not torch.allclose(self.out, expected, atol=1e-2):
            raise RuntimeError(
                f"verification failed for {name}: self.out after benchmark_{name}() is not "
                f"close to what verify_{name}() returns; fix the kernel call or the reference"
            )


def _seed(seed: int) -> None:
    random.seed(seed)
    torch = sys.modules.get("torch")  # a workload that uses torch has imported it
    if torch is not None:
        torch.manual_seed(seed)  # every device's generator, CUDA's too


def _synchronize() -> None:
    torch = sys.modules.get("torch")  # never import torch just to time pure Python
    # Nothing can be queued on a GPU that torch has not initialized: asking whether one
    # exists, or synchronizing it, would start CUDA for a workload that never uses it.
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
