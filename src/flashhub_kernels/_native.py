"""Native libraries of kernels: one op namespace registered from two paths.

torch lets one ``TORCH_LIBRARY`` block register an op namespace. When a second copy of
a library that registers it is loaded (the same build at another path: v1 and v2
published from one build, or a local build and its published copy; or another build
that kept the namespace), its static initializer throws from inside ``dlopen`` and the
process aborts. No Python code can catch that, so the second ``dlopen`` must not run.

Before a kernel package runs, :func:`register` notes its native libraries (two dict
lookups each: the sizes come from the entry's receipt). A library that may meet another
kernel's (the same size, or the same file name) is handed to :mod:`._native_conflicts`,
which decides whether they conflict and only then guards ``torch.ops.load_library``.
"""

from __future__ import annotations

import _thread
import os

from ._models.kernel_dir import NATIVE_SUFFIXES

TYPE_CHECKING = False  # not typing's: a warm load of a native kernel imports this module
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ._models.kernel_dir import KernelDir


class Library:
    """One native library of a kernel that this process ran."""

    __slots__ = ("entry", "module", "name", "path", "relpath", "size")

    def __init__(self, path: str, size: int, module: str, entry: Path | None, relpath: str) -> None:
        self.path, self.size, self.module = path, size, module
        self.entry, self.relpath = entry, relpath  # where its digest is listed, if cached
        self.name = os.path.basename(path)


_lock = _thread.allocate_lock()
if hasattr(os, "register_at_fork"):  # a child forked while a thread registers: not held there
    os.register_at_fork(after_in_child=lambda: globals().update(_lock=_thread.allocate_lock()))
_known: set[str] = set()  # paths registered
_by_size: dict[int, list[Library]] = {}
_by_name: dict[str, list[Library]] = {}


def register(kernel_dir: KernelDir, module: str) -> None:
    """Note the native libraries of the kernel ``module`` about to run from ``kernel_dir``."""
    with _lock:
        for library in _libraries(kernel_dir, module):
            if library.path in _known:
                continue
            earlier = {id(o): o for o in _by_size.get(library.size, ())}
            earlier.update((id(o), o) for o in _by_name.get(library.name, ()))
            if earlier:
                from ._native_conflicts import meet  # two libraries that may be one

                for other in earlier.values():
                    meet(library, other)
            _by_size.setdefault(library.size, []).append(library)
            _by_name.setdefault(library.name, []).append(library)
            _known.add(library.path)  # last: a fork or Ctrl-C before leaves it to note again


def _libraries(kernel_dir: KernelDir, module: str) -> Iterator[Library]:
    if kernel_dir.natives is not None and kernel_dir.entry is not None:
        entry = kernel_dir.entry
        for relpath, size in kernel_dir.natives:
            yield Library(f"{entry}/{relpath}", size, module, entry, relpath)
        return
    package = kernel_dir.package_dir  # a "zip" build's libraries lie beside its archive
    for dirpath, _dirs, files in os.walk(package.parent if package.suffix == ".zip" else package):
        for name in files:
            if name.endswith(NATIVE_SUFFIXES):
                path = os.path.join(dirpath, name)
                yield Library(path, os.stat(path).st_size, module, None, "")
