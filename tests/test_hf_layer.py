"""Hugging Face kernels' tests of its layer API (tests/test_layer.py of kernels 0.17,
Apache-2.0), ported to flashhub_kernels.

The test functions and their assertions are kept; what differs is named where it differs:
the Hub repos are served by the loopback CDN (``support.hf_layer_kernels``: pure-torch
builds of the same layers), a revision is a version number (HF's ``revision="main"``
becomes a published version), and the mapping internals and messages are this API's. The tests that
HF runs on CUDA only because its kernels are CUDA builds run on the ``device`` of this host
(the CPU here); those that need a device's hardware keep HF's markers and skip without it.
Where HF 0.19.1 behaves otherwise than the 0.17 tests say, the test follows 0.19.1 and says
so; what is marked "Added" checks 0.19.1's behaviour beyond HF's own tests.
"""

# ruff: noqa: E501, SIM117, RUF010 - HF's code as it is written, in its line length

import sys
from contextlib import nullcontext

import pytest
import torch
import torch.nn as nn
from torch.nn import functional as F

from flashhub_kernels import (
    CUDAProperties,
    Device,
    FuncRepository,
    LayerRepository,
    LocalLayerRepository,
    Mode,
    get_kernelized_layers,
    install_kernel,
    kernelize,
    register_kernel_mapping,
    use_kernel_forward_from_hub,
    use_kernel_mapping,
)
from flashhub_kernels.errors import KernelNotFoundError
from flashhub_kernels.layers import _mapping, validate_layer
from support.cdn_server import CdnServer
from support.hf_layer_kernels import (
    cuda_only,
    hf_device,
    neuron_only,
    publish_hf_layer_kernels,
    rocm_only,
    tpu_only,
    xpu_only,
)

# HF's mapping names "cuda" for the kernels it builds for CUDA; here they run on this host.
DEVICE = hf_device()
device = pytest.fixture(name="device")(hf_device)


def _repos(layer_name, device):
    """What HF reads as ``_KERNEL_MAPPING.get()[layer_name][device].repos``."""
    return _mapping.current_mapping()[layer_name][Device(type=device)]


@pytest.fixture
def local_kernel_path():
    # install_kernel only works with resolved revisions.
    return install_kernel("kernels-test/silu-and-mul", revision="v1")


kernel_layer_mapping = {
    "SiluAndMul": {
        Device(type=DEVICE): LayerRepository(
            repo_id="kernels-test/silu-and-mul",
            layer_name="SiluAndMul",
            version=1,
        ),
    },
    "SiluAndMulNoCompile": {
        DEVICE: LayerRepository(
            repo_id="kernels-test/op-without-fake-test",
            layer_name="SiluAndMul",
            version=1,
        ),
        "rocm": LayerRepository(
            repo_id="kernels-test/op-without-fake-test",
            layer_name="SiluAndMul",
            version=1,
        ),
    },
    "SiluAndMulStringDevice": {
        DEVICE: LayerRepository(
            repo_id="kernels-test/silu-and-mul",
            layer_name="SiluAndMul",
            version=1,
        )
    },
    "LigerRMSNorm": {
        "xpu": LayerRepository(
            repo_id="kernels-community/liger_kernels",
            layer_name="LigerRMSNorm",  # Triton
            version=1,
        )
    },
}


@pytest.fixture(autouse=True)
def hub(cdn: CdnServer, monkeypatch: pytest.MonkeyPatch) -> CdnServer:
    """The Hub of these tests, and HF's mapping, which it registers at import: here for
    each test, process-wide, and gone after it."""
    publish_hf_layer_kernels(cdn.root)
    monkeypatch.setattr(_mapping, "_base", {})
    register_kernel_mapping(kernel_layer_mapping)
    return cdn


class RMSNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, eps: float = 1e-6):
        super().__init__()
        # Used to check that we called hub kernel.
        self.n_calls = 0
        self.weight = nn.Parameter(weight)
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor):
        self.n_calls += 1
        var = x.pow(2).mean(-1, keepdim=True)
        x_norm = x * torch.rsqrt(var + self.variance_epsilon)
        return x_norm * self.weight


@use_kernel_forward_from_hub("LigerRMSNorm")
class RMSNormWithKernel(RMSNorm):
    pass


class ReLU(nn.Module):
    def __init__(self):
        super().__init__()
        # Used to check that we called hub kernel.
        self.n_calls = 0

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self.n_calls += 1
        return F.relu(input)


