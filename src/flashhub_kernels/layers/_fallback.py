"""When a marked layer may keep its original ``forward``: the cases of :class:`KernelizeFallback`.

Imports no torch.
"""

from __future__ import annotations

import enum


class KernelizeFallback(enum.Flag):
    """The cases in which a marked layer keeps its original ``forward`` instead of raising.

    ``kernelize(use_fallback=...)`` takes a combination of them; ``True`` means
    ``DEFAULT`` and ``False`` means ``NONE``. A layer marked with ``use_fallback=False``
    is ``NONE`` whatever ``kernelize`` is given.

    - ``NO_LAYER``: the mapping has no entry for the layer's name;
    - ``NO_DEVICE``: the layer is mapped, but for no device of the type it runs on;
    - ``NO_COMPATIBLE_PROPERTIES``: it is mapped for the type, but only for capability
      ranges that do not hold the GPU's;
    - ``NO_COMPATIBLE_MODE``: no mapping key serves the mode, or the kernel layer found
      does not support it (``has_backward = False`` in training, no
      ``can_torch_compile = True`` under ``TORCH_COMPILE``);
    - ``CANNOT_LOAD``: the kernel cannot be fetched or imported (any ``KernelImportError``:
      not published, no build for this system, the network, a digest mismatch). It is
      logged as a warning on the ``flashhub_kernels`` logger;
    - ``DEFAULT``: the first four, what ``use_fallback=True`` means; a kernel that is
      mapped but fails to load still raises;
    - ``ALL``: every case, ``CANNOT_LOAD`` too.
    """

    NONE = 0
    NO_LAYER = enum.auto()
    NO_DEVICE = enum.auto()
    NO_COMPATIBLE_PROPERTIES = enum.auto()
    NO_COMPATIBLE_MODE = enum.auto()
    CANNOT_LOAD = enum.auto()

    DEFAULT = NO_LAYER | NO_DEVICE | NO_COMPATIBLE_PROPERTIES | NO_COMPATIBLE_MODE
    ALL = DEFAULT | CANNOT_LOAD


def as_fallback(use_fallback: object) -> KernelizeFallback:
    """``True`` -> ``DEFAULT``, ``False`` -> ``NONE``; a ``KernelizeFallback`` as it is."""
    if isinstance(use_fallback, KernelizeFallback):
        return use_fallback
    if isinstance(use_fallback, bool):
        return KernelizeFallback.DEFAULT if use_fallback else KernelizeFallback.NONE
    raise TypeError(
        f"use_fallback must be a bool or a KernelizeFallback such as "
        f"KernelizeFallback.ALL, got {use_fallback!r}"
    )


def fallback_text(fallback: KernelizeFallback) -> str:
    """How a caller spelled ``fallback``: ``use_fallback=False``, ``...=KernelizeFallback.X``."""
    if fallback == KernelizeFallback.NONE:
        return "use_fallback=False"
    if fallback == KernelizeFallback.DEFAULT:
        return "use_fallback=True"
    names = "|".join(f"KernelizeFallback.{m.name}" for m in _CASES if m & fallback)
    return f"use_fallback={names}"


# The single cases, in the order they are checked.
_CASES = (
    KernelizeFallback.NO_LAYER,
    KernelizeFallback.NO_DEVICE,
    KernelizeFallback.NO_COMPATIBLE_PROPERTIES,
    KernelizeFallback.NO_COMPATIBLE_MODE,
    KernelizeFallback.CANNOT_LOAD,
)
