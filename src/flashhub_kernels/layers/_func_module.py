"""A plain function as an ``nn.Module`` class, so functions take part where layers do.

A marked function is an instance of such a class, and a kernel's function is loaded as
one: mappings, ``kernelize`` and validation then treat functions as layers, and either
may replace the other. Imports torch when a class is made.

A marked function is pickled by its name, as a function is; a module's own instance of it
(see ``_func_routes``) by the name and its state, so that it comes back as an instance of
the same class, with the ``forward`` that ``kernelize`` bound. A deep copy is a new instance.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._layer_mark import mark_of

if TYPE_CHECKING:
    from torch import nn


def func_module(func: Callable[..., Any]) -> type[nn.Module]:
    """An ``nn.Module`` class whose ``forward(self, ...)`` calls ``func(...)``.

    ``forward`` reports ``func``'s signature with ``self`` in front, so that
    ``validate_layer`` compares it with the ``forward`` it replaces, and the class carries
    ``func``'s ``has_backward`` and ``can_torch_compile`` attributes, if it has them.
    """
    from torch import nn

    from ._validate import PROTOCOL_MARKERS

    class Func(nn.Module):
        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return func(*args, **kwargs)

        def __reduce__(self) -> str | tuple[Any, ...]:
            if getattr(importlib.import_module(func.__module__), func.__name__, None) is self:
                return func.__name__  # the function itself: found by its name
            return (rebuild_func, (func.__module__, func.__name__), _state(self))

        def __deepcopy__(self, memo: dict[int, Any]) -> nn.Module:
            copied = type(self)()
            memo[id(self)] = copied
            copied.__setstate__(copy.deepcopy(_state(self), memo))  # type: ignore[no-untyped-call]
            return copied

    for marker in sorted(PROTOCOL_MARKERS):
        if hasattr(func, marker):
            setattr(Func, marker, getattr(func, marker))
    signature = inspect.signature(func)
    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    parameters = [this, *signature.parameters.values()]
    Func.forward.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    name = getattr(func, "__name__", Func.__name__)
    Func.__name__ = name
    Func.__qualname__ = getattr(func, "__qualname__", name)
    Func.__module__ = getattr(func, "__module__", None) or Func.__module__
    Func.__doc__ = func.__doc__
    return Func


def _state(module: nn.Module) -> dict[str, Any]:
    state: dict[str, Any] = module.__getstate__()  # type: ignore[no-untyped-call]
    return state


def rebuild_func(module: str, name: str) -> nn.Module:
    """A new instance of the class of the marked function ``module.name``: how a module's
    own instance of it is unpickled (its state is set after)."""
    func = getattr(importlib.import_module(module), name)
    if mark_of(getattr(type(func), "forward", None)) is None:
        raise pickle.UnpicklingError(
            f"cannot unpickle a module's own instance of {module}.{name}: it is not a marked "
            "function in this process; mark it with use_kernel_forward_from_hub before "
            "loading, as the process that saved it did"
        )
    instance: nn.Module = type(func)()
    return instance
