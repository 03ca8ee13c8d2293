"""What a local kernel directory holds, for ``flashhub info PATH``: each build variant
judged against this system, its files and their sizes, and what its ``metadata.json``
says of the build. Nothing is imported or checked against digests."""

from __future__ import annotations

import os
from pathlib import Path

from .._constants import MANIFEST_NAME
from .._models.kernel_metadata import KernelMetadata, read_kernel_metadata
from .._models.record import Record
from .._variants.grammar import is_variant_name
from .._variants.named_system import target_system
from .._variants.verdicts import VariantRejected, describe_system, judge_builds, judge_variants
from ..errors import KernelNotFoundError, LocalKernelNotFoundError
from .local import build_targets_in, metadata_in

_NO_METADATA = KernelMetadata()


class LocalVariant(Record):
    """One variant directory: whether this system loads it (and why not), its files
    (relative path -> size in bytes) and the builder's fields of its ``metadata.json``."""

    name: str
    compatible: bool
    reason: str | None
    files: dict[str, int]
    metadata: KernelMetadata = _NO_METADATA

    @property
    def size(self) -> int:
        return sum(self.files.values())

    def to_dict(self) -> dict[str, object]:
        return {
            "variant": self.name,
            "compatible": self.compatible,
            "reason": self.reason,
            "bytes": self.size,
            "files": [{"path": p, "bytes": s} for p, s in self.files.items()],
            "metadata": {**self.metadata.to_json(), "dirty": bool(self.metadata.dirty_sources)},
        }


class LocalKernelDescription(Record):
    """A local kernel directory judged against one system: its variants, compatible ones
    first, best first, and the one a load takes."""

    path: str
    system: str
    variants: list[LocalVariant]
    chosen: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "system": self.system,
            "chosen": self.chosen,
            "variants": [variant.to_dict() for variant in self.variants],
        }


def describe_local_kernel(path: Path, *, backend: str | None = None) -> LocalKernelDescription:
    """The build variants in ``path``: a kernel repo holding ``build/<variant>/``, such a
    ``build`` directory, or one variant directory, each judged as ``get_local_kernel``
    judges it.

    Raises:
        LocalKernelNotFoundError: ``path`` is not a directory.
        KernelNotFoundError: ``path`` holds no build variant.
        ManifestError: a variant's ``metadata.json`` states a field in the wrong form.
    """
    if not path.is_dir():
        raise LocalKernelNotFoundError(
            f"{path} is not a directory",
            hint="pass the directory of a kernel repo (holding build/<variant>/), its build "
            "directory, or one variant",
        )
    base, names = _variant_directories(path)
    system = target_system(backend)
    verdicts = judge_builds(
        judge_variants(names, system), system, build_targets_in(base), first_fit=False
    )
    variants = [
        LocalVariant(
            name=verdict.variant,
            compatible=not isinstance(verdict, VariantRejected),
            reason=verdict.reason if isinstance(verdict, VariantRejected) else None,
            files=_files(base / verdict.variant),
            metadata=_metadata(base / verdict.variant),
        )
        for verdict in verdicts
    ]
    chosen = next((v.name for v in variants if v.compatible), None)
    return LocalKernelDescription(str(path), describe_system(system), variants, chosen)


def _variant_directories(path: Path) -> tuple[Path, list[str]]:
    """The directory holding the variants, and their names (``path`` itself, when it is
    one variant)."""
    base = path / "build" if (path / "build").is_dir() else path
    names = [child.name for child in sorted(base.iterdir()) if child.is_dir()]
    if not any(map(is_variant_name, names)) and is_variant_name(path.name):
        return path.parent, [path.name]
    if not any(map(is_variant_name, names)):
        raise KernelNotFoundError(
            f"no build variant found in {path}",
            hint="pass the directory of a kernel repo (holding build/<variant>/), its build "
            "directory, or one variant",
        )
    return base, names


def _files(variant_dir: Path) -> dict[str, int]:
    """Every file of the variant but its ``metadata.json`` and bytecode caches, by path
    (symbolic links to directories are not followed)."""
    files = {}
    for root, dirs, names in os.walk(variant_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in names:
            file = Path(root, name)
            if file.is_file() and file != variant_dir / MANIFEST_NAME:
                files[file.relative_to(variant_dir).as_posix()] = file.stat().st_size
    return dict(sorted(files.items()))


def _metadata(variant_dir: Path) -> KernelMetadata:
    document = metadata_in(variant_dir)
    if document is None:
        return _NO_METADATA
    return read_kernel_metadata(document, source=str(variant_dir / MANIFEST_NAME))
