"""A noarch kernel as today's kernel builder writes it, loaded through every API and
tested with its own tests (kernels-test/silu-and-mul, the builder's example, Apache-2.0).

The builder (edition 5, ``[torch-noarch]``) copies the package's files into one flattened
variant per backend (``torch-cpu``, ``torch-cuda``, ...) and renders ``_ops.py`` from its
noarch template: the op namespace is ``_<name>_<backend>_<unique id>``, the backend read
from torch when the module runs. The kernel defines its op in Python with
``torch.library.custom_op(add_op_namespace_prefix(...))``, with a fake and an autograd
formula, and its layer calls it through ``ops``. The tests at the end are the kernel's
own (``tests/test_silu_and_mul.py``) on the CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.library import opcheck

import flashhub_kernels as fk
from flashhub_kernels._publish import publish
from support.builder import provenance
from support.cdn_server import CdnServer

REPO = "kernels-test/silu-and-mul"
MODULE = "flashhub.kernels_test.silu_and_mul.v1"
BACKENDS = ("cpu", "cuda", "metal", "rocm", "xpu")
UNIQUE_ID = "c3f07a2"  # the builder's: the short hash of the kernel's git tree
# The template's backend is the one torch is built for, whichever variant was loaded.
NAMESPACE = f"_silu_and_mul_{'cuda' if torch.version.cuda else 'cpu'}_{UNIQUE_ID}"

# torch-ext/silu_and_mul/, as the kernel's sources hold it.
INIT = """\
import torch

from ._ops import ops
from .op import _silu_and_mul
from . import layers


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    return ops.silu_and_mul(x)


__all__ = ["layers", "silu_and_mul"]
"""
OP = """\
import torch
import torch.nn.functional as F

from ._ops import add_op_namespace_prefix


@torch.library.custom_op(add_op_namespace_prefix("silu_and_mul"), mutates_args=())
def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def backward(ctx, grad_output):
    x = ctx.saved_tensors[0]
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    sigmoid_x1 = torch.sigmoid(x1)
    silu_x1 = F.silu(x1)
    dsilu_dx1 = sigmoid_x1 + silu_x1 * (1 - sigmoid_x1)
    dx1 = grad_output * x2 * dsilu_dx1
    dx2 = grad_output * silu_x1
    return torch.cat([dx1, dx2], dim=-1)


def setup_context(ctx, inputs, output):
    (x,) = inputs
    ctx.save_for_backward(x)


_silu_and_mul.register_autograd(backward, setup_context=setup_context)


@_silu_and_mul.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], x.shape[1] // 2)
"""
LAYERS = """\
import torch
import torch.nn as nn

from ._ops import ops


class SiluAndMul(nn.Module):
    can_torch_compile: bool = True

    def forward(self, x: torch.Tensor):
        return ops.silu_and_mul(x)
