"""The ``"zip"`` build layout: a kernel whose package is one archive.

A kernel builder may lay a variant out as ``"build-layout": "zip"`` in its
``metadata.json``: the package's Python files (and data files) are one archive,
``<id>.zip``, whose root is the package's root (``__init__.py``, ``_ops.py``, ...), and
the native libraries lie beside it in the variant directory::

    build/<variant>/metadata.json
    build/<variant>/<id>.zip
    build/<variant>/<id>.abi3.so

Such a kernel is imported as Hugging Face ``kernels`` imports it:

- ``__file__`` is ``<variant>/<id>.zip/__init__.py``;
- ``__path__`` is ``[<variant>, <variant>/<id>.zip]``: submodules come from the archive
  (through Python's zipimport), native libraries from the variant directory, whether
  the kernel imports one as an extension module (``from . import <ops name>``, as the
  builder's ``_ops.py`` does) or loads it with ``torch.ops.load_library`` from a path
  built on ``__path__[0]``;
- ``__loader__`` (:class:`ArchiveLoader`) reads the archive: ``importlib.resources``
  sees its root, ``inspect.getsource`` and tracebacks its sources.

The archive is a file of the cache entry like any other: verified against its sha256
when downloaded, against its receipt (size and mtime) on a warm load, before anything
here opens it. zipimport compiles the modules from their sources on each load (it
writes no bytecode), as it does for Hugging Face ``kernels``.
"""

from __future__ import annotations

import importlib._abc
import os
import sys
import zipimport
import zlib

TYPE_CHECKING = False  # not typing's: a warm load of a zip build imports this module
if TYPE_CHECKING:
    import importlib.machinery
    from collections.abc import Callable
    from pathlib import Path
    from types import CodeType, ModuleType
    from typing import TypeVar

    from ..errors import KernelImportError
    from .zip_resources import ArchiveResources

    _T = TypeVar("_T")

_INIT = "__init__"
# The archives this process imported: zipimport keeps each one's table of contents.
_imported: set[str] = set()


def exec_archive(module: ModuleType, archive: Path) -> None:
    """Run the package in ``archive`` as ``module``, once the module is the archive's:
    its loader, and ``__path__`` with the variant directory first."""
    loader = ArchiveLoader(str(archive))
    if str(archive) in _imported:
        # Imported before, maybe from another file (the entry evicted and fetched again
        # since): what zipimport knows of it is read again.
        loader.reread()
        _forget_importers(str(archive))
    _imported.add(str(archive))
    spec = module.__spec__
    assert spec is not None
    module.__loader__ = spec.loader = loader
    module.__path__ = spec.submodule_search_locations = [str(archive.parent), str(archive)]
    sys.path_importer_cache[str(archive)] = _SubmoduleImporter(str(archive))
    loader.exec_module(module)


def _forget_importers(archive: str) -> None:
    """Drop the path finder's importers of ``archive`` and of its subpackages."""
    inside = os.path.join(archive, "")
    for path in [p for p in sys.path_importer_cache if isinstance(p, str)]:
        if path == archive or path.startswith(inside):
            del sys.path_importer_cache[path]


# What zipimport raises for an entry it cannot read: its header or its size is wrong
# (ZipImportError, OSError), its data does not inflate (zlib.error); and a source that
# does not decode in the encoding it declares (UnicodeDecodeError).
_UNREADABLE = (zipimport.ZipImportError, OSError, UnicodeDecodeError, zlib.error)


def _declared_source(importer: zipimport.zipimporter, fullname: str) -> str | None:
    """zipimport's ``get_source``, decoded in the encoding the source declares, as Python
    reads a source file (zipimport decodes it as UTF-8)."""
    try:
        return zipimport.zipimporter.get_source(importer, fullname)
    except UnicodeDecodeError:
        import importlib.util  # only for a source not in UTF-8

        path = zipimport.zipimporter.get_filename(importer, fullname)
        return importlib.util.decode_source(importer.get_data(path))


class _SubmoduleImporter(zipimport.zipimporter):
    """zipimport's importer of the modules in the archive (or in a package of it), which
    names the archive when an entry cannot be read, and imports the archive's packages'
    submodules likewise."""

    def find_spec(
        self, fullname: str, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        spec = self._reading(super().find_spec, fullname, target)  # it reads the entry
        for path in (spec and spec.submodule_search_locations) or ():
            sys.path_importer_cache[path] = _SubmoduleImporter(path)
        return spec

    def get_code(self, fullname: str) -> CodeType:
        return self._reading(super().get_code, fullname)

    def get_source(self, fullname: str) -> str | None:
        return self._reading(lambda name: _declared_source(self, name), fullname)

    def _reading(self, read: Callable[..., _T], fullname: str, *args: object) -> _T:
        """``read(fullname, *args)``, which reads ``fullname``'s entry; a
        :class:`KernelImportError` naming the archive where the entry cannot be read."""
        try:
            return read(fullname, *args)
        except _UNREADABLE as exc:
            where = f"holds an entry for {fullname} that cannot be read ({exc})"
            raise _broken(self.archive, where) from exc


# importlib._abc.Loader is importlib.abc.Loader, without importlib.abc's imports.
class ArchiveLoader(importlib._abc.Loader):
    """The loader of a kernel package that is the root of a zip archive."""

    def __init__(self, archive: str) -> None:
        self.archive = archive
        try:
            self._zip = zipimport.zipimporter(archive)
        except zipimport.ZipImportError as exc:
            raise _broken(archive, "is not a zip archive") from exc

    def reread(self) -> None:
        """Read the archive's table of contents again, for this loader and for zipimport's
        importers made from now on."""
        self._zip.invalidate_caches()

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        exec(self.get_code(module.__name__), module.__dict__)

    def is_package(self, fullname: str) -> bool:
        return True

    def get_filename(self, fullname: str) -> str:
        return os.path.join(self.archive, f"{_INIT}.py")

    def get_code(self, fullname: str) -> CodeType:
        try:
            return self._zip.get_code(_INIT)
        except zipimport.ZipImportError as exc:
            from .archive_errors import no_init_error  # only for a broken archive

            raise no_init_error(self.archive, exc) from exc
        except _UNREADABLE as exc:  # its directory states wrong sizes, or it does not inflate
            raise _broken(self.archive, f"is malformed ({exc})") from exc

    def get_source(self, fullname: str) -> str | None:
        try:
            return _declared_source(self._zip, _INIT)
        except _UNREADABLE as exc:  # inspect and tracebacks take an ImportError for no source
            raise _broken(self.archive, f"is malformed ({exc})") from exc

    def get_data(self, path: str) -> bytes:
        """A file of the archive, by its path (``<archive>/<name>``) or its name in it."""
        return self._zip.get_data(path)

    def get_resource_reader(self, fullname: str) -> ArchiveResources:
        from .zip_resources import ArchiveResources  # only when resources are asked for

        return ArchiveResources(self.archive)


def _broken(archive: str, problem: str) -> KernelImportError:
    from .archive_errors import archive_error  # only for a broken archive

    return archive_error(archive, problem)
