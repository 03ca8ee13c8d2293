"""The CDN's three documents, each fetched, size-capped and parsed in one function.

========================================  ==================================
``<org>/<pkg>/versions.json``             :func:`get_versions`
``<org>/<pkg>/v<N>/variants.json``        :func:`get_variant_names`
``<org>/<pkg>/v<N>/build/<v>/metadata.json``  :func:`get_manifest`
========================================  ==================================

Each raises :class:`NotPublished` (its text the URL asked for) when the document does
not exist: for ``versions.json``, ``variants.json`` and a probed manifest that is an
answer, and the caller decides what it means.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING, NamedTuple

from ._manifest import (
    MANIFEST_NAME,
    MAX_DOCUMENT_BYTES,
    Manifest,
    parse_metadata,
    parse_variants,
    parse_versions,
)
from ._mirrors import NotPublished
from ._names import RepoInfo
from ._text import escape_controls
from ._urls import redact_url
from .errors import TransportError

if TYPE_CHECKING:
    from ._transport import Fetcher

__all__ = [
    "ManifestDocument",
    "NotPublished",
    "get_listed_manifest",
    "get_manifest",
    "get_variant_names",
    "get_versions",
    "variant_path",
]


class ManifestDocument(NamedTuple):
    """A variant's ``metadata.json``: its exact bytes (cached with the entry), parsed."""

    data: bytes
    manifest: Manifest


def variant_path(info: RepoInfo, variant: str, relpath: str) -> str:
    """The CDN path of ``relpath`` in ``variant`` of ``info``."""
    return f"{info.cdn_path}/build/{variant}/{urllib.parse.quote(relpath)}"


def get_versions(fetcher: Fetcher, repo_id: str) -> list[int]:
    """The versions a repo's ``versions.json`` lists, oldest first."""
    data = fetcher.get_bytes(f"{repo_id}/versions.json", limit=MAX_DOCUMENT_BYTES)
    return parse_versions(data, source=f"{repo_id}/versions.json")


def get_variant_names(fetcher: Fetcher, info: RepoInfo) -> list[str]:
    """The variant names a version's ``variants.json`` lists."""
    data = fetcher.get_bytes(f"{info.cdn_path}/variants.json", limit=MAX_DOCUMENT_BYTES)
    return parse_variants(data, source=f"{info}/variants.json")


def get_manifest(fetcher: Fetcher, info: RepoInfo, variant: str) -> ManifestDocument:
    """A variant's ``metadata.json``, validated."""
    data = fetcher.get_bytes(variant_path(info, variant, MANIFEST_NAME), limit=MAX_DOCUMENT_BYTES)
    source = f"{info}/build/{escape_controls(variant)}/{MANIFEST_NAME}"
    return ManifestDocument(data, parse_metadata(data, source=source))


def get_listed_manifest(fetcher: Fetcher, info: RepoInfo, variant: str) -> ManifestDocument:
    """The manifest of a variant that ``variants.json`` (or a probe) found.

    Its absence is then the CDN's fault, not an answer: a :class:`TransportError`.
    """
    try:
        return get_manifest(fetcher, info, variant)
    except NotPublished as exc:
        raise TransportError(
            f"{info} lists variant {escape_controls(variant)}, but "
            f"{redact_url(str(exc))} does not exist",
            hint="the CDN is incomplete: report it to the kernel's publisher, or add a "
            "complete mirror to FLASHHUB_CDN_URL",
        ) from None
