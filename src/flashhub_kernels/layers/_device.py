"""Devices a layer is mapped for, optionally narrowed to a range of GPU capabilities.

Imports no torch: a mapping can be built before torch is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Device types a mapping may name. ``rocm`` is a ROCm GPU, which torch calls ``cuda``;
#: ``npu`` an Ascend NPU (torch_npu), ``neuron`` an AWS Neuron device, ``tpu`` a TPU.
DEVICE_TYPES = ("cpu", "cuda", "rocm", "mps", "xpu", "npu", "neuron", "tpu")


@dataclass(frozen=True)
class _CapabilityRange:
    min_capability: int
    max_capability: int

    def __post_init__(self) -> None:
        kind = type(self).__name__
        for name in ("min_capability", "max_capability"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{kind}.{name} must be an int such as 80 (sm_80), got {value!r}")
            if value < 0:
                raise ValueError(f"{kind}.{name} must be >= 0, got {value}")
        if self.min_capability > self.max_capability:
            raise ValueError(
                f"{kind}(min_capability={self.min_capability}, "
                f"max_capability={self.max_capability}) is an empty range: min is above max"
            )

    def __contains__(self, capability: int) -> bool:
        return self.min_capability <= capability <= self.max_capability

    @property
    def width(self) -> int:
        """How many capabilities the range spans, less one; a narrower range is more specific."""
        return self.max_capability - self.min_capability


class CUDAProperties(_CapabilityRange):
    """Narrow a ``cuda`` mapping to compute capabilities ``min_capability..max_capability``.

    A capability is ``major * 10 + minor``: 80 for sm_80 (A100), 90 for sm_90 (H100),
    100 for sm_100. Both bounds are inclusive.
    """


class ROCMProperties(_CapabilityRange):
    """Narrow a ``rocm`` mapping to a range of capabilities, as torch reports them for the GPU.

    A capability is ``major * 10 + minor`` of ``torch.cuda.get_device_capability()``
    (94 for gfx942, for example). Both bounds are inclusive.
    """


_PROPERTIES = {"cuda": CUDAProperties, "rocm": ROCMProperties}


@dataclass(frozen=True)
class Device:
    """A device type a kernel layer is mapped for, e.g. ``Device("cuda")``.

    A plain string (``"cuda"``) is accepted wherever a ``Device`` is. ``properties``
    narrows a ``cuda`` or ``rocm`` mapping to a range of capabilities; entries without
    properties match every capability of their type.

    Raises:
        ValueError: the type is not one of :data:`DEVICE_TYPES`, or the properties do not
            belong to the type.
    """

    type: str
    properties: CUDAProperties | ROCMProperties | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.type, str):
            raise TypeError(f"device type must be a string such as 'cuda', got {self.type!r}")
        if self.type not in DEVICE_TYPES:
            raise ValueError(
                f"unknown device type {self.type!r}: use one of {', '.join(DEVICE_TYPES)} "
                "(the type alone, without an index such as ':0'; Apple GPUs are 'mps')"
            )
        expected = _PROPERTIES.get(self.type)
        if self.properties is not None and type(self.properties) is not expected:
            wanted = f"{expected.__name__} or None" if expected else "None"
            raise ValueError(
                f"Device({self.type!r}) takes properties={wanted}, got {self.properties!r}"
            )

    def matches(self, capability: int | None) -> bool:
        """Whether this entry applies to a device of its type with ``capability``."""
        if self.properties is None:
            return True
        return capability is not None and capability in self.properties


def as_device(device: Device | str) -> Device:
    """``"cuda"`` -> ``Device("cuda")``; a ``Device`` is returned as it is."""
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        return Device(device)
    raise TypeError(f"a device must be a Device or a device type string, got {device!r}")
