"""The device a forward runs on, as mappings name it, from a tensor or a caller's argument."""

from __future__ import annotations

import torch

from .._models.record import Record
from ._device import DEVICE_TYPES, Device

_GPU_TYPES = ("cuda", "rocm")


class Target(Record):
    """The device a forward runs on: its type as mappings name it, and its torch index."""

    type: str
    index: int | None = None

    def capability(self) -> int | None:
        """``major * 10 + minor`` of a CUDA/ROCm GPU; ``None`` elsewhere or when unknown.

        Read without creating a CUDA context (torch is asked only once it has one), so
        that kernelizing for a GPU before using it keeps a process that forks later, such
        as a data loader's, able to use CUDA.
        """
        if self.type not in _GPU_TYPES:
            return None
        from .._variants.device_arch import gpu_capability

        try:
            return gpu_capability(self.type, self.index)
        except (AssertionError, RuntimeError):  # torch built without CUDA, or no GPU
            return None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def target_of(device: torch.device) -> Target:
    """The target of a tensor on ``device``; a ROCm build's ``cuda`` device is ``rocm``."""
    kind = device.type
    if kind == "cuda" and torch.version.hip:
        kind = "rocm"
    return Target(kind, device.index)


def _named_target(device: str) -> Target | None:
    """``"cuda"``, ``"rocm"``, ``"tpu:1"``: a device type of mappings, with an optional
    index, taken as it is named, as Hugging Face kernels takes a device string.

    So ``"cuda"`` is ``cuda`` on a ROCm build of torch too (which calls its GPUs
    ``cuda``), and a type torch knows only with a plugin (``npu``, ``neuron``, ``tpu``) or
    not at all (``rocm``) needs none. ``None`` for any other string.
    """
    kind, colon, index = device.partition(":")
    if kind not in DEVICE_TYPES or (colon and not index.isdigit()):
        return None
    return Target(kind, int(index) if colon else None)


def parse_target(device: str | torch.device | Device) -> Target:
    """The target a caller names: ``"cuda:1"``, ``torch.device("cpu")`` or ``Device("rocm")``.

    A ``torch.device`` is the device of a tensor (see :func:`target_of`); a string that
    names a device type of mappings is that type (see :func:`_named_target`).
    """
    if isinstance(device, Device):
        return Target(device.type)
    try:
        named = _named_target(device) if isinstance(device, str) else None
        return named if named is not None else target_of(torch.device(device))
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"invalid device {device!r}: give a torch device such as 'cuda', 'cuda:1' or "
            f"'cpu', or a device type of a mapping ({', '.join(DEVICE_TYPES)})"
        ) from None
