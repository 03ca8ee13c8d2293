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


def import_cryptography() -> None:
    """Import what :func:`verifies` needs of ``cryptography``, in the calling thread, where
    it is installed; a missing one is reported when a signature is checked."""
    with suppress(ImportError):
        import cryptography.exceptions
        import cryptography.hazmat.primitives.asymmetric.ed25519  # noqa: F401


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
