"""Ed25519 through ``cryptography``, imported only when a key signs or signatures are checked.

``cryptography`` comes with the ``signing`` extra. Importing this module, or
flashhub_kernels, never imports it; a missing (or broken) one is a
:class:`~flashhub_kernels.errors.SignatureError` that says what to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from ..errors import SignatureError

INSTALL_HINT = "pip install 'flashhub-kernels[signing]'"


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


# RFC 8032's first Ed25519 test vector: a public key and its signature of the empty message.
_KNOWN_KEY = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
_KNOWN_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
    "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)


def import_cryptography() -> None:
    """Import what :func:`verifies` needs of ``cryptography``, in the calling thread, where
    it is installed, by checking a known signature: some versions (42) import their
    OpenSSL backend when a key is first used. A missing one is reported when a signature
    is checked."""
    with suppress(SignatureError):  # cryptography is missing
        verifies(_KNOWN_KEY, _KNOWN_SIGNATURE, b"")


def verifies(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is the key's signature of ``message`` (``False`` also for a
    public key that is no point of the curve)."""
    with _cryptography():
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):  # ValueError: not a point of the curve
        return False
    return True


def public_key_of(seed: bytes) -> bytes:
    """The 32 raw bytes of the public key of the private key ``seed``."""
    with _cryptography():
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte signature of ``message`` by the private key ``seed``."""
    with _cryptography():
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    return Ed25519PrivateKey.from_private_bytes(seed).sign(message)
