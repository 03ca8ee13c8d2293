"""Where a kernel layer comes from: a kernel on the CDN, a locked one, or a local directory.

Imports no torch (nor the lock machinery) until a layer is loaded.
"""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, overload

from .._loading.api import get_kernel, get_local_kernel
from .._loading.hub_arguments import check_trust_remote_code, user_agent_text
from .._loading.version_arguments import requested_version
from .._models.names import RepoInfo, parse_repo_id
from .._models.record import Record
from .._utils.callers import caller_module
from ..errors import KernelLayerError

if TYPE_CHECKING:
    from torch import nn


class _Memo:
    """A layer class loaded once, under a lock, on first use. Copies start empty."""

    __slots__ = ("_lock", "_pid", "_value")

    def __init__(self) -> None:
        self._lock, self._pid = threading.Lock(), os.getpid()
        self._value: type[nn.Module] | None = None

    def get(self, load: Callable[[], type[nn.Module]]) -> type[nn.Module]:
        value = self._value
        if value is None:
            if self._pid != os.getpid():
                # A forked child: a thread it lacks may have held the lock at the fork.
                self._lock, self._pid = threading.Lock(), os.getpid()
            with self._lock:
                if self._value is None:
                    self._value = load()
                value = self._value
        return value

    def __reduce__(self) -> tuple[type[_Memo], tuple[()]]:
        return (_Memo, ())


def _check_layer_name(layer_name: object) -> None:
    if not isinstance(layer_name, str) or not layer_name.isidentifier():
        raise ValueError(
            f"layer_name must be a class name such as 'SiluAndMul', got {layer_name!r}"
        )


class _FromCdn:
    """Where a repository's kernel comes from: the CDN kernel ``repo_id`` at one version.

    Layer and function repositories share their kernel sources through these mixins and
    differ only in what they take from the kernel. ``check_arch`` is a field of the
    repositories that take it; the others check the device archs. A ``user_agent=`` is
    kept for the load, but is no field: it is not compared or shown, as in Hugging Face
    kernels.
    """

    repo_id: str
    version: int | None
    revision: str | None
    check_arch: bool = True
    _user_agent: str | None = None

    def _check_source(
        self, trust_remote_code: object, user_agent: str | Mapping[str, object] | None = None
    ) -> None:
        """Check the fields and Hugging Face kernels' ``trust_remote_code`` and
        ``user_agent``, and keep the second for the load."""
        parse_repo_id(self.repo_id)
        requested_version(self.version, self.revision)
        check_trust_remote_code(trust_remote_code)
        if user_agent is not None:
            object.__setattr__(self, "_user_agent", user_agent_text(user_agent))

    @property
    def info(self) -> RepoInfo:
        """The kernel version this repository points at."""
        return RepoInfo(self.repo_id, requested_version(self.version, self.revision))

    def load_kernel(self) -> ModuleType:
        """``get_kernel(repo_id, version=...)``: the same module ``import flashhub...`` gives."""
        return get_kernel(
            self.repo_id,
            version=self.info.version,
            user_agent=self._user_agent,
            check_arch=self.check_arch,
        )

    def __str__(self) -> str:
        return str(self.info)


class _FromLocalDir:
    """Where a repository's kernel comes from: a local directory (see ``get_local_kernel``)."""

    path: Path
    check_arch: bool = True
    package_name: str | None = None

    def load_kernel(self) -> ModuleType:
        """``get_local_kernel(path, package_name)``."""
        return get_local_kernel(self.path, self.package_name, check_arch=self.check_arch)

    def __str__(self) -> str:
        package = f" (package {self.package_name})" if self.package_name else ""
        return f"{self.path}{package}"


def lockfile_path(lockfile: str | os.PathLike[str] | None) -> Path | None:
    """The absolute path of a locked repository's ``lockfile``, when one is given."""
    return Path(lockfile).absolute() if lockfile else None


def local_dir(
    cls: type,
    path: str | os.PathLike[str] | None,
    repo_path: str | os.PathLike[str] | None,
) -> Path:
    """The directory of a local repository, given as ``path`` or, in the Hugging Face
    kernels spelling, ``repo_path=`` (exactly one of them)."""
    chosen = path if path is not None else repo_path
    if chosen is None or (path is not None and repo_path is not None):
        raise TypeError(f"{cls.__name__} takes a path (or repo_path=)")
    return Path(chosen)


class _FromLockfile:
    """Where a repository's kernel comes from: the version of ``repo_id`` a lock file pins.

    Without ``lockfile`` the lock is looked for, when the kernel is first loaded, in the
    package of the module that created the repository, then in the working directory.
    That module is no field: it is not compared or shown.
    """

    repo_id: str
    lockfile: Path | None
    _caller: str | None
    check_arch: bool = True

    def _remember_caller(self) -> None:
        """Note the creating module: its package is where the lock is looked for
        (``lockfile`` unset)."""
        object.__setattr__(self, "_caller", None if self.lockfile else caller_module())

    def load_kernel(self) -> ModuleType:
        """``get_locked_kernel(repo_id)`` with this object's lock file."""
        from .._lockfiles.discovery import find_lockfile
        from .._lockfiles.locked_loading import load_locked

        lock = find_lockfile(self.lockfile, caller=self._caller)
        return load_locked(lock.kernel(self.repo_id), download=True, check_arch=self.check_arch)

    def __str__(self) -> str:
        return f"{self.repo_id} (locked)"


_memo_lock = threading.Lock()


