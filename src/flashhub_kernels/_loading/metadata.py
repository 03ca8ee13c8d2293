"""A build's ``metadata.json`` as Hugging Face kernels shows it: :class:`Metadata`, which
is also the ``metadata`` of a :class:`~flashhub_kernels.LoadedKernel`, and as 0.1.2 did:
a read-only mapping of the parsed document.

It is read as a load reads it (the builder's fields by :mod:`.._models.kernel_metadata`,
the digest by :mod:`.._models.manifest`), so it is as lenient as loading is: a field the
document lacks is ``None`` (or empty), where Hugging Face's reader requires ``name``,
``id``, ``version``, ``license``, ``backend`` and ``python-depends``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from .._constants import MANIFEST_NAME
from .._models.kernel_metadata import (
    METADATA_HINT,
    BackendInfo,
    KernelDependency,
    KernelMetadata,
    Provenance,
    read_kernel_metadata,
)
from .._models.manifest import encode_digest, load_json, parse_metadata
from .._models.record import Record
from ..errors import ManifestError, MetadataIsADirectoryError

_NO_DOCUMENT: Mapping[str, Any] = MappingProxyType({})  # shared: it must stay empty


class KernelName(str):
    """A kernel's name, as its ``metadata.json`` gives it (``"flash-attn"``): a ``str``."""

    __slots__ = ()

    @property
    def python_name(self) -> str:
        """The name as a Python identifier, dashes made underscores (``"flash_attn"``)."""
        return self.replace("-", "_")


class Digest(Record):
    """``digest``: its algorithm (``"sha256"``), and each file's digest in base64."""

    algorithm: str
    files: Mapping[str, str]


class Metadata(Record, Mapping[str, Any]):
    """A build variant's ``metadata.json``, with the fields of Hugging Face kernels'
    ``Metadata``: ``id``, ``name`` (a :class:`KernelName`: ``str(name)``,
    ``name.python_name``), ``version``, ``build_layout`` (``"files"`` or ``"zip"``),
    ``kernels_minver``, ``license``, ``upstream``, ``source``, ``python_depends``,
    ``kernel_depends`` (each with ``repo_id`` and ``version``), ``backend``
    (``backend_type`` and ``archs``), ``digest`` (``algorithm`` and ``files``) and
    ``provenance`` (``kernel_builder``, ``kernel``, ``dirty``); and this client's own
    ``flashhub_kernels_minver``.

    A field the document lacks is ``None``, or empty for the lists. The lists are
    tuples, and versions and the backend type are the strings the document holds, as
    ``str()`` of Hugging Face's values gives them. Immutable, and equal by its fields.

    It is also a read-only mapping of the document as parsed, as flashhub-kernels 0.1.2
    gave it (a dict): ``metadata["digest"]["files"]``, ``metadata.get("name")``, ``in``,
    ``keys()``, ``items()``, ``len()``, ``copy()``, and equal to a ``dict`` of the same
    document. A :class:`Metadata` made from its fields, or for a package without a
    ``metadata.json``, maps nothing (and is false, as ``{}`` is).
    """

    id: str | None = None
    name: KernelName | None = None
    version: int | None = None
    build_layout: str = "files"
    kernels_minver: str | None = None
    license: str | None = None
    upstream: str | None = None
    source: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()
    backend: BackendInfo | None = None
    digest: Digest | None = None
    provenance: Provenance | None = None
    flashhub_kernels_minver: str | None = None

    _document = _NO_DOCUMENT  # not annotated: it is no field

    def __getitem__(self, key: str) -> Any:
        return self._document[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._document)

    def __len__(self) -> int:
        return len(self._document)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping) and not isinstance(other, Record):  # 0.1.2's dict
            return dict(self._document) == dict(other)
        return super().__eq__(other)

    __hash__ = Record.__hash__  # which defining __eq__ would drop

    def copy(self) -> dict[str, Any]:
        """The document as a new ``dict``, as 0.1.2's ``metadata.copy()`` gave it (so is
        ``dict(metadata)``, which ``json.dumps`` takes)."""
        return dict(self._document)

    def __reduce__(self) -> tuple[Any, ...]:
        # The fields, as a record is pickled and copied, and the document as its state.
        return type(self), self._values(), {"_document": dict(self._document)}

    @staticmethod
    def read_from_file(metadata_path: str | os.PathLike[str]) -> Metadata:
        """Read the ``metadata.json`` at ``metadata_path``.

        Raises:
            MetadataIsADirectoryError: ``metadata_path`` is a directory (an ``OSError``
                and a ``ValueError``); the hint names its ``metadata.json``, if it has one.
            OSError: the file cannot be read.
            ManifestError: it is not a valid ``metadata.json``; the message names the
                field at fault.
        """
        path = Path(metadata_path)
        try:
            data = path.read_bytes()
        except IsADirectoryError:
            raise _directory_given(path) from None
        return Metadata.from_bytes(data, source=str(path))

    @staticmethod
    def from_bytes(bytes: bytes, *, source: str = MANIFEST_NAME) -> Metadata:
        """Read a ``metadata.json`` document from its bytes; ``source`` names it in errors.
        (``bytes`` is named as Hugging Face ``kernels`` names it, for callers that pass it
        by keyword.)

        Raises:
            ManifestError: it is not a valid ``metadata.json``.
        """
        data = bytes
        document = load_json(data, source)
        if not isinstance(document, dict):
            raise ManifestError(f"{source} must be a JSON object", hint=METADATA_HINT)
        fields = read_kernel_metadata(document, source=source)
        values = {name: getattr(fields, name) for name in KernelMetadata._fields}
        values["name"] = None if fields.name is None else KernelName(fields.name)
        values["build_layout"] = fields.build_layout or "files"
        digest = None
        if "digest" in document:
            files = parse_metadata(data, source=source).files
            digest = Digest("sha256", {path: encode_digest(raw) for path, raw in files.items()})
        metadata = Metadata(**values, digest=digest)
        object.__setattr__(metadata, "_document", document)
        return metadata


def _directory_given(path: Path) -> MetadataIsADirectoryError:
    inside = path / MANIFEST_NAME
    if inside.is_file():
        hint = f"pass {inside}, the {MANIFEST_NAME} in it"
    else:
        hint = f"pass the path of a build variant's {MANIFEST_NAME} (this directory has none)"
    return MetadataIsADirectoryError(
        f"{path} is a directory; Metadata.read_from_file reads a {MANIFEST_NAME} file", hint=hint
    )


def loaded_metadata(package_dir: Path) -> Metadata:
    """The ``metadata.json`` of the kernel imported from ``package_dir``: its own (a
    flattened build's) or its variant's; for a local package without one, a
    :class:`Metadata` whose fields are all absent.

    Raises:
        OSError, ManifestError: as :meth:`Metadata.read_from_file`.
    """
    for directory in (package_dir, package_dir.parent):
        path = directory / MANIFEST_NAME
        if path.is_file():
            return Metadata.read_from_file(path)
    return Metadata()
