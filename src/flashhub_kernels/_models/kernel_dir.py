"""Where the files of a kernel module are: the record the finder, the cache and local
overrides share."""

from __future__ import annotations

from .record import Record

TYPE_CHECKING = False  # not typing's: this module is on the import hook's path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

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
        """The package's ``__init__.py`` (inside the archive, for a ``"zip"`` build)."""
        return self.package_dir / "__init__.py"
