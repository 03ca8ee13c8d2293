"""The documented API as a type checker sees it from a user's code.

CI runs ``mypy --strict examples/typed_usage.py``: each function below is code written
the way README.md and docs/*.md show it (and as Hugging Face ``kernels`` users write it),
and must check without an ignore. A line ending in ``# type: ignore[code]`` is a mistake
the checker must flag; strict mode reports an ignore that is no longer needed, so a hint
that grows too loose fails CI too. ``assert_type`` pins a precise type where ``Any``
would slip through. Nothing here runs: the functions are never called.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn
from typing_extensions import assert_type

import flashhub_kernels
from flashhub_kernels import (
    Benchmark,
    Config,
    CUDAProperties,
    Device,
    FuncRepository,
    KernelizedFunc,
    KernelizedLayer,
    KernelizeFallback,
    LayerRepository,
    LoadedKernel,
    LocalFuncRepository,
    LocalLayerRepository,
    LockedFuncRepository,
    LockedLayerRepository,
    Metadata,
    Mode,
    RepoInfo,
    ROCMProperties,
    VariantAccepted,
    VariantRejected,
    configure,
    get_config,
    get_kernel,
    get_kernel_dep,
    get_kernel_variants,
    get_kernelized_layers,
    get_loaded_kernels,
    get_local_kernel,
    get_locked_kernel,
    has_kernel,
    install_kernel,
    kernelize,
    load_kernel,
    register_kernel_mapping,
    replace_kernel_forward_from_hub,
    use_kernel_forward_from_hub,
    use_kernel_func_from_hub,
    use_kernel_mapping,
    use_kernelized_func,
)
from flashhub_kernels.errors import (
    FlashhubError,
    KernelImportError,
    KernelLayerError,
    KernelNotFoundError,
    LocalKernelNotFoundError,
    LockfileError,
    NoCompatibleVariantError,
    OfflineError,
    VersionNotFoundError,
)

# README: API; a name misspelt in an import is flagged, not taken as Any


def names() -> None:
    from flashhub_kernels import get_kernal  # type: ignore[attr-defined]
    from flashhub_kernels.layer import kernelise  # type: ignore[attr-defined]
    from flashhub_kernels.layer_types import Devise  # type: ignore[attr-defined]
    from flashhub_kernels.layers import validate_layer

    print(get_kernal, kernelise, Devise, validate_layer)
    print(flashhub_kernels.get_kernal)  # type: ignore[attr-defined]
    assert_type(flashhub_kernels.__version__, str)
    assert_type(flashhub_kernels.errors.KernelNotFoundError, type[KernelNotFoundError])


def the_import_hook() -> None:
    import flashhub.sdq.audio_codebook_primitives.v1 as k
    from flashhub.acme.tensor_tricks import v1, v2

    print(k.delayed_codebook_argmax_embed_bf16, v1.scale_shift, v2)


def loading_a_kernel(logits: torch.Tensor, codebook: torch.Tensor) -> None:
    k = get_kernel("sdq/audio-codebook-primitives", version=1)
    assert_type(k, ModuleType)
    codes, emb = k.delayed_codebook_argmax_embed_bf16(logits, codebook, delay=2, boc=1)
    print(codes, emb)
    get_kernel("acme/tensor-tricks", revision="v1", backend="cpu", check_arch=False)
    get_kernel("acme/tensor-tricks", version=1, user_agent={"app": "1.0"}, trust_remote_code=True)
    get_kernel("acme/tensor-tricks", versoin=1)  # type: ignore[call-arg]
    get_kernel("acme/tensor-tricks", version="1")  # type: ignore[arg-type]

    assert_type(get_local_kernel("examples/kernels/silu-layers"), ModuleType)
    get_local_kernel(Path("build"), "silu_layers", backend="cpu", check_arch=False)
    assert_type(has_kernel("acme/tensor-tricks", 1, backend="cpu"), bool)
    has_kernel("acme/tensor-tricks", revison="v1")  # type: ignore[call-arg]

    system = "torch213-cxx11-cpu-x86_64-linux"
    for verdict in get_kernel_variants("acme/tensor-tricks", system=system):
        if isinstance(verdict, VariantRejected):
            print(verdict.variant, verdict.reason)
        else:
            assert_type(verdict, VariantAccepted)
            print(verdict.variant == "torch-universal", verdict.variant.tier)

    entry: LoadedKernel
    for entry in get_loaded_kernels():
        assert_type(entry.module, ModuleType)
        assert_type(entry.path, Path)
        assert_type(entry.repo_info, RepoInfo | None)
        print(entry.metadata["digest"]["files"], entry.metadata.get("name"))
    assert_type(Metadata.read_from_file(Path("metadata.json")), Metadata)
    assert_type(RepoInfo("acme/tensor-tricks", 1).revision, str)
    RepoInfo("acme/tensor-tricks", "1")  # type: ignore[arg-type]

    assert_type(install_kernel("acme/tensor-tricks", version=1, local_files_only=True), Path)
    install_kernel("acme/tensor-tricks", 1)  # type: ignore[call-arg]


def settings() -> None:
    config = configure(cdn_url="https://kernels.example.com", cache_dir=Path("/srv/cache"))
    assert_type(config, Config)
    configure(trusted_keys=["flashhub-ed25519:..."])
    assert_type(get_config(), Config)
    configure(cdn_url=os.environ)  # type: ignore[arg-type]


def errors() -> None:
    try:
        get_kernel("acme/tensor-tricks", version=1)
    except NoCompatibleVariantError as error:
        print(error.hint, error.cli_hint)
    except (VersionNotFoundError, OfflineError) as error:
        assert_type(error.hint, str | None)
    except KernelNotFoundError as error:
        print(error.name)
    except KernelImportError:
        pass
    except LocalKernelNotFoundError:  # a FileNotFoundError, no ImportError
        pass
    except (TypeError, ValueError):
        pass
    except FlashhubError as error:
        print(error.message)


# docs/locking.md


def locked_kernels() -> None:
    assert_type(get_locked_kernel("sdq/audio-codebook-primitives"), ModuleType)
    assert_type(load_kernel("sdq/audio-codebook-primitives"), ModuleType)
    load_kernel("sdq/audio-codebook-primitives", lockfile=Path("flashhub.lock"), backend="cpu")
    load_kernel("sdq/audio-codebook-primitives", Path("flashhub.lock"))  # type: ignore[call-arg]
    try:
        load_kernel("sdq/audio-codebook-primitives")
    except LockfileError as error:
        print(error.hint)


# docs/kernel-requirements.md: a kernel that depends on another


def kernel_dependency() -> None:
    assert_type(get_kernel_dep("kernels-community/einops"), ModuleType)


# docs/layers.md: A first example


def a_first_example() -> None:
    @use_kernel_forward_from_hub("SiluAndMul")
    class SiluAndMul(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            d = x.shape[-1] // 2
            return F.silu(x[..., :d]) * x[..., d:]

    model = nn.Sequential(nn.Linear(64, 256), SiluAndMul(), nn.Linear(128, 64)).eval()
    x = torch.randn(8, 64)
    local = LocalLayerRepository("examples/kernels/silu-layers", "SiluAndMul")
    LocalLayerRepository(repo_path=Path("silu-layers"), layer_name="SiluAndMul")
    LocalLayerRepository("examples/kernels/silu-layers", "SiluAndMul", package_name="silu_layers")
    LocalLayerRepository("silu-layers", "SiluAndMul", pakage_name="x")  # type: ignore[call-overload]
    LocalLayerRepository(repo_path=Path("silu-layers"))  # type: ignore[call-overload]
    LocalLayerRepository("silu-layers", "SiluAndMul", repo_path="x")  # type: ignore[call-overload]
    with use_kernel_mapping({"SiluAndMul": {"cpu": local, "cuda": local}}):
        assert_type(kernelize(model, mode=Mode.INFERENCE), nn.Sequential)
    torch.testing.assert_close(model(x), model(x))

    remote = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    register_kernel_mapping({"SiluAndMul": {"cpu": remote}})
    layer = SiluAndMul()
    assert_type(layer, SiluAndMul)
    assert_type(remote.load(), type[nn.Module])
    LayerRepository("acme/silu-layers", "SiluAndMul", version=1.0)  # type: ignore[arg-type]


# docs/layers.md: Marking a layer


def marking_a_layer() -> None:
    @use_kernel_forward_from_hub("RMSNorm", lambda module: module.weight.dtype != torch.float64)
    class RMSNorm(nn.Module):
        weight: torch.Tensor

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * self.weight

    replace_kernel_forward_from_hub(RMSNorm, "RMSNorm", use_fallback=False)
    replace_kernel_forward_from_hub(RMSNorm(), "RMSNorm")  # type: ignore[arg-type]
    use_kernel_forward_from_hub(RMSNorm)  # type: ignore[arg-type]


# docs/layers.md: Mapping layers to kernels, Scopes


def mapping_layers_to_kernels(model: nn.Module) -> None:
    silu = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    silu_sm90 = LayerRepository("acme/silu-hopper", "SiluAndMul", version=3)
    silu_train = LayerRepository("acme/silu-train", "SiluAndMul", version=1)
    mapping = {
        "SiluAndMul": {
            "cuda": silu,
            Device("cuda", CUDAProperties(90, 90)): silu_sm90,
            "cpu": {Mode.INFERENCE: silu, Mode.TRAINING: silu_train},
        }
    }
    register_kernel_mapping(mapping)
    register_kernel_mapping(mapping, inherit_mapping=False)
    with use_kernel_mapping({"SiluAndMul": {"cuda": silu_sm90}}, inherit_mapping=False):
        kernelize(model)
    Device("rocm", ROCMProperties(90, 94))
    Device("cuda", properties=(80, 90))  # type: ignore[arg-type]
    register_kernel_mapping([("SiluAndMul", silu)])  # type: ignore[arg-type]

    @use_kernel_mapping({"SiluAndMul": {"cuda": silu}})
    def run_benchmark(model: nn.Module) -> float:
        return 0.0

    assert_type(run_benchmark(model), float)


# docs/layers.md: kernelize, Fallbacks, get_kernelized_layers


def kernelizing(model: nn.Linear) -> None:
    model = kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
    torch.compile(model, fullgraph=True)
    kernelize(model, mode=Mode.TRAINING, device="cuda:1")
    kernelize(model, mode=Mode.INFERENCE, device=torch.device("cuda"), use_fallback=False)
    kernelize(model, mode=Mode.INFERENCE, use_fallback=KernelizeFallback.ALL)
    kernelize(model, mode=Mode.INFERENCE, use_fallback=KernelizeFallback.NO_LAYER)
    kernelize(model, mode="inference")  # type: ignore[arg-type]
    kernelize(model, mode=Mode.INFERENCE | "compile")  # type: ignore[operator]
    kernelize(model, mode=Mode.INFERENCE | KernelizeFallback.ALL)  # type: ignore[operator]
    kernelize(model, Mode.INFERENCE)  # type: ignore[call-arg]
    kernelize(model, mode=Mode.INFERENCE, use_fallback="all")  # type: ignore[arg-type]
    try:
        kernelize(model, mode=Mode.INFERENCE, use_fallback=KernelizeFallback.NONE)
    except KernelLayerError as error:
        print(error.hint)

    found = get_kernelized_layers(model)
    assert_type(found.layers, dict[str, KernelizedLayer])
    assert_type(found.funcs, dict[tuple[str, str], KernelizedFunc])
    print(found.layers["mlp.act"].repo)


# docs/layers.md: Marked functions, Function kernels (deprecated)


def marked_functions(model: nn.Module) -> None:
    @use_kernel_forward_from_hub("silu_and_mul")
    def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]

    @use_kernelized_func(silu_and_mul)
    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Linear(64, 256)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return silu_and_mul(self.up(x))

    assert_type(MLP().up, nn.Linear)
    silu_and_mul.eval()
    assert_type(silu_and_mul(torch.randn(2, 8)), torch.Tensor)
    silu_and_mul([1.0, 2.0])  # type: ignore[arg-type]
    use_kernelized_func(F.silu)  # type: ignore[arg-type]

    silu = FuncRepository("acme/silu-layers", "silu_and_mul", version=1)
    local = LocalFuncRepository("examples/kernels/silu-layers", "silu_and_mul")
    LocalFuncRepository(repo_path="silu-layers")  # type: ignore[call-overload]
    LockedFuncRepository("acme/silu-layers", "silu_and_mul")
    register_kernel_mapping({"silu_and_mul": {"cuda": silu, "cpu": local}})
    use_kernel_func_from_hub("silu_and_mul")


# docs/layers.md: Coming from Hugging Face kernels


def from_hugging_face_kernels() -> None:
    activation = get_kernel("kernels-community/activation", version=1)
    x = torch.randn((10, 10), dtype=torch.float16)
    y = torch.empty_like(x)
    activation.gelu_fast(y, x)
    silu = LayerRepository(
        repo_id="kernels-community/activation", layer_name="SiluAndMul", version=1
    )
    # transformers' own annotation of its mapping
    mapping: dict[str, dict[Device | str, LayerRepository | dict[Mode, LayerRepository]]] = {
        "SiluAndMul": {
            "cuda": silu,
            Device(type="cuda", properties=CUDAProperties(min_capability=75, max_capability=89)): (
                silu
            ),
            "rocm": {Mode.INFERENCE: silu, Mode.TRAINING | Mode.TORCH_COMPILE: silu},
        }
    }
    register_kernel_mapping(mapping)
    LockedLayerRepository(
        repo_id="kernels-community/activation", layer_name="SiluAndMul", lockfile=Path("l")
    )


# 0.1.2 names


def from_flashhub_kernels_0_1_2(kernel: ModuleType) -> None:
    from flashhub_kernels.benchmark import Benchmark as Benchmark012
    from flashhub_kernels.layer_types import Device as Device012, Mode as Mode012

    assert Benchmark012 is Benchmark and Device012 is Device and Mode012 is Mode

    class Argmax(Benchmark):
        def benchmark_decode_step(self) -> None:
            self.out = self.kernel.argmax(torch.zeros(4))

    print(Argmax(kernel).run()[0].median)
    print(flashhub_kernels.get_kernel("sdq/audio-codebook-primitives", version=1))
