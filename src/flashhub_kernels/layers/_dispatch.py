"""Running a marked layer: pick the kernel layer's ``forward`` per call, or once (``kernelize``).

A marked class's ``forward`` looks up, on every call, the mapping in effect for the
input's device and the module's mode and runs the kernel layer's ``forward`` with the
module as ``self`` (or the original ``forward``). While torch.compile traces that call,
the choice is made once, at trace time, and the compiled code keeps it: the mapping lives
in a ContextVar, which cannot be traced, so the choice runs as a constant of the graph
(``assume_constant_result``), and ``fullgraph=True`` compiles. :func:`kernelize` makes
the decision once per module instead, by binding the chosen ``forward`` to the instance
(and, for a kernel layer, noting its repository there); a module that is unpickled or
copied gets that ``forward`` bound again (:func:`restore_kernelized`). A kernel layer
without backward bound for inference gets a check that warns when the module is trained
after all.
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from types import MethodType
from typing import Any, TypeVar

import torch
from torch import nn

from .._utils.callers import warn_at_caller
from .._utils.logs import logger
from ..errors import KernelWithoutBackwardWarning
from ._choice import Chosen, choose_layer, kernel_mapping_disabled, supports_backward, validated
from ._compiling import compiling
from ._device import Device
from ._fallback import KernelizeFallback, as_fallback
from ._func_routes import private_instance
from ._layer_mark import (
    KERNEL_REPO_ATTR,
    Forward,
    LayerMark,
    ModuleT,
    hub_mark,
    kernel_funcs,
    mark_by_key,
    mark_of,
    restore_after_setstate,
)
from ._mapping import Mode, check_request, current_mapping, mode_text
from ._repository import BaseLayerRepository
from ._target import Target, parse_target, target_of


def _first_tensor(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> torch.Tensor | None:
    for value in itertools.chain(args, kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value
    return None


def _mode(training: bool, compiling: bool) -> Mode:
    mode = Mode.TRAINING if training else Mode.INFERENCE
    return mode | Mode.TORCH_COMPILE if compiling else mode


def _fallback_of(mark: LayerMark) -> KernelizeFallback:
    return KernelizeFallback.DEFAULT if mark.use_fallback else KernelizeFallback.NONE


def dispatch(
    mark: LayerMark, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run one call of a marked layer: the mapped kernel layer's forward, or the original.

    A call of a marked function from the ``forward`` of a module that holds its own,
    kernelized, instance of it (``use_kernelized_func``) runs that instance.
    """
    private = private_instance(mark.key, module)
    if private is not None:
        return private(*args, **kwargs)
    if not mark.applies_to(module):
        return mark.original(module, *args, **kwargs)
    tensor = _first_tensor(args, kwargs)
    device = tensor.device if tensor is not None else None
    if compiling():
        # Constants only (strings and a bool) cross into the choice, which runs untraced.
        where = None if device is None else str(device)
        forward = getattr(_Traced, _choose_while_tracing(mark.key, where, module.training))
    else:
        forward = _choose_eagerly(mark, device, module.training)
    return forward(module, *args, **kwargs)


# The last choice of each mark for a call that was not traced: the mapping in effect (a
# change builds a new one, so the object stands for its content), the call's device and
# mode, and the forward chosen. A call like the last one runs that forward at once.
_last_choices: dict[str, tuple[object, torch.device | None, bool, Forward]] = {}


def _choose_eagerly(mark: LayerMark, device: torch.device | None, training: bool) -> Forward:
    """:func:`_choose` for a call that is not traced, remembering the last choice."""
    if kernel_mapping_disabled():
        return mark.original
    mapping = current_mapping()
    last = _last_choices.get(mark.key)
    if last is not None and last[0] is mapping and last[1] == device and last[2] == training:
        return last[3]
    forward = _choose(mark, device, training, compiling=False)
    _last_choices[mark.key] = (mapping, device, training, forward)
    return forward


def _choose(
    mark: LayerMark, device: torch.device | None, training: bool, *, compiling: bool
) -> Forward:
    """The kernel layer's forward for a call on ``device``, else the original one."""
    target = target_of(device) if device is not None else None
    chosen = choose_layer(mark, target, _mode(training, compiling), _fallback_of(mark))
    forward: Forward = mark.original if chosen is None else chosen[0].forward
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
    except TypeError:  # an older torch (2.5) takes no reason, but its error shows the function
        func.__qualname__ = reason
        outside = disable(func)
    return outside


