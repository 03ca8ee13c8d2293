"""sdq/audio-codebook-primitives: MusicGen-style delayed codebook decoding step.

``delayed_codebook_argmax_embed_bf16(logits, codebook, delay, boc)`` picks, for each
codebook ``k``, ``argmax(logits[k])`` when ``k <= delay`` and ``boc`` otherwise, and
gathers the embedding ``codebook[k, code]``.
"""

from __future__ import annotations

import torch

from ._ops import NAMESPACE, add_op_namespace_prefix, ops
from ._reference import check_inputs, reference_delayed_codebook_argmax_embed

__all__ = [
    "NAMESPACE",
    "add_op_namespace_prefix",
    "delayed_codebook_argmax_embed_bf16",
    "ops",
    "reference_delayed_codebook_argmax_embed",
]


def delayed_codebook_argmax_embed_bf16(
    logits: torch.Tensor, codebook: torch.Tensor, delay: int, boc: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(codes, emb)`` for one decoding step with the delay pattern.

    Args:
        logits: ``(K, V)`` bfloat16 scores, one row per codebook.
        codebook: ``(K, V, D)`` bfloat16 embedding tables, on the same device.
        delay: decoding step; codebooks ``k <= delay`` take their argmax (``>= 0``).
        boc: token used by codebooks ``k > delay`` (``0 <= boc < V``).

    Returns:
        ``codes`` ``(K,)`` int64 and ``emb`` ``(K, D)`` bfloat16 with
        ``emb[k] = codebook[k, codes[k]]``.

    """
    delay = check_inputs(logits, codebook, delay, boc)
    codes, emb = ops.delayed_codebook_argmax_embed_bf16(logits, codebook, delay, int(boc))
    return codes, emb
