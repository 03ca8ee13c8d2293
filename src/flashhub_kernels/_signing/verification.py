"""Verifying a fetched document against its ``.sig`` and the keys trusted for its org.

The statement is built from what the client asked for (:mod:`.statements`); a trusted
key's entry in the ``.sig`` (:mod:`.signature_files`) must sign it. ``cryptography`` is
imported only when a signature is checked, or is about to be (:func:`prepare_checks`).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from pathlib import Path

from .._constants import MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, SIG_SUFFIX, TRUSTED_KEYS_VAR
from .._models.manifest import parse_metadata, parse_variants
from .._models.names import RepoInfo, parse_repo_id
from .._utils.filesystem import read_regular
from ..errors import ManifestError, SignatureError
from .ed25519 import import_cryptography, verifies
from .signature_files import SignatureEntry, parse_signatures
from .statements import DocumentKind, document_name, statement
from .trusted_keys import TrustedKey, shown_key_id


def prepare_checks() -> None:
    """Import in the calling thread what checking a signature needs beyond this module:
    ``cryptography``, where it is installed. A download run that trusts a key calls it
    before its threads start: they check signatures, and must not import (see
    :mod:`.._utils.threads`)."""
    import_cryptography()


def verify_document(
    *,
    kind: DocumentKind,
    repo_id: str,
    version: int | None,
    variant: str | None,
    data: bytes,
    sig_bytes: bytes | None,
    keys: Sequence[TrustedKey],
    org: str,
    require: bool,
) -> str | None:
    """Check the signatures of one document the client fetched.

    Args:
        kind, repo_id, version, variant: What the client asked for (see :func:`statement`).
        data: The document's exact bytes.
        sig_bytes: The bytes of ``<document>.sig``, or ``None`` when it does not exist.
        keys: The trusted keys (:func:`.trusted_keys.load_trusted_keys`).
        org: The org of ``repo_id``; only keys trusted for it may vouch.
        require: Refuse the document unless a trusted key signed it, even when no key is
            configured for ``org``.

    Returns:
        The key id of the trusted key whose signature verifies, or ``None`` when no key
        is trusted for ``org`` and ``require`` is false: the document is accepted
        unsigned, and neither the ``.sig`` nor ``cryptography`` is looked at.

    Raises:
        SignatureError: A signature is required (a key is trusted for ``org``, or
            ``require``) and the document is unsigned, no signature by a key trusted for
            ``org`` verifies, or the ``.sig`` is malformed; or ``cryptography`` is missing.
        ValueError: The arguments are malformed, or ``org`` is not the org of ``repo_id``.
    """
    message = statement(kind, repo_id, version, variant, data)
    if org != parse_repo_id(repo_id)[0]:
        raise ValueError(f"org {org!r} is not the org of {repo_id!r}")
    trusted = [k for k in keys if k.trusted_for(org)]
    if not trusted and not require:
        return None
    document = document_name(repo_id, version, variant)
    if not trusted:
        raise SignatureError(
            f"{document}: signatures are required, but no trusted key is configured for "
            f"the org {org!r}",
            hint=_add_key_hint(org),
        )
    if sig_bytes is None:
        raise SignatureError(
            f"{document} is not signed ({document}.sig does not exist), but keys are trusted "
            f"for the org {org!r}: {_shown_ids(trusted)}",
            hint="ask the kernel's publisher to sign it with `flashhub sign`",
        )
    source = f"{document}{SIG_SUFFIX}"
    entries = parse_signatures(sig_bytes, source=source)
    signer = _verifying_key(entries, trusted, message, source)
    if signer is None:
        raise _unverified_error(document, org, entries, trusted)
    return signer


def _verifying_key(
    entries: Sequence[SignatureEntry], trusted: Sequence[TrustedKey], message: bytes, source: str
) -> str | None:
    """The id of the first key of ``trusted`` whose signature among ``entries`` verifies
    ``message``; ``None`` when none does."""
    for entry in entries:
        for key in trusted:
            if entry.key_id == key.key_id and verifies(
                key.public_key, entry.decoded(source), message
            ):
                return key.key_id
    return None


def _shown_ids(keys: Sequence[TrustedKey]) -> str:
    return ", ".join(sorted({key.key_id for key in keys}))


def _add_key_hint(org: str) -> str:
    return (
        f"add the publisher's public key to {TRUSTED_KEYS_VAR} (flashhub-ed25519:... for "
        f"every org, or {org}:flashhub-ed25519:... for this org only)"
    )


def _unverified_error(
    document: str, org: str, entries: Sequence[SignatureEntry], trusted: Sequence[TrustedKey]
) -> SignatureError:
    """The error for ``document``, whose ``.sig`` holds ``entries`` of which none by a key
    of ``trusted`` (those trusted for ``org``) verifies."""
    present = ", ".join(shown_key_id(e.key_id) for e in entries) or "none"
    failed = (
        f"{document}: no signature by a key trusted for the org {org!r} verifies "
        f"(signed by: {present}; trusted: {_shown_ids(trusted)})"
    )
    trusted_ids = {key.key_id for key in trusted}
    mismatched = dict.fromkeys(e.key_id for e in entries if e.key_id in trusted_ids)
    if mismatched:
        # A key the user trusts signed something, but not these bytes at this path: an
        # edit after signing, or a signature replayed from another document.
        return SignatureError(
            f"{failed}: the document does not match its signature by the trusted key "
            f"{', '.join(mismatched)}; it was changed after it was signed, "
            "or the signature is another document's",
            hint=f"the signer is already in {TRUSTED_KEYS_VAR}, so no key is missing: the CDN "
            "serves a document other than the one signed; do not use it, and report it to "
            "the kernel's publisher",
        )
    return SignatureError(
        failed,
        hint=f"if the publisher signs with a new key, {_add_key_hint(org)}; otherwise the "
        "document was changed after it was signed: report it to the kernel's publisher",
    )


def holds_trusted_signature(sig_bytes: bytes, keys: Sequence[TrustedKey], org: str) -> bool:
    """Whether the ``.sig`` document ``sig_bytes`` holds a signature, valid or not, by a
    key of ``keys`` trusted for ``org``. A malformed one does, as far as anyone can tell:
    it may have been a trusted key's, tampered with."""
    try:
        entries = parse_signatures(sig_bytes, source=SIG_SUFFIX)
    except SignatureError:
        return True
    trusted = {key.key_id for key in keys if key.trusted_for(org)}
    return any(entry.key_id in trusted for entry in entries)