def _graph_constant(func: FuncT) -> FuncT:
    """``func`` as a constant of a torch.compile graph: called once, when tracing.

    This is what ``torch.compiler.assume_constant_result`` does (it sets this attribute,
    which dynamo reads as it traces a call), without importing ``torch._dynamo`` as that
    function does first: 0.8 s of CPU that a program marking its layers would pay as it
    imports its model, compiled or not. A test holds the mark to the public function's."""
    func._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return func


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


def _chosen_per_call(key: str, error: Exception) -> Forward:
    """The forward the traced code gets where its choice failed with ``error``: outside
    the graph, it chooses again at each call, as an eager call does, so that the error is
    raised again, not remembered, and a kernel that can be loaded later runs."""

    def choose_per_call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return dispatch(mark_by_key(key), module, args, kwargs)  # not compiling out there

    # With fullgraph=True, torch's error shows this reason: kernelize() would have raised
    # the error before compiling, or chosen what it allows in its place.
    reason = f"flashhub_kernels: {type(error).__name__}: {error}; call kernelize() first"
    return _outside_graph(choose_per_call, reason)


@_graph_constant
def _choose_while_tracing(key: str, device: str | None, training: bool) -> str:
    """:func:`_choose` for a call that torch.compile traces, run when tracing: the mapping
    in effect then decides. Takes and gives constants: the mark's key, the device
    (``"cuda:0"``), and the name of the forward chosen in :class:`_Traced`. An error
    makes the call choose again each time, outside the graph (with ``fullgraph=True``,
    torch's error names it)."""
    try:
        where = None if device is None else torch.device(device)
        mark = mark_by_key(key)
        if kernel_mapping_disabled():
            forward = mark.original
        else:
            forward = _choose(mark, where, training, compiling=True)
    except Exception as error:  # any error: the traced code chooses again, outside the graph
        forward = _chosen_per_call(key, error)
    return _traced_name(forward)


def _model_target(model: nn.Module) -> Target:
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        return target_of(tensor.device)
    raise ValueError(
        "kernelize cannot tell the model's device: it has no parameters or buffers; "
        "pass device=, e.g. device='cuda'"
    )


_RESTORES_ATTR = "_flashhub_restores_its_class"


def _marked_in(
    module: nn.Module, hub_marks: dict[type[nn.Module], LayerMark | None]
) -> Iterator[tuple[nn.Module, LayerMark]]:
    """The module's own instances of marked functions (``use_kernelized_func``), then the
    module itself if it is marked, each with its mark: this package's, or the one
    Hugging Face kernels left (read once per class into ``hub_marks``)."""
    for candidate in (*kernel_funcs(module).values(), module):
        cls = type(candidate)
        mark = mark_of(cls.forward)
        if mark is None:
            if cls not in hub_marks:
                hub_marks[cls] = hub_mark(cls)
            mark = hub_marks[cls]
        if mark is not None:
            yield candidate, mark


class _RestoresItsClass:
    """Kept on a module bound to a kernel layer, whose class may not restore what
    ``kernelize`` bound in a process that unpickles it (Hugging Face kernels' mark gives
    it no ``__setstate__``, nor a marking done only where the model was pickled): this is
    unpickled with the module's state, before that state is set, and gives the module's
    class that ``__setstate__`` first."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __reduce__(self) -> tuple[Callable[[nn.Module], _RestoresItsClass], tuple[Any]]:
        return _restoring, (self.module,)


def _restoring(module: nn.Module) -> _RestoresItsClass:
    """The module, not yet given its state, gets its class's restoring ``__setstate__``."""
    restore_after_setstate(type(module), restore_kernelized)
    return _RestoresItsClass(module)


