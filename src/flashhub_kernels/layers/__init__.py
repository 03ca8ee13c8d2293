"""Kernel layers: let a kernel from the CDN run the ``forward`` of a model's layers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from ._device import DEVICE_TYPES, CUDAProperties, Device, ROCMProperties
from ._fallback import KernelizeFallback
from ._func_repository import (
    BaseFuncRepository,
    FuncRepository,
    LocalFuncRepository,
    LockedFuncRepository,
    use_kernel_func_from_hub,
)
from ._inspect import KernelizedFunc, KernelizedLayer, KernelizedLayers, get_kernelized_layers
from ._mapping import KernelMapping, Mode, register_kernel_mapping, use_kernel_mapping
from ._marking import (
    replace_kernel_forward_from_hub,
    use_kernel_forward_from_hub,
    use_kernelized_func,
)
from ._repository import (
    BaseLayerRepository,
    LayerRepository,
    LocalLayerRepository,
    LockedLayerRepository,
)

if TYPE_CHECKING:
    from ._dispatch import kernelize
    from ._validate import validate_layer

# The names whose modules import torch: loaded on first attribute access (PEP 562).
_LAZY = {"kernelize": "._dispatch", "validate_layer": "._validate"}

__all__ = [
    "DEVICE_TYPES",
    "BaseFuncRepository",
    "BaseLayerRepository",
    "CUDAProperties",
    "Device",
    "FuncRepository",
    "KernelMapping",
    "KernelizeFallback",
    "KernelizedFunc",
    "KernelizedLayer",
    "KernelizedLayers",
    "LayerRepository",
    "LocalFuncRepository",
    "LocalLayerRepository",
    "LockedFuncRepository",
    "LockedLayerRepository",
    "Mode",
    "ROCMProperties",
    "get_kernelized_layers",
    "kernelize",
    "register_kernel_mapping",
    "replace_kernel_forward_from_hub",
    "use_kernel_forward_from_hub",
    "use_kernel_func_from_hub",
    "use_kernel_mapping",
    "use_kernelized_func",
    "validate_layer",
]


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
