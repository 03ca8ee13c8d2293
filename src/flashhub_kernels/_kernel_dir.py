"""Where the files of a kernel module are: the record the finder, the cache and local
overrides share."""

from __future__ import annotations

from ._record import Record

TYPE_CHECKING = False  # not typing's: this module is on the import hook's path
if TYPE_CHECKING:
    from pathlib import Path

    from ._names import RepoInfo

# The file names of native libraries, which a kernel loads with torch.ops.load_library.
NATIVE_SUFFIXES = (".so", ".dylib")


class KernelDir(Record):
    """A kernel package directory ready to import, and where it came from.

    Attributes:
        package_dir: The directory imported as the kernel (it holds ``__init__.py``).
        info: The repo and version; ``None`` for :func:`get_local_kernel` directories.
        variant: The build variant chosen, when known.
        entry: The verified cache entry holding ``package_dir``; ``None`` outside the
            cache (a local directory).
        signer: The trusted key that vouched for the entry, if one was checked.
        natives: The native libraries of a cache entry, as ``(path relative to entry,
            size)`` from its receipt; ``None`` outside the cache, where the directory is
            looked at when the kernel is loaded.
    """

    package_dir: Path
    info: RepoInfo | None
    variant: str | None
    entry: Path | None
    signer: str | None
    natives: tuple[tuple[str, int], ...] | None

    def __init__(
        self,
        package_dir: Path,
        info: RepoInfo | None = None,
        variant: str | None = None,
        entry: Path | None = None,
        signer: str | None = None,
        natives: tuple[tuple[str, int], ...] | None = None,
    ) -> None:
        self._init(package_dir, info, variant, entry, signer, natives)

    @property
    def init_file(self) -> Path:
        return self.package_dir / "__init__.py"
