"""Marking layers and functions whose ``forward`` a kernel may replace.

Marking gives a class a ``forward`` that dispatches each call to the kernel layer the
mapping picks (see ``_dispatch``) and carries a :class:`~._layer_mark.LayerMark`, the
record of the marking. A marked function becomes an instance of a marked class whose
``forward`` calls it. Importing this module imports no torch: a library can import the decorators
before torch, and marking a class (an ``nn.Module``, so torch is loaded by then) or a
function loads the dispatcher.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from ._layer_mark import (
    Condition,
    Forward,
    LayerMark,
    mark_of,
    put_mark,
    restore_after_setstate,
)

MarkedT = TypeVar("MarkedT", bound="type[nn.Module]")
P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from torch import nn

    class MarkedFunction(nn.Module, Generic[P, R]):
        """A marked function as type checkers see it: an ``nn.Module`` called like the
        function it was made from. At run time it is an instance of a class made for
        that function (see ``_func_module``)."""

        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...


class _LayerName:
    """``cls.kernel_layer_name``, as Hugging Face kernels sets it: the name a class was
    marked with; an ``AttributeError`` for a class whose ``forward`` is not the marked one
    (a subclass that overrides it is not marked)."""

    def __get__(self, instance: object, owner: type) -> str:
        mark = mark_of(getattr(owner, "forward", None))
        if mark is None:
            raise AttributeError(f"{owner.__qualname__} is not marked for kernel layers")
        return mark.layer_name


_LAYER_NAME = _LayerName()


def replace_kernel_forward_from_hub(
    cls: type[nn.Module],
    layer_name: str,
    condition: Condition | None = None,
    *,
    use_fallback: bool = True,
) -> None:
    """Mark ``cls`` (a class you cannot edit) so a mapped kernel layer may run its ``forward``.

    Same as decorating it with :func:`use_kernel_forward_from_hub`. Subclasses that do not
    override ``forward`` are marked too. Marking again replaces the earlier mark.

    Args:
        cls: An ``nn.Module`` subclass with a ``forward``.
        layer_name: The name mappings use for this layer, e.g. ``"SiluAndMul"``.
        condition: Called with a module of the class; where it returns ``False`` that
            module keeps its original ``forward`` (in ``kernelize`` and per call).
        use_fallback: Run the original ``forward`` when nothing is mapped for the input's
            device and mode. ``False`` raises ``KernelLayerError`` instead.
    """
    from torch import nn

    from ._dispatch import dispatch, restore_kernelized

    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"only torch.nn.Module subclasses can be marked, got {cls!r}")
    if not isinstance(layer_name, str) or not layer_name:
        raise ValueError(f"layer_name must be a non-empty string, got {layer_name!r}")
    if condition is not None and not callable(condition):
        raise TypeError(f"condition must be a function of the module, got {condition!r}")
    original: Forward = cls.forward
    if original is nn.Module.forward:
        raise TypeError(f"{cls.__qualname__} defines no forward to replace")
    earlier = mark_of(original)
    if earlier is not None:
        original = earlier.original
    mark = LayerMark(layer_name, cls, original, use_fallback, condition)

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return dispatch(mark, self, args, kwargs)

    functools.update_wrapper(forward, original)  # name, docs, and __wrapped__ for inspect
    put_mark(forward, mark)
    cls.forward = forward
    cls.kernel_layer_name = _LAYER_NAME  # type: ignore[attr-defined]
    restore_after_setstate(cls, restore_kernelized)


def _mark(target: Any, layer_name: str, condition: Condition | None, fallback: bool) -> Any:
    if isinstance(target, type):
        replace_kernel_forward_from_hub(target, layer_name, condition, use_fallback=fallback)
        return target
    from torch import nn

    from ._func_module import func_module

    if not callable(target) or isinstance(target, nn.Module):
        raise TypeError(
            f"use_kernel_forward_from_hub decorates nn.Module classes and functions, got {target!r}"
        )
    cls = func_module(target)
    replace_kernel_forward_from_hub(cls, layer_name, condition, use_fallback=fallback)
    return cls()


class _Marker:
    """What ``use_kernel_forward_from_hub(name)`` returns: a decorator of a class or a function."""

    def __init__(self, layer_name: str, condition: Condition | None, use_fallback: bool) -> None:
        self.layer_name = layer_name
        self.condition = condition
        self.use_fallback = use_fallback

    @overload
    def __call__(self, target: MarkedT) -> MarkedT: ...  # type: ignore[overload-overlap]
    @overload
    def __call__(self, target: Callable[P, R]) -> MarkedFunction[P, R]: ...
    def __call__(self, target: Callable[..., Any]) -> Any:
        return _mark(target, self.layer_name, self.condition, self.use_fallback)


def use_kernel_forward_from_hub(
    layer_name: str, condition: Condition | None = None, *, use_fallback: bool = True
) -> _Marker:
    """Decorator: let a mapped kernel layer named ``layer_name`` run this layer's forward.

    On a class, it marks the class and returns it. Example::

        @use_kernel_forward_from_hub("SiluAndMul")
        class SiluAndMul(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                d = x.shape[-1] // 2
                return F.silu(x[..., :d]) * x[..., d:]

    On a function, it returns an ``nn.Module`` instance that calls the function, is still
    called like it, and is marked like a layer. ``kernelize`` reaches it as a submodule of
    the model (an attribute of one of its modules) or when it is attached to a class with
    :func:`use_kernelized_func`.

    The kernel layer is picked by the device of the first tensor argument and the
    module's mode (``TRAINING`` when ``module.training``, else ``INFERENCE``; plus
    ``TORCH_COMPILE`` while ``torch.compile`` traces). See
    :func:`replace_kernel_forward_from_hub` for ``condition`` and ``use_fallback``.
    Decorating a function imports torch.
    """
    if not isinstance(layer_name, str) or not layer_name:
        raise ValueError(f"layer_name must be a non-empty string, got {layer_name!r}")
    return _Marker(layer_name, condition, use_fallback)


def use_kernelized_func(*funcs: nn.Module) -> Callable[[MarkedT], MarkedT]:
    """Class decorator: let ``kernelize`` reach marked functions that the class calls.

    A marked function that a module's ``forward`` calls directly, rather than as one of its
    submodules, is not a module of the model, so ``kernelize`` would not see it. With this
    decorator, each module of the class holds its own instance of each of ``funcs`` (made
    with :func:`use_kernel_forward_from_hub` on a function), as a plain attribute, not a
    submodule; ``kernelize`` of a model holding the module binds those, and while the
    module's ``forward`` runs, its calls of the function run its own instance. So
    kernelizing one model changes the function for that model only: other modules of the
    class, and the function called elsewhere, keep theirs. Example::

        @use_kernel_forward_from_hub("silu_and_mul")
        def silu_and_mul(x: torch.Tensor) -> torch.Tensor: ...

        @use_kernelized_func(silu_and_mul)
        class MLP(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return silu_and_mul(x)

    The class's ``__init__`` and ``forward`` are wrapped to do this; a marked class stays
    marked.

    Raises:
        ValueError: one of ``funcs`` is not a marked function.
    """
    for func in funcs:
        if mark_of(getattr(type(func), "forward", None)) is None:
            name = getattr(func, "__name__", None) or repr(func)
            raise ValueError(
                f"Function `{name}` is not decorated with @use_kernel_forward_from_hub and "
                "cannot be used with @use_kernelized_func: decorate the function first"
            )

    def decorate(cls: MarkedT) -> MarkedT:
        from ._func_routes import give_private_funcs

        mark = mark_of(cls.forward)
        if mark is not None:  # routing goes around the original forward, then marked again
            cls.forward = mark.original
        give_private_funcs(cls, funcs)
        if mark is not None:
            replace_kernel_forward_from_hub(
                cls, mark.layer_name, mark.condition, use_fallback=mark.use_fallback
            )
        return cls

    return decorate
