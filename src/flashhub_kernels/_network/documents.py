"""The CDN's three documents, each fetched, size-capped and parsed in one function.

============================================  ==========================================
``<org>/<pkg>/versions.json``                 :func:`get_versions`
``<org>/<pkg>/v<N>/variants.json``            :func:`get_variant_list` (the names alone:
                                              :func:`get_variant_names`)
``<org>/<pkg>/v<N>/build/<v>/metadata.json``  :func:`get_manifest`
============================================  ==========================================

Each raises :class:`NotPublished` (its text the URL asked for) when the document does
not exist: for ``versions.json``, ``variants.json`` and a probed manifest that is an
answer, and the caller decides what it means.

When the user trusts a key for the kernel's org (or requires signatures), each document
is also checked against its ``.sig`` here, before the caller sees it: a CDN that serves
other files together with a matching manifest is refused before any file is fetched. The
``.sig`` is fetched beside its document, not after it, so checking costs no round trip.
"""

from __future__ import annotations

import contextlib
import functools
import urllib.parse
from typing import TYPE_CHECKING, TypeVar

from .._constants import MANIFEST_NAME, SIG_SUFFIX
from .._models.manifest import (
    MAX_DOCUMENT_BYTES,
    Manifest,
    manifest_source,
    parse_metadata,
    parse_variants,
    parse_versions,
)
from .._models.names import RepoInfo
from .._models.record import Record
from .._utils.escaping import escape_controls
from .._utils.logs import logger
from .._utils.urls import redact_url
from ..errors import LockMismatchError, SignatureError, TransportError
from .answers import listed_404_hint
from .mirrors import NotPublished

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._signing.statements import DocumentKind
    from .._signing.trusted_keys import TrustedKey
    from .transport import Fetcher

T = TypeVar("T")


class ManifestDocument(Record):
    """A variant's ``metadata.json``: its exact bytes (cached with the entry), parsed, and
    when signatures were checked, its ``metadata.json.sig`` and the key that vouched."""

    data: bytes
    manifest: Manifest
    signature: bytes | None = None
    signer: str | None = None


def variant_path(info: RepoInfo, variant: str, relpath: str) -> str:
    """The CDN path of ``relpath`` in ``variant`` of ``info``."""
    return f"{info.cdn_path}/build/{variant}/{urllib.parse.quote(relpath)}"


def get_versions(
    fetcher: Fetcher, repo_id: str, *, check: Callable[[list[int]], None] | None = None
) -> list[int]:
    """The versions a repo's ``versions.json`` lists, oldest first.

    ``check`` may refuse a mirror's list (a :class:`RollbackError` for one older than a
    list seen before): the next mirror is asked then.
    """
    path = f"{repo_id}/versions.json"

    def parse(data: bytes) -> list[int]:
        versions = parse_versions(data, source=path)
        if check is not None:
            check(versions)
        return versions

    _, versions, _, _ = _fetch_checked(fetcher, path, parse, "versions", repo_id, None, None)
    return versions


def get_variant_names(fetcher: Fetcher, info: RepoInfo) -> list[str]:
    """The variant names a version's ``variants.json`` lists."""
    return get_variant_list(fetcher, info)[0]


def get_variant_list(fetcher: Fetcher, info: RepoInfo) -> tuple[list[str], tuple[str, str] | None]:
    """The variant names a version's ``variants.json`` lists, and where a trusted key
    vouched for it, the proof a variant index records of it
    (:attr:`~.._cache.layout.VariantIndex.proof`)."""
    path = f"{info.cdn_path}/variants.json"
    parse = functools.partial(parse_variants, source=f"{info}/variants.json")
    data, names, signature, _ = _fetch_checked(
        fetcher, path, parse, "variants", info.repo_id, info.version, None
    )
    if signature is None:
        return names, None
    from .._signing.verification import variants_proof  # imported already: it was checked

    return names, variants_proof(data, signature)


def get_manifest(
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    *,
    prefer_signer: str | None = None,
    expected_hash: str | None = None,
    listed: bool = False,
) -> ManifestDocument:
    """A variant's ``metadata.json``, validated (and its signature checked, when due).

    When several trusted keys signed it, ``prefer_signer`` (a lock file's signer) is the
    one reported, if its signature verifies. With ``expected_hash`` (a lock file's pin),
    a mirror whose manifest holds other content fails for it, and the next is asked: a
    :class:`LockMismatchError` names each mirror's content when none serves the pinned
    one. ``listed``: the variant is known to be published, so a mirror without its
    manifest hands over to the next.
    """
    path = variant_path(info, variant, MANIFEST_NAME)
    parse = functools.partial(
        _parse_pinned, source=manifest_source(info, variant), expected_hash=expected_hash
    )
    data, manifest, signature, signer = _fetch_checked(
        fetcher,
        path,
        parse,
        "metadata",
        info.repo_id,
        info.version,
        variant,
        prefer_signer,
        listed=listed,
    )
    return ManifestDocument(data, manifest, signature, signer)


def _parse_pinned(data: bytes, *, source: str, expected_hash: str | None) -> Manifest:
    """``data`` parsed as a manifest; refused unless it holds the ``expected_hash``
    content, when one is given."""
    manifest = parse_metadata(data, source=source)
    if expected_hash not in (None, manifest.content_hash):
        raise LockMismatchError(f"serves content {manifest.content_hash}")
    return manifest


