"""acme/tensor-tricks: ``scale_shift(x, alpha)``, a native CPU op that differs by version.

Version 1 computes ``x * alpha + 1`` and version 2 ``x * alpha - 1``; each build has its own
``torch.ops`` namespace, so both versions load side by side in one process.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._ops import NAMESPACE, add_op_namespace_prefix, ops

VERSION: int = int(ops.version())
SHIFT: float = 1.0 if VERSION == 1 else -1.0

__all__ = [
    "NAMESPACE",
    "SHIFT",
    "VERSION",
    "Recipe",
    "add_op_namespace_prefix",
    "ops",
    "reference_scale_shift",
    "scale_shift",
]


def scale_shift(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """Return ``x * alpha + SHIFT`` (``SHIFT`` is +1 in v1, -1 in v2) for a CPU float tensor."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating point torch.Tensor, got {type(x).__name__}")
    if x.device.type != "cpu":
        raise ValueError(f"scale_shift runs on CPU tensors only, got {x.device}")
    out: torch.Tensor = ops.scale_shift(x, float(alpha))
    return out


def reference_scale_shift(x: torch.Tensor, alpha: float) -> torch.Tensor:
    """Pure-torch ``scale_shift``."""
    return x * alpha + SHIFT


@dataclass(frozen=True)
class Recipe:
    """A picklable ``scale_shift`` setting, e.g. to send to a worker process."""

    alpha: float = 2.0

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """Apply ``scale_shift(x, self.alpha)`` of this kernel version."""
        return scale_shift(x, self.alpha)