@use_kernel_forward_from_hub("ReLU")
class ReLUWithKernel(ReLU):
    pass


class SiluAndMul(nn.Module):
    def __init__(self):
        super().__init__()
        # Used to check that we called hub kernel.
        self.n_calls = 0

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self.n_calls += 1
        d = input.shape[-1] // 2
        return F.silu(input[..., :d]) * input[..., d:]


@use_kernel_forward_from_hub("SiluAndMulNoCompile")
class SiluAndMulNoCompileKernel(SiluAndMul):
    pass


@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMulWithKernel(SiluAndMul):
    pass


@use_kernel_forward_from_hub("SiluAndMulStringDevice")
class SiluAndMulStringDevice(SiluAndMul):
    pass


@use_kernel_forward_from_hub("Linear")
class TorchLinearWithCounter(nn.Linear):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Used to check that we called hub kernel.
        self.n_calls = 0

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        self.n_calls += 1
        return super().forward(input)


def test_arg_kinds():
    @use_kernel_forward_from_hub("ArgKind")
    class ArgKind(nn.Module):
        def forward(
            self,
            arg1,
            arg2,
            *,
            kwarg1,
            kwarg2=42,
        ):
            return (arg1, arg2, kwarg1, kwarg2)

    arg_kind = ArgKind()
    assert arg_kind("foo", "bar", kwarg1="baz") == ("foo", "bar", "baz", 42)
    assert arg_kind("foo", "bar", kwarg1="baz", kwarg2=5) == ("foo", "bar", "baz", 5)


@pytest.mark.parametrize("cls", [SiluAndMulWithKernel, SiluAndMulStringDevice])
def test_hub_forward(cls, device):
    torch.random.manual_seed(0)

    silu_and_mul = SiluAndMul()
    X = torch.randn((32, 64), device=device)
    Y = silu_and_mul(X)

    silu_and_mul_with_kernel = kernelize(cls(), device=device, mode=Mode.INFERENCE)
    Y_kernel = silu_and_mul_with_kernel(X)

    torch.testing.assert_close(Y_kernel, Y)

    assert silu_and_mul.n_calls == 1
    assert silu_and_mul_with_kernel.n_calls == 0


@pytest.mark.filterwarnings("ignore:FuncRepository is deprecated:DeprecationWarning")
@pytest.mark.parametrize("cls", [SiluAndMulWithKernel, SiluAndMulStringDevice])
def test_hub_func(cls, device):
    torch.random.manual_seed(0)

    silu_and_mul = SiluAndMul()
    X = torch.randn((32, 64), device=device)
    Y = silu_and_mul(X)

    # SiluAndMul is pure, so we can also use a function.
    with use_kernel_mapping(
        {
            "surprise_me": {
                device: FuncRepository(
                    "kernels-test/flattened-build",
                    func_name="silu_and_mul",
                    version=1,
                )
            }
        }
    ):
        silu_and_mul_with_kernel = kernelize(cls(), device=device, mode=Mode.INFERENCE)
    Y_kernel = silu_and_mul_with_kernel(X)

    torch.testing.assert_close(Y_kernel, Y)

    assert silu_and_mul.n_calls == 1
    assert silu_and_mul_with_kernel.n_calls == 0


