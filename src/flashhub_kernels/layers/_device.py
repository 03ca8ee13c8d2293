"""Devices a layer is mapped for, optionally narrowed to a range of GPU capabilities.

Imports no torch: a mapping can be built before torch is loaded.
"""

from __future__ import annotations

from .._models.record import Record

#: Device types a mapping may name. ``rocm`` is a ROCm GPU, which torch calls ``cuda``;
#: ``npu`` an Ascend NPU (torch_npu), ``neuron`` an AWS Neuron device, ``tpu`` a TPU.
DEVICE_TYPES = ("cpu", "cuda", "rocm", "mps", "xpu", "npu", "neuron", "tpu")


class _CapabilityRange(Record):
    min_capability: int
    max_capability: int

    def __init__(self, min_capability: int, max_capability: int) -> None:
        _check_range(type(self).__name__, min_capability, max_capability)
        self._init(min_capability, max_capability)

    # Hugging Face kernels' strict dataclasses have these two; construction checks already.
    def validate(self) -> None:
        """Raise if a bound is not a capability or the range is empty (never, for a range
        that was built: it was checked then)."""
        _check_range(type(self).__name__, self.min_capability, self.max_capability)

    def validate_capability_range(self) -> None:
        """Raise ``ValueError`` if ``min_capability`` is above ``max_capability`` (never,
        for a range that was built)."""
        self.validate()

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

    Raises:
        ValueError: a bound is negative, or ``min_capability`` is above ``max_capability``
            (an empty range, such as ``CUDAProperties(90, 80)``).
        TypeError: a bound is not an ``int``.
    """


class ROCMProperties(_CapabilityRange):
    """Narrow a ``rocm`` mapping to a range of capabilities, as torch reports them for the GPU.

    A capability is ``major * 10 + minor`` of ``torch.cuda.get_device_capability()``
    (94 for gfx942, for example). Both bounds are inclusive.

    Raises:
        ValueError: a bound is negative, or ``min_capability`` is above ``max_capability``
            (an empty range, such as ``ROCMProperties(90, 80)``).
        TypeError: a bound is not an ``int``.
    """


_PROPERTIES = {"cuda": CUDAProperties, "rocm": ROCMProperties}


def _check_range(kind: str, min_capability: int, max_capability: int) -> None:
    """Raise unless both bounds are capabilities, ``min_capability`` no higher."""
    for name, value in (("min_capability", min_capability), ("max_capability", max_capability)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{kind}.{name} must be an int such as 80 (sm_80), got {value!r}")
        if value < 0:
            raise ValueError(f"{kind}.{name} must be >= 0, got {value}")
    if min_capability > max_capability:
        raise ValueError(
            f"{kind}(min_capability={min_capability}, "
            f"max_capability={max_capability}) is an empty range: min is above max"
        )


class Device(Record):
    """A device type a kernel layer is mapped for, e.g. ``Device("cuda")``.

    A plain string (``"cuda"``) is accepted wherever a ``Device`` is. ``properties``
    narrows a ``cuda`` or ``rocm`` mapping to a range of capabilities; entries without
    properties match every capability of their type.

    Raises:
        ValueError: the type is not one of :data:`DEVICE_TYPES`, or the properties do not
            belong to the type.
        TypeError: the type is not a string.
    """

    type: str
    properties: CUDAProperties | ROCMProperties | None

    def __init__(
        self, type: str, properties: CUDAProperties | ROCMProperties | None = None
    ) -> None:
        _check_device(type, properties)
        self._init(type, properties)

    def validate(self) -> None:
        """Raise if the type or the properties are not a mapping's (never, for a device
        that was built: it was checked then); as Hugging Face kernels' ``Device`` has it."""
        _check_device(self.type, self.properties)

    def __str__(self) -> str:
        """The device type (``"cuda"``), as the 0.1.2 release printed a ``Device``."""
        return self.type

    def matches(self, capability: int | None) -> bool:
        """Whether this entry applies to a device of its type with ``capability``."""
        if self.properties is None:
            return True
        return capability is not None and capability in self.properties


def _check_device(kind: object, properties: object) -> None:
    """Raise if ``kind`` is no device type of a mapping, or ``properties`` are not its."""
    if not isinstance(kind, str):
        raise TypeError(f"device type must be a string such as 'cuda', got {kind!r}")
    if kind not in DEVICE_TYPES:
        raise ValueError(
            f"unknown device type {kind!r}: use one of {', '.join(DEVICE_TYPES)} "
            "(the type alone, without an index such as ':0'; Apple GPUs are 'mps')"
        )
    expected = _PROPERTIES.get(kind)
    if properties is not None and type(properties) is not expected:
        wanted = f"{expected.__name__} or None" if expected else "None"
        raise ValueError(f"Device({kind!r}) takes properties={wanted}, got {properties!r}")


def as_device(device: Device | str) -> Device:
    """``"cuda"`` -> ``Device("cuda")``; a ``Device`` is returned as it is."""
    if isinstance(device, Device):
        return device
    if isinstance(device, str):
        return Device(device)
    raise TypeError(f"a device must be a Device or a device type string, got {device!r}")
