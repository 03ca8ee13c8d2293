"""What a signature over one of the CDN's documents signs: the document's statement.

A statement is built from what the client asked for, never read from the signature
file. It binds the kind of document (a variant's ``metadata.json``, a version's
``variants.json``, a kernel's ``versions.json``), the repo id, the version, the variant
and the sha256 of the document's exact bytes, so a signature cannot be replayed for
another kernel, version, variant or kind of document. Pure: no third-party package.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from .._models.names import check_version, parse_repo_id

DocumentKind = Literal["metadata", "variants", "versions"]

_KINDS: tuple[DocumentKind, ...] = ("metadata", "variants", "versions")
_STATEMENT_HEADER = "flashhub-signed-document v1"


def statement(
    kind: DocumentKind, repo_id: str, version: int | None, variant: str | None, data: bytes
) -> bytes:
    """The message a signature over a document signs.

    UTF-8 lines::

        flashhub-signed-document v1
        kind: metadata|variants|versions
        repo: <org>/<pkg>
        version: <N, or - for versions.json>
        variant: <name, or - unless metadata.json>
        sha256: <hex digest of the document's exact bytes>

    Build it from what was asked for, never from the signature file.

    Raises:
        ValueError: ``kind`` is unknown, ``repo_id`` is malformed, or ``version`` and
            ``variant`` do not fit ``kind`` (``versions``: neither; ``variants``: a
            version only; ``metadata``: both).
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown document kind {kind!r}: one of {', '.join(_KINDS)}")
    parse_repo_id(repo_id)
    if (version is None) != (kind == "versions") or (variant is None) != (kind != "metadata"):
        raise ValueError(
            f"a {kind} document takes "
            + {
                "versions": "neither a version nor a variant",
                "variants": "a version and no variant",
                "metadata": "a version and a variant",
            }[kind]
            + f", got version={version!r}, variant={variant!r}"
        )
    version_text = "-" if version is None else str(check_version(version))
    variant_text = "-" if variant is None else _check_variant(variant)
    lines = [
        _STATEMENT_HEADER,
        f"kind: {kind}",
        f"repo: {repo_id}",
        f"version: {version_text}",
        f"variant: {variant_text}",
        f"sha256: {hashlib.sha256(data).hexdigest()}",
    ]
    return "".join(line + "\n" for line in lines).encode("utf-8")


def document_name(repo_id: str, version: int | None, variant: str | None) -> str:
    """Where the document lies under the CDN prefix, for messages."""
    if version is None:
        return f"{repo_id}/versions.json"
    if variant is None:
        return f"{repo_id}/v{version}/variants.json"
    return f"{repo_id}/v{version}/build/{variant}/metadata.json"


def _check_variant(variant: str) -> str:
    if (
        not isinstance(variant, str)
        or not 0 < len(variant) <= 200
        or variant in (".", "..")
        or "/" in variant
        or any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F for ch in variant)
    ):
        raise ValueError(f"invalid variant name {variant!r} for a signed document")
    return variant