@neuron_only
def test_hub_forward_neuron():
    torch.manual_seed(0)

    mapping = {
        "ReLU": {
            "neuron": LayerRepository(repo_id="kernels-test/relu-nki", version=1, layer_name="ReLU")
        }
    }

    relu = ReLU()
    X = torch.randn((16, 16), device="neuron")
    Y = relu(X)

    with use_kernel_mapping(mapping):
        relu_with_kernel = kernelize(ReLUWithKernel(), device="neuron", mode=Mode.INFERENCE)
    Y_kernel = relu_with_kernel(X)

    torch.testing.assert_close(Y_kernel, Y)

    assert relu.n_calls == 1
    assert relu_with_kernel.n_calls == 0

    # Check that the device type can be determined automatically.
    class SMOL(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(16, 16)
            self.relu = ReLUWithKernel()

        def forward(self, x):
            return self.relu(self.linear(x))

    smol = SMOL().to("neuron")

    Y = smol(X)

    with use_kernel_mapping(mapping):
        smol = kernelize(smol, mode=Mode.INFERENCE)
    Y_kernel = smol(X)

    torch.testing.assert_close(Y, Y_kernel)
    assert smol.relu.n_calls == 1


@tpu_only
def test_hub_forward_tpu():
    torch.manual_seed(0)

    mapping = {
        "ReLU": {
            "tpu": LayerRepository(repo_id="kernels-test/relu-tpu", version=1, layer_name="ReLU")
        }
    }

    relu = ReLU()
    X = torch.randn((16, 16), device="tpu")
    Y = relu(X)

    with use_kernel_mapping(mapping):
        relu_with_kernel = kernelize(ReLUWithKernel(), device="tpu", mode=Mode.INFERENCE)
    Y_kernel = relu_with_kernel(X)

    torch.testing.assert_close(Y_kernel, Y)

    assert relu.n_calls == 1
    assert relu_with_kernel.n_calls == 0

    # Check that the device type can be determined automatically.
    class SMOL(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(16, 16)
            self.relu = ReLUWithKernel()

        def forward(self, x):
            return self.relu(self.linear(x))

    smol = SMOL().to("tpu")

    Y = smol(X)

    with use_kernel_mapping(mapping):
        smol = kernelize(smol, mode=Mode.INFERENCE)
    Y_kernel = smol(X)

    torch.testing.assert_close(Y, Y_kernel)
    assert smol.relu.n_calls == 1


@rocm_only
def test_hub_forward_rocm():
    torch.manual_seed(0)

    silu_and_mul = SiluAndMul()
    X = torch.randn((32, 64))
    Y = silu_and_mul(X)

    silu_and_mul_with_kernel = kernelize(
        SiluAndMulNoCompileKernel(), device="rocm", mode=Mode.INFERENCE
    )
    Y_kernel = silu_and_mul_with_kernel(X)

    torch.testing.assert_close(Y_kernel, Y)

    assert silu_and_mul.n_calls == 1
    # Should use kernel (n_calls == 0) if ROCm kernel is available, otherwise fallback (n_calls == 1)
    # The exact behavior depends on whether the test kernel exists for ROCm
    assert silu_and_mul_with_kernel.n_calls in [0, 1]


@xpu_only
def test_hub_forward_xpu():
    torch.manual_seed(0)

    hidden_size = 1024
    weight = torch.ones(hidden_size, device="xpu")
    rms_norm = RMSNorm(weight).to("xpu")
    X = torch.randn(4, 16, hidden_size, device="xpu", dtype=torch.float32)
    Y = rms_norm(X)

    rms_norm_with_kernel = kernelize(RMSNormWithKernel(weight), mode=Mode.INFERENCE, device="xpu")
    Y_kernel = rms_norm_with_kernel(X)

    torch.testing.assert_close(Y_kernel, Y)

    assert rms_norm.n_calls == 1
    assert rms_norm_with_kernel.n_calls == 0


def test_rocm_kernel_mapping(device):
    """Test that ROCm shorthand device mapping works correctly."""

    # HF skips this test off CUDA and ROCm: its lookup asks the GPU for its capability.
    # This mapping asks for it only for an entry with a capability range, so it runs.

    kernel_layer_mapping = {
        "SiluAndMul": {
            "rocm": LayerRepository(
                repo_id="kernels-test/silu-and-mul",
                layer_name="SiluAndMul",
                version=1,
            )
        }
    }

    # Test that the mapping is processed correctly
    with use_kernel_mapping(kernel_layer_mapping, inherit_mapping=False):
        mapping = _mapping.current_mapping()

        # Verify the mapping exists
        assert "SiluAndMul" in mapping
        assert Device(type="rocm") in mapping["SiluAndMul"]

        # Verify the repository is correctly stored
        rocm_repos = _repos("SiluAndMul", "rocm")
        assert rocm_repos is not None
        assert rocm_repos[Mode.FALLBACK].repo_id == "kernels-test/silu-and-mul"
        assert rocm_repos[Mode.FALLBACK].layer_name == "SiluAndMul"

        # Added: the layer is kernelized for the device type named, without a ROCm GPU
        # (this kernel is plain torch, so it runs on this host's tensors).
        layer = kernelize(SiluAndMulWithKernel(), device="rocm", mode=Mode.INFERENCE)
        assert get_kernelized_layers(layer).layers[""].repo is rocm_repos[Mode.FALLBACK]
        X = torch.randn((32, 64))
        torch.testing.assert_close(layer(X), SiluAndMul()(X))
        assert layer.n_calls == 0


@cuda_only
def test_capability():
    linear = TorchLinearWithCounter(32, 32).to("cuda")
    with use_kernel_mapping(
        {
            "Linear": {
                Device(
                    type="cuda",
                    properties=CUDAProperties(min_capability=75, max_capability=sys.maxsize),
                ): LayerRepository(
                    repo_id="kernels-test/backward-marker-test",
                    layer_name="LinearBackward",
                    version=1,
                )
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device="cuda")
        linear(X)

        # Check that we called out to the kernel.
        assert linear.n_calls == 0

    with use_kernel_mapping(
        {
            "Linear": {
                Device(
                    type="cuda",
                    properties=CUDAProperties(
                        min_capability=sys.maxsize, max_capability=sys.maxsize
                    ),
                ): LayerRepository(
                    repo_id="kernels-test/backward-marker-test",
                    layer_name="LinearBackward",
                    version=1,
                )
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device="cuda")
        linear(X)

        # Check that we didn't call out to the kernel because there is
        # is no kernel with a matching capability..
        assert linear.n_calls == 1


def test_layer_fallback_works():
    @use_kernel_forward_from_hub("SiluAndMulNonExisting")
    class SiluAndMulWithKernelFallback(SiluAndMul):
        pass

    # Check that we don't raise an exception for a non-existing kernel.
    silu_and_mul = SiluAndMulWithKernelFallback()
    kernelize(silu_and_mul, device="cuda", mode=Mode.INFERENCE)


def test_local_layer_repo(device):
    # Fetch a kernel to the local cache.
    path = install_kernel("kernels-test/backward-marker-test", version=1)

    linear = TorchLinearWithCounter(32, 32).to(device)

    with use_kernel_mapping(
        {
            "Linear": {
                device: LocalLayerRepository(
                    # install_kernel will give the fully-resolved path. Here it is the
                    # variant directory itself, not a file two levels below the repo.
                    repo_path=path,
                    layer_name="LinearBackward",
                )
            }
        },
        inherit_mapping=False,
    ):
        kernelize(linear, mode=Mode.INFERENCE)

    X = torch.randn(10, 32, device=device)
    linear(X)
    assert linear.n_calls == 0


@pytest.mark.parametrize("cls", [SiluAndMulWithKernel, SiluAndMulNoCompileKernel])
def test_torch_compile_layer_without_fallback(cls, device):
    silu_and_mul = SiluAndMul()

    X = torch.randn((32, 64), dtype=torch.float32, device=device)
    Y = silu_and_mul(X)

    silu_and_mul_with_kernel = cls()
    silu_and_mul_with_kernel.eval()

    ctx = (
        pytest.raises(ValueError, match="does not support mode")
        if cls is SiluAndMulNoCompileKernel
        else nullcontext()
    )
    with ctx:
        silu_and_mul_with_kernel = kernelize(
            silu_and_mul_with_kernel,
            device=device,
            mode=Mode.INFERENCE | Mode.TORCH_COMPILE,
            use_fallback=False,
        )
    # backend="eager": the test is about what torch.compile traces, not the code it makes.
    silu_and_mul_compiled = torch.compile(silu_and_mul_with_kernel, backend="eager", fullgraph=True)

    Y_compiled = silu_and_mul_compiled(X)

    torch.testing.assert_close(Y_compiled, Y)


@pytest.mark.parametrize("cls", [SiluAndMulWithKernel, SiluAndMulNoCompileKernel])
def test_torch_compile_layer_with_fallback(cls, device):
    silu_and_mul = SiluAndMul()

    X = torch.randn((32, 64), dtype=torch.float32, device=device)
    Y = silu_and_mul(X)

    silu_and_mul_with_kernel = cls()
    silu_and_mul_with_kernel.eval()
    silu_and_mul_with_kernel = kernelize(
        silu_and_mul_with_kernel,
        device=device,
        mode=Mode.INFERENCE | Mode.TORCH_COMPILE,
    )
    # backend="eager": the test is about what torch.compile traces, not the code it makes.
    silu_and_mul_compiled = torch.compile(silu_and_mul_with_kernel, backend="eager", fullgraph=True)

    Y_compiled = silu_and_mul_compiled(X)

    torch.testing.assert_close(Y_compiled, Y)


def test_mapping_contexts(device):
    # Make sure we start from scratch.
    register_kernel_mapping(kernel_layer_mapping, inherit_mapping=False)

    assert set(_mapping.current_mapping().keys()) == {
        "SiluAndMul",
        "SiluAndMulStringDevice",
        "SiluAndMulNoCompile",
        "LigerRMSNorm",
    }

    extra_mapping1 = {
        "TestKernel": {
            Device(type=device): LayerRepository(
                repo_id="kernels-test/silu-and-mul",
                layer_name="SiluAndMul",
                version=1,
            )
        }
    }

    with use_kernel_mapping(extra_mapping1):
        assert set(_mapping.current_mapping().keys()) == {
            "SiluAndMul",
            "SiluAndMulStringDevice",
            "SiluAndMulNoCompile",
            "LigerRMSNorm",
            "TestKernel",
        }

        extra_mapping2 = {
            "SiluAndMul": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-community/non-existing",
                    layer_name="SiluAndMul",
                    version=1,
                )
            }
        }

        with use_kernel_mapping(extra_mapping2):
            assert set(_mapping.current_mapping().keys()) == {
                "SiluAndMul",
                "SiluAndMulStringDevice",
                "SiluAndMulNoCompile",
                "LigerRMSNorm",
                "TestKernel",
            }
            assert (
                _repos("SiluAndMul", device)[Mode.FALLBACK].repo_id
                == "kernels-community/non-existing"
            )

        assert set(_mapping.current_mapping().keys()) == {
            "SiluAndMul",
            "SiluAndMulStringDevice",
            "SiluAndMulNoCompile",
            "LigerRMSNorm",
            "TestKernel",
        }
        assert _repos("SiluAndMul", device)[Mode.FALLBACK].repo_id == "kernels-test/silu-and-mul"

        with use_kernel_mapping(extra_mapping2, inherit_mapping=False):
            assert set(_mapping.current_mapping().keys()) == {
                "SiluAndMul",
            }
            assert (
                _repos("SiluAndMul", device)[Mode.FALLBACK].repo_id
                == "kernels-community/non-existing"
            )

        assert set(_mapping.current_mapping().keys()) == {
            "SiluAndMul",
            "SiluAndMulStringDevice",
            "SiluAndMulNoCompile",
            "LigerRMSNorm",
            "TestKernel",
        }
        assert _repos("SiluAndMul", device)[Mode.FALLBACK].repo_id == "kernels-test/silu-and-mul"

    assert set(_mapping.current_mapping().keys()) == {
        "SiluAndMul",
        "SiluAndMulStringDevice",
        "SiluAndMulNoCompile",
        "LigerRMSNorm",
    }


def test_layer_repository_requires_version_or_revision():
    with pytest.raises(ValueError, match="exactly one of version= or revision="):
        LayerRepository(repo_id="kernels-test/silu-and-mul", layer_name="SiluAndMul")


def test_validate_kernel_layer():
    # validate_layer(cls, check_cls) is HF's _validate_layer(cls=, check_cls=, repo=); its
    # errors name the class and the rule broken, not a repository.
    class BadLayer(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.foo = 42

    with pytest.raises(
        TypeError,
        match="BadLayer breaks the rule 'no own __init__'",
    ):
        validate_layer(BadLayer, SiluAndMul)

    class BadLayer2(nn.Module):
        foo: int = 42

    with pytest.raises(
        TypeError,
        match="BadLayer2 breaks the rule 'no extra members': it defines foo",
    ):
        validate_layer(BadLayer2, SiluAndMul)

    class BadLayer3(nn.Module):
        def forward(self, x: torch.Tensor, foo: int) -> torch.Tensor: ...

    with pytest.raises(
        TypeError,
        match=r"BadLayer3 breaks the rule 'same forward arity'.*SiluAndMul\.forward",
    ):
        validate_layer(BadLayer3, SiluAndMul)

    class BadLayer4(nn.Module):
        def forward(self, *, x: torch.Tensor) -> torch.Tensor: ...

    with pytest.raises(
        TypeError,
        match=r"BadLayer4 breaks the rule 'same forward parameter kinds'.*SiluAndMul\.forward",
    ):
        validate_layer(BadLayer4, SiluAndMul)


def test_invalid_mode_for_mapping_rejected(device):
    # HF 0.17 refused a kernel layer mapped under a mode it does not support whatever the
    # fallback; 0.19.1 checks it against the mode asked for only, and falls back unless
    # use_fallback forbids it (NO_COMPATIBLE_MODE), as this API does.
    linear = TorchLinearWithCounter(32, 32).to(device)

    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.TRAINING: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearNoBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        with pytest.raises(ValueError, match="does not support backward"):
            kernelize(linear, mode=Mode.TRAINING, use_fallback=False)
        kernelize(linear, mode=Mode.TRAINING)
        linear(torch.randn(10, 32, device=device))
        assert linear.n_calls == 1


def test_kernel_modes(device):
    linear = TorchLinearWithCounter(32, 32).to(device)

    # Case 1: layer without further specification, becomes the
    #         base layer.
    with use_kernel_mapping(
        {
            "Linear": {
                device: LayerRepository(
                    repo_id="kernels-test/backward-marker-test",
                    layer_name="LinearBackward",
                    version=1,
                )
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        assert linear.n_calls == 0

    # Case 2: register a kernel just for training. If no base kernel
    #         layer is registered, we fall back to the original layer.
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.TRAINING: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # Training has a kernel, so fallback.
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # TRAINING | TORCH_COMPILE cannot fall back to TRAINING kernel, so uses original.
        assert linear.n_calls == 1

    # Case 3: register a kernel just for training and one for fallback.
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.FALLBACK: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.TRAINING: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # Falls back to TRAINING.
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # Falls back to the TRAINING kernel.
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # TRAINING | TORCH_COMPILE falls back to FALLBACK kernel.
        assert linear.n_calls == 1

    # Case 4: register a kernel with two preferences.
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.TRAINING | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # Falls back to the TRAINING | TORCH_COMPILE kernel.
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # TRAINING can fall back to TRAINING | TORCH_COMPILE kernel.
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # Uses TRAINING | TORCH_COMPILE kernel.
        assert linear.n_calls == 1


def test_fallback_used_when_training(device):
    linear = TorchLinearWithCounter(32, 32).to(device)

    # Case 1: kernel with explicit backward support should always
    #         use the kernel.
    with use_kernel_mapping(
        {
            "Linear": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-test/backward-marker-test",
                    layer_name="LinearBackward",
                    version=1,
                )
            }
        }
    ):
        linear.train()
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 0

        linear.eval()
        linear(X)
        assert linear.n_calls == 0

    # Case 2: kernel with implicit backward support should always
    #         use the kernel.
    with use_kernel_mapping(
        {
            "Linear": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-test/backward-marker-test",
                    layer_name="LinearImplicitBackward",
                    version=1,
                )
            }
        }
    ):
        linear.train()
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 0

        linear.eval()
        linear(X)
        assert linear.n_calls == 0


def test_invalid_mode_rejected():
    with pytest.raises(ValueError, match="mutually exclusive"):
        _ = Mode.INFERENCE | Mode.TRAINING

    with pytest.raises(ValueError, match="cannot be combined with other modes"):
        _ = Mode.FALLBACK | Mode.TORCH_COMPILE

    with pytest.raises(ValueError, match="can only be used to register kernel mappings"):
        kernelize(torch.nn.Linear(32, 32), mode=Mode.FALLBACK)

    with pytest.raises(ValueError, match="mode must contain"):
        kernelize(torch.nn.Linear(32, 32), mode=Mode.TORCH_COMPILE)


def test_kernel_modes_inference(device):
    """Test inference-specific fallback scenarios."""
    linear = TorchLinearWithCounter(32, 32).to(device)

    # Case 1: register a kernel just for inference
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.INFERENCE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        linear(X)
        # INFERENCE | TORCH_COMPILE cannot fall back to INFERENCE kernel, so uses original
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # No training kernel, so fallback to original
        assert linear.n_calls == 2

    # Case 2: register a kernel just for inference + torch.compile
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.INFERENCE | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 2

        kernelize(linear, mode=Mode.INFERENCE)
        linear(X)
        # INFERENCE falls back to INFERENCE | TORCH_COMPILE kernel
        assert linear.n_calls == 2

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # No training kernel, so fallback to original
        assert linear.n_calls == 3

    # Case 3: register both inference kernels
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.INFERENCE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.INFERENCE | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # Uses exact INFERENCE kernel
        assert linear.n_calls == 3

        kernelize(linear, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        linear(X)
        # Uses exact INFERENCE | TORCH_COMPILE kernel
        assert linear.n_calls == 3

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # No training kernel, so fallback to original
        assert linear.n_calls == 4


def test_kernel_modes_mixed(device):
    """Test mixed training and inference kernel scenarios."""
    linear = TorchLinearWithCounter(32, 32).to(device)

    # Case 1: register both base inference and training kernels
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.INFERENCE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.TRAINING: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        linear(X)
        # INFERENCE | TORCH_COMPILE cannot fall back to INFERENCE kernel, so uses original
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # TRAINING | TORCH_COMPILE cannot fall back to TRAINING kernel, so uses original
        assert linear.n_calls == 2

    # Case 2: register all four kernel modes
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.INFERENCE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.TRAINING: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.INFERENCE | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.TRAINING | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # Uses exact INFERENCE kernel
        assert linear.n_calls == 2

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # Uses exact TRAINING kernel
        assert linear.n_calls == 2

        kernelize(linear, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        linear(X)
        # Uses exact INFERENCE | TORCH_COMPILE kernel
        assert linear.n_calls == 2

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # Uses exact TRAINING | TORCH_COMPILE kernel
        assert linear.n_calls == 2


def test_kernel_modes_cross_fallback(device):
    """Test cross-mode fallback scenarios from inference to training modes."""
    linear = TorchLinearWithCounter(32, 32).to(device)

    # Case 1: Only training kernel registered - inference should fall back to training
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.TRAINING: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # INFERENCE falls back to TRAINING kernel
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # TRAINING uses the kernel directly
        assert linear.n_calls == 0

    # Case 2: Only training + torch.compile kernel registered
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.TRAINING | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    )
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.INFERENCE)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # INFERENCE falls back to TRAINING | TORCH_COMPILE kernel
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)
        linear(X)
        # INFERENCE | TORCH_COMPILE falls back to TRAINING | TORCH_COMPILE kernel
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING)
        linear(X)
        # TRAINING falls back to TRAINING | TORCH_COMPILE kernel
        assert linear.n_calls == 0

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # TRAINING | TORCH_COMPILE uses the kernel directly
        assert linear.n_calls == 0

    # Case 3: Test that training modes don't fall back to inference modes
    with use_kernel_mapping(
        {
            "Linear": {
                device: {
                    Mode.INFERENCE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                    Mode.INFERENCE | Mode.TORCH_COMPILE: LayerRepository(
                        repo_id="kernels-test/backward-marker-test",
                        layer_name="LinearBackward",
                        version=1,
                    ),
                }
            }
        }
    ):
        kernelize(linear, mode=Mode.TRAINING)
        X = torch.randn(10, 32, device=device)
        linear(X)
        # TRAINING should NOT fall back to inference kernels, use original
        assert linear.n_calls == 1

        kernelize(linear, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        linear(X)
        # TRAINING | TORCH_COMPILE should NOT fall back to inference kernels, use original
        assert linear.n_calls == 2


def test_layer_versions(device):
    @use_kernel_forward_from_hub("Version")
    class Version(nn.Module):
        def forward(self) -> int:
            return 0

    version = Version()

    with use_kernel_mapping(
        {
            "Version": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-test/versions",
                    layer_name="Version",
                    # HF's revision="main" is the newest version.
                    revision="v2",
                )
            }
        }
    ):
        version = kernelize(version, device=device, mode=Mode.INFERENCE)
        assert version() == 2

    with use_kernel_mapping(
        {
            "Version": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-test/versions",
                    layer_name="Version",
                    version=1,
                )
            }
        }
    ):
        version = kernelize(version, device=device, mode=Mode.INFERENCE)
        assert version() == 1

    with use_kernel_mapping(
        {
            "Version": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-test/versions",
                    layer_name="Version",
                    version=2,
                )
            }
        }
    ):
        version = kernelize(version, device=device, mode=Mode.INFERENCE)
        assert version() == 2

    with use_kernel_mapping(
        {
            "Version": {
                Device(type=device): LayerRepository(
                    repo_id="kernels-test/versions",
                    layer_name="Version",
                    # Versions are numbered from 1, so version=0 is refused when the
                    # repository is made; an unpublished version is the case HF tests.
                    version=3,
                )
            }
        }
    ):
        with pytest.raises(
            KernelNotFoundError, match=r"v3 was not found.*published versions: 1, 2"
        ):
            kernelize(version, device=device, mode=Mode.INFERENCE)

    with pytest.raises(ValueError, match=r"exactly one of version= or revision="):
        use_kernel_mapping(
            {
                "Version": {
                    Device(type=device): LayerRepository(
                        repo_id="kernels-test/versions",
                        layer_name="Version",
                        revision="v0.1.0",
                        version=1,
                    )
                }
            }
        )


