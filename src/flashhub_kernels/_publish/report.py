"""What :func:`~flashhub_kernels._publish.publish` reports: the published variants, and
its findings: the native libraries the version shares with others, the packages it
imports undeclared, the paths a zip build makes from ``__file__``, and the compiled
modules it leaves out for want of their source."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from .._constants import MANIFEST_NAME
from .._models.record import Record


class VariantReport(Record):
    """One published variant: its name, file count, total size and content hash
    (``sha256-<hex>`` over its manifest, the value lock files pin)."""

    name: str
    files: int
    bytes: int
    content_hash: str


class Finding(Protocol):
    """Something a published version may get wrong, warned about and reported."""

    def describe(self, repo_id: str, version: int) -> str:
        """The warning, for version ``version`` of ``repo_id``."""
        ...


class SharedNativeLibrary(Record):
    """A native library of the published version that another version also ships.

    Attributes:
        file: The library, relative to the published version's directory
            (``build/<variant>/<py_pkg>/<name>.so``).
        version: The other version.
        other_file: Its library, relative to that version's directory.
        same_bytes: The two files are identical; else they are different builds of the
            same file name, and so (by the naming rule) of the same op namespace.
    """

    file: str
    version: int
    other_file: str
    same_bytes: bool

    def describe(self, repo_id: str, version: int) -> str:
        """The warning, for version ``version`` of ``repo_id``."""
        rebuild = (
            "rebuild with a namespace unique to the build, "
            "_<py_pkg>_<backend>_<hash of its sources>"
        )
        if self.same_bytes:
            return (
                f"{repo_id} v{version}: {self.file} is byte-identical to v{self.version}'s "
                f"{self.other_file}: loaded side by side in one process, both versions run "
                "on the one copy loaded first, with the same native ops; if this version "
                f"was meant to change them, {rebuild}"
            )
        namespace = self.file.rpartition("/")[2].partition(".")[0]
        return (
            f"{repo_id} v{version}: {self.file} is another build of v{self.version}'s "
            f"{self.other_file}: by its file name both register the op namespace "
            f"{namespace}, so the two versions cannot be loaded side by side in one process "
            "(the one imported second raises NativeLibraryConflictError, even if its "
            "_ops.py skips load_library when the namespace is registered); "
            f"{rebuild}"
        )


class UndeclaredImport(Record):
    """A package a variant imports but does not list in its ``python-depends``.

    Attributes:
        module: The top-level name imported (``numpy`` for ``import numpy.linalg``).
        file: The first file that imports it, relative to the published version's
            directory (``build/<variant>/...``).
        line: The line of that import.
    """

    module: str
    file: str
    line: int

    def describe(self, repo_id: str, version: int) -> str:
        """The warning, for version ``version`` of ``repo_id``."""
        variant = self.file.split("/")[1]
        return (
            f"{repo_id} v{version}: {self.file}:{self.line} imports {self.module}, which "
            "is not in the standard library, torch or the kernel, and which the variant "
            "does not declare: a machine without it cannot import the kernel. List its "
            f'package in "python-depends" of build/{variant}/{MANIFEST_NAME} '
            f'(e.g. "python-depends": ["{self.module}"]), as kernel builders write it'
        )


class FileRelativePath(Record):
    """A Python file of a variant published in the zip layout that makes a path from
    ``__file__`` (``os.path.dirname(__file__)``, ``Path(__file__)``, ``open(__file__)``,
    ...): in a zip build ``__file__`` lies inside the archive, where no file can be
    opened, listed or loaded.

    Attributes:
        file: The file, relative to the build directory (``build/<variant>/...``).
        line: The first line of it that does so.
    """

    file: str
    line: int

    def describe(self, repo_id: str, version: int) -> str:
        """The warning, for version ``version`` of ``repo_id``."""
        return (
            f"{repo_id} v{version}: {self.file}:{self.line} makes a path from __file__, "
            "which in a zip build lies inside the archive: a file opened, listed or loaded "
            "through it is not found (NotADirectoryError, or a check such as "
            "os.path.exists that quietly says no). Read the package's data with "
            "importlib.resources.files(__package__), which reads inside the archive, load "
            "a native library from __path__[0], or publish without the zip layout"
        )


class SourcelessModule(Record):
    """A ``.pyc`` file of a variant, outside ``__pycache__``, with no ``.py`` beside it:
    loaded from the build directory (``get_local_kernel``), Python imports it as the
    module; publish leaves it out, as every ``.pyc``, so the published kernel lacks it.

    Attributes:
        file: The file, relative to the build directory (``build/<variant>/...``).
    """

    file: str

    def describe(self, repo_id: str, version: int) -> str:
        """The warning, for version ``version`` of ``repo_id``."""
        source = self.file.rpartition("/")[2].removesuffix("c")
        return (
            f"{repo_id} v{version}: {self.file} is not published: publish ships Python "
            f"sources only, and there is no {source} beside it. A local load imports the "
            "compiled module; the published kernel lacks it, and its import fails. Put "
            f"{source} in the build and publish again"
        )


class PublishReport(Record):
    """What :func:`publish` did.

    Attributes:
        repo_id: The kernel, ``<org>/<pkg>``.
        version: The published version number.
        version_dir: The ``v<N>`` directory on disk, or its URL in an object store.
        variants: The published variants, sorted by name.
        versions: The content of ``versions.json`` after publishing.
        written: Files created or replaced, relative to ``out``, sorted, ``/`` separated
            (on an object store, the stale files a ``force`` replace deletes are not).
        bytes_written: Total size of the files in ``written``.
        noop: The version was already published with identical content and
            ``versions.json`` already listed it, with the same signatures: nothing was
            touched.
        replaced: ``force=True`` replaced a version that held different content.
        signed_by: The key ids of the keys that signed the documents, in the order
            given; empty when nothing was signed.
        shared_natives: The native libraries this version shares with other versions
            in ``out`` (each also issued as a :class:`SharedNativeLibraryWarning`).
        undeclared_imports: The packages a variant imports without declaring them in
            its ``python-depends``, one per package and variant (each also issued as an
            :class:`UndeclaredDependencyWarning`).
        file_relative_paths: The Python files of variants published in the zip layout
            that make a path from ``__file__``, one per file (each also issued as a
            :class:`FileRelativePathWarning`).
        sourceless_modules: The ``.pyc`` files of the variants that have no ``.py``
            beside them, and so are not published, one per file (each also issued as a
            :class:`SourcelessModuleWarning`).
    """

    repo_id: str
    version: int
    version_dir: Path | str
    variants: tuple[VariantReport, ...]
    versions: tuple[int, ...]
    written: tuple[str, ...]
    bytes_written: int
    noop: bool
    replaced: bool
    signed_by: tuple[str, ...] = ()
    shared_natives: tuple[SharedNativeLibrary, ...] = ()
    undeclared_imports: tuple[UndeclaredImport, ...] = ()
    file_relative_paths: tuple[FileRelativePath, ...] = ()
    sourceless_modules: tuple[SourcelessModule, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (what ``flashhub publish --json`` prints)."""
        return {
            "repo_id": self.repo_id,
            "version": self.version,
            "version_dir": str(self.version_dir),
            "variants": [asdict(v) for v in self.variants],
            "versions": list(self.versions),
            "written": list(self.written),
            "bytes_written": self.bytes_written,
            "noop": self.noop,
            "replaced": self.replaced,
            "signed_by": list(self.signed_by),
            "shared_natives": [asdict(shared) for shared in self.shared_natives],
            "undeclared_imports": [asdict(found) for found in self.undeclared_imports],
            "file_relative_paths": [asdict(found) for found in self.file_relative_paths],
            "sourceless_modules": [asdict(found) for found in self.sourceless_modules],
        }
