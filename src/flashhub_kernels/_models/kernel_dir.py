"""Where the files of a kernel module are: the record the finder, the cache and local
overrides share, and how a verified cache entry becomes one."""

from __future__ import annotations

from .record import Record

TYPE_CHECKING = False  # not typing's: this module is on the import hook's path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from .._cache.receipt import Receipt
    from .names import RepoInfo

# The file names of native libraries, which a kernel loads with torch.ops.load_library.
NATIVE_SUFFIXES = (".so", ".dylib")


class KernelDir(Record):
    """A kernel package directory ready to import, and where it came from.

    Attributes:
        package_dir: The directory imported as the kernel (it holds ``__init__.py``), or
            a ``"zip"`` build's archive (see :mod:`~.._loading.zip_layout`).
        info: The repo and version; ``None`` for :func:`get_local_kernel` directories.
        variant: The build variant chosen, when known.
        entry: The verified cache entry holding ``package_dir``; ``None`` outside the
            cache (a local directory).
        signer: The trusted key that vouched for the entry, if one was checked.
        natives: The native libraries of a cache entry, as ``(path relative to entry,
            size)`` from its receipt; ``None`` outside the cache, where the directory is
            looked at when the kernel is loaded.
        requires: What its ``metadata.json`` asks of a load (python-depends,
            kernel-depends, minimum client versions, a dirty build), as the entry's
            receipt records it: ``{}`` for nothing; ``None`` when not recorded (a local
            directory, an entry cached by an older client), where ``metadata.json`` is
            read when the kernel is loaded (and a local directory's files are checked
            against its digest: a local one is never ``{}``).
    """

    package_dir: Path
    info: RepoInfo | None = None
    variant: str | None = None
    entry: Path | None = None
    signer: str | None = None
    natives: tuple[tuple[str, int], ...] | None = None
    requires: Mapping[str, Any] | None = None

    @property
    def init_file(self) -> Path:
        return self.package_dir / "__init__.py"


def package_dir_of(entry: Path, py_pkg: str) -> Path:
    """The directory of a verified entry imported as the kernel: ``<py_pkg>/`` when the
    variant ships it, else the entry itself (a flattened build, whose ``__init__.py``,
    ``_ops.py``, ... lie in the variant directory); ``<py_pkg>/`` when it has both."""
    package = entry / py_pkg
    return package if (package / "__init__.py").is_file() else entry


def cached_kernel(entry: Path, info: RepoInfo, variant: str, receipt: Receipt) -> KernelDir:
    """The kernel in a verified entry, as its receipt describes it."""
    natives = tuple(
        (rel, size) for rel, (size, _) in receipt.files.items() if rel.endswith(NATIVE_SUFFIXES)
    )
    package = entry / receipt.package if receipt.package else package_dir_of(entry, info.py_pkg)
    return KernelDir(package, info, variant, entry, receipt.signer, natives, receipt.requires)
