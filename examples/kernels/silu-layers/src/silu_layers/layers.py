"""Pure layers for kernel layer swapping: no ``__init__``, no state, only ``forward``.

Plain torch operations, so ``torch.compile`` traces them (``can_torch_compile``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SiluAndMul(nn.Module):
    """``silu(x[..., :d]) * x[..., d:]`` with ``d = x.shape[-1] // 2``."""

    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the gated SiLU over the last dimension."""
        d = x.shape[-1] // 2
        return F.silu(x[..., :d]) * x[..., d:]


class GeluTanh(nn.Module):
    """GELU with the tanh approximation (as in GPT-2's "fast GELU")."""

    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply tanh-approximated GELU elementwise."""
        return F.gelu(x, approximate="tanh")
