"""``Benchmark``: a small base class for timing kernel workloads (a 0.1.2 public name)."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable

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

    :meth:`run` calls ``setup`` before each workload, runs it ``warmup`` times untimed,
    then ``iterations`` times timed. When torch with CUDA is loaded, the device is
    synchronised around each timed call so asynchronous kernels are measured in full.

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
            self.setup()
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


def _synchronize() -> None:
    torch = sys.modules.get("torch")  # never import torch just to time pure Python
    if torch is not None and torch.cuda.is_available():
        torch.cuda.synchronize()
