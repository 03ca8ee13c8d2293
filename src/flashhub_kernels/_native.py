"""Native libraries of kernels: one op namespace registered from two paths.

torch lets one ``TORCH_LIBRARY`` block register an op namespace. When a second copy of
a library that registers it is loaded (the same build at another path: v1 and v2
published from one build, or a local build and its published copy; or another build
that kept the namespace), its static initializer throws from inside ``dlopen`` and the
process aborts. No Python code can catch that, so the second ``dlopen`` must not run.

Before a kernel package runs, :func:`register` notes its native libraries. A library
meets another kernel's, at another path, when both have the same size and digest, or
the same file name (a build names its library after its namespace,
``_<py_pkg>_<backend>_<hash>.so``). Only then is ``torch.ops.load_library`` wrapped, so
that loading either file while the other is loaded raises
:class:`~flashhub_kernels.errors.NativeLibraryConflictError`, naming both kernels. An
``_ops.py`` that skips ``load_library`` when its namespace is registered never calls it,
and shares the library loaded first.

The check costs two dict lookups per library: the sizes come from the entry's receipt;
digests are read from the entries' manifests (or, for a local directory, hashed) only
when two sizes match.
"""

from __future__ import annotations

import _thread
import os
from pathlib import Path

from ._models.kernel_dir import NATIVE_SUFFIXES, KernelDir
from .errors import NativeLibraryConflictError

TYPE_CHECKING = False  # not typing's: a warm load of a native kernel imports this module
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class _Library:
    """One native library of a kernel that this process ran."""

    __slots__ = ("_digest", "entry", "module", "name", "path", "relpath", "size")

    def __init__(self, path: str, size: int, module: str, entry: Path | None, relpath: str) -> None:
        self.path, self.size, self.module = path, size, module
        self.entry, self.relpath = entry, relpath  # where its digest is listed, if cached
        self.name = os.path.basename(path)
        self._digest: bytes | None = None

    def digest(self) -> bytes | None:
        """The sha256 of the file: from the cached entry's manifest, else hashed."""
        if self._digest is None:
            try:
                self._digest = self._listed_digest() if self.entry else self._hashed()
            except (OSError, ValueError):
                return None  # unreadable: not known to be the same as another
        return self._digest

    def _listed_digest(self) -> bytes:
        from ._constants import MANIFEST_NAME
        from ._models.manifest import parse_metadata

        assert self.entry is not None
        manifest = parse_metadata((self.entry / MANIFEST_NAME).read_bytes())
        return manifest.files[self.relpath]

    def _hashed(self) -> bytes:
        from ._network.hashing import sha256_file

        return sha256_file(Path(self.path))

    def namespace(self) -> str:
        """The op namespace the file name says it registers."""
        return self.name.partition(".")[0]


_lock = _thread.allocate_lock()
_known: set[str] = set()  # paths registered
_by_size: dict[int, list[_Library]] = {}
_by_name: dict[str, list[_Library]] = {}
# realpath -> (this library, another one it meets, whether the bytes are the same)
_meetings: dict[str, list[tuple[_Library, _Library, bool]]] = {}


def register(target: KernelDir, module: str) -> None:
    """Note the native libraries of the kernel ``module`` about to run from ``target``."""
    with _lock:
        for library in _libraries(target, module):
            if library.path in _known:
                continue
            _known.add(library.path)
            earlier = {id(o): o for o in _by_size.get(library.size, ())}
            earlier.update((id(o), o) for o in _by_name.get(library.name, ()))
            for other in earlier.values():
                _meet(library, other)
            _by_size.setdefault(library.size, []).append(library)
            _by_name.setdefault(library.name, []).append(library)


def _libraries(target: KernelDir, module: str) -> Iterator[_Library]:
    if target.natives is not None and target.entry is not None:
        entry = target.entry
        for relpath, size in target.natives:
            yield _Library(f"{entry}/{relpath}", size, module, entry, relpath)
        return
    for dirpath, _dirs, files in os.walk(target.package_dir):
        for name in files:
            if name.endswith(NATIVE_SUFFIXES):
                path = os.path.join(dirpath, name)
                yield _Library(path, os.stat(path).st_size, module, None, "")


def _meet(library: _Library, other: _Library) -> None:
    same_bytes = library.size == other.size and (
        (digest := library.digest()) is not None and digest == other.digest()
    )
    if not (same_bytes or library.name == other.name):
        return
    try:
        if os.path.samefile(library.path, other.path):
            return  # one file by two paths: the dynamic loader loads it once
    except OSError:
        return
    _install_hook()
    for one, two in ((library, other), (other, library)):
        _meetings.setdefault(os.path.realpath(one.path), []).append((one, two, same_bytes))


def _install_hook() -> None:
    """Wrap ``torch.ops.load_library`` (once) to refuse a library that would abort."""
    import torch

    original: Callable[[str], None] = torch.ops.load_library
    if getattr(original, "_flashhub_refuses_twins", False):
        return

    def load_library(path: str) -> None:
        for library, other, same_bytes in _meetings.get(os.path.realpath(path), ()):
            if os.path.realpath(other.path) in torch.ops.loaded_libraries and (
                same_bytes or _registered(library.namespace())
            ):
                raise _conflict(library, other, same_bytes)
        original(path)

    load_library.__doc__ = original.__doc__
    load_library._flashhub_refuses_twins = True  # type: ignore[attr-defined]
    torch.ops.load_library = load_library  # type: ignore[method-assign]


def _registered(namespace: str) -> bool:
    """Whether torch's dispatcher holds an op of ``namespace``."""
    import torch

    prefix = f"{namespace}::"
    return any(name.startswith(prefix) for name in torch._C._dispatch_get_all_op_names())


def _conflict(library: _Library, other: _Library, same_bytes: bool) -> NativeLibraryConflictError:
    if same_bytes:
        what = (
            f"it is the same build as {other.path}, which {other.module} loaded, and torch "
            "aborts the process when a second copy registers the library's op namespace"
        )
        hint = (
            f"use {other.module}, which runs the same code, instead of loading both; or "
            "republish one of them built with an op namespace of its own; an _ops.py that "
            "skips load_library when its namespace is registered shares the loaded copy "
            "(see the kernel requirements)"
        )
    else:
        what = (
            f"{other.module} loaded another build that registers the same op namespace "
            f"{library.namespace()} (from {other.path}), and torch aborts the process when "
            "one namespace is registered twice"
        )
        hint = (
            "load one of the two; to load both, rebuild one with a namespace unique to the "
            "build (_<py_pkg>_<backend>_<hash of its sources>) and publish it as a new version"
        )
    return NativeLibraryConflictError(
        f"{library.module} cannot load its native library {library.path}: {what}",
        hint=hint,
        name=library.module,
    )
