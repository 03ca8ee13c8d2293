"""Two kernels' native libraries that may be one: shared when they are, refused when they
conflict.

A library meets another kernel's, at another path, when both have the same size and
digest, or the same file name (a build names its library after its namespace,
``_<py_pkg>_<backend>_<hash>.so``). Only then are ``torch.ops.load_library`` and the
loader of extension modules wrapped. torch aborts the process when a second copy of a
library registers its op namespace again; the dynamic loader, asked for a path it holds,
runs nothing twice. So loading either file while the other is loaded (however it was
loaded) loads the one already in the process when the bytes are the same: both kernels
run on one copy, as Hugging Face kernels hands a build loaded twice its first module.
Another build that registers the same namespace raises
:class:`~flashhub_kernels.errors.NativeLibraryConflictError`, naming both kernels: when
the other is loaded already, before the kernel's code runs, since an ``_ops.py`` that
skips ``load_library`` when its namespace is registered would run the other build's ops;
else when the load is asked for.

Digests are read from the entries' manifests (or, for a local directory, hashed) only
when two sizes match.
"""

from __future__ import annotations

import importlib.machinery
import os
from pathlib import Path

from ._utils.logs import logger
from .errors import NativeLibraryConflictError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

    from ._native import Library

# realpath -> (this library, another one it meets, whether the bytes are the same)
_meetings: dict[str, list[tuple[Library, Library, bool]]] = {}
_digests: dict[str, bytes | None] = {}  # path -> its sha256, once read


def meet(library: Library, other: Library) -> None:
    """Guard ``torch.ops.load_library`` against loading both, if they conflict; raise
    :class:`~flashhub_kernels.errors.NativeLibraryConflictError` if ``other`` is another
    build under the file name of ``library`` (the kernel about to run) and is loaded."""
    same_bytes = library.size == other.size and (
        (digest := _digest(library)) is not None and digest == _digest(other)
    )
    if not (same_bytes or library.name == other.name):
        return
    try:
        if os.path.samefile(library.path, other.path):
            return  # one file by two paths: the dynamic loader loads it once
    except OSError:
        return
    if not same_bytes and _loaded(other) and _registered(_namespace(library)):
        raise _conflict(library, other)
    _install_hook()
    for one, two in ((library, other), (other, library)):
        _meetings.setdefault(os.path.realpath(one.path), []).append((one, two, same_bytes))


def _digest(library: Library) -> bytes | None:
    """The sha256 of the file: from the cached entry's manifest, else hashed."""
    if library.path not in _digests:
        try:
            _digests[library.path] = _listed_digest(library) if library.entry else _hashed(library)
        except (OSError, ValueError):
            return None  # unreadable: not known to be the same as another
    return _digests[library.path]


def _listed_digest(library: Library) -> bytes:
    from ._constants import MANIFEST_NAME
    from ._models.manifest import parse_metadata
    from ._utils.filesystem import read_regular

    assert library.entry is not None
    manifest = parse_metadata(read_regular(library.entry / MANIFEST_NAME))
    return manifest.files[library.relpath]


def _hashed(library: Library) -> bytes:
    from ._utils.hashing import sha256_file

    return sha256_file(Path(library.path))


def _namespace(library: Library) -> str:
    """The op namespace the file name says it registers."""
    return library.name.partition(".")[0]


def _install_hook() -> None:
    """Share or refuse (once installed) a library that would abort: wrap
    ``torch.ops.load_library``, and the loader of extension modules, through which an
    ``_ops.py`` that imports its library (``from . import <namespace>``, as Hugging Face's
    kernel builder writes it) loads it."""
    import torch

    original: Callable[[str], None] = torch.ops.load_library
    if getattr(original, "_flashhub_shares_or_refuses", False):
        return

    def load_library(path: str) -> None:
        original(_path_to_load(path))

    load_library.__doc__ = original.__doc__
    load_library._flashhub_shares_or_refuses = True  # type: ignore[attr-defined]
    torch.ops.load_library = load_library  # type: ignore[method-assign]

    extension_loader = importlib.machinery.ExtensionFileLoader
    create_module = extension_loader.create_module

    def create_extension(
        self: importlib.machinery.ExtensionFileLoader, spec: importlib.machinery.ModuleSpec
    ) -> ModuleType:
        if spec.origin is not None:
            path = _path_to_load(spec.origin)
            if path != spec.origin:  # the module is made anew from the copy loaded first
                spec = importlib.machinery.ModuleSpec(spec.name, self, origin=path)
        return create_module(self, spec)

    create_extension.__doc__ = create_module.__doc__
    extension_loader.create_module = create_extension  # type: ignore[method-assign]


def _path_to_load(path: str) -> str:
    """The file to load for ``path``: another kernel's copy of the same bytes when one is
    loaded, else ``path``. Raises if ``path`` would register a namespace that another
    build registered from another path."""
    for library, other, same_bytes in _meetings.get(os.path.realpath(path), ()):
        loaded = _loaded(other)
        if loaded and same_bytes:
            logger.info(
                "%s runs on the native library %s of %s, the same build",
                library.module,
                other.path,
                other.module,
            )
            return other.path
        if loaded and _registered(_namespace(library)):
            raise _conflict(library, other)
    return path


def _loaded(library: Library) -> bool:
    """Whether ``library`` is in the process: loaded by ``torch.ops.load_library`` or
    otherwise."""
    import torch

    return os.path.realpath(library.path) in torch.ops.loaded_libraries or _in_process(library.path)


def _in_process(path: str) -> bool:
    """Whether the dynamic loader holds the file at ``path``, however it was loaded (an
    extension module's import, ``ctypes``); asking never loads it."""
    import ctypes

    no_load = getattr(os, "RTLD_NOLOAD", 0)
    if not no_load:
        return False
    try:
        ctypes.CDLL(path, mode=no_load | os.RTLD_LAZY)
    except OSError:
        return False
    return True


def _registered(namespace: str) -> bool:
    """Whether torch's dispatcher holds an op of ``namespace``."""
    import torch

    prefix = f"{namespace}::"
    return any(name.startswith(prefix) for name in torch._C._dispatch_get_all_op_names())


def _conflict(library: Library, other: Library) -> NativeLibraryConflictError:
    return NativeLibraryConflictError(
        f"{library.module} cannot load its native library {library.path}: {other.module} "
        f"loaded another build that registers the same op namespace {_namespace(library)} "
        f"(from {other.path}), and torch aborts the process when one namespace is "
        "registered twice",
        hint="load one of the two; to load both, rebuild one with a namespace unique to the "
        "build (_<py_pkg>_<backend>_<hash of its sources>) and publish it as a new version",
        name=library.module,
    )
