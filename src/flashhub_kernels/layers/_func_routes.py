"""Marked functions per module: the private instances ``use_kernelized_func`` gives each
module of a class, and the routing of the shared function's calls to them.

A marked function is one object, shared by every module whose ``forward`` calls it by
its name. So that ``kernelize`` of one model changes the function for that model only,
each module of a decorated class holds its own instance of every function's class (in
``module._kernel_funcs``, by layer name, as Hugging Face kernels keeps them; plain
attributes, not submodules), and ``kernelize`` binds those. While the module's
``forward`` runs, a call of the shared function runs the module's own instance instead,
once ``kernelize`` has bound it. Imported when a class is decorated, so torch is loaded.
"""

from __future__ import annotations

import functools
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from ._compiling import compiling
from ._layer_mark import KERNEL_FUNCS_ATTR, Forward, mark_of

if TYPE_CHECKING:
    from torch import nn

# The private instances in effect while a module's forward runs: by the key of the
# shared function's mark (a string, which torch.compile traces as a constant).
Routes = dict[str, "nn.Module"]


class _ActiveRoutes:
    """The routes in effect: a ``ContextVar`` (each thread and task its own) in eager
    code; while torch.compile traces, which cannot trace a ``ContextVar``, a plain
    attribute, whose changes the compiled code replays when it runs."""

    def __init__(self) -> None:
        self._var: ContextVar[Routes | None] = ContextVar("flashhub_kernel_funcs", default=None)
        self._traced: Routes | None = None
        self._tracing = False  # set by a change made while tracing, until it is undone

    def get(self) -> Routes | None:
        if self._tracing or compiling():
            return self._traced
        return self._var.get()

    def set(self, routes: Routes) -> Token[Routes | None] | Routes | None:
        """Put ``routes`` in effect; what it returns undoes that, given to :meth:`reset`."""
        if self._tracing or compiling():
            previous = self._traced
            self._traced, self._tracing = routes, True
            return previous
        return self._var.set(routes)

    def reset(self, token: Token[Routes | None] | Routes | None) -> None:
        if isinstance(token, Token):
            self._var.reset(token)
        else:
            self._traced, self._tracing = token, token is not None


_active = _ActiveRoutes()


def _key_and_name(func: nn.Module) -> tuple[str, str]:
    mark = mark_of(type(func).forward)
    if mark is None:
        raise ValueError(f"{func!r} is not a marked function")
    return mark.key, mark.layer_name


def give_private_funcs(cls: type[nn.Module], funcs: tuple[nn.Module, ...]) -> None:
    """Give every module of ``cls`` made from now on its own instances of ``funcs``, and
    route the calls of ``funcs`` that its ``forward`` makes to them."""
    keys = [_key_and_name(func) for func in funcs]
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        # Not through nn.Module.__setattr__: a dict of modules is no submodule.
        private = self.__dict__.setdefault(KERNEL_FUNCS_ATTR, {})
        for func, (_, name) in zip(funcs, keys, strict=True):
            private[name] = type(func)()

    forward: Forward = cls.forward

    @functools.wraps(forward)
    def routing_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        private = self.__dict__.get(KERNEL_FUNCS_ATTR)
        if not private:
            return forward(self, *args, **kwargs)
        routes = dict(_active.get() or {})
        for key, name in keys:
            if name in private:
                routes[key] = private[name]
        token = _active.set(routes)
        try:
            return forward(self, *args, **kwargs)
        finally:
            _active.reset(token)

    cls.__init__ = __init__  # type: ignore[method-assign]
    cls.forward = routing_forward


def private_instance(key: str, module: nn.Module) -> nn.Module | None:
    """The instance that the running module holds of the shared marked function
    ``module`` (whose mark has ``key``), if ``kernelize`` bound it; else ``None``."""
    routes = _active.get()
    private = None if routes is None else routes.get(key)
    if private is None or private is module:
        return None
    # Bound: kernelize gave it a forward of its own, not its class's dispatching one.
    bound = getattr(private.forward, "__func__", None) is not type(private).forward
    return private if bound else None
