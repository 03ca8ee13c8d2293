"""Marking layers whose ``forward`` a kernel may replace, and replacing it.

A marked class gets a ``forward`` that, on every call, looks up the mapping in effect
for the input's device and the module's mode and runs the kernel layer's ``forward``
with the module as ``self`` (or the original ``forward``). :func:`kernelize` makes that
decision once per module instead, by binding the chosen ``forward`` to the instance.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MethodType
from typing import Any, TypeVar

import torch
from torch import nn

from .._config import kernel_mapping_disabled
from ..errors import KernelLayerError
from ._device import Device, Target, parse_target, target_of
from ._mapping import Mode, check_request, current_mapping, mode_text, select_repository
from ._validate import validate_layer

_HOOK_ATTR = "__flashhub_layer__"
_ModuleT = TypeVar("_ModuleT", bound=nn.Module)
_Forward = Callable[..., Any]


@dataclass(frozen=True)
class _Hook:
    """What marking a class recorded: its layer name, original forward and fallback rule."""

    layer_name: str
    owner: type[nn.Module]
    original: _Forward
    use_fallback: bool
    # Layer classes already checked against ``owner``; a set add is atomic, and a
    # duplicate check in a race is harmless.
    validated: set[type[nn.Module]] = field(default_factory=set, compare=False, repr=False)


def _hook_of(forward: object) -> _Hook | None:
    hook = getattr(forward, _HOOK_ATTR, None)
    return hook if isinstance(hook, _Hook) else None


def replace_kernel_forward_from_hub(
    cls: type[nn.Module], layer_name: str, *, use_fallback: bool = True
) -> None:
    """Mark ``cls`` (a class you cannot edit) so a mapped kernel layer may run its ``forward``.

    Same as decorating it with :func:`use_kernel_forward_from_hub`. Subclasses that do not
    override ``forward`` are marked too. Marking again replaces the earlier mark.

    Args:
        cls: An ``nn.Module`` subclass with a ``forward``.
        layer_name: The name mappings use for this layer, e.g. ``"SiluAndMul"``.
        use_fallback: Run the original ``forward`` when nothing is mapped for the input's
            device and mode. ``False`` raises ``KernelLayerError`` instead.
    """
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"only torch.nn.Module subclasses can be marked, got {cls!r}")
    if not isinstance(layer_name, str) or not layer_name:
        raise ValueError(f"layer_name must be a non-empty string, got {layer_name!r}")
    original: _Forward = cls.forward
    if original is nn.Module.forward:
        raise TypeError(f"{cls.__qualname__} defines no forward to replace")
    marked = _hook_of(original)
    if marked is not None:
        original = marked.original
    hook = _Hook(layer_name, cls, original, use_fallback)

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return _dispatch(hook, self, args, kwargs)

    functools.update_wrapper(forward, original)  # name, docs, and __wrapped__ for inspect
    setattr(forward, _HOOK_ATTR, hook)
    cls.forward = forward


def use_kernel_forward_from_hub(
    layer_name: str, *, use_fallback: bool = True
) -> Callable[[type[_ModuleT]], type[_ModuleT]]:
    """Class decorator: let a mapped kernel layer named ``layer_name`` run this layer's forward.

    Example::

        @use_kernel_forward_from_hub("SiluAndMul")
        class SiluAndMul(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                d = x.shape[-1] // 2
                return F.silu(x[..., :d]) * x[..., d:]

    The kernel layer is picked by the device of the first tensor argument and the
    module's mode (``TRAINING`` when ``module.training``, else ``INFERENCE``; plus
    ``TORCH_COMPILE`` while ``torch.compile`` traces). See
    :func:`replace_kernel_forward_from_hub` for ``use_fallback``.
    """

    def decorate(cls: type[_ModuleT]) -> type[_ModuleT]:
        replace_kernel_forward_from_hub(cls, layer_name, use_fallback=use_fallback)
        return cls

    return decorate


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


def _dispatch(hook: _Hook, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if kernel_mapping_disabled():
        return hook.original(module, *args, **kwargs)
    tensor = _first_tensor(args, kwargs)
    target = target_of(tensor.device) if tensor is not None else None
    forward = _choose(hook, target, _runtime_mode(module), hook.use_fallback)
    return forward(module, *args, **kwargs)


def _choose(hook: _Hook, target: Target | None, mode: Mode, use_fallback: bool) -> _Forward:
    """The kernel layer's forward for ``target`` and ``mode``, else the original one."""
    entries = current_mapping().get(hook.layer_name)
    repo = select_repository(entries, target, mode) if entries and target else None
    if repo is None:
        if use_fallback:
            return hook.original
        where = f"device {str(target)!r}" if target else "an input without tensors"
        raise KernelLayerError(
            f"no kernel layer is mapped for {hook.layer_name!r} on {where} in mode "
            f"{mode_text(mode)}, and use_fallback=False forbids the original forward",
            hint="map one with register_kernel_mapping or use_kernel_mapping, "
            "or allow the original with use_fallback=True",
        )
    layer = repo.load()
    if layer not in hook.validated:
        validate_layer(layer, hook.owner)
        hook.validated.add(layer)
    forward: _Forward = layer.forward
    return forward


def _model_target(model: nn.Module) -> Target:
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return target_of(tensor.device)
    raise ValueError(
        "kernelize cannot tell the model's device: it has no parameters or buffers; "
        "pass device=, e.g. device='cuda'"
    )


def kernelize(
    model: _ModuleT,
    *,
    mode: Mode = Mode.INFERENCE,
    device: str | torch.device | Device | None = None,
    use_fallback: bool = True,
) -> _ModuleT:
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

    With ``DISABLE_KERNEL_MAPPING=1`` every marked layer gets its original forward.
    """
    mode = check_request(mode)
    target = parse_target(device) if device is not None else _model_target(model)
    disabled = kernel_mapping_disabled()
    for module in model.modules():
        hook = _hook_of(type(module).forward)
        if hook is None:
            continue
        chosen = (
            hook.original
            if disabled
            else _choose(hook, target, mode, use_fallback and hook.use_fallback)
        )
        module.forward = MethodType(chosen, module)
    return model
