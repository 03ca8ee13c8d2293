"""Which kernel layer replaces which layer: the mapping, its scopes, and the selection.

A mapping names layers, then devices, then repositories (one for every mode, or one per
mode). Registered mappings merge into the current one, device entry by device entry: a
later entry for the same ``Device`` replaces the earlier one.

Scoping: :func:`use_kernel_mapping` sets a ``ContextVar`` for the ``with`` block, so the
mapping it adds is seen by that thread or asyncio task (and tasks it creates) only, and
the previous one is back on exit, error or not. :func:`register_kernel_mapping` outside
any such block changes the process-wide base mapping, which every thread sees, so a
library can register at import time and its mapping reaches worker threads too.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from contextlib import ContextDecorator
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from .._models.record import Record
from ._device import Device, as_device
from ._fallback import KernelizeFallback
from ._repository import BaseLayerRepository

if TYPE_CHECKING:
    from ._target import Target


class Mode(enum.Flag):
    """How a model runs, to pick a kernel layer for it; a mapping may give one per mode.

    A request (``kernelize(mode=...)``, or the module's ``training`` flag for a marked
    layer) is ``INFERENCE`` or ``TRAINING``, optionally ``| TORCH_COMPILE``. A mapping
    key names what its kernel supports, in the same terms, or is ``FALLBACK``: the
    kernel for any request that no other key of the entry serves. See
    :func:`select_mode` for which keys serve which request.

    ``INFERENCE | TRAINING`` and ``FALLBACK`` with anything else raise ``ValueError``:
    a run is one or the other, and a fallback is for every mode.
    """

    INFERENCE = enum.auto()
    TRAINING = enum.auto()
    TORCH_COMPILE = enum.auto()
    FALLBACK = enum.auto()

    def __or__(self, other: Mode) -> Mode:
        union = super().__or__(other)
        if not isinstance(union, Mode):  # typed code passes a Mode; others may not
            return union  # NotImplemented, for an operand that is no Mode
        if union.value & _EXCLUSIVE == _EXCLUSIVE:
            raise ValueError("Mode.INFERENCE and Mode.TRAINING are mutually exclusive")
        if union.value & _FALLBACK_VALUE and union.value != _FALLBACK_VALUE:
            raise ValueError(
                f"Mode.FALLBACK cannot be combined with other modes ({mode_text(union)})"
            )
        return union


# Bit values: Mode's own operators cannot combine the members these checks are about.
_EXCLUSIVE = Mode.INFERENCE.value | Mode.TRAINING.value
_FALLBACK_VALUE = Mode.FALLBACK.value

# The mapping keys each request tries, best first. A kernel that can train can also
# infer, and one safe to compile also runs without compiling; the reverse never holds.
_KEYS_TRIED: dict[Mode, tuple[Mode, ...]] = {
    Mode.INFERENCE: (
        Mode.INFERENCE,
        Mode.INFERENCE | Mode.TORCH_COMPILE,
        Mode.TRAINING,
        Mode.TRAINING | Mode.TORCH_COMPILE,
        Mode.FALLBACK,
    ),
    Mode.TRAINING: (Mode.TRAINING, Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK),
    Mode.INFERENCE | Mode.TORCH_COMPILE: (
        Mode.INFERENCE | Mode.TORCH_COMPILE,
        Mode.TRAINING | Mode.TORCH_COMPILE,
        Mode.FALLBACK,
    ),
    Mode.TRAINING | Mode.TORCH_COMPILE: (Mode.TRAINING | Mode.TORCH_COMPILE, Mode.FALLBACK),
}

RepoT = TypeVar("RepoT")

# Keys are ``Device | str``, values a repository or ``{Mode: repository}``. Typed loosely
# because Mapping keys are invariant: the precise type would reject a plain
# ``dict[str, ...]`` variable. normalize() checks every key and value at run time.
DeviceRepositories: TypeAlias = Mapping[Any, Any]
#: ``{"SiluAndMul": {"cuda": repo, "cpu": {Mode.INFERENCE: repo_a, Mode.TRAINING: repo_b}}}``
KernelMapping: TypeAlias = Mapping[str, DeviceRepositories]

# Normalized and never mutated: a change builds a new dict, so a snapshot stays valid.
_Entries: TypeAlias = dict[Device, dict[Mode, BaseLayerRepository]]
_Mapping: TypeAlias = dict[str, _Entries]

_base_lock = threading.Lock()
_base: _Mapping = {}
_scoped: ContextVar[_Mapping | None] = ContextVar("flashhub_kernel_mapping", default=None)


def mode_text(mode: Mode) -> str:
    """``INFERENCE|TORCH_COMPILE``, the same on every Python version."""
    return "|".join(str(m.name) for m in Mode if m.value & mode.value)


def check_request(mode: object) -> Mode:
    """Return ``mode`` if a model can run in it: ``INFERENCE`` or ``TRAINING`` (+ compile)."""
    if not isinstance(mode, Mode):
        raise TypeError(f"mode must be a Mode such as Mode.INFERENCE, got {mode!r}")
    if mode.value & _FALLBACK_VALUE:
        raise ValueError(
            "Mode.FALLBACK can only be used to register kernel mappings; "
            "kernelize in Mode.INFERENCE or Mode.TRAINING"
        )
    if mode not in _KEYS_TRIED:
        raise ValueError(
            f"kernelize mode must contain Mode.INFERENCE or Mode.TRAINING (one of them), "
            f"optionally | Mode.TORCH_COMPILE, got {mode_text(mode) or 0}"
        )
    return mode


def _check_key(mode: object) -> Mode:
    if not isinstance(mode, Mode):
        raise TypeError(f"a mode key must be a Mode such as Mode.INFERENCE, got {mode!r}")
    if mode.value & _FALLBACK_VALUE and mode != Mode.FALLBACK:
        raise ValueError(f"Mode.FALLBACK cannot be combined with other modes ({mode_text(mode)})")
    if mode != Mode.FALLBACK and mode not in _KEYS_TRIED:
        raise ValueError(
            f"mode key {mode_text(mode) or 0} must include Mode.INFERENCE or Mode.TRAINING "
            "(not both), optionally | Mode.TORCH_COMPILE, or be Mode.FALLBACK"
        )
    return mode


def _check_repository(repo: object, where: str) -> BaseLayerRepository:
    if not isinstance(repo, BaseLayerRepository):
        raise TypeError(
            f"{where}: expected a LayerRepository, FuncRepository or one of their local "
            f"and locked forms, got {repo!r}"
        )
    return repo


def _mode_repositories(value: object, where: str) -> dict[Mode, BaseLayerRepository]:
    if isinstance(value, Mapping):
        return {_check_key(m): _check_repository(r, f"{where}[{m}]") for m, r in value.items()}
    return {Mode.FALLBACK: _check_repository(value, where)}


def normalize(mapping: KernelMapping) -> _Mapping:
    """Validate ``mapping`` and turn it into ``{layer: {Device: {Mode: repository}}}``."""
    if not isinstance(mapping, Mapping):
        raise TypeError(f"a kernel mapping must be a dict of layer names, got {mapping!r}")
    result: _Mapping = {}
    for layer_name, devices in mapping.items():
        if not isinstance(layer_name, str) or not layer_name:
            raise TypeError(f"layer names in a kernel mapping are strings, got {layer_name!r}")
        if not isinstance(devices, Mapping):
            raise TypeError(f"mapping[{layer_name!r}] must be a dict of devices, got {devices!r}")
        result[layer_name] = {
            as_device(device): _mode_repositories(value, f"mapping[{layer_name!r}][{device!r}]")
            for device, value in devices.items()
        }
    return result


def merge(base: _Mapping, new: _Mapping) -> _Mapping:
    """``base`` with the device entries of ``new`` added or replaced; neither is changed."""
    merged = dict(base)
    for layer_name, entries in new.items():
        merged[layer_name] = {**base.get(layer_name, {}), **entries}
    return merged


def current_mapping() -> _Mapping:
    """The mapping in effect here: the innermost ``use_kernel_mapping``, else the base."""
    scoped = _scoped.get()
    return _base if scoped is None else scoped


def register_kernel_mapping(mapping: KernelMapping, inherit_mapping: bool = True) -> None:
    """Add ``mapping`` to the mapping in effect, or replace it with ``inherit_mapping=False``.

    Inside a :func:`use_kernel_mapping` block it lasts until the block ends; elsewhere
    it changes the process-wide mapping. Entries replace earlier ones for the same layer
    and ``Device``; with ``inherit_mapping=False`` the earlier entries are all dropped and
    ``mapping`` alone is in effect. Example::

        register_kernel_mapping({
            "SiluAndMul": {"cuda": LayerRepository("acme/silu-layers", "SiluAndMul", version=1)}
        })

    Raises:
        TypeError, ValueError: ``mapping`` is malformed (nothing is registered then).
    """
    global _base
    normalized = normalize(mapping)
    scoped = _scoped.get()
    if scoped is not None:
        _scoped.set(merge(scoped, normalized) if inherit_mapping else normalized)
        return
    with _base_lock:
        _base = merge(_base, normalized) if inherit_mapping else normalized


class _MappingScope(ContextDecorator):
    """What :func:`use_kernel_mapping` returns: a context manager, which can be entered
    again (as Hugging Face kernels' can), and a function decorator."""

    def __init__(self, mapping: KernelMapping, inherit_mapping: bool) -> None:
        self._mapping = mapping
        self._inherit = inherit_mapping
        self._tokens: list[Token[_Mapping | None]] = []  # one per block entered, innermost last

    def __enter__(self) -> None:
        base = current_mapping() if self._inherit else {}
        self._tokens.append(_scoped.set(merge(base, normalize(self._mapping))))

    def __exit__(self, *exc_info: object) -> None:
        _scoped.reset(self._tokens.pop())

    def _recreate_cm(self) -> _MappingScope:
        # A decorated function called from several threads at once: a scope per call.
        return _MappingScope(self._mapping, self._inherit)


def use_kernel_mapping(mapping: KernelMapping, *, inherit_mapping: bool = True) -> _MappingScope:
    """Use ``mapping`` for the duration of a ``with`` block, in this thread or task only.

    With ``inherit_mapping=True`` it stacks on the mapping in effect when the block is
    entered (its entries win); with ``False`` it replaces it. On exit, including by an
    exception, the previous mapping is back. The object returned can be entered again,
    for another block, and is also usable as a function decorator.
    """
    return _MappingScope(mapping, inherit_mapping)


def select_mode(repos: Mapping[Mode, RepoT], mode: Mode) -> tuple[RepoT, Mode] | None:
    """The repository of ``repos`` that serves ``mode`` best, and the key it was found under.

    The keys tried, in order:

    - ``INFERENCE``: ``INFERENCE``, ``INFERENCE|TORCH_COMPILE``, ``TRAINING``,
      ``TRAINING|TORCH_COMPILE``, ``FALLBACK``;
    - ``TRAINING``: ``TRAINING``, ``TRAINING|TORCH_COMPILE``, ``FALLBACK``;
    - ``INFERENCE|TORCH_COMPILE``: ``INFERENCE|TORCH_COMPILE``, ``TRAINING|TORCH_COMPILE``,
      ``FALLBACK``;
    - ``TRAINING|TORCH_COMPILE``: ``TRAINING|TORCH_COMPILE``, ``FALLBACK``.
    """
    for key in _KEYS_TRIED[mode]:
        if key in repos:
            return repos[key], key
    return None


class Miss(Record):
    """Why a mapping holds no repository for a call: the fallback case, and what it lacks."""

    case: KernelizeFallback
    detail: str


def _breadth(device: Device) -> tuple[int, int, int]:
    props = device.properties
    if props is None:
        return (1, 0, 0)
    return (0, props.width, -props.min_capability)


def _ranges(devices: list[Device]) -> str:
    return ", ".join(
        f"{p.min_capability}-{p.max_capability}" for d in devices if (p := d.properties)
    )


def _no_mode(device: Device, keys: Mapping[Mode, object], shadows: bool) -> Miss:
    """The miss of ``device``'s entry, whose mapping keys ``keys`` do not serve the mode
    asked; ``shadows``: wider entries, not tried, hold the GPU's capability too."""
    where = f"its {device.type} entry"
    if (props := device.properties) is not None:
        where += f" for the capabilities {props.min_capability}-{props.max_capability}"
    modes = sorted(mode_text(k) for k in keys)
    detail = f"{where} is for the modes {', '.join(modes)}, none of which serves it"
    if not modes:
        detail = f"{where} maps no mode"
    if shadows:
        detail += (
            " (the narrowest entry that holds this GPU's capability: wider ones are not tried)"
        )
    return Miss(KernelizeFallback.NO_COMPATIBLE_MODE, detail)


def select_repository(
    entries: _Entries | None, target: Target | None, mode: Mode
) -> tuple[BaseLayerRepository, Mode] | Miss:
    """The repository of the most specific device entry for ``mode``, and its key; else
    the :class:`Miss` that says why there is none.

    ``entries`` are a layer's (``None``: it is not mapped); ``target`` is the device it
    runs on (``None``: a call without tensor arguments). Of the entries whose range holds
    the GPU's capability, only the narrowest is used, as in Hugging Face kernels: a
    narrower capability range beats a wider one (on a tie, the higher minimum wins), and a
    range beats an entry without properties. When that entry has no key for ``mode``,
    wider ones are not tried. The GPU is asked for its capability only when an entry has a
    range. Within the entry, :func:`select_mode` picks the key.
    """
    if entries is None:
        return Miss(KernelizeFallback.NO_LAYER, "the mapping has no entry for it")
    if target is None:
        return Miss(KernelizeFallback.NO_DEVICE, "the call has no tensor argument")
    of_type = [d for d in entries if d.type == target.type]
    if not of_type:
        types = sorted({d.type for d in entries})
        return Miss(
            KernelizeFallback.NO_DEVICE,
            f"it is mapped for {', '.join(types)} only" if types else "it is mapped for no device",
        )
    candidates = of_type
    if any(d.properties is not None for d in candidates):
        capability = target.capability()
        candidates = [d for d in candidates if d.matches(capability)]
        if not candidates:
            held = "unknown" if capability is None else str(capability)
            return Miss(
                KernelizeFallback.NO_COMPATIBLE_PROPERTIES,
                f"its {target.type} entries hold the capabilities {_ranges(of_type)}, "
                f"and this GPU's is {held}",
            )
    device = min(candidates, key=_breadth)
    selected = select_mode(entries[device], mode)
    if selected is not None:
        return selected
    return _no_mode(device, entries[device], len(candidates) > 1)