def get_signers(fetcher: Fetcher, info: RepoInfo, variant: str) -> list[str]:
    """The key ids a variant's ``metadata.json.sig`` names, unverified (``[]``: unsigned).

    For display only (``flashhub info`` with no trusted key): a name in a ``.sig`` proves
    nothing until a trusted key's signature verifies.
    """
    from .._signing.signature_files import MAX_SIGNATURE_BYTES, parse_signatures

    path = variant_path(info, variant, MANIFEST_NAME) + SIG_SUFFIX
    try:
        data = fetcher.get_bytes(path, limit=MAX_SIGNATURE_BYTES)
        return [entry.key_id for entry in parse_signatures(data, source=path)]
    except (NotPublished, SignatureError):  # none, or none that could be shown
        return []


def _fetch_checked(
    fetcher: Fetcher,
    path: str,
    parse: Callable[[bytes], T],
    kind: DocumentKind,
    repo_id: str,
    version: int | None,
    variant: str | None,
    prefer_signer: str | None = None,
    *,
    listed: bool = False,
) -> tuple[bytes, T, bytes | None, str | None]:
    """The document at ``path``, and what ``parse`` makes of it (a mirror whose answer
    does not parse, or lacks a ``listed`` document, fails over to the next); and when
    the user trusts a key for the org,
    its ``.sig`` and the trusted key that vouches for it (the key ``prefer_signer`` if it
    is one that does), else ``None`` and ``None`` (no ``.sig`` is fetched then).

    The ``.sig`` is asked for together with the document: both answers come in one
    round trip. When they do not verify and a mirror failed meanwhile, the ``.sig`` is
    asked for again: its answer may have come from the mirror that then failed. So it is
    when no ``.sig`` came and there are other mirrors, which are asked for it in turn.

    Raises:
        NotPublished: the document does not exist.
        ManifestError: no mirror served one that parses.
        SignatureError: a trusted key's signature is due and none verifies.
    """
    config = fetcher.config
    org = repo_id.split("/")[0]
    if not config.checks_signatures(org):
        data, parsed = fetcher.get_document(
            path, limit=MAX_DOCUMENT_BYTES, parse=parse, listed=listed
        )
        return data, parsed, None, None
    # Imported only when a key is trusted: an unsigned load spares most of a millisecond.
    from .._signing.verification import verify_document

    failures = fetcher.mirror_failures
    pending = fetcher.soon(functools.partial(_get_signature, fetcher, path))
    data, parsed = fetcher.get_document(path, limit=MAX_DOCUMENT_BYTES, parse=parse, listed=listed)
    signature = pending.result()
    verify = functools.partial(
        verify_document,
        kind=kind,
        repo_id=repo_id,
        version=version,
        variant=variant,
        data=data,
        org=org,
        require=config.require_signatures,
    )
    try:
        signer = _signer(verify, signature, config.trusted_keys, prefer_signer)
    except SignatureError:
        unsynced = signature is None and len(config.cdn_urls) > 1
        if fetcher.mirror_failures == failures and not unsynced:
            raise
        # A mirror failed meanwhile: the .sig may be the answer of one that then failed
        # the document. Or a mirror has no .sig: it may not be fully synced (a sync copies
        # x.json before x.json.sig). Ask again, the document's mirror now first, and
        # pass over a mirror without it.
        signature = _get_signature(fetcher, path, listed=True)
        signer = _signer(verify, signature, config.trusted_keys, prefer_signer)
    logger.info("%s: signed by the trusted key %s", path, signer)
    return data, parsed, signature, signer


def _get_signature(fetcher: Fetcher, path: str, *, listed: bool = False) -> bytes | None:
    """The ``.sig`` of the document at ``path``; ``None`` when there is none (``listed``:
    on no mirror, as for a listed document)."""
    from .._signing.signature_files import MAX_SIGNATURE_BYTES

    try:
        relpath, limit = path + SIG_SUFFIX, MAX_SIGNATURE_BYTES
        return fetcher.get_document(relpath, limit=limit, parse=bytes, listed=listed)[0]
    except NotPublished:
        return None


def _signer(
    verify: Callable[..., str | None],
    signature: bytes | None,
    keys: Sequence[TrustedKey],
    prefer_signer: str | None,
) -> str | None:
    """The key of ``keys`` that vouches, by ``signature``, for the document ``verify``
    checks (:func:`~.._signing.verification.verify_document`): ``prefer_signer`` if it
    is one that does.

    Raises:
        SignatureError: a trusted key's signature is due and none verifies.
    """
    preferred = tuple(k for k in keys if k.key_id == prefer_signer)
    if preferred:
        with contextlib.suppress(SignatureError):  # then any trusted key, and its error
            signer = verify(sig_bytes=signature, keys=preferred)
            if signer:
                return signer
    return verify(sig_bytes=signature, keys=keys)


def get_listed_manifest(
    fetcher: Fetcher,
    info: RepoInfo,
    variant: str,
    *,
    prefer_signer: str | None = None,
    expected_hash: str | None = None,
) -> ManifestDocument:
    """The manifest of a variant that ``variants.json`` (or a probe) found, and with
    ``expected_hash``, of that content (see :func:`get_manifest`).

    A mirror without it is not fully synced, and the next is asked; its absence from
    every mirror is the CDN's fault, not an answer: a :class:`TransportError`.
    """
    try:
        return get_manifest(
            fetcher,
            info,
            variant,
            prefer_signer=prefer_signer,
            expected_hash=expected_hash,
            listed=True,
        )
    except LockMismatchError as exc:
        raise LockMismatchError(
            f"{info} variant {variant}: the lock pins {expected_hash}, but {exc.message}"
        ) from None
    except NotPublished as exc:
        raise TransportError(
            f"{info} lists variant {escape_controls(variant)}, but "
            f"{redact_url(str(exc))} does not exist",
            hint=listed_404_hint(str(info)),
        ) from None