def cached_signer(
    entry: Path, info: RepoInfo, variant: str, content_hash: str, keys: Sequence[TrustedKey]
) -> str | None:
    """The key of ``keys`` whose signature, in the ``metadata.json.sig`` cached in the
    entry directory ``entry``, verifies the ``metadata.json`` cached beside it, where that
    manifest is of ``content_hash`` (the content the entry's files were verified against);
    ``None`` when no key's does, or either file is missing or malformed.

    Offline: an entry that another process cached, vouched for by a key this one does
    not trust (a fleet mid-rotation, trusting the old key here and the new one there),
    is vouched for by this one's keys without a request.
    """
    try:
        data = read_regular(entry / MANIFEST_NAME)
        signature = read_regular(entry / MANIFEST_SIGNATURE_NAME)
        if parse_metadata(data).content_hash != content_hash:
            return None
        return _signed_by(keys, "metadata", info, variant, data, signature)
    except (OSError, ManifestError, SignatureError):
        return None


def proven_variants(proof: object, info: RepoInfo, keys: Sequence[TrustedKey]) -> list[str] | None:
    """The names of the ``variants.json`` of ``info`` that a variant index records with its
    ``.sig`` as ``proof`` (see :attr:`~.._cache.layout.VariantIndex.proof`), where a key
    of ``keys`` signed it; ``None`` when none did, or ``proof`` is malformed.

    A process that trusts other keys than the one that recorded it shares its list, offline
    too, the way :func:`cached_signer` shares a cached entry.
    """
    if not isinstance(proof, list) or len(proof) != 2:
        return None
    try:
        data, signature = (base64.b64decode(part, validate=True) for part in proof)
        _signed_by(keys, "variants", info, None, data, signature)
        return parse_variants(data)
    except (TypeError, ValueError, ManifestError, SignatureError):
        return None


def _signed_by(
    keys: Sequence[TrustedKey],
    kind: DocumentKind,
    info: RepoInfo,
    variant: str | None,
    data: bytes,
    signature: bytes,
) -> str | None:
    """The key of ``keys`` whose signature of a document of ``info`` (``kind``, of
    ``variant``) in ``signature`` verifies ``data``: a document the cache kept, checked
    again with this process's keys.

    Raises:
        SignatureError: none does.
    """
    return verify_document(
        kind=kind,
        repo_id=info.repo_id,
        version=info.version,
        variant=variant,
        data=data,
        sig_bytes=signature,
        keys=keys,
        org=info.org,
        require=True,
    )


def variants_proof(data: bytes, signature: bytes) -> tuple[str, str]:
    """A signed ``variants.json`` and its ``.sig`` as a variant index records them: base64."""
    return base64.b64encode(data).decode("ascii"), base64.b64encode(signature).decode("ascii")
