"""The public names of the 0.1.2 release keep working, and Benchmark times workloads."""

from __future__ import annotations

import pytest

import flashhub_kernels as fk

NAMES_0_1_2 = [
    "configure",
    "get_config",
    "get_kernel",
    "get_kernel_variants",
    "get_loaded_kernels",
    "get_local_kernel",
    "has_kernel",
    "Benchmark",
    "CUDAProperties",
    "Device",
    "LoadedKernel",
    "Mode",
    "ROCMProperties",
    "RepoInfo",
    "VariantAccepted",
    "VariantRejected",
    "__version__",
]


@pytest.mark.parametrize("name", NAMES_0_1_2)
def test_every_0_1_2_name_is_exported(name: str) -> None:
    assert name in fk.__all__
    assert getattr(fk, name) is not None


def test_all_names_resolve() -> None:
    missing = [name for name in fk.__all__ if not hasattr(fk, name)]
    assert missing == []


def test_version_is_newer_than_the_release_it_replaces() -> None:
    from packaging.version import Version

    assert Version(fk.__version__) > Version("0.1.2")


def test_repo_info() -> None:
    info = fk.RepoInfo("sdq/audio-codebook-primitives", 1)
    assert info.module_name() == "flashhub.sdq.audio_codebook_primitives.v1"
    assert str(info) == "sdq/audio-codebook-primitives@v1"
    with pytest.raises(ValueError):
        fk.RepoInfo("a/b/c", 1)


def test_benchmark_times_each_workload() -> None:
    class Counting(fk.Benchmark):
        warmup, iterations = 2, 4

        def setup(self) -> None:
            self.calls = getattr(self, "calls", 0)
            self.setups = getattr(self, "setups", 0) + 1

        def benchmark_add(self) -> None:
            self.calls += 1

        def benchmark_sum(self) -> None:
            sum(range(1000))

    bench = Counting()
    results = bench.run()
    assert [r.name for r in results] == ["add", "sum"]
    assert bench.setups == 2 and bench.calls == 6  # warmup + iterations of "add"
    for result in results:
        assert len(result.times) == 4 and result.min <= result.median <= result.max
    with pytest.raises(ValueError):
        type("Bad", (fk.Benchmark,), {"iterations": 0})().run()
