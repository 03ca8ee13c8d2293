"""acme/silu-layers: pure-torch activation layers (``layers``) and their functional forms."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import layers

__all__ = ["gelu_tanh", "layers", "silu_and_mul"]


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` for an even last dimension ``2 * d``."""
    if x.shape[-1] % 2:
        raise ValueError(f"silu_and_mul needs an even last dimension, got {tuple(x.shape)}")
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation."""
    return F.gelu(x, approximate="tanh")
