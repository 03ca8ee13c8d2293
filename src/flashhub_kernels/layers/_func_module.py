"""A plain function as an ``nn.Module`` class, so functions take part where layers do.

A marked function is an instance of such a class, and a kernel's function is loaded as
one: mappings, ``kernelize`` and validation then treat functions as layers, and either
may replace the other. Imports torch when a class is made.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