def _bind(module: nn.Module, mark: LayerMark | None, chosen: Chosen | None) -> None:
    """Bind the forward of the chosen kernel layer, or the original, to ``module``, and
    note on it the kernel layer's repository (for ``get_kernelized_layers``, and to load
    it again once unpickled) and what restores it then, in any process
    (:class:`_RestoresItsClass`: the class may be marked there otherwise, or not at all).

    Where the class's own ``forward`` is the original (Hugging Face kernels marked it),
    the original is bound by binding nothing, as that package does: a bound method of a
    function of its own, such as its marked functions' ``forward``, would not pickle.
    ``mark`` is ``None`` only for a kernel layer restored where nothing marks the class.
    """
    layer, repo = chosen if chosen is not None else (None, None)
    if layer is not None:
        forward = layer.forward
    elif mark is not None and mark_of(type(module).forward) is not None:
        forward = mark.original
    else:
        for name in ("forward", KERNEL_REPO_ATTR, _RESTORES_ATTR):
            module.__dict__.pop(name, None)
        return
    module.forward = MethodType(_named_forward(forward), module)
    if repo is None:
        module.__dict__.pop(KERNEL_REPO_ATTR, None)
        module.__dict__.pop(_RESTORES_ATTR, None)
    else:
        # The class restores it once copied here, and the object kept once unpickled anywhere.
        restore_after_setstate(type(module), restore_kernelized)
        module.__dict__[KERNEL_REPO_ATTR] = repo
        module.__dict__[_RESTORES_ATTR] = _RestoresItsClass(module)


