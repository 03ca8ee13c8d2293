"""``flashhub_kernels.layer``: the layer API under the name Hugging Face kernels gives it.

Code written for ``kernels`` imports ``from kernels.layer import ...``; with
``from flashhub_kernels.layer import ...`` it gets the same objects as from
:mod:`flashhub_kernels.layers`, which importing this module imports (no torch). Each
name is read from there on first access, so ``kernelize`` and ``validate_layer`` import
torch only then, as they do there.
"""

from __future__ import annotations

from . import layers
from ._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing costs more than this whole module
if TYPE_CHECKING:
    from .layers import *  # noqa: F403

__all__ = list(layers.__all__)

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, layers.__name__))
