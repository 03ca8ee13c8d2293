"""Hugging Face kernels' tests of its function kernels (tests/test_func.py of kernels 0.17,
Apache-2.0), ported to flashhub_kernels.

The test functions and their assertions are kept; what differs is named where it differs:
the Hub repos are served by the loopback CDN (``support.hf_layer_kernels``), a revision is
a version number, the deprecation messages are this API's, and the test HF runs on CUDA
only because its kernel is a CUDA build runs on the ``device`` of this host.
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from flashhub_kernels import (
    FuncRepository,
    LayerRepository,
    LocalFuncRepository,
    Mode,
    install_kernel,
    kernelize,
    use_kernel_forward_from_hub,
    use_kernel_func_from_hub,
    use_kernel_mapping,
    use_kernelized_func,
)
from flashhub_kernels.layer import LockedFuncRepository
from support.cdn_server import CdnServer
from support.hf_layer_kernels import hf_device, publish_hf_layer_kernels

device = pytest.fixture(name="device")(hf_device)


@pytest.fixture(autouse=True)
def hub(cdn: CdnServer) -> CdnServer:
    """The Hub of these tests."""
    publish_hf_layer_kernels(cdn.root)
    return cdn


# A function + layer that we can map arbitrary functions to for testing.
@use_kernel_forward_from_hub("surprise_me")
def surprise_me(x: torch.Tensor):
    return x


@use_kernelized_func(surprise_me)
class SurpriseMe(nn.Module):
    def forward(self, x: torch.Tensor):
        return surprise_me(x)


def test_decorator():
    @use_kernel_forward_from_hub("identity_func")
    def identity(x):
        return x

    assert type(identity).kernel_layer_name == "identity_func"
    assert isinstance(identity, nn.Module)


@pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")
def test_deprecated_decorator():
    @use_kernel_func_from_hub("identity_func")
    def identity(x):
        return x

    assert type(identity).kernel_layer_name == "identity_func"
    assert isinstance(identity, nn.Module)


@pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")
def test_deprecated_func_repository_requires_version_or_revision():
    with pytest.raises(ValueError, match="exactly one of version= or revision="):
        FuncRepository("kernels-test/flattened-build", func_name="silu_and_mul")


@pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")
def test_deprecated_func_repository(device):
    model = SurpriseMe()

    x = torch.arange(-10, 10, device=device).float()
    assert model(x) is x

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
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    torch.testing.assert_close(model(x), _silu_and_mul(x))

    # And empty mapping should revert to the original implementation.
    with use_kernel_mapping({"surprise_me": {}}):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    assert model(x) is x


def test_kernel_func_with_layer(device):
    model = SurpriseMe()

    x = torch.arange(-10, 10, device=device).float()
    assert model(x) is x

    # We can also replace the function by a pure layer.
    with use_kernel_mapping(
        {
            "surprise_me": {
                device: LayerRepository(
                    "kernels-test/silu-and-mul",
                    layer_name="SiluAndMul",
                    version=1,
                )
            }
        }
    ):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    torch.testing.assert_close(model(x), _silu_and_mul(x))

    # And empty mapping should revert to the original implementation.
    with use_kernel_mapping({"surprise_me": {}}):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    assert model(x) is x


@pytest.mark.filterwarnings("ignore:.*is deprecated:DeprecationWarning")
def test_deprecated_local_kernel_func(device):
    model = SurpriseMe()

    x = torch.arange(-10, 10).float()
    assert model(x) is x

    path = install_kernel("kernels-test/flattened-build", version=1)

    with use_kernel_mapping(
        {
            "surprise_me": {
                device: LocalFuncRepository(
                    # Here install_kernel gives the variant directory itself.
                    repo_path=path,
                    func_name="silu_and_mul",
                )
            }
        }
    ):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    torch.testing.assert_close(model(x), _silu_and_mul(x))

    with use_kernel_mapping({"do_something_func": {}}):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    assert model(x) is x


def test_deprecated_kernel_func():
    with pytest.deprecated_call(match="is deprecated"):
        FuncRepository("kernels-test/flattened-build", func_name="silu_and_mul", version=1)

    # HF reads this lock file here; this LockedFuncRepository reads it when the function
    # is first used, so the path (which does not exist in this repository) is enough.
    project_dir = Path(__file__).parent / "layer_locking"
    with pytest.deprecated_call(match="is deprecated"):
        LockedFuncRepository(
            "kernels-test/versions",
            func_name="version",
            lockfile=project_dir / "kernels.lock",
        )

    with pytest.deprecated_call(match="is deprecated"):
        LocalFuncRepository(
            # We are never loading the kernel, so we can just use an invalid path.
            repo_path=Path("."),
            func_name="silu_and_mul",
        )

    with pytest.deprecated_call(match="is deprecated"):

        @use_kernel_func_from_hub("deprecated")
        def deprecated_func(x):
            return x


def test_use_kernelized_func_used_on_non_kernelized_func():
    def not_kernelized(x):
        return x

    with pytest.raises(ValueError, match="Function `not_kernelized` is not decorated"):

        @use_kernelized_func(not_kernelized)
        class NotKernelized(nn.Module):
            def forward(self, x: torch.Tensor):
                return not_kernelized(x)


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]