def test_local_overrides_layer(monkeypatch, local_kernel_path, device):
    # The primary validation is in the get_kernel tests. Here we just want
    # to ensure that the lookups also happen in layers.

    mapping = {
        "SiluAndMul": {
            Device(type=device): LayerRepository(
                repo_id="kernels-test/silu-and-mul",
                layer_name="SiluAndMul",
                # HF's revision="main" is missing on its Hub; here an unpublished version.
                version=2,
            ),
        },
    }

    model = SiluAndMulWithKernel()

    with use_kernel_mapping(mapping, inherit_mapping=False):
        with pytest.raises(KernelNotFoundError):
            kernelize(model, device=device, mode=Mode.INFERENCE)

    with monkeypatch.context() as m:
        m.setenv(
            "LOCAL_KERNELS",
            f"kernels-test/silu-and-mul={str(local_kernel_path)}:kernels-test/non-existing2=/non/existing",
        )
        kernelize(model, device=device, mode=Mode.INFERENCE)


# Added: what HF 0.19.1's kernelize does for each device type it accepts (its
# _validate_device_type), checked here without the device. Its device-only tests
# (test_hub_forward_neuron, _tpu, _rocm, ...) need the hardware for the tensors; the
# choice of the kernel layer needs only the device type's name, and these kernels are
# plain torch, so they run on this host's tensors whatever type they are mapped for.
HF_DEVICE_TYPES = ["cpu", "cuda", "mps", "neuron", "npu", "rocm", "tpu", "xpu"]


