"""Function kernels: a kernel's plain function in place of a marked function.

:func:`use_kernel_func_from_hub` turns a function into an ``nn.Module`` instance whose
``forward`` calls it, marked like a layer. The function repositories load a function
from a kernel's top-level module and wrap it the same way, so mappings, ``kernelize`` and
validation treat functions as layers: a function may replace a layer's ``forward`` and
a layer may replace a function.

Imports no torch until a function is marked or loaded.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..errors import KernelLayerError
from ._repository import (
    BaseLayerRepository,
    _FromCdn,
    _FromLocalDir,
    _FromLockfile,
    local_dir,
)

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


def use_kernel_func_from_hub(
    func_name: str, *, use_fallback: bool = True
) -> Callable[[Callable[..., Any]], nn.Module]:
    """Decorator: let a mapped kernel function (or layer) named ``func_name`` replace a function.

    The decorated function becomes an ``nn.Module`` instance that calls it; it is still
    called like the function. ``kernelize`` reaches it when it is a submodule of the
    model, i.e. assigned as an attribute of one of its modules. Example::

        @use_kernel_func_from_hub("silu_and_mul")
        def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
            d = x.shape[-1] // 2
            return F.silu(x[..., :d]) * x[..., d:]

        class MLP(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.act = silu_and_mul

    Without ``kernelize``, each call picks the kernel like a marked layer does; the
    mode follows the module's ``training`` flag, which ``model.eval()`` sets for a
    submodule (a function used on its own runs as ``TRAINING`` until ``.eval()``).
    ``use_fallback`` is as for :func:`use_kernel_forward_from_hub`. Decorating imports
    torch.
    """
    if not isinstance(func_name, str) or not func_name:
        raise ValueError(f"func_name must be a non-empty string, got {func_name!r}")

    def decorate(func: Callable[..., Any]) -> nn.Module:
        from ._marking import replace_kernel_forward_from_hub

        if not callable(func) or isinstance(func, type):
            raise TypeError(f"use_kernel_func_from_hub decorates functions, got {func!r}")
        cls = func_module(func)
        replace_kernel_forward_from_hub(cls, func_name, use_fallback=use_fallback)
        return cls()

    return decorate


def _check_func_name(func_name: object) -> None:
    if not isinstance(func_name, str) or not func_name.isidentifier():
        raise ValueError(
            f"func_name must be a function name such as 'silu_and_mul', got {func_name!r}"
        )


class BaseFuncRepository(BaseLayerRepository):
    """A source of one kernel function, ``<kernel>.<func_name>``, wrapped as a layer.

    Subclasses set ``func_name`` and define ``load_kernel``; :meth:`load` returns the
    function's module class (see :func:`func_module`), once per repository object.
    """

    #: The name of the function in the kernel's top-level module.
    func_name: str

    def _load_layer(self) -> type[nn.Module]:
        kernel = self.load_kernel()
        func = getattr(kernel, self.func_name, None)
        if not callable(func) or isinstance(func, (type, ModuleType)):
            found = sorted(
                n for n, v in vars(kernel).items() if inspect.isroutine(v) and not n.startswith("_")
            )
            raise KernelLayerError(
                f"kernel {self} has no function {self.func_name!r}",
                hint=f"its module defines: {', '.join(found) or 'no functions'}",
            )
        return func_module(func)


@dataclass(frozen=True)
class FuncRepository(_FromCdn, BaseFuncRepository):
    """The function ``func_name`` of the CDN kernel ``repo_id`` at one version.

    Give exactly one of ``version`` (``1``) and ``revision`` (``"v1"`` or ``"1"``). The
    kernel is loaded with ``get_kernel`` when the function is first used.

    Raises:
        ValueError: the repo id, the function name or the version is malformed, or both
            or neither of ``version`` and ``revision`` are given.
    """

    repo_id: str
    func_name: str
    version: int | None = None
    revision: str | None = None

    def __post_init__(self) -> None:
        self._check_source()
        _check_func_name(self.func_name)


@dataclass(frozen=True, init=False)
class LocalFuncRepository(_FromLocalDir, BaseFuncRepository):
    """The function ``func_name`` of a kernel in a local directory (see ``get_local_kernel``).

    ``path`` (or ``repo_path=``) is read when the function is first used, as for
    ``LocalLayerRepository``.
    """

    path: Path
    func_name: str

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        func_name: str | None = None,
        *,
        repo_path: str | os.PathLike[str] | None = None,
        package_name: str | None = None,
    ) -> None:
        del package_name  # accepted for the Hugging Face spelling; not needed
        directory = local_dir(type(self), path, repo_path)
        _check_func_name(func_name)
        object.__setattr__(self, "path", directory)
        object.__setattr__(self, "func_name", func_name)


@dataclass(frozen=True, init=False)
class LockedFuncRepository(_FromLockfile, BaseFuncRepository):
    """The function ``func_name`` of the kernel ``repo_id`` at the version a lock file pins.

    The locked form of :class:`FuncRepository`, found and checked against the lock as
    for ``LockedLayerRepository``.
    """

    repo_id: str
    func_name: str
    lockfile: Path | None
    _package: str | None = field(repr=False, compare=False)

    def __init__(
        self, repo_id: str, func_name: str, *, lockfile: str | os.PathLike[str] | None = None
    ) -> None:
        _check_func_name(func_name)
        self._set_source(repo_id, lockfile)
        object.__setattr__(self, "func_name", func_name)
