"""The Hub kernels that Hugging Face kernels' layer and function tests load, as pure-torch
``torch-universal`` builds for the loopback CDN, and the device flags of its test suite.

Each kernel keeps its Hub repo id and the layers or functions the tests use, written in
plain torch so that they run on the CPU (and on any other device): ``silu-and-mul`` (a
``SiluAndMul`` layer safe to compile), ``op-without-fake-test`` (one that is not),
``flattened-build`` (a ``silu_and_mul`` function, laid out as a flattened build),
``backward-marker-test`` (``Linear`` layers with and without backward), ``versions``
(v1 and v2, whose ``Version`` layer and ``version`` function give their version), and the
``ReLU`` and ``LigerRMSNorm`` layers of the device-only tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from support.trees import write_variant

UNIVERSAL = "torch-universal"

_SILU_AND_MUL = """
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]
"""

_IMPORTS = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"


def _layer(name: str, forward: str, *markers: str) -> str:
    body = "".join(f"    {marker}\n" for marker in markers)
    return f"\n\nclass {name}(nn.Module):\n{body}\n    def forward{forward}\n"


_SILU_LAYER = "(self, x: torch.Tensor) -> torch.Tensor:\n        return silu_and_mul(x)"
_BOTH = ("has_backward = True", "can_torch_compile = True")
_LINEAR = (
    "(self, input: torch.Tensor) -> torch.Tensor:\n"
    "        return F.linear(input, self.weight, self.bias)"
)
_RMS_NORM = (
    "(self, x: torch.Tensor) -> torch.Tensor:\n"
    "        var = x.pow(2).mean(-1, keepdim=True)\n"
    "        return x * torch.rsqrt(var + self.variance_epsilon) * self.weight"
)


def _package(layers: str, init: str = "") -> dict[str, str]:
    return {"__init__.py": f"{_IMPORTS}\nfrom . import layers\n{init}", "layers.py": layers}


def _kernels() -> dict[tuple[str, int], tuple[dict[str, str], bool]]:
    """``(repo_id, version) -> (files of the package, flattened)``."""
    silu_layers = _IMPORTS + _SILU_AND_MUL
    versions = {
        ("kernels-test/versions", v): (
            _package(
                _IMPORTS + _layer("Version", f"(self) -> int:\n        return {v}"),
                f"\n\ndef version() -> int:\n    return {v}\n",
            ),
            False,
        )
        for v in (1, 2)
    }
    return {
        ("kernels-test/silu-and-mul", 1): (
            _package(
                silu_layers + _layer("SiluAndMul", _SILU_LAYER, "can_torch_compile = True"),
                "from .layers import silu_and_mul\n",
            ),
            False,
        ),
        ("kernels-test/op-without-fake-test", 1): (
            _package(silu_layers + _layer("SiluAndMul", _SILU_LAYER)),
            False,
        ),
        ("kernels-test/flattened-build", 1): (
            {"__init__.py": _IMPORTS + _SILU_AND_MUL},
            True,
        ),
        ("kernels-test/backward-marker-test", 1): (
            _package(
                _IMPORTS
                + _layer(
                    "LinearBackward", _LINEAR, "has_backward = True", "can_torch_compile = True"
                )
                + _layer("LinearNoBackward", _LINEAR, "has_backward = False")
                + _layer("LinearImplicitBackward", _LINEAR)
            ),
            False,
        ),
        **versions,
        **{
            (repo_id, 1): (
                _package(_IMPORTS + _layer("ReLU", "(self, x):\n        return F.relu(x)")),
                False,
            )
            for repo_id in ("kernels-test/relu-nki", "kernels-test/relu-tpu")
        },
        ("kernels-community/liger_kernels", 1): (
            _package(_IMPORTS + _layer("LigerRMSNorm", _RMS_NORM)),
            False,
        ),
    }


def publish_hf_layer_kernels(root: Path) -> None:
    """Publish every kernel above under ``root`` (a CDN root), with its index files."""
    published: dict[str, list[int]] = {}
    for (repo_id, version), (files, flattened) in _kernels().items():
        py_pkg = repo_id.split("/")[1].replace("-", "_")
        prefix = "" if flattened else f"{py_pkg}/"
        data = {f"{prefix}{name}": text.encode() for name, text in files.items()}
        write_variant(root, repo_id, version, UNIVERSAL, data)
        (root / "kernels" / repo_id / f"v{version}" / "variants.json").write_text(
            json.dumps([UNIVERSAL])
        )
        published.setdefault(repo_id, []).append(version)
    for repo_id, versions in published.items():
        (root / "kernels" / repo_id / "versions.json").write_text(json.dumps(sorted(versions)))


# The devices of Hugging Face kernels' conftest.py, which its tests skip on without.
has_cuda = torch.version.cuda is not None and torch.cuda.device_count() > 0
has_rocm = torch.version.hip is not None and torch.cuda.device_count() > 0
has_xpu = getattr(torch.version, "xpu", None) is not None and torch.xpu.device_count() > 0
has_neuron = hasattr(torch, "neuron") and torch.neuron.device_count() > 0
has_tpu = hasattr(torch, "tpu") and torch.tpu.device_count() > 0
has_npu = torch._C._get_privateuse1_backend_name() == "npu"


def hf_device() -> str:
    """The device the tests run on, as the ``device`` fixture of Hugging Face kernels picks it."""
    for name, present in (("cuda", has_cuda), ("xpu", has_xpu), ("npu", has_npu)):
        if present:
            return name
    return "tpu" if has_tpu else "cpu"


# Its markers: the test is skipped on a host without the device, as there.
cuda_only = pytest.mark.skipif(not has_cuda, reason="skipping CUDA-only test on host without CUDA")
rocm_only = pytest.mark.skipif(not has_rocm, reason="skipping ROCm-only test on host without ROCm")
xpu_only = pytest.mark.skipif(not has_xpu, reason="skipping XPU-only test on host without XPU")
neuron_only = pytest.mark.skipif(
    not has_neuron, reason="skipping Neuron-only test on host without Neuron"
)
tpu_only = pytest.mark.skipif(not has_tpu, reason="skipping TPU-only test on host without TPU")
