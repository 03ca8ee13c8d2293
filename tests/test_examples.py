"""The example kernels, built for real, published, served over loopback and loaded.

Their native builds are CPU builds (the CUDA one is built for the gpu tests only), so
they load as ``backend="cpu"`` names them (``...v1_cpu``): on a CPU-only torch that is
the module plain ``v1`` gives, and a CUDA torch loads them too.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.utils.cpp_extension

import flashhub_kernels as fk
from conftest import EXAMPLES
from flashhub_kernels._publish import publish
from support.cdn_server import CdnServer
from support.trees import cpu_variant


@pytest.fixture
def published(cdn: CdnServer, built: list) -> CdnServer:  # type: ignore[type-arg]
    for kernel in built:
        publish(kernel.build_dir, repo_id=kernel.repo_id, version=kernel.version, out=cdn.root)
    return cdn


def test_native_audio_kernel_matches_the_reference(published: CdnServer) -> None:
    import flashhub.sdq.audio_codebook_primitives.v1_cpu as k

    assert fk.get_loaded_kernels()[-1].variant == cpu_variant()
    assert any(p.endswith(".so") for p in published.gets())
    # torch-universal's metadata.json was asked for beside variants.json; none of its files.
    assert not any("/torch-universal/" in p for p in published.gets() if ".json" not in p)
    torch.manual_seed(0)
    for K, V, D in [(4, 16, 8), (9, 300, 5)]:
        logits = torch.randn((K, V), dtype=torch.bfloat16)
        codebook = torch.randn((K, V, D), dtype=torch.bfloat16)
        for delay in (0, 2, K - 1, K + 5):
            codes, emb = k.delayed_codebook_argmax_embed_bf16(logits, codebook, delay, 1)
            ref_codes, ref_emb = k.reference_delayed_codebook_argmax_embed(
                logits, codebook, delay, 1
            )
            assert codes.dtype == torch.int64 and emb.dtype == torch.bfloat16
            assert torch.equal(codes, ref_codes) and torch.equal(emb, ref_emb)
            assert (codes[delay + 1 :] == 1).all()
    with pytest.raises((TypeError, ValueError)):
        k.delayed_codebook_argmax_embed_bf16(logits.float(), codebook, 0, 1)


def test_universal_variant_matches_the_reference(
    published: CdnServer,
    tmp_path: Path,
    built: list,  # type: ignore[type-arg]
) -> None:
    audio = next(b for b in built if b.repo_id == "sdq/audio-codebook-primitives")
    k = fk.get_local_kernel(audio.build_dir / "torch-universal")
    logits = torch.randn((3, 7), dtype=torch.bfloat16)
    codebook = torch.randn((3, 7, 2), dtype=torch.bfloat16)
    codes, emb = k.delayed_codebook_argmax_embed_bf16(logits, codebook, 1, 0)
    ref_codes, ref_emb = k.reference_delayed_codebook_argmax_embed(logits, codebook, 1, 0)
    assert torch.equal(codes, ref_codes) and torch.equal(emb, ref_emb)


def test_two_native_versions_side_by_side(published: CdnServer) -> None:
    from flashhub.acme.tensor_tricks import v1_cpu as v1, v2_cpu as v2

    x = torch.randn(17)
    assert torch.allclose(v1.scale_shift(x, 3.0), x * 3.0 + 1)
    assert torch.allclose(v2.scale_shift(x, 3.0), x * 3.0 - 1)
    assert v1.NAMESPACE != v2.NAMESPACE
    assert hasattr(torch.ops, v1.NAMESPACE) and hasattr(torch.ops, v2.NAMESPACE)
    assert (v1.VERSION, v2.VERSION) == (1, 2)
    sos = {Path(p).name for p in published.gets(".so")}
    assert len(sos) == 2


def test_publish_round_trips_and_is_immutable(published: CdnServer, built: list) -> None:  # type: ignore[type-arg]
    tricks_v1 = next(b for b in built if b.repo_id == "acme/tensor-tricks" and b.version == 1)
    again = publish(
        tricks_v1.build_dir, repo_id="acme/tensor-tricks", version=1, out=published.root
    )
    assert again.noop
    tricks_v2 = next(b for b in built if b.repo_id == "acme/tensor-tricks" and b.version == 2)
    with pytest.raises(fk.errors.PublishError):
        publish(tricks_v2.build_dir, repo_id="acme/tensor-tricks", version=1, out=published.root)
    assert fk.has_kernel("acme/tensor-tricks", version=2, backend="cpu")
    assert fk.has_kernel("acme/silu-layers")


def test_a_cuda_build_found_through_a_wrapper_nvcc_is_possible_on_every_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch guessed CUDA_HOME from an nvcc wrapper outside the toolkit (/usr/local/bin):
    every call of ``cuda_backend`` finds the toolkit in its usual place (the quickstart's,
    then each kernel build's), or the quickstart announces CUDA variants that its builds
    then skip."""
    wrapper_home, toolkit = tmp_path / "local", tmp_path / "cuda"
    for home in (wrapper_home, toolkit):
        (home / "bin").mkdir(parents=True)
        (home / "bin/nvcc").write_text("#!/bin/sh\n")
    (toolkit / "lib64").mkdir()
    (toolkit / "lib64/libcudart.so.13").write_bytes(b"")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    import _buildlib

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.utils.cpp_extension, "CUDA_HOME", str(wrapper_home))
    monkeypatch.setattr(_buildlib, "_USUAL_CUDA_HOME", str(toolkit))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    assert [_buildlib.cuda_backend() for _ in range(3)] == [("cu130", "")] * 3
    assert _buildlib.cuda_toolkit() == (str(toolkit), "")  # what the compilers get
    # Only they: a CUDA_HOME changed here would start this worker's later children as
    # new interpreters (see support.preloaded), and the gpu tests' too.
    assert "CUDA_HOME" not in os.environ
