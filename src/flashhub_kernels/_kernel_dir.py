"""Where the files of a kernel module are: the record the finder, the cache and local
overrides share."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from ._names import RepoInfo


class KernelDir(NamedTuple):
    """A kernel package directory ready to import, and where it came from.

    Attributes:
        package_dir: The directory imported as the kernel (it holds ``__init__.py``).
        info: The repo and version; ``None`` for :func:`get_local_kernel` directories.
        variant: The build variant chosen, when known.
        entry: The verified cache entry holding ``package_dir``; ``None`` outside the
            cache (a local directory).
    """

    package_dir: Path
    info: RepoInfo | None = None
    variant: str | None = None
    entry: Path | None = None

    @property
    def init_file(self) -> Path:
        return self.package_dir / "__init__.py"