class BaseLayerRepository(abc.ABC):
    """A source of one kernel layer. Subclasses set ``layer_name`` and define :meth:`load_kernel`.

    :meth:`load` imports the kernel and looks the layer up once per repository object;
    concurrent first calls from several threads load it once. Subclasses are usually
    records (or frozen dataclasses), so that equal repositories compare and hash equal.
    """

    #: The class name of the layer in the kernel's ``layers`` module.
    layer_name: str

    # Pickled and copied as any object, by its state: not by calling the class again, as
    # a record is, which would warn again of a deprecated class and take a locked
    # repository's package from the code that unpickles it.
    __reduce__ = object.__reduce__

    @abc.abstractmethod
    def load_kernel(self) -> ModuleType:
        """Import the kernel (through the flashhub finder) and return its module."""

    def load(self) -> type[nn.Module]:
        """The layer class ``<kernel>.layers.<layer_name>`` (cached on this object)."""
        return self._memo().get(self._load_layer)

    def _memo(self) -> _Memo:
        # Kept out of the fields, so subclasses need not declare it; set with
        # object.__setattr__ because subclasses are frozen.
        memo: _Memo | None = vars(self).get("_layer_memo")
        if memo is None:
            with _memo_lock:
                memo = vars(self).get("_layer_memo")
                if memo is None:
                    memo = _Memo()
                    object.__setattr__(self, "_layer_memo", memo)
        return memo

    def _load_layer(self) -> type[nn.Module]:
        from ._validate import as_layer_class

        kernel = self.load_kernel()
        layers = getattr(kernel, "layers", None)
        if not isinstance(layers, ModuleType):
            raise KernelLayerError(
                f"kernel {self} has no layers module",
                hint="a kernel publishes layers in <package>/layers.py and imports it in "
                "__init__.py with 'from . import layers'",
            )
        layer = getattr(layers, self.layer_name, None)
        if layer is None:
            found = sorted(n for n, v in vars(layers).items() if isinstance(v, type))
            raise KernelLayerError(
                f"kernel {self} has no layer {self.layer_name!r}",
                hint=f"its layers module defines: {', '.join(found) or 'no classes'}",
            )
        return as_layer_class(layer)


class LayerRepository(_FromCdn, BaseLayerRepository, Record):
    """The layer ``layer_name`` of the CDN kernel ``repo_id`` at one version.

    Give exactly one of ``version`` (``1``) and ``revision`` (``"v1"`` or ``"1"``).
    ``check_arch=False`` loads the kernel with ``get_kernel(..., check_arch=False)``:
    without the device archs its builds list. It is a field, so it takes part in
    equality and hashing, as in Hugging Face kernels. ``user_agent`` and
    ``trust_remote_code`` as for ``get_kernel``; neither is a field.

    Raises:
        ValueError: the repo id, the layer name, the version or ``user_agent`` is
            malformed, or both or neither of ``version`` and ``revision`` are given.
        TypeError: ``user_agent`` or ``trust_remote_code`` is of the wrong type.
    """

    repo_id: str
    layer_name: str
    version: int | None
    revision: str | None
    check_arch: bool

    def __init__(
        self,
        repo_id: str,
        layer_name: str,
        version: int | None = None,
        revision: str | None = None,
        *,
        trust_remote_code: bool | list[str] = False,
        user_agent: str | Mapping[str, object] | None = None,
        check_arch: bool = True,
    ) -> None:
        self._init(repo_id, layer_name, version, revision, check_arch)
        self._check_source(trust_remote_code, user_agent)
        _check_layer_name(layer_name)


class LocalLayerRepository(_FromLocalDir, BaseLayerRepository, Record):
    """The layer ``layer_name`` of a kernel in a local directory (see ``get_local_kernel``).

    ``path`` is a kernel repo with ``build/<variant>/<py_pkg>/``, a ``build`` or variant
    directory, or the package directory itself. It is read when the layer is first used.
    ``repo_path=`` (the Hugging Face kernels spelling) works too. ``package_name=`` picks
    the package of a variant that holds several, as for ``get_local_kernel``. ``check_arch``
    as for :class:`LayerRepository`.
    """

    path: Path
    layer_name: str
    check_arch: bool
    package_name: str | None

    @overload
    def __init__(
        self,
        path: str | os.PathLike[str],
        layer_name: str,
        *,
        package_name: str | None = None,
        check_arch: bool = True,
    ) -> None: ...
    @overload
    def __init__(
        self,
        *,
        repo_path: str | os.PathLike[str],
        layer_name: str,
        package_name: str | None = None,
        check_arch: bool = True,
    ) -> None: ...
    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        layer_name: str | None = None,
        *,
        repo_path: str | os.PathLike[str] | None = None,
        package_name: str | None = None,
        check_arch: bool = True,
    ) -> None:
        directory = local_dir(type(self), path, repo_path)
        _check_layer_name(layer_name)
        self._init(directory, layer_name, check_arch, package_name)


class LockedLayerRepository(_FromLockfile, BaseLayerRepository, Record):
    """The layer ``layer_name`` of the kernel ``repo_id`` at the version a lock file pins.

    The locked form of :class:`LayerRepository`: the kernel is loaded with
    :func:`~flashhub_kernels.get_locked_kernel` when the layer is first used, so its
    bytes are checked against the lock. Without ``lockfile`` the lock is looked for, at
    that time, in the package that created this object, then in the working directory.
    ``check_arch`` and ``trust_remote_code`` as for :class:`LayerRepository`.
    """

    repo_id: str
    layer_name: str
    lockfile: Path | None
    check_arch: bool

    def __init__(
        self,
        repo_id: str,
        layer_name: str,
        *,
        lockfile: str | os.PathLike[str] | None = None,
        trust_remote_code: bool | list[str] = False,
        check_arch: bool = True,
    ) -> None:
        _check_layer_name(layer_name)
        parse_repo_id(repo_id)
        check_trust_remote_code(trust_remote_code)
        self._init(repo_id, layer_name, lockfile_path(lockfile), check_arch)
        self._remember_caller()
