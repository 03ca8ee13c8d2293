"""The public names of the 0.1.2 release keep working, and Benchmark times workloads."""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import run_python
from support.cdn_server import CdnServer
from support.gpu_stand_in import context_requests, gpu_machine_env
from support.trees import write_kernel

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


def test_the_0_1_2_modules_import_by_their_paths() -> None:
    """0.1.2 code imports Benchmark and the layer types from their modules, as Hugging
    Face kernels' benchmarks import ``kernels.benchmark``; none of them needs torch."""
    code = """
        import sys
        from flashhub_kernels.benchmark import Benchmark
        from flashhub_kernels.layer_types import CUDAProperties, Device, Mode, ROCMProperties
        import flashhub_kernels as fk

        assert Benchmark is fk.Benchmark and Device is fk.Device and Mode is fk.Mode
        assert (CUDAProperties, ROCMProperties) == (fk.CUDAProperties, fk.ROCMProperties)
        assert "torch" not in sys.modules
    """
    run_python(textwrap.dedent(code), fresh=True)


def test_a_device_prints_as_its_type_as_in_0_1_2() -> None:
    # 0.1.2 code passes str(device) where a device name goes (torch.device, logs, keys).
    device = fk.Device("cuda", fk.CUDAProperties(75, 90))
    assert (str(device), f"{device}") == ("cuda", "cuda")
    assert repr(device) == (
        "Device(type='cuda', properties=CUDAProperties(min_capability=75, max_capability=90))"
    )


# What Hugging Face kernels 0.19.1 adds to the loading API: Metadata, and check_arch= on
# each function and layer or function repository that loads a kernel.
CHECK_ARCH_TAKERS = [
    "get_kernel",
    "get_local_kernel",
    "get_locked_kernel",
    "has_kernel",
    "load_kernel",
    "LayerRepository",
    "LocalLayerRepository",
    "LockedLayerRepository",
    "FuncRepository",
    "LocalFuncRepository",
    "LockedFuncRepository",
]


@pytest.mark.parametrize("name", CHECK_ARCH_TAKERS)
def test_check_arch_is_a_keyword_that_defaults_to_checking(name: str) -> None:
    parameter = inspect.signature(getattr(fk, name)).parameters["check_arch"]
    assert parameter.kind is inspect.Parameter.KEYWORD_ONLY and parameter.default is True


def test_metadata_is_exported_with_hugging_faces_fields() -> None:
    assert "Metadata" in fk.__all__ and "Metadata" in dir(fk)
    fields = {field.name for field in dataclasses.fields(fk.Metadata)}
    assert fields >= {
        "id",
        "name",
        "version",
        "build_layout",
        "kernels_minver",
        "license",
        "upstream",
        "source",
        "python_depends",
        "kernel_depends",
        "backend",
        "digest",
        "provenance",
    }
    assert isinstance(inspect.getattr_static(fk.Metadata, "read_from_file"), staticmethod)
    assert isinstance(inspect.getattr_static(fk.LoadedKernel, "metadata"), property)


def test_all_names_resolve() -> None:
    missing = [name for name in fk.__all__ if not hasattr(fk, name)]
    assert missing == []


# Everything of the layer API except kernelize: none of it needs torch to be imported.
TORCH_FREE_LAYER_NAMES = [
    "CUDAProperties",
    "Device",
    "FuncRepository",
    "KernelizeFallback",
    "KernelizedFunc",
    "KernelizedLayer",
    "KernelizedLayers",
    "LayerRepository",
    "LocalFuncRepository",
    "LocalLayerRepository",
    "LockedFuncRepository",
    "LockedLayerRepository",
    "Mode",
    "ROCMProperties",
    "get_kernelized_layers",
    "register_kernel_mapping",
    "replace_kernel_forward_from_hub",
    "use_kernel_forward_from_hub",
    "use_kernel_func_from_hub",
    "use_kernel_mapping",
    "use_kernelized_func",
]


