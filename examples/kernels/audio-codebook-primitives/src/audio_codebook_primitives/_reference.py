"""Input checks and the pure-torch reference of the delayed codebook argmax + embedding."""

from __future__ import annotations

import operator

import torch


def check_inputs(logits: torch.Tensor, codebook: torch.Tensor, delay: int, boc: int) -> int:
    """Validate the op's inputs; return ``delay`` clamped to ``K`` (larger means all rows).

    Raises ``TypeError`` for wrong types/dtypes and ``ValueError`` for wrong shapes,
    devices or out-of-range ``delay``/``boc``.
    """
    if not isinstance(logits, torch.Tensor) or not isinstance(codebook, torch.Tensor):
        raise TypeError("logits and codebook must be torch.Tensor")
    if isinstance(delay, bool) or isinstance(boc, bool):
        raise TypeError("delay and boc must be integers, not bool")
    delay, boc = operator.index(delay), operator.index(boc)
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (K, V), got {tuple(logits.shape)}")
    if codebook.dim() != 3 or codebook.shape[:2] != logits.shape:
        raise ValueError(
            f"codebook must have shape (K, V, D) = ({logits.shape[0]}, {logits.shape[1]}, D), "
            f"got {tuple(codebook.shape)}"
        )
    if logits.dtype != torch.bfloat16 or codebook.dtype != torch.bfloat16:
        raise TypeError(
            f"logits and codebook must be torch.bfloat16, got {logits.dtype} and {codebook.dtype}"
        )
    if logits.device != codebook.device:
        raise ValueError(
            f"logits ({logits.device}) and codebook ({codebook.device}) must be on one device"
        )
    if delay < 0:
        raise ValueError(f"delay must be >= 0, got {delay}")
    if not 0 <= boc < logits.shape[1]:
        raise ValueError(f"boc must be in [0, V={logits.shape[1]}), got {boc}")
    return min(delay, logits.shape[0])


def reference_delayed_codebook_argmax_embed(
    logits: torch.Tensor, codebook: torch.Tensor, delay: int, boc: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure-torch ``delayed_codebook_argmax_embed_bf16``: same contract, same results."""
    delay = check_inputs(logits, codebook, delay, boc)
    k = torch.arange(logits.shape[0], device=logits.device)
    codes = torch.where(k <= delay, logits.argmax(dim=-1), operator.index(boc))
    return codes, codebook[k, codes]