@pytest.mark.parametrize("device_type", HF_DEVICE_TYPES)
def test_kernelize_for_each_hugging_face_device_type(device_type):
    repo_id = {"neuron": "kernels-test/relu-nki", "tpu": "kernels-test/relu-tpu"}
    mapping = {
        "ReLU": {
            device_type: LayerRepository(
                repo_id=repo_id.get(device_type, "kernels-test/relu-nki"),
                layer_name="ReLU",
                version=1,
            )
        }
    }

    relu = ReLUWithKernel()
    with use_kernel_mapping(mapping):
        relu_with_kernel = kernelize(relu, device=device_type, mode=Mode.INFERENCE)
        X = torch.randn((16, 16))
        torch.testing.assert_close(relu_with_kernel(X), F.relu(X))
        assert relu.n_calls == 0

        # Another device type has no mapping: the original forward.
        other = "cpu" if device_type != "cpu" else "cuda"
        kernelize(relu, device=other, mode=Mode.INFERENCE)
        relu(X)
        assert relu.n_calls == 1


@pytest.mark.parametrize("device_type", HF_DEVICE_TYPES)
def test_kernel_modes_fall_back_on_each_device_type(device_type):
    """A kernel layer without can_torch_compile (or has_backward) is used for the modes it
    supports, under whatever mode key it is mapped, and the original forward runs for the
    others; with use_fallback=False, kernelize raises instead."""
    linear = TorchLinearWithCounter(32, 32).eval()  # no training with a kernel without backward
    X = torch.randn(10, 32)

    def runs_kernel(mode):
        kernelize(linear, device=device_type, mode=mode)
        before = linear.n_calls
        linear(X)
        return linear.n_calls == before

    no_compile = LayerRepository(
        repo_id="kernels-test/backward-marker-test",
        layer_name="LinearImplicitBackward",
        version=1,
    )
    compiled_keys = [Mode.INFERENCE | Mode.TORCH_COMPILE, Mode.TRAINING | Mode.TORCH_COMPILE]
    for key in [Mode.FALLBACK, *compiled_keys]:
        with use_kernel_mapping({"Linear": {device_type: {key: no_compile}}}):
            assert not runs_kernel(Mode.INFERENCE | Mode.TORCH_COMPILE)
            assert not runs_kernel(Mode.TRAINING | Mode.TORCH_COMPILE)
            assert runs_kernel(Mode.INFERENCE)
            # TRAINING does not fall back to an INFERENCE | TORCH_COMPILE key
            assert runs_kernel(Mode.TRAINING) is (key != Mode.INFERENCE | Mode.TORCH_COMPILE)
            with pytest.raises(ValueError, match=r"does not support torch\.compile"):
                kernelize(
                    linear,
                    device=device_type,
                    mode=Mode.INFERENCE | Mode.TORCH_COMPILE,
                    use_fallback=False,
                )

    no_backward = LayerRepository(
        repo_id="kernels-test/backward-marker-test",
        layer_name="LinearNoBackward",
        version=1,
    )
    with use_kernel_mapping({"Linear": {device_type: {Mode.TRAINING: no_backward}}}):
        assert not runs_kernel(Mode.TRAINING)
        assert runs_kernel(Mode.INFERENCE)
        with pytest.raises(ValueError, match="does not support backward"):
            kernelize(linear, device=device_type, mode=Mode.TRAINING, use_fallback=False)