def test_layer_names_and_mappings_need_no_torch(tmp_path: Path) -> None:
    code = f"""
        import sys
        from flashhub_kernels import {", ".join(TORCH_FREE_LAYER_NAMES)}
        import flashhub_kernels.layers

        silu = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
        locked = LockedLayerRepository(
            "acme/silu-layers", "SiluAndMul", lockfile={str(tmp_path / "flashhub.lock")!r}
        )
        local = LocalLayerRepository(".", "SiluAndMul")
        func = FuncRepository("acme/silu-layers", "silu_and_mul", version=1)
        locked_func = LockedFuncRepository(
            "acme/silu-layers", "silu_and_mul", lockfile={str(tmp_path / "flashhub.lock")!r}
        )
        assert get_kernelized_layers.__module__ == "flashhub_kernels.layers._inspect"
        assert KernelizedLayers().layers == {{}} and KernelizedLayers().funcs == {{}}
        register_kernel_mapping({{"SiluAndMul": {{"cpu": local}}}})
        register_kernel_mapping({{"silu_and_mul": {{"cpu": func}}}}, inherit_mapping=False)
        with use_kernel_mapping({{
            "SiluAndMul": {{
                Device("cuda", CUDAProperties(80, 90)): {{Mode.INFERENCE: silu}},
                Device("rocm", ROCMProperties(90, 94)): locked,
                "cpu": {{Mode.TRAINING: LocalFuncRepository(".", "silu_and_mul")}},
                "xpu": locked_func,
            }}
        }}):
            use_kernel_forward_from_hub("SiluAndMul")
            use_kernel_func_from_hub("silu_and_mul")
        heavy = {{"torch", "flashhub_kernels._lockfiles.locked_loading"}} & set(sys.modules)
        assert not heavy, heavy
    """
    run_python(textwrap.dedent(code), fresh=True)  # a new interpreter: no torch yet


