"""On a CUDA GPU: the example kernels' CUDA build, loaded through the import hook and run
on the device against its reference, a kernel layer under ``torch.compile``, and the
quickstart. Elsewhere each test is skipped, saying what is missing (``conftest.py``).

The device is used in child processes only: CUDA initialized in a pytest worker would
break the tests that fork after it there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import EXAMPLES, device_capability, run_python
from flashhub_kernels._publish import publish
from flashhub_kernels._variants.archs import arch_mismatch
from flashhub_kernels._variants.compat import read_target
from support.cdn_server import CdnServer
from support.trees import local_variant

pytestmark = pytest.mark.gpu

AUDIO = "sdq/audio-codebook-primitives"
QUICKSTART = EXAMPLES.parent / "quickstart.py"


@pytest.fixture
def published_cuda(cdn: CdnServer, built_cuda: list[Any]) -> CdnServer:
    """Every example kernel, CUDA variants included, on the test's CDN."""
    for kernel in built_cuda:
        publish(kernel.build_dir, repo_id=kernel.repo_id, version=kernel.version, out=cdn.root)
    return cdn


def test_the_examples_build_a_cuda_variant_for_this_gpu(built_cuda: list[Any]) -> None:
    from _buildlib import cuda_backend  # beside build_all, which built_cuda imported

    backend, why_not = cuda_backend()
    assert backend is not None, f"no CUDA variant was built: {why_not}"
    audio = next(kernel for kernel in built_cuda if kernel.repo_id == AUDIO)
    variant = audio.build_dir / local_variant()
    assert "-cu" in variant.name
    sos = [p.name for p in (variant / "audio_codebook_primitives").glob("*.so")]
    assert len(sos) == 1 and sos[0].startswith("_audio_codebook_primitives_cuda_"), sos
    target = read_target(json.loads((variant / "metadata.json").read_text()))
    assert target.backend == "cuda" and target.archs
    capability = device_capability()
    assert arch_mismatch(target, "cuda", cuda_capability=capability) is None, target.archs


AUDIO_ON_CUDA = """
import torch
import flashhub_kernels as fk
import flashhub.sdq.audio_codebook_primitives.v1 as k

print(fk.get_loaded_kernels()[-1].variant)
op = k.add_op_namespace_prefix("delayed_codebook_argmax_embed_bf16")
print(torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"))
torch.manual_seed(0)
for K, V, D in [(4, 16, 8), (9, 300, 5), (8, 4096, 64)]:
    logits = torch.randn((K, V), dtype=torch.bfloat16, device="cuda")
    codebook = torch.randn((K, V, D), dtype=torch.bfloat16, device="cuda")
    for delay in (0, 2, K - 1, K + 5):
        codes, emb = k.delayed_codebook_argmax_embed_bf16(logits, codebook, delay, 1)
        ref_codes, ref_emb = k.reference_delayed_codebook_argmax_embed(logits, codebook, delay, 1)
        assert codes.is_cuda and emb.is_cuda, (codes.device, emb.device)
        assert torch.equal(codes, ref_codes) and torch.equal(emb, ref_emb), (K, V, D, delay)
print("matches")
"""


def test_the_cuda_variant_loads_through_the_hook_and_matches_the_reference(
    published_cuda: CdnServer,
) -> None:
    out = run_python(AUDIO_ON_CUDA)
    assert out.split() == [local_variant(), "True", "matches"]
    assert any(path.endswith(".so") and "-cu" in path for path in published_cuda.gets())


LAYER_COMPILED_ON_CUDA = """
import torch
import torch.nn.functional as F
from torch import nn

from flashhub_kernels import (
    LayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping,
)


@use_kernel_forward_from_hub("SiluAndMul")
class SiluAndMul(nn.Module):
    def forward(self, x):
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(64, 256), SiluAndMul(), nn.Linear(128, 64)).cuda().eval()
x = torch.randn(8, 64, device="cuda")
with torch.no_grad():
    expected = model(x)
    repo = LayerRepository("acme/silu-layers", "SiluAndMul", version=1)
    with use_kernel_mapping({"SiluAndMul": {"cuda": repo}}):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, use_fallback=False)
    print(model[1].forward.__func__.__module__)
    compiled = torch.compile(model, fullgraph=True)
    out = compiled(x)
    torch.testing.assert_close(out, expected)
print(out.device)
"""


def test_a_kernelized_layer_compiles_with_fullgraph_on_cuda(published_cuda: CdnServer) -> None:
    out = run_python(LAYER_COMPILED_ON_CUDA, timeout=300)
    assert out.split() == ["flashhub.acme.silu_layers.v1.layers", "cuda:0"]


def test_the_quickstart_loads_the_cuda_variant_and_runs_it_on_the_gpu(
    tmp_path: Path, built_cuda: list[Any]
) -> None:
    # The quickstart works beside the cache: under tmp_path, as FLASHHUB_CACHE_DIR is.
    result = subprocess.run(
        [sys.executable, str(QUICKSTART)],
        env={**os.environ, "FLASHHUB_CACHE_DIR": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert any(line.strip().startswith("CUDA variants: cu") for line in lines), result.stdout
    assert f"  {AUDIO} v1: variant {local_variant()}" in lines, result.stdout
    assert any(" on cuda: codes=" in line for line in lines), result.stdout
    assert any(line.endswith(" ms, 0 requests") for line in lines), result.stdout
