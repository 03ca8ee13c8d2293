"""Ed25519 signatures over the CDN's documents: keys, statements, ``.sig`` files.

Beside each signed document ``X`` (a variant's ``metadata.json``, a version's
``variants.json``, a kernel's ``versions.json``) the CDN holds ``X.sig``::

    {"format": 1, "signatures": [{"key_id": "<16 hex>", "signature": "<base64, 64 bytes>"}]}

A list, so that a document can carry the signatures of an old and a new key while keys
are rotated. What is signed is never read from the ``.sig`` file: the verifier builds a
*statement* from what it asked for (:func:`statement`), which binds the kind of
document, the repo id, the version, the variant and the sha256 of the document's exact
bytes. A signature therefore cannot be replayed for another kernel, version, variant or
kind of document.

Public keys, the ones a user trusts, are parsed in :mod:`._trusted_keys`. A private key
is one line of text too, in the key file ``flashhub keygen`` writes (mode 0600):
``flashhub-ed25519-private:<base64 of the 32-byte seed>``.

The parsing here is pure and needs no third-party package. Signing and verifying use
``cryptography``, imported only inside the functions that need it (the ``signing``
extra), so importing this module, or flashhub_kernels, never imports it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, NamedTuple

from .._constants import SIG_SUFFIX, TRUSTED_KEYS_VAR
from .._models.manifest import dump_json, load_json
from .._models.names import check_version, parse_repo_id
from .._utils.filesystem import write_atomic
from ..errors import ManifestError, PublishError, SignatureError
from .trusted_keys import (
    KEY_PREFIX,
    TrustedKey,
    decode_base64,
    key_id_of,
    public_key_line,
    shown_key_id,
)

__all__ = [
    "INSTALL_HINT",
    "MAX_SIGNATURES",
    "MAX_SIGNATURE_BYTES",
    "PRIVATE_KEY_PREFIX",
    "SIGNATURE_FORMAT",
    "SIG_SUFFIX",
    "DocumentKind",
    "SignatureEntry",
    "SigningKey",
    "dump_signatures",
    "generate_signing_key",
    "load_signing_key",
    "parse_signatures",
    "public_key_file",
    "sign_document",
    "statement",
    "verify_document",
    "write_key_pair",
]

DocumentKind = Literal["metadata", "variants", "versions"]

PRIVATE_KEY_PREFIX = "flashhub-ed25519-private:"
SIGNATURE_FORMAT = 1
MAX_SIGNATURE_BYTES = 64 * 1024  # a .sig holds a few entries of ~130 bytes each
MAX_SIGNATURES = 64
INSTALL_HINT = "pip install 'flashhub-kernels[signing]'"

_KINDS: tuple[DocumentKind, ...] = ("metadata", "variants", "versions")
_STATEMENT_HEADER = "flashhub-signed-document v1"
_SEED_BYTES = 32
_SIGNATURE_BYTES = 64
_MAX_KEY_FILE_BYTES = 64 * 1024
_PRIVATE_MODE = 0o600
_PUBLIC_MODE = 0o644
_TAMPERED_HINT = (
    "the CDN serves a broken or tampered signature file; report it to the kernel's publisher"
)


# --- statements and .sig documents: pure -----------------------------------------------


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


def _document_name(
    kind: DocumentKind, repo_id: str, version: int | None, variant: str | None
) -> str:
    """Where the document lies under the CDN prefix, for messages."""
    if version is None:
        return f"{repo_id}/versions.json"
    if variant is None:
        return f"{repo_id}/v{version}/variants.json"
    return f"{repo_id}/v{version}/build/{variant}/metadata.json"


class SignatureEntry(NamedTuple):
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


# --- cryptography, imported on use -----------------------------------------------------


@contextmanager
def _cryptography() -> Iterator[None]:
    """Turn a missing (or broken) ``cryptography`` into a :class:`SignatureError`."""
    try:
        yield
    except ImportError as exc:
        raise SignatureError(
            f"Ed25519 signatures need the 'cryptography' package, which cannot be imported ({exc})",
            hint=f"install it: {INSTALL_HINT}",
        ) from None


def _verifies(public_key: bytes, signature: bytes, message: bytes) -> bool:
    with _cryptography():
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):  # ValueError: not a point of the curve
        return False
    return True


def _public_key_of(seed: bytes) -> bytes:
    with _cryptography():
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


def _sign(seed: bytes, message: bytes) -> bytes:
    with _cryptography():
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.from_private_bytes(seed).sign(message)


# --- verifying ---------------------------------------------------------------------------


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
        keys: The trusted keys (:func:`._trusted_keys.load_trusted_keys`).
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
    document = _document_name(kind, repo_id, version, variant)
    add_key = (
        f"add the publisher's public key to {TRUSTED_KEYS_VAR} (flashhub-ed25519:... for "
        f"every org, or {org}:flashhub-ed25519:... for this org only)"
    )
    if not trusted:
        raise SignatureError(
            f"{document}: signatures are required, but no trusted key is configured for "
            f"the org {org!r}",
            hint=add_key,
        )
    trusted_ids = ", ".join(sorted({k.key_id for k in trusted}))
    if sig_bytes is None:
        raise SignatureError(
            f"{document} is not signed ({document}.sig does not exist), but keys are trusted "
            f"for the org {org!r}: {trusted_ids}",
            hint="ask the kernel's publisher to sign it with `flashhub sign`",
        )
    source = f"{document}{SIG_SUFFIX}"
    entries = parse_signatures(sig_bytes, source=source)
    mismatched: list[str] = []  # trusted keys whose signature is not over these bytes
    for entry in entries:
        for key in trusted:
            if entry.key_id != key.key_id:
                continue
            if _verifies(key.public_key, entry.decoded(source), message):
                return key.key_id
            mismatched.append(key.key_id)
    present = ", ".join(shown_key_id(e.key_id) for e in entries) or "none"
    failed = (
        f"{document}: no signature by a key trusted for the org {org!r} verifies "
        f"(signed by: {present}; trusted: {trusted_ids})"
    )
    if mismatched:
        # A key the user trusts signed something, but not these bytes at this path: an
        # edit after signing, or a signature replayed from another document.
        raise SignatureError(
            f"{failed}: the document does not match its signature by the trusted key "
            f"{', '.join(dict.fromkeys(mismatched))}; it was changed after it was signed, "
            "or the signature is another document's",
            hint=f"the signer is already in {TRUSTED_KEYS_VAR}, so no key is missing: the CDN "
            "serves a document other than the one signed; do not use it, and report it to "
            "the kernel's publisher",
        )
    raise SignatureError(
        failed,
        hint=f"if the publisher signs with a new key, {add_key}; otherwise the document was "
        "changed after it was signed: report it to the kernel's publisher",
    )


# --- signing -----------------------------------------------------------------------------


class SigningKey:
    """An Ed25519 private key that signs documents.

    Attributes:
        public_key: The 32 raw bytes of the public key.
        key_id: Its key id (:func:`key_id_of`).
        public_line: ``flashhub-ed25519:<base64>``, the line clients put in
            ``FLASHHUB_TRUSTED_KEYS``.
    """

    __slots__ = ("_seed", "key_id", "public_key", "public_line")

    def __init__(self, seed: bytes) -> None:
        if len(seed) != _SEED_BYTES:
            raise ValueError(f"an Ed25519 seed has {_SEED_BYTES} bytes")
        self._seed = bytes(seed)
        self.public_key = _public_key_of(self._seed)
        self.key_id = key_id_of(self.public_key)
        self.public_line = public_key_line(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return _sign(self._seed, message)

    def private_line(self) -> str:
        """``flashhub-ed25519-private:<base64 seed>``: the secret line of a key file."""
        return PRIVATE_KEY_PREFIX + base64.b64encode(self._seed).decode("ascii")

    def __repr__(self) -> str:  # never the seed
        return f"SigningKey(key_id={self.key_id!r})"


def generate_signing_key() -> SigningKey:
    """A new random key (needs ``cryptography``, to derive the public key)."""
    return SigningKey(os.urandom(_SEED_BYTES))


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
    source = _document_name(kind, repo_id, version, variant) + SIG_SUFFIX
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


# --- key files ---------------------------------------------------------------------------


def load_signing_key(path: str | os.PathLike[str]) -> SigningKey:
    """Read a private key file written by :func:`write_key_pair` (``flashhub keygen``).

    Refused, like ssh refuses, when the file may be read or written by the group or by
    others (POSIX only).

    Raises:
        PublishError: The file is not private, is not a flashhub private key (a ``.pub``
            is named as such), or cannot be read.
        SignatureError: ``cryptography`` is missing.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise PublishError(
            f"cannot read the signing key {path}: {exc.strerror or exc}",
            hint="create one with `flashhub keygen --out KEYFILE`",
        ) from None
    with os.fdopen(fd, "rb") as f:
        mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
        data = f.read(_MAX_KEY_FILE_BYTES + 1)
    seed = _seed_in(data)
    if seed is None:
        public = KEY_PREFIX.encode() in data and PRIVATE_KEY_PREFIX.encode() not in data
        raise PublishError(
            f"{path} is a public key, not a signing key"
            if public
            else f"{path} is not a flashhub signing key (a line {PRIVATE_KEY_PREFIX}<base64>)",
            hint="pass the private key file that `flashhub keygen --out KEYFILE` wrote "
            "(KEYFILE, not KEYFILE.pub)",
        )
    if os.name == "posix" and mode & 0o077:
        raise PublishError(
            f"the signing key {path} is accessible by others (mode {mode:04o}); "
            "a private key must be readable by its owner only",
            hint=f"chmod 600 {path}",
        )
    return SigningKey(seed)


