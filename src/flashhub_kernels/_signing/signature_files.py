"""The ``.sig`` files beside the CDN's signed documents: parsed, written, signed into.

Beside each signed document ``X`` the CDN holds ``X.sig``::

    {"format": 1, "signatures": [{"key_id": "<16 hex>", "signature": "<base64, 64 bytes>"}]}

A list, so that a document can carry the signatures of an old and a new key while keys
are rotated. What each signature signs is the document's statement
(:func:`.statements.statement`), never anything read from the ``.sig`` file. Parsing and
writing are pure; only signing needs ``cryptography``.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._constants import SIG_SUFFIX
from .._models.manifest import dump_json, load_json
from .._models.record import Record
from ..errors import ManifestError, SignatureError
from .statements import DocumentKind, document_name, statement
from .trusted_keys import decode_base64

if TYPE_CHECKING:
    from .signing_keys import SigningKey


SIGNATURE_FORMAT = 1
MAX_SIGNATURE_BYTES = 64 * 1024  # a .sig holds a few entries of ~130 bytes each
MAX_SIGNATURES = 64

_SIGNATURE_BYTES = 64
_TAMPERED_HINT = (
    "the CDN serves a broken or tampered signature file; report it to the kernel's publisher"
)


class SignatureEntry(Record):
    """One entry of a ``.sig`` document: a key id and its base64 signature, as written."""

    key_id: str
    signature: str

    def decoded(self, source: str) -> bytes:
        """The 64 raw signature bytes; :class:`SignatureError` if they are not."""
        raw = decode_base64(self.signature, _SIGNATURE_BYTES)
        if raw is None:
            raise SignatureError(
                f"{source}: the signature of key {self.key_id} is not base64 of "
                f"{_SIGNATURE_BYTES} bytes",
                hint=_TAMPERED_HINT,
            )
        return raw


def parse_signatures(data: bytes, *, source: str) -> tuple[SignatureEntry, ...]:
    """Validate a ``.sig`` document and return its entries, in order.

    Only the shape is checked here: every entry must be an object with a string
    ``key_id`` and a string ``signature`` (other fields are ignored). The signature of
    an entry is decoded when a trusted key needs it (:meth:`SignatureEntry.decoded`),
    so entries of unknown keys never fail a document.

    Raises:
        SignatureError: The document is too large, not JSON, of an unknown ``format``,
            or not of this shape.
    """
    if len(data) > MAX_SIGNATURE_BYTES:
        raise SignatureError(
            f"{source} is {len(data)} bytes, over the {MAX_SIGNATURE_BYTES // 1024} KiB limit",
            hint=_TAMPERED_HINT,
        )
    try:
        document = load_json(data, source)
    except ManifestError as exc:
        raise SignatureError(exc.message, hint=_TAMPERED_HINT) from None
    if not isinstance(document, dict):
        raise SignatureError(f"{source} must be a JSON object", hint=_TAMPERED_HINT)
    fmt = document.get("format")
    if fmt != SIGNATURE_FORMAT or isinstance(fmt, bool):
        raise SignatureError(
            f"{source} has format {fmt!r}; this flashhub-kernels reads format {SIGNATURE_FORMAT}",
            hint="upgrade flashhub-kernels if the publisher uses a newer format; otherwise "
            + _TAMPERED_HINT,
        )
    entries = document.get("signatures")
    if not isinstance(entries, list) or len(entries) > MAX_SIGNATURES:
        raise SignatureError(
            f'{source} must hold a "signatures" list of at most {MAX_SIGNATURES} entries',
            hint=_TAMPERED_HINT,
        )
    parsed = []
    for entry in entries:
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("key_id"), str)
            and isinstance(entry.get("signature"), str)
        ):
            raise SignatureError(
                f'{source}: each signature must be an object with string "key_id" and '
                '"signature" fields',
                hint=_TAMPERED_HINT,
            )
        parsed.append(SignatureEntry(entry["key_id"], entry["signature"]))
    return tuple(parsed)


def dump_signatures(entries: Iterable[SignatureEntry]) -> bytes:
    """A ``.sig`` document holding ``entries``, in the publisher's canonical JSON form."""
    return dump_json(
        {
            "format": SIGNATURE_FORMAT,
            "signatures": [{"key_id": e.key_id, "signature": e.signature} for e in entries],
        }
    )


def sign_document(
    kind: DocumentKind,
    repo_id: str,
    version: int | None,
    variant: str | None,
    data: bytes,
    key: SigningKey,
    existing_sig: bytes | None,
) -> bytes:
    """The ``.sig`` document for ``data`` once ``key`` has signed it.

    Entries of ``existing_sig`` by other keys are kept in their place; one by the same
    key is replaced (in place), otherwise the new entry is appended. Pass ``None`` when
    the document changed: the old entries sign other bytes.

    Raises:
        SignatureError: ``existing_sig`` is malformed, or ``cryptography`` is missing.
        ValueError: The arguments are malformed (see :func:`statement`).
    """
    message = statement(kind, repo_id, version, variant, data)
    source = document_name(repo_id, version, variant) + SIG_SUFFIX
    try:
        entries = list(parse_signatures(existing_sig, source=source)) if existing_sig else []
    except SignatureError as exc:
        raise SignatureError(
            exc.message, hint="delete the .sig file and sign the document again"
        ) from None
    new = SignatureEntry(key.key_id, base64.b64encode(key.sign(message)).decode("ascii"))
    mine = [i for i, e in enumerate(entries) if e.key_id == key.key_id]
    if mine:
        entries[mine[0]] = new
        entries = [e for i, e in enumerate(entries) if i not in mine[1:]]
    else:
        entries.append(new)
    return dump_signatures(entries)
