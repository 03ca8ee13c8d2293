"""The kernels imported in this process: :func:`get_loaded_kernels` and its records."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from .._finder import install
from .._models.names import RepoInfo
from .._models.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .metadata import Metadata


class LoadedKernel(Record):
    """A kernel imported in this process (see :func:`get_loaded_kernels`). ``repo_id``,
    ``version`` and ``variant`` are ``None`` for one :func:`get_local_kernel` loaded;
    ``path`` is its package directory, or its archive (a zip build); ``module`` is the
    kernel's module, the one :func:`get_kernel` returns for it."""

    repo_id: str | None
    version: int | None
    variant: str | None
    path: Path
    module: ModuleType

    @property
    def repo_info(self) -> RepoInfo | None:
        """The kernel's repo and version, as Hugging Face ``kernels`` names them on its
        record; ``None`` for a kernel loaded from a local directory."""
        if self.repo_id is None or self.version is None:
            return None
        return RepoInfo(self.repo_id, self.version)

    @property
    def metadata(self) -> Metadata:
        """Its build's ``metadata.json`` (see :class:`~flashhub_kernels.Metadata`), read now."""
        from .metadata import loaded_metadata

        return loaded_metadata(self.path)


def get_loaded_kernels() -> list[LoadedKernel]:
    """The kernels imported in this process, in load order."""
    records = []
    for module, kernel_dir in install().loaded():
        info = kernel_dir.info
        repo_id, version = (info.repo_id, info.version) if info else (None, None)
        records.append(
            LoadedKernel(repo_id, version, kernel_dir.variant, kernel_dir.package_dir, module)
        )
    return records
