"""Running a marked layer: pick the kernel layer's ``forward`` per call, or once (``kernelize``).

A marked class's ``forward`` looks up, on every call, the mapping in effect for the
input's device and the module's mode and runs the kernel layer's ``forward`` with the
module as ``self`` (or the original ``forward``). Under ``torch.compile`` that lookup
runs outside the graph, and ``fullgraph=True`` fails with a message to kernelize first.
:func:`kernelize` makes the decision once per module instead, by binding the chosen
``forward`` to the instance; a kernel layer without backward bound for inference gets a
check that warns when the module is trained after all.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from types import MethodType
from typing import Any, TypeVar

import torch
from torch import nn

from .._callers import warn_at_caller
from .._config import kernel_mapping_disabled
from ..errors import KernelLayerError, KernelWithoutBackwardWarning
from ._device import Device
from ._mapping import Mode, check_request, current_mapping, mode_text, select_repository
from ._mark import Forward, LayerMark, ModuleT, mark_of
from ._repository import BaseLayerRepository
from ._target import Target, parse_target, target_of
from ._validate import validate_layer


def _first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def _compiling() -> bool:
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def _runtime_mode(module: nn.Module) -> Mode:
    mode = Mode.TRAINING if module.training else Mode.INFERENCE
    return mode | Mode.TORCH_COMPILE if _compiling() else mode


def dispatch(
    mark: LayerMark, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run one call of a marked layer: the mapped kernel layer's forward, or the original."""
    if kernel_mapping_disabled():
        return mark.original(module, *args, **kwargs)
    tensor = _first_tensor(args, kwargs)
    target = target_of(tensor.device) if tensor is not None else None
    # The mode is taken here, in the traced code: outside it torch.compile is not compiling.
    mode = _runtime_mode(module)
    choose = _choose_outside_graph if Mode.TORCH_COMPILE in mode else _choose
    forward = choose(mark, target, mode, mark.use_fallback)
    return forward(module, *args, **kwargs)


def _choose(mark: LayerMark, target: Target | None, mode: Mode, use_fallback: bool) -> Forward:
    """The kernel layer's forward for ``target`` and ``mode``, else the original one."""
    layer = _choose_layer(mark, target, mode, use_fallback)
    forward: Forward = mark.original if layer is None else layer.forward
    return forward


FuncT = TypeVar("FuncT", bound=Forward)

_KERNELIZE_FIRST = (
    "flashhub_kernels: a marked layer that is not kernelized looks its kernel up on each "
    "call, which torch.compile cannot trace; call kernelize() before torch.compile, "
    "e.g. kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE)"
)


