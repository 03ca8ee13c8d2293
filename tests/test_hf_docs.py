"""Hugging Face kernels' documentation (docs/source/*.md of kernels 0.19), followed as it
is written, with ``from kernels import`` changed to ``from flashhub_kernels import``.

Each test runs a documented example in a new process against the loopback CDN, which
serves the Hub's kernels of the same names as pure-torch builds
(``support/hf_layer_kernels.py``), and checks what the documentation says it does.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import run_python
from support.cdn_server import CdnServer
from support.cli_runner import flashhub_child
from support.hf_layer_kernels import publish_hf_layer_kernels


@pytest.fixture(autouse=True)
def hub(cdn: CdnServer) -> CdnServer:
    publish_hf_layer_kernels(cdn.root)
    return cdn


# layers.md, "Using a decorator" and "Registering a hub kernel for a layer"
_MODEL = """
import logging
import sys

import torch
import torch.nn.functional as F
from torch import nn

from flashhub_kernels import LayerRepository, Mode, kernelize, use_kernel_forward_from_hub
from flashhub_kernels import use_kernel_mapping


@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMul(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        d = input.shape[-1] // 2
        return F.silu(input[..., :d]) * input[..., d:]


kernel_layer_mapping = {
    "SiluAndMul": {
        "cpu": LayerRepository(
            repo_id="kernels-test/silu-and-mul",
            layer_name="SiluAndMul",
            version=1,
        ),
    }
}
model = nn.Sequential(nn.Linear(4, 8), SiluAndMul(), nn.Linear(4, 8), SiluAndMul())
"""


def test_kernelize_logs_the_kernels_it_uses_at_info() -> None:
    # layers.md, "Inspecting which kernels are used": "The kernels that are used are
    # logged at the INFO level by kernelize."
    code = _MODEL + textwrap.dedent(
        """
        with use_kernel_mapping(kernel_layer_mapping):
            kernelize(model, mode=Mode.INFERENCE)  # downloads the kernel
            logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
            kernelize(model, mode=Mode.INFERENCE)  # from the cache
            kernelize(model, mode=Mode.TRAINING | Mode.TORCH_COMPILE)
        """
    )
    lines = run_python(code).splitlines()
    used = "runs kernel layer SiluAndMul of kernels-test/silu-and-mul@v1"
    assert lines == [  # once per call for both layers
        f"kernelize: 'SiluAndMul' on device 'cpu' in mode INFERENCE {used}",
        f"kernelize: 'SiluAndMul' on device 'cpu' in mode TRAINING|TORCH_COMPILE {used}",
    ]


def test_variants_json_lists_the_revisions_as_hugging_face_kernels_does() -> None:
    # cli-variants.md, "JSON Output": "a single JSON object with the repository ID and a
    # revisions list, including when selecting just one version or revision"; with
    # --all-versions, "entries appear in ascending version order".
    one = flashhub_child("variants", "kernels-test/versions", "--version", "1", "--json")
    every = flashhub_child("variants", "kernels-test/versions", "--all-versions", "--json")

    for result in (one, every):
        assert result.returncode == 0, result.stderr
    variant = {"variant": "torch-universal", "compatible": True, "preferred": True, "reason": None}
    revisions = [
        {"version": version, "revision": f"v{version}", "variants": [variant]} for version in (1, 2)
    ]
    assert json.loads(one.stdout)["revisions"] == revisions[:1]
    assert json.loads(every.stdout)["revisions"] == revisions


def test_describe_api_takes_trust_remote_code_and_describes_the_same() -> None:
    # kernels describe-api takes --trust-remote-code (for Hub kernels); it changes nothing
    # here, as trust_remote_code= changes nothing for the loaders.
    trusting = flashhub_child(
        "describe-api", "kernels-test/silu-and-mul", "--version", "1", "--trust-remote-code"
    )
    plain = flashhub_child("describe-api", "kernels-test/silu-and-mul", "--version", "1")

    assert trusting.returncode == 0, trusting.stderr
    assert "SiluAndMul  has_backward=True  can_torch_compile=True" in trusting.stdout
    assert trusting.stdout == plain.stdout
