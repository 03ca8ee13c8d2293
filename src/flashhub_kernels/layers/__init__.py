"""Kernel layers: let a kernel from the CDN run the ``forward`` of a model's layers.

A library marks a layer as replaceable (:func:`use_kernel_forward_from_hub`, or
:func:`replace_kernel_forward_from_hub` for a class it cannot edit); a user maps the
layer's name to a layer class in a kernel's ``layers`` module, per device and mode
(:func:`register_kernel_mapping`, :func:`use_kernel_mapping`). The kernel layer's
``forward`` then runs with the original module as ``self``, on each call or, after
:func:`kernelize`, fixed per module. ``DISABLE_KERNEL_MAPPING=1`` turns it all off.

See ``docs/layers.md``. This module imports torch; ``flashhub_kernels`` does not.
"""

from __future__ import annotations

from ._device import DEVICE_TYPES, CUDAProperties, Device, ROCMProperties
from ._hooks import kernelize, replace_kernel_forward_from_hub, use_kernel_forward_from_hub
from ._mapping import KernelMapping, Mode, register_kernel_mapping, use_kernel_mapping
from ._repository import (
    BaseLayerRepository,
    LayerRepository,
    LocalLayerRepository,
    LockedLayerRepository,
)
from ._validate import validate_layer

__all__ = [
    "DEVICE_TYPES",
    "BaseLayerRepository",
    "CUDAProperties",
    "Device",
    "KernelMapping",
    "LayerRepository",
    "LocalLayerRepository",
    "LockedLayerRepository",
    "Mode",
    "ROCMProperties",
    "kernelize",
    "register_kernel_mapping",
    "replace_kernel_forward_from_hub",
    "use_kernel_forward_from_hub",
    "use_kernel_mapping",
    "validate_layer",
]