def _seed_in(data: bytes) -> bytes | None:
    """The seed of the one private key line in a key file's bytes, or ``None``."""
    if len(data) > _MAX_KEY_FILE_BYTES:
        return None
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None
    keys = [line.strip() for line in lines if line.strip().startswith(PRIVATE_KEY_PREFIX)]
    if len(keys) != 1:
        return None
    return decode_base64(keys[0].removeprefix(PRIVATE_KEY_PREFIX), _SEED_BYTES)


def public_key_file(path: str | os.PathLike[str]) -> Path:
    """Where the public key of the key file ``path`` goes: ``<path>.pub``."""
    path = Path(path)
    return path.with_name(path.name + ".pub")


def write_key_pair(key: SigningKey, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write ``key`` to ``path`` (mode 0600) and its public line to ``path.pub`` (0644).

    The private file holds a comment line (key id and public key) and the private line.
    Neither file is overwritten unless ``force``.

    Returns:
        The path of the public key file.

    Raises:
        PublishError: A file exists and ``force`` is false.
        OSError: A file cannot be written.
    """
    path = Path(path)
    public = public_key_file(path)
    if not force:
        for existing in (path, public):
            if existing.exists() or existing.is_symlink():
                raise PublishError(
                    f"{existing} already exists; not overwriting a key",
                    hint="choose another --out, or pass --force to replace it (the old key "
                    "is lost, and what it signed must be signed again)",
                )
    secret = (
        f"# flashhub Ed25519 signing key {key.key_id}; public key: {key.public_line}\n"
        f"{key.private_line()}\n"
    ).encode("ascii")
    write_atomic(path, secret, mode=_PRIVATE_MODE, overwrite=force)
    write_atomic(public, f"{key.public_line}\n".encode("ascii"), mode=_PUBLIC_MODE)
    return public