"""
# The builder's templates/torch/noarch/_ops.py, rendered (its TPU and Neuron checks left
# out: neither runs here).
OPS = f'''\
import torch

def get_backend() -> str:
    """Detect the backend by inspecting torch."""
    import torch

    if torch.version.cuda is not None:
        return "cuda"
    elif torch.version.hip is not None:
        return "rocm"
    elif torch.backends.mps.is_available():
        return "metal"
    elif hasattr(torch.version, "xpu") and torch.version.xpu is not None:
        return "xpu"
    else:
        return "cpu"


def _find_ops_name() -> str:
    kernel_name = "silu_and_mul"
    unique_id = "{UNIQUE_ID}"
    backend = get_backend()
    return f"_{{kernel_name}}_{{backend}}_{{unique_id}}"


_OPS_NAME = _find_ops_name()

ops = getattr(torch.ops, _OPS_NAME)

def add_op_namespace_prefix(op_name: str) -> str:
    """
    Prefix op by namespace.
    """
    return f"{{_OPS_NAME}}::{{op_name}}"
'''


def write_build(kernel_dir: Path) -> Path:
    """``build/torch-<backend>/`` for each backend, as ``python setup.py build_kernel``
    leaves them: the package's files and the builder's ``metadata-<backend>.json``."""
    files = {"__init__.py": INIT, "_ops.py": OPS, "op.py": OP, "layers.py": LAYERS}
    for backend in BACKENDS:
        variant = kernel_dir / "build" / f"torch-{backend}"
        variant.mkdir(parents=True)
        for name, text in files.items():
            (variant / name).write_text(text)
        metadata = {
            "name": "silu-and-mul",
            "id": f"_silu_and_mul_{backend}_{UNIQUE_ID}",
            "version": 1,
            "license": "apache-2.0",
            "python-depends": [],
            "kernel-depends": [],
            "backend": {"type": backend},
            "provenance": provenance(),
        }
        (variant / "metadata.json").write_text(json.dumps(metadata, indent=2))
    return kernel_dir


@pytest.fixture
def kernel_dir(tmp_path: Path) -> Path:
    return write_build(tmp_path / "silu-and-mul")


@pytest.fixture
def silu_and_mul(kernel_dir: Path, cdn: CdnServer, cpu_only_torch: None) -> ModuleType:
    """The kernel published with the publisher and loaded with ``get_kernel``."""
    publish(kernel_dir, repo_id=REPO, version=1, out=cdn.root)
    kernel: ModuleType = fk.get_kernel(REPO, version=1)
    return kernel


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


# -- loading ----------------------------------------------------------------------------------


def test_the_cpu_build_loads_with_its_ops_in_the_builders_namespace(
    silu_and_mul: ModuleType, cache_dir: Path
) -> None:
    import flashhub.kernels_test.silu_and_mul.v1 as by_statement

    assert by_statement is silu_and_mul and silu_and_mul.__name__ == MODULE
    entry = cache_dir / "kernels" / REPO / "v1" / "torch-cpu"
    assert silu_and_mul.__file__ == str(entry / "__init__.py")
    assert silu_and_mul.ops is getattr(torch.ops, NAMESPACE)
    x = torch.randn(4, 8)
    assert torch.equal(getattr(torch.ops, NAMESPACE).silu_and_mul(x), silu_and_mul.silu_and_mul(x))


def test_kernelize_replaces_the_forward_with_the_kernels_layer(silu_and_mul: ModuleType) -> None:
    @fk.use_kernel_forward_from_hub("SiluAndMul")
    class SiluAndMul(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise AssertionError("the model's own forward ran, not the kernel's")

    model = nn.Sequential(SiluAndMul())
    repository = fk.LayerRepository(repo_id=REPO, layer_name="SiluAndMul", version=1)
    with fk.use_kernel_mapping({"SiluAndMul": {"cpu": repository}}):
        fk.kernelize(model, mode=fk.Mode.TRAINING | fk.Mode.TORCH_COMPILE, device="cpu")
    x = torch.randn(4, 8)
    torch.testing.assert_close(model(x), silu_and_mul_ref(x))


def test_get_local_kernel_loads_the_build_directory(kernel_dir: Path, cpu_only_torch: None) -> None:
    local = fk.get_local_kernel(kernel_dir)
    assert local.__file__ == str(kernel_dir / "build" / "torch-cpu" / "__init__.py")
    x = torch.randn(4, 8)
    torch.testing.assert_close(local.silu_and_mul(x), silu_and_mul_ref(x))


# -- the kernel's own tests, on the CPU -------------------------------------------------------


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(silu_and_mul: ModuleType, requires_grad: bool) -> None:
    torch.manual_seed(42)
    x = torch.randn(32, 128, requires_grad=requires_grad)
    opcheck(silu_and_mul.ops.silu_and_mul, (x,))


@pytest.mark.parametrize("layer", [False, True])
def test_silu_and_mul(silu_and_mul: ModuleType, layer: bool) -> None:
    torch.manual_seed(42)
    x_ref = torch.randn(32, 128, requires_grad=True)
    x = torch.empty(32, 128, requires_grad=True)
    with torch.no_grad():
        x.copy_(x_ref)

    y_ref = silu_and_mul_ref(x_ref)
    y = silu_and_mul.layers.SiluAndMul()(x) if layer else silu_and_mul.silu_and_mul(x)
    torch.testing.assert_close(y_ref, y)

    d_y = torch.randn((32, 64))
    y_ref.backward(d_y)
    y.backward(d_y)
    torch.testing.assert_close(x_ref.grad, x.grad)
