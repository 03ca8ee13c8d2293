"""Pure-torch stand-in for the native ops (the ``torch-universal`` build ships this as _ops.py)."""

from __future__ import annotations

import torch

from ._reference import reference_delayed_codebook_argmax_embed

NAMESPACE = "_audio_codebook_primitives_universal"


def add_op_namespace_prefix(name: str) -> str:
    """Return ``name`` qualified with this build's namespace (no torch.ops library here)."""
    return f"{NAMESPACE}::{name}"


class _Ops:
    """The op table; mirrors ``torch.ops.<namespace>`` of the native builds."""

    @staticmethod
    def delayed_codebook_argmax_embed_bf16(
        logits: torch.Tensor, codebook: torch.Tensor, delay: int, boc: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """See the package's ``delayed_codebook_argmax_embed_bf16``."""
        return reference_delayed_codebook_argmax_embed(logits, codebook, delay, boc)


ops = _Ops()
