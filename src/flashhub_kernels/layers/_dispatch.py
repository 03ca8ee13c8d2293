"""Running a marked layer: pick the kernel layer's ``forward`` per call, or once (``kernelize``).

A marked class's ``forward`` looks up, on every call, the mapping in effect for the
input's device and the module's mode and runs the kernel layer's ``forward`` with the
module as ``self`` (or the original ``forward``). While torch.compile traces that call,
the choice is made once, at trace time, and the compiled code keeps it: the mapping lives
in a ContextVar, which cannot be traced, so the choice runs as a constant of the graph
(``assume_constant_result``), and ``fullgraph=True`` compiles. :func:`kernelize` makes
the decision once per module instead, by binding the chosen ``forward`` to the instance;
a kernel layer without backward bound for inference gets a check that warns when the
module is trained after all.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from types import MethodType
from typing import Any, TypeVar

import torch
from torch import nn

from .._config import env_flag
from .._utils.callers import warn_at_caller
from ..errors import (
    KernelImportError,
    KernelLayerError,
    KernelWithoutBackwardWarning,
    LockfileError,
)
from ._device import Device
from ._fallback import KernelizeFallback, as_fallback, fallback_text
from ._layer_mark import Forward, LayerMark, ModuleT, kernel_funcs, mark_by_key, mark_of
from ._mapping import Miss, Mode, check_request, current_mapping, mode_text, select_repository
from ._repository import BaseLayerRepository
from ._target import Target, parse_target, target_of
from ._validate import validate_layer

logger = logging.getLogger("flashhub_kernels")


def kernel_mapping_disabled() -> bool:
    """Whether ``DISABLE_KERNEL_MAPPING=1`` turns kernel layers off.

    Read on every call, so it can be flipped at run time, like the other settings.
    """
    return env_flag("DISABLE_KERNEL_MAPPING")


def _first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def _compiling() -> bool:
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


def _mode(training: bool, compiling: bool) -> Mode:
    mode = Mode.TRAINING if training else Mode.INFERENCE
    return mode | Mode.TORCH_COMPILE if compiling else mode


def _fallback_of(mark: LayerMark) -> KernelizeFallback:
    return KernelizeFallback.DEFAULT if mark.use_fallback else KernelizeFallback.NONE


def dispatch(
    mark: LayerMark, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run one call of a marked layer: the mapped kernel layer's forward, or the original."""
    if not mark.applies_to(module):
        return mark.original(module, *args, **kwargs)
    tensor = _first_tensor(args, kwargs)
    device = tensor.device if tensor is not None else None
    if _compiling():
        # Constants only (strings and a bool) cross into the choice, which runs untraced.
        where = None if device is None else str(device)
        forward = getattr(_Traced, _choose_while_tracing(mark.key, where, module.training))
    else:
        forward = _choose(mark, device, module.training, compiling=False)
    return forward(module, *args, **kwargs)


def _choose(
    mark: LayerMark, device: torch.device | None, training: bool, *, compiling: bool
) -> Forward:
    """The kernel layer's forward for a call on ``device``, else the original one."""
    if kernel_mapping_disabled():
        return mark.original
    target = target_of(device) if device is not None else None
    layer = _choose_layer(mark, target, _mode(training, compiling), _fallback_of(mark))
    forward: Forward = mark.original if layer is None else layer.forward
    return forward


FuncT = TypeVar("FuncT", bound=Callable[..., Any])