def _named_forward(function: Forward) -> Forward:
    """``function``, or where it is named otherwise (``forward = _impl``), a function named
    ``forward`` that calls it: a pickled bound method is looked up by its function's name
    as it is unpickled, and only ``forward`` is found (then bound again, see below)."""
    if function.__name__ == "forward":
        return function

    @functools.wraps(function)
    def forward(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return function(module, *args, **kwargs)

    forward.__name__ = "forward"
    return forward


def restore_kernelized(module: nn.Module) -> None:
    """Bind again the ``forward`` that ``kernelize`` bound to ``module``, after it was
    unpickled or copied (from its ``__setstate__``).

    Unpickled, the bound method comes back bound to the class's ``forward``: the kernel
    layer is loaded again from the repository noted on the module (in a new process,
    through the kernel's own import), also where nothing marks the class in this process
    (a class marked with ``replace_kernel_forward_from_hub`` in the process that pickled
    it), or the original bound. A shallow copy holds the method of the module it was
    copied from: it is bound to the copy.
    """
    forward = module.__dict__.get("forward")
    if not isinstance(forward, MethodType):
        return
    if forward.__func__ is not getattr(type(module), "forward", None):
        if forward.__self__ is not module:  # a shallow copy's
            module.forward = MethodType(forward.__func__, module)
        return
    # Unpickled: bound to the class's forward, which Hugging Face kernels' mark leaves
    # as it is, and which a class marked elsewhere only may not be marked here.
    mark = mark_of(forward.__func__) or hub_mark(type(module))
    repo: BaseLayerRepository | None = module.__dict__.get(KERNEL_REPO_ATTR)
    chosen = None if repo is None else (repo.load(), repo)
    if chosen is not None and mark is not None:
        validated(chosen[0], mark)
    _bind(module, mark, chosen)


def kernelize(
    model: ModuleT,
    *,
    mode: Mode = Mode.INFERENCE,
    device: str | torch.device | Device | None = None,
    use_fallback: bool | KernelizeFallback = True,
) -> ModuleT:
    """Replace the forward of every marked layer in ``model`` now, and return ``model``.

    Each marked submodule, and each module's own instance of the marked functions its
    class was decorated with (``use_kernelized_func``), gets the kernel layer's
    ``forward`` that the mapping in effect picks for ``device`` and ``mode``, bound to
    that module; a layer with nothing mapped gets its original ``forward``. The choice is
    fixed until the next ``kernelize``: later mapping changes, moves to another device and
    ``train()``/``eval()`` do not change it, and no lookup happens per call (which suits
    ``torch.compile``). It survives pickling and copying the model; see
    :func:`get_kernelized_layers` for what was bound.

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
    one without ``can_torch_compile = True`` not under ``TORCH_COMPILE``, whatever mapping
    key it was found under: the original forward is bound instead (``NO_COMPATIBLE_MODE``;
    ``KernelLayerError`` where the fallback forbids it). One with ``has_backward = False``
    bound for inference warns (``KernelWithoutBackwardWarning``, once per layer class)
    if its module is trained with gradients enabled afterwards. A module for which the
    ``condition`` given at marking is false gets its original forward.

    Each kernel layer bound is logged at ``INFO`` on the ``flashhub_kernels`` logger (once
    per name and repository and call), as in Hugging Face kernels. A marked layer whose
    name the mapping does not hold at all is logged as a warning there (once per name and
    call); one mapped for other devices, capabilities or modes falls back silently.

    With ``DISABLE_KERNEL_MAPPING=1`` every marked layer gets its original forward.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"kernelize takes a torch.nn.Module, got {type(model).__name__}")
    mode = check_request(mode)
    fallback = as_fallback(use_fallback)
    target = parse_target(device) if device is not None else _model_target(model)
    disabled = kernel_mapping_disabled()
    unloadable: set[int] = set()
    unmapped: set[str] = set()
    used: set[tuple[str, int]] = set()
    hub_marks: dict[type[nn.Module], LayerMark | None] = {}
    for owner in model.modules():
        without_backward: list[type[nn.Module]] = []
        for module, mark in _marked_in(owner, hub_marks):
            chosen = None
            if not disabled and mark.applies_to(module):
                allowed = fallback if mark.use_fallback else KernelizeFallback.NONE
                chosen = choose_layer(mark, target, mode, allowed, unloadable)
                if chosen is None:
                    _log_unmapped(mark.layer_name, unmapped)
                else:
                    _log_used(mark.layer_name, chosen, target, mode, used)
            _bind(module, mark, chosen)
            if chosen is not None and not supports_backward(chosen[0]):
                without_backward.append(chosen[0])
        _watch_training(owner, without_backward)
    return model


def _log_used(
    layer_name: str, chosen: Chosen, target: Target | None, mode: Mode, logged: set[tuple[str, int]]
) -> None:
    """Log at ``INFO``, once per ``kernelize``, name and repository, the kernel layer bound
    for a marked layer, as Hugging Face kernels does."""
    layer, repo = chosen
    if (layer_name, id(repo)) in logged:
        return
    logged.add((layer_name, id(repo)))
    logger.info(
        "kernelize: %r on device %r in mode %s runs kernel layer %s of %s",
        layer_name,
        str(target),
        mode_text(mode),
        layer.__qualname__,
        repo,
    )


def _log_unmapped(layer_name: str, logged: set[str]) -> None:
    """Log a warning, once per ``kernelize`` and name, for a marked layer that keeps its
    original forward because the mapping has no entry for its name at all, as Hugging
    Face kernels does (a name misspelt in the mapping or the mark, most likely)."""
    if layer_name in logged or current_mapping().get(layer_name) is not None:
        return
    logged.add(layer_name)
    logger.warning(
        "no kernel mapping found for layer %r, so its original forward runs: check that "
        "the layer name matches one in the mapping, or map a kernel layer for it with "
        "register_kernel_mapping or use_kernel_mapping",
        layer_name,
    )


# Kernel layer classes whose training warning was issued, by name; a set add is atomic,
# and a second warning in a race is harmless.
_warned_no_backward: set[str] = set()


class _TrainingCheck:
    """Forward pre-hook of a module that ``kernelize`` bound, itself or the instances of
    marked functions it holds, to kernel layers without backward (only a mode without
    ``TRAINING`` does that): warns, once per layer class, when the module runs in training
    mode with gradients enabled. Holds the layers' names, so that it pickles."""

    def __init__(self, layers: list[str]) -> None:
        self.layers = layers

    def __call__(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        # Skipped while torch.compile traces: a warning cannot be traced, and breaking
        # the graph for it would fail fullgraph=True.
        if compiling() or not (module.training and torch.is_grad_enabled()):
            return
        for name in self.layers:
            if name not in _warned_no_backward:
                _warned_no_backward.add(name)
                _warn_without_backward(name, module)


def _warn_without_backward(name: str, module: nn.Module) -> None:
    warn_at_caller(
        f"kernel layer {name} has no backward (has_backward = False), but the "
        f"{type(module).__qualname__} module that runs it is training with gradients "
        "enabled: kernelize bound it for a mode without Mode.TRAINING, so its gradients "
        "may be missing or wrong; call kernelize(model, mode=Mode.TRAINING) before "
        "training, or run it under torch.no_grad()",
        KernelWithoutBackwardWarning,
    )


def _watch_training(module: nn.Module, without_backward: list[type[nn.Module]]) -> None:
    """Give ``module`` a training check for the kernel layers ``without_backward`` that
    it runs, if any; drop an earlier one."""
    # Found by type rather than by a kept handle, so a deep copy's check is found too.
    pre_forward = module._forward_pre_hooks
    for key in [k for k, check in pre_forward.items() if isinstance(check, _TrainingCheck)]:
        del pre_forward[key]
    if without_backward:
        names = [f"{layer.__module__}.{layer.__qualname__}" for layer in without_backward]
        module.register_forward_pre_hook(_TrainingCheck(names))