def _outside_graph(func: FuncT) -> FuncT:
    """``func``, run eagerly under torch.compile: the graph breaks around it, and with
    ``fullgraph=True`` compiling fails, naming the reason to kernelize first."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:  # torch 2.0: nothing compiles it, so nothing to keep it out of
        return func
    try:
        outside: FuncT = disable(func, reason=_KERNELIZE_FIRST)
    except TypeError:  # an older torch.compiler.disable takes no reason
        outside = disable(func)
    return outside


# Reading the mapping's ContextVar cannot be traced, and loading a kernel has no place in
# a graph: under torch.compile the whole choice runs outside it.
_choose_outside_graph = _outside_graph(_choose)


def _choose_layer(
    mark: LayerMark, target: Target | None, mode: Mode, use_fallback: bool
) -> type[nn.Module] | None:
    """The kernel layer to run for ``target`` and ``mode``; ``None`` for the original."""
    entries = current_mapping().get(mark.layer_name)
    selected = select_repository(entries, target, mode) if entries and target else None
    if selected is None:
        if use_fallback:
            return None
        where = f"device {str(target)!r}" if target else "an input without tensors"
        raise KernelLayerError(
            f"no kernel layer is mapped for {mark.layer_name!r} on {where} in mode "
            f"{mode_text(mode)}, and use_fallback=False forbids the original forward",
            hint="map one with register_kernel_mapping or use_kernel_mapping, "
            "or allow the original with use_fallback=True",
        )
    repo, key = selected
    layer = repo.load()
    if layer not in mark.validated:
        validate_layer(layer, mark.owner)
        mark.validated.add(layer)
    _check_registered_mode(layer, repo, key, mark.layer_name)
    lacking = _lacking_support(layer, mode)
    if lacking is None:
        return layer
    if use_fallback:
        return None
    raise KernelLayerError(
        f"kernel layer {repo} for {mark.layer_name!r} does not support {lacking}, which "
        f"mode {mode_text(mode)} needs, and use_fallback=False forbids the original forward",
        hint="map a kernel that supports it for this mode, or allow the original with "
        "use_fallback=True",
    )


def _supports_backward(layer: type[nn.Module]) -> bool:
    return bool(getattr(layer, "has_backward", True))


def _supports_compile(layer: type[nn.Module]) -> bool:
    return bool(getattr(layer, "can_torch_compile", False))


def _lacking_support(layer: type[nn.Module], mode: Mode) -> str | None:
    """What ``mode`` needs that ``layer`` does not declare: backward or torch.compile."""
    if Mode.TRAINING in mode and not _supports_backward(layer):
        return "backward (has_backward = False)"
    if Mode.TORCH_COMPILE in mode and not _supports_compile(layer):
        return "torch.compile (no can_torch_compile = True)"
    return None


def _check_registered_mode(
    layer: type[nn.Module], repo: BaseLayerRepository, key: Mode, layer_name: str
) -> None:
    # Mapped explicitly for a mode the layer says it cannot serve: a mistake in the
    # mapping, so it raises rather than quietly running the original. A FALLBACK entry
    # makes no such claim; _lacking_support decides for it.
    lacking = _lacking_support(layer, key & (Mode.TRAINING | Mode.TORCH_COMPILE))
    if lacking is not None:
        raise KernelLayerError(
            f"kernel layer {repo} is mapped for {layer_name!r} in mode {mode_text(key)}, "
            f"but does not support {lacking}",
            hint="map it under a mode it supports, or declare the support in the kernel layer",
        )


def _model_target(model: nn.Module) -> Target:
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return target_of(tensor.device)
    raise ValueError(
        "kernelize cannot tell the model's device: it has no parameters or buffers; "
        "pass device=, e.g. device='cuda'"
    )


def kernelize(
    model: ModuleT,
    *,
    mode: Mode = Mode.INFERENCE,
    device: str | torch.device | Device | None = None,
    use_fallback: bool = True,
) -> ModuleT:
    """Replace the forward of every marked layer in ``model`` now, and return ``model``.

    Each marked submodule gets the kernel layer's ``forward`` that the mapping in effect
    picks for ``device`` and ``mode``, bound to that module; a layer with nothing mapped
    gets its original ``forward``. The choice is fixed until the next ``kernelize``: later
    mapping changes, moves to another device and ``train()``/``eval()`` do not change it,
    and no lookup happens per call (which suits ``torch.compile``).

    Args:
        model: The model; changed in place.
        mode: ``Mode.INFERENCE`` or ``Mode.TRAINING``, optionally ``| Mode.TORCH_COMPILE``.
        device: The device the model will run on (``"cuda"``, ``"cuda:1"``,
            ``torch.device``, ``Device``). Default: the device of its first parameter
            or buffer.
        use_fallback: Keep the original forward of a layer with nothing mapped. ``False``
            raises ``KernelLayerError`` instead (as does a layer marked with
            ``use_fallback=False``).

    A kernel layer with ``has_backward = False`` is not used in ``TRAINING`` mode, and
    one without ``can_torch_compile = True`` not under ``TORCH_COMPILE``: the original
    forward is bound instead (``use_fallback=False`` raises). Mapped under a key that
    names such a mode, it raises ``KernelLayerError``. One with ``has_backward = False``
    bound for inference warns (``KernelWithoutBackwardWarning``, once per layer class)
    if its module is trained with gradients enabled afterwards.

    With ``DISABLE_KERNEL_MAPPING=1`` every marked layer gets its original forward.
    """
    mode = check_request(mode)
    target = parse_target(device) if device is not None else _model_target(model)
    disabled = kernel_mapping_disabled()
    for module in model.modules():
        mark = mark_of(type(module).forward)
        if mark is None:
            continue
        layer = (
            None
            if disabled
            else _choose_layer(mark, target, mode, use_fallback and mark.use_fallback)
        )
        module.forward = MethodType(mark.original if layer is None else layer.forward, module)
        _watch_training(module, layer)
    return model


# Kernel layer classes whose training warning was issued; a set add is atomic, and a
# second warning in a race is harmless.
_warned_no_backward: set[type[nn.Module]] = set()


class _TrainingCheck:
    """Forward pre-hook of a module that ``kernelize`` bound to a kernel layer without
    backward (only a mode without ``TRAINING`` does that): warns, once per layer class,
    when the module runs in training mode with gradients enabled."""

    def __init__(self, layer: type[nn.Module]) -> None:
        self.layer = layer

    def __call__(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        # Skipped while torch.compile traces: a warning cannot be traced, and breaking
        # the graph for it would fail fullgraph=True.
        if _compiling() or not (module.training and torch.is_grad_enabled()):
            return
        if self.layer in _warned_no_backward:
            return
        _warned_no_backward.add(self.layer)
        name = f"{self.layer.__module__}.{self.layer.__qualname__}"
        warn_at_caller(
            f"kernel layer {name} has no backward (has_backward = False), but the "
            f"{type(module).__qualname__} module that runs it is training with gradients "
            "enabled: kernelize bound it for a mode without Mode.TRAINING, so its gradients "
            "may be missing or wrong; call kernelize(model, mode=Mode.TRAINING) before "
            "training, or run it under torch.no_grad()",
            KernelWithoutBackwardWarning,
        )


def _watch_training(module: nn.Module, layer: type[nn.Module] | None) -> None:
    """Give ``module`` a training check if ``layer`` has no backward; drop an earlier one."""
    # Found by type rather than by a kept handle, so a deep copy's check is found too.
    pre_forward = module._forward_pre_hooks
    for key in [k for k, check in pre_forward.items() if isinstance(check, _TrainingCheck)]:
        del pre_forward[key]
    if layer is not None and not _supports_backward(layer):
        module.register_forward_pre_hook(_TrainingCheck(layer))