def _outside_graph(func: FuncT, reason: str) -> FuncT:
    """``func``, run eagerly under torch.compile: the graph breaks around it, and with
    ``fullgraph=True`` compiling fails, giving ``reason``."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:  # torch 2.0: nothing compiles it, so nothing to keep it out of
        return func
    try:
        outside: FuncT = disable(func, reason=reason)
    except TypeError:  # an older torch.compiler.disable takes no reason
        outside = disable(func)
    return outside


def _graph_constant(func: FuncT) -> FuncT:
    """``func`` as a constant of a torch.compile graph: called once, when tracing."""
    constant = getattr(getattr(torch, "compiler", None), "assume_constant_result", None)
    return func if constant is None else constant(func)  # torch < 2.1 has no compiler


class _Traced:
    """The forwards chosen while tracing, as attributes named by the choice. The traced
    code reads each one as it gets its name: it would read a dict once per trace, before
    the choices made later in that trace were added."""


_traced_names: dict[Forward, str] = {}
_traced_lock = threading.Lock()


def _traced_name(forward: Forward) -> str:
    """The attribute of :class:`_Traced` that holds ``forward``, added on first use."""
    with _traced_lock:
        name = _traced_names.get(forward)
        if name is None:
            name = _traced_names[forward] = f"forward_{len(_traced_names)}"
            setattr(_Traced, name, forward)
        return name


def _raiser(error: Exception) -> Forward:
    """A forward that raises ``error``: where the traced code gets a choice that failed."""

    def raise_error(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        raise error.with_traceback(None)

    # With fullgraph=True, torch's error shows this reason: kernelize() would have raised
    # the error before compiling, or chosen what it allows in its place.
    reason = f"flashhub_kernels: {type(error).__name__}: {error}; call kernelize() first"
    return _outside_graph(raise_error, reason)


@_graph_constant
def _choose_while_tracing(key: str, device: str | None, training: bool) -> str:
    """:func:`_choose` for a call that torch.compile traces, run when tracing: the mapping
    in effect then decides. Takes and gives constants: the mark's key, the device
    (``"cuda:0"``), and the name of the forward chosen in :class:`_Traced`. An error
    becomes a forward that raises it, outside the graph (with ``fullgraph=True``, torch's
    error names it)."""
    try:
        where = None if device is None else torch.device(device)
        forward = _choose(mark_by_key(key), where, training, compiling=True)
    except Exception as error:  # any error: the traced code raises it, outside the graph
        forward = _raiser(error)
    return _traced_name(forward)


def _choose_layer(
    mark: LayerMark,
    target: Target | None,
    mode: Mode,
    fallback: KernelizeFallback,
    unloadable: set[int] | None = None,
) -> type[nn.Module] | None:
    """The kernel layer to run for ``target`` and ``mode``; ``None`` for the original.

    ``unloadable`` holds the ids of repositories that could not be loaded so far in this
    ``kernelize``, so that each is tried once.
    """
    selected = select_repository(current_mapping().get(mark.layer_name), target, mode)
    if isinstance(selected, Miss):
        _fall_back(mark, target, mode, fallback, selected)
        return None
    repo, key = selected
    layer = _load(repo, mark, fallback, set() if unloadable is None else unloadable)
    if layer is None:
        return None
    if layer not in mark.validated:
        validate_layer(layer, mark.owner)
        mark.validated.add(layer)
    _check_registered_mode(layer, repo, key, mark.layer_name)
    lacking = _lacking_support(layer, mode)
    if lacking is None:
        return layer
    detail = (
        f"kernel layer {repo} does not support mode {mode_text(mode)}, as it does not "
        f"support {lacking}"
    )
    _fall_back(mark, target, mode, fallback, Miss(KernelizeFallback.NO_COMPATIBLE_MODE, detail))
    return None


def _fall_back(
    mark: LayerMark, target: Target | None, mode: Mode, fallback: KernelizeFallback, miss: Miss
) -> None:
    """Return (to run the original forward) if ``fallback`` allows ``miss``; else raise."""
    if miss.case & fallback:
        return
    where = f"device {str(target)!r}" if target else "an input without tensors"
    raise KernelLayerError(
        f"no kernel layer runs {mark.layer_name!r} on {where} in mode {mode_text(mode)}: "
        f"{miss.detail}, and {fallback_text(fallback)} forbids the original forward "
        f"(KernelizeFallback.{miss.case.name})",
        hint="map a kernel layer that fits with register_kernel_mapping or "
        "use_kernel_mapping, or let the original forward run with use_fallback=True",
    )


def _load(
    repo: BaseLayerRepository, mark: LayerMark, fallback: KernelizeFallback, unloadable: set[int]
) -> type[nn.Module] | None:
    """``repo.load()``; ``None`` if it cannot be loaded and ``fallback`` allows that."""
    if id(repo) in unloadable:
        return None
    try:
        return repo.load()
    except (KernelImportError, LockfileError) as error:
        if KernelizeFallback.CANNOT_LOAD not in fallback:
            raise
        unloadable.add(id(repo))
        logger.warning(
            "kernel layer %s for %r cannot be loaded, so the original forward runs "
            "(KernelizeFallback.CANNOT_LOAD): %s",
            repo,
            mark.layer_name,
            error,
        )
        return None


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
    if key == Mode.FALLBACK:
        return
    lacking = _lacking_support(layer, key)
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


def _marked_modules(model: nn.Module) -> Iterator[tuple[nn.Module, LayerMark]]:
    """The marked modules of ``model`` and the marked functions attached to its modules'
    classes (``use_kernelized_func``), each once."""
    seen: set[int] = set()
    for module in model.modules():
        for candidate in (*kernel_funcs(module), module):
            mark = mark_of(type(candidate).forward)
            if mark is not None and id(candidate) not in seen:
                seen.add(id(candidate))
                yield candidate, mark


def kernelize(
    model: ModuleT,
    *,
    mode: Mode = Mode.INFERENCE,
    device: str | torch.device | Device | None = None,
    use_fallback: bool | KernelizeFallback = True,
) -> ModuleT:
    """Replace the forward of every marked layer in ``model`` now, and return ``model``.

    Each marked submodule, and each marked function attached to a module's class with
    ``use_kernelized_func``, gets the kernel layer's ``forward`` that the mapping in
    effect picks for ``device`` and ``mode``, bound to that module; a layer with nothing
    mapped gets its original ``forward``. The choice is fixed until the next
    ``kernelize``: later mapping changes, moves to another device and
    ``train()``/``eval()`` do not change it, and no lookup happens per call (which suits
    ``torch.compile``).

    Args:
        model: The model; changed in place.
        mode: ``Mode.INFERENCE`` or ``Mode.TRAINING``, optionally ``| Mode.TORCH_COMPILE``.
        device: The device the model will run on (``"cuda"``, ``"cuda:1"``, ``"rocm"``,
            ``"tpu"``, ``torch.device``, ``Device``). Default: the device of its first
            parameter or buffer.
        use_fallback: When a marked layer may keep its original forward: ``True``
            (``KernelizeFallback.DEFAULT``: nothing mapped fits the layer, device,
            capability or mode), ``False`` (``KernelizeFallback.NONE``: never, raise
            ``KernelLayerError``), or a combination of :class:`KernelizeFallback` cases,
            such as ``KernelizeFallback.ALL``, which also falls back when the kernel cannot
            be loaded. A layer marked with ``use_fallback=False`` never falls back.

    A kernel layer with ``has_backward = False`` is not used in ``TRAINING`` mode, and
    one without ``can_torch_compile = True`` not under ``TORCH_COMPILE``: the original
    forward is bound instead (unless the fallback forbids it). Mapped under a key that
    names such a mode, it raises ``KernelLayerError``. One with ``has_backward = False``
    bound for inference warns (``KernelWithoutBackwardWarning``, once per layer class)
    if its module is trained with gradients enabled afterwards. A module for which the
    ``condition`` given at marking is false gets its original forward.

    With ``DISABLE_KERNEL_MAPPING=1`` every marked layer gets its original forward.
    """
    mode = check_request(mode)
    fallback = as_fallback(use_fallback)
    target = parse_target(device) if device is not None else _model_target(model)
    disabled = kernel_mapping_disabled()
    unloadable: set[int] = set()
    for module, mark in _marked_modules(model):
        layer = None
        if not disabled and mark.applies_to(module):
            allowed = fallback if mark.use_fallback else KernelizeFallback.NONE
            layer = _choose_layer(mark, target, mode, allowed, unloadable)
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
