"""Whether torch.compile is tracing the code that asks.

Code that torch.compile cannot trace (a ``ContextVar``, a lookup that may load a kernel)
takes another path while it traces; this says when.
"""

from __future__ import annotations

import torch


def compiling() -> bool:
    """Whether torch.compile (dynamo) is tracing this call; ``False`` on a torch without
    ``torch.compiler.is_compiling`` (before 2.3), which cannot tell."""
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False