def test_kernelize_runs_a_kernel_layer(tmp_path: Path) -> None:
    import torch
    from torch import nn

    package = tmp_path / "double_layers"
    package.mkdir()
    (package / "__init__.py").write_text("from . import layers\n")
    (package / "layers.py").write_text(
        "from torch import nn\n\n\n"
        "class Double(nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x * 2\n"
    )

    @fk.use_kernel_forward_from_hub("Double")
    class Identity(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    model = nn.Sequential(Identity())
    x = torch.ones(3)
    repo = fk.LocalLayerRepository(package, "Double")
    with fk.use_kernel_mapping({"Double": {"cpu": repo}}):
        assert fk.kernelize(model, mode=fk.Mode.INFERENCE, device="cpu") is model
    assert torch.equal(model(x), x * 2)
    assert fk.get_kernelized_layers(model) == fk.KernelizedLayers(
        layers={"0": fk.KernelizedLayer(model[0], repo)}
    )


def test_version_is_newer_than_the_release_it_replaces() -> None:
    from packaging.version import Version

    assert Version(fk.__version__) > Version("0.1.2")


def test_get_config_has_the_0_1_2_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.1.2 code reads get_config().cdn_url, .prefix and .cache_dir.
    monkeypatch.setenv("FLASHHUB_CDN_URL", "http://mirror-a.example,http://mirror-b.example")
    config = fk.get_config()
    assert config.cdn_url == "http://mirror-a.example"
    assert config.prefix == "kernels"
    fk.configure(cdn_url="http://other.example")
    assert fk.get_config().cdn_url == "http://other.example"


def test_what_0_1_2_raised_as_a_value_error_is_caught_as_one(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """0.1.2 raised ``ValueError`` when no build fits, when a file does not match its
    digest, and for a malformed variants.json or metadata.json: its fallbacks still run."""
    never_fits = "torch212-cxx11-cu126-x86_64-linux"  # an older torch's build
    write_kernel(cdn.root, "acme/no-fit", 1, [never_fits])
    [variant] = write_kernel(cdn.root, "acme/tampered", 1)
    ran = tmp_path / "ran"
    init = cdn.root / f"kernels/acme/tampered/v1/build/{variant}/tampered/__init__.py"
    init.write_text(f"open({str(ran)!r}, 'w').close()\n")
    write_kernel(cdn.root, "acme/not-a-list", 1)
    (cdn.root / "kernels/acme/not-a-list/v1/variants.json").write_text('{"a": 1}')
    write_kernel(cdn.root, "acme/no-digest", 1)
    (cdn.root / f"kernels/acme/no-digest/v1/build/{variant}/metadata.json").write_text("{}")
    code = """
        from flashhub_kernels import get_kernel
        for repo in ("acme/no-fit", "acme/tampered", "acme/not-a-list", "acme/no-digest"):
            try:
                get_kernel(repo, version=1)
            except ValueError as e:
                print(repo, type(e).__name__)
    """

    caught = run_python(textwrap.dedent(code)).split("\n")

    assert caught == [
        "acme/no-fit NoCompatibleVariantError",
        "acme/tampered IntegrityError",
        "acme/not-a-list ManifestError",
        "acme/no-digest ManifestError",
        "",
    ]
    assert not ran.exists()


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


def test_a_benchmark_written_for_0_1_2_takes_its_kernel_when_made() -> None:
    class Tripling(fk.Benchmark):
        iterations = 1

        def benchmark_triple(self) -> None:
            self.out = self.kernel(2)

    for bench in (Tripling(lambda x: x * 3), Tripling(kernel=lambda x: x * 3)):
        assert [r.name for r in bench.run()] == ["triple"] and bench.out == 6


CPU_BENCHMARK = """
import torch
import flashhub_kernels as fk

class Adding(fk.Benchmark):
    seed, warmup, iterations = 3, 1, 2

    def setup(self):
        self.x = torch.ones(4)

    def benchmark_add(self):
        self.out = self.x + 1

    def verify_add(self):
        return torch.full((4,), 2.0)

print([r.name for r in Adding().run()], torch.cuda.is_initialized())
synchronized = []
torch.cuda.init()  # a workload that uses the GPU: its kernels are waited for
torch.cuda.synchronize = lambda: synchronized.append(1)
print(len(Adding().run()[0].times), len(synchronized))
"""


def test_a_benchmark_on_the_cpu_of_a_gpu_machine_starts_no_cuda(tmp_path: Path) -> None:
    """Synchronizing before and after each timed call is for a GPU the workloads use:
    a benchmark that never touches one neither asks torch about it nor creates a
    context, which would cost the GPU's memory and fail forked workers."""
    env = gpu_machine_env(tmp_path, nvml=tmp_path)
    assert run_python(CPU_BENCHMARK, env=env).split() == ["['add']", "False", "2", "5"]
    assert context_requests(tmp_path) == []


def test_a_benchmark_written_for_hugging_face_kernels_runs() -> None:
    import torch

    class Doubling(fk.Benchmark):
        seed, iterations = 7, 2

        def setup(self) -> None:
            self.x = torch.randn(4, 8, device=self.device)
            self.drawn = self.x.clone()

        def setup_halve(self) -> None:
            self.x = torch.ones(4, device=self.device)

        def benchmark_double(self) -> None:
            self.out = self.kernel(self.x)

        def verify_double(self) -> torch.Tensor:
            return self.x * 2

        def benchmark_halve(self) -> None:
            self.out = self.x / 2

        def verify_halve(self) -> torch.Tensor:
            return torch.full((4,), 0.5)

    bench = Doubling()
    assert (bench.device, bench.kernel, bench.out) == ("cpu", None, None)
    bench.kernel = lambda x: x * 2
    assert [r.name for r in bench.run()] == ["double", "halve"]
    torch.manual_seed(7)
    torch.testing.assert_close(bench.drawn, torch.randn(4, 8))  # seeded before setup()
    torch.testing.assert_close(bench.x, torch.ones(4))  # setup_halve() replaced setup()
    bench.kernel = lambda x: x * 3
    with pytest.raises(RuntimeError, match="verification failed for double"):
        bench.run()
