"""Kernel layers: let a kernel from the CDN run the ``forward`` of a model's layers.

A library marks a layer as replaceable (:func:`use_kernel_forward_from_hub`, or
:func:`replace_kernel_forward_from_hub` for a class it cannot edit); a user maps the
layer's name to a layer class in a kernel's ``layers`` module, per device and mode
(:func:`register_kernel_mapping`, :func:`use_kernel_mapping`). The kernel layer's
``forward`` then runs with the original module as ``self``, on each call or, after
:func:`kernelize`, fixed per module. Plain functions are marked the same way
(:func:`use_kernel_forward_from_hub` on a function, :func:`use_kernelized_func`).
:func:`get_kernelized_layers` tells what ``kernelize`` bound in a model.
``DISABLE_KERNEL_MAPPING=1`` turns it all off. ``flashhub_kernels.layer`` is this
package under the name Hugging Face kernels uses (``kernels.layer``).

See ``docs/layers.md``. Importing this module imports no torch: devices, modes,
repositories, mappings, the marking decorators and :func:`get_kernelized_layers` do
without it. :func:`kernelize` and
:func:`validate_layer` load on first access and import torch; so does marking a class,
which is an ``nn.Module`` and so comes after torch anyway, or a function.
"""

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
