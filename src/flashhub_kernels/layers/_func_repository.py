"""Function kernels: a kernel's plain function in place of a marked layer or function.

The function repositories load a function from a kernel's top-level module and wrap it
as a layer class (see ``_func_module``), so mappings, ``kernelize`` and validation treat
it as a kernel layer. They are deprecated, as in Hugging Face kernels, in favour of layer
classes in the kernel's ``layers`` module; so is :func:`use_kernel_func_from_hub`, since
:func:`use_kernel_forward_from_hub` marks functions too. They keep working, with a
``DeprecationWarning``.

Imports no torch until a function is loaded.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, overload

from .._loading.hub_arguments import check_trust_remote_code
from .._models.names import parse_repo_id
from .._models.record import Record
from .._utils.callers import warn_at_caller
from ..errors import KernelLayerError
from ._func_module import func_module
from ._repository import (
    BaseLayerRepository,
    _FromCdn,
    _FromLocalDir,
    _FromLockfile,
    local_dir,
    lockfile_path,
)

if TYPE_CHECKING:
    from torch import nn


def _deprecated(name: str, instead: str) -> None:
    warn_at_caller(
        f"{name} is deprecated and will be removed in a future release, as in Hugging Face "
        f"kernels: {instead}",
        DeprecationWarning,
    )


_USE_A_LAYER = (
    "export the function from the kernel's layers module as a layer class (an nn.Module "
    "whose forward calls it) and map it with {}"
)


def use_kernel_func_from_hub(
    func_name: str, *, use_fallback: bool = True
) -> Callable[[Callable[..., Any]], nn.Module]:
    """Deprecated: :func:`use_kernel_forward_from_hub` marks functions the same way.

    Decorator: the decorated function becomes an ``nn.Module`` instance that calls it,
    marked as the layer ``func_name``. Issues a ``DeprecationWarning``.

    ``use_fallback``: call the function itself when nothing is mapped for the input's
    device and mode; ``False`` raises ``KernelLayerError`` instead (as for
    :func:`use_kernel_forward_from_hub`).
    """
    from ._marking import use_kernel_forward_from_hub

    _deprecated("use_kernel_func_from_hub", "mark the function with use_kernel_forward_from_hub")
    return use_kernel_forward_from_hub(func_name, use_fallback=use_fallback)


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


class FuncRepository(_FromCdn, BaseFuncRepository, Record):
    """The function ``func_name`` of the CDN kernel ``repo_id`` at one version.

    Give exactly one of ``version`` (``1``) and ``revision`` (``"v1"`` or ``"1"``). The
    kernel is loaded with ``get_kernel`` when the function is first used;
    ``check_arch=False`` loads it without the device archs its builds list, and
    ``trust_remote_code`` is checked, as for ``LayerRepository``.

    Raises:
        ValueError: the repo id, the function name or the version is malformed, or both
            or neither of ``version`` and ``revision`` are given.
        TypeError: ``trust_remote_code`` is of the wrong type.
    """

    repo_id: str
    func_name: str
    version: int | None
    revision: str | None
    check_arch: bool

    def __init__(
        self,
        repo_id: str,
        func_name: str,
        version: int | None = None,
        revision: str | None = None,
        *,
        trust_remote_code: bool | list[str] = False,
        check_arch: bool = True,
    ) -> None:
        self._init(repo_id, func_name, version, revision, check_arch)
        self._check_source(trust_remote_code)
        _check_func_name(func_name)
        _deprecated("FuncRepository", _USE_A_LAYER.format("LayerRepository"))


class LocalFuncRepository(_FromLocalDir, BaseFuncRepository, Record):
    """The function ``func_name`` of a kernel in a local directory (see ``get_local_kernel``).

    ``path`` (or ``repo_path=``) is read when the function is first used, as for
    ``LocalLayerRepository``, and so are ``check_arch`` and ``package_name``.
    """

    path: Path
    func_name: str
    check_arch: bool
    package_name: str | None

    @overload
    def __init__(
        self,
        path: str | os.PathLike[str],
        func_name: str,
        *,
        package_name: str | None = None,
        check_arch: bool = True,
    ) -> None: ...
    @overload
    def __init__(
        self,
        *,
        repo_path: str | os.PathLike[str],
        func_name: str,
        package_name: str | None = None,
        check_arch: bool = True,
    ) -> None: ...
    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        func_name: str | None = None,
        *,
        repo_path: str | os.PathLike[str] | None = None,
        package_name: str | None = None,
        check_arch: bool = True,
    ) -> None:
        directory = local_dir(type(self), path, repo_path)
        _check_func_name(func_name)
        self._init(directory, func_name, check_arch, package_name)
        _deprecated("LocalFuncRepository", _USE_A_LAYER.format("LocalLayerRepository"))


class LockedFuncRepository(_FromLockfile, BaseFuncRepository, Record):
    """The function ``func_name`` of the kernel ``repo_id`` at the version a lock file pins.

    The locked form of :class:`FuncRepository`, found and checked against the lock as
    for ``LockedLayerRepository``, and so are ``check_arch`` and ``trust_remote_code``.
    """

    repo_id: str
    func_name: str
    lockfile: Path | None
    check_arch: bool

    def __init__(
        self,
        repo_id: str,
        func_name: str,
        *,
        lockfile: str | os.PathLike[str] | None = None,
        trust_remote_code: bool | list[str] = False,
        check_arch: bool = True,
    ) -> None:
        _check_func_name(func_name)
        parse_repo_id(repo_id)
        check_trust_remote_code(trust_remote_code)
        self._init(repo_id, func_name, lockfile_path(lockfile), check_arch)
        self._remember_caller()
        _deprecated("LockedFuncRepository", _USE_A_LAYER.format("LockedLayerRepository"))
