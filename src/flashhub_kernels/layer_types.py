"""``flashhub_kernels.layer_types``: the 0.1.2 release's module of the layer API's types.

Code written for 0.1.2 imports ``from flashhub_kernels.layer_types import Device, ...``;
it gets the same objects as from :mod:`flashhub_kernels.layers`, which importing this
module imports (no torch).
"""

from __future__ import annotations

from . import layers
from ._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing costs more than this whole module
if TYPE_CHECKING:
    from .layers import CUDAProperties, Device, Mode, ROCMProperties

__all__ = ["CUDAProperties", "Device", "Mode", "ROCMProperties"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(__all__, layers.__name__))
