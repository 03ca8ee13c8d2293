"""Signing keys: an Ed25519 private key, generated and kept in a key file.

A private key is one line of text, in the key file ``flashhub keygen`` writes (mode
0600): ``flashhub-ed25519-private:<base64 of the 32-byte seed>``; its public key goes to
``<key file>.pub`` in the form clients trust (:mod:`.trusted_keys`). Deriving the public
key and signing need ``cryptography`` (:mod:`.ed25519`).
"""

from __future__ import annotations

import base64
import functools
import os
import stat
from pathlib import Path

from .._utils.filesystem import write_atomic
from ..errors import PublishError
from . import ed25519
from .trusted_keys import KEY_PREFIX, decode_base64, key_id_of, public_key_line

PRIVATE_KEY_PREFIX = "flashhub-ed25519-private:"

_SEED_BYTES = 32
_MAX_KEY_FILE_BYTES = 64 * 1024
_PRIVATE_MODE = 0o600
_PUBLIC_MODE = 0o644


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
        self.public_key = ed25519.public_key_of(self._seed)
        self.key_id = key_id_of(self.public_key)
        self.public_line = public_key_line(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of ``message``."""
        return ed25519.sign(self._seed, message)

    def private_line(self) -> str:
        """``flashhub-ed25519-private:<base64 seed>``: the secret line of a key file."""
        return PRIVATE_KEY_PREFIX + base64.b64encode(self._seed).decode("ascii")

    def __repr__(self) -> str:  # never the seed
        return f"SigningKey(key_id={self.key_id!r})"


def generate_signing_key() -> SigningKey:
    """A new random key (needs ``cryptography``, to derive the public key)."""
    return SigningKey(os.urandom(_SEED_BYTES))


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
        with open(path, "rb") as f:  # a pipe too: --sign <(vault read ...)
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            data = f.read(_MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise PublishError(
            f"cannot read the signing key {path}: {exc.strerror or exc}",
            hint="create one with `flashhub keygen --out KEYFILE`",
        ) from None
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
    Neither file is overwritten unless ``force``. Missing directories are created (0700).

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
    # A key's usual home (~/.config/flashhub/) may not exist yet: made private, as ssh
    # does, each directory made (mkdir's parents=True makes the others as the umask says).
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()]
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
    line = f"{key.public_line}\n".encode("ascii")
    private = functools.partial(write_atomic, path, secret, mode=_PRIVATE_MODE, overwrite=force)
    public_line = functools.partial(write_atomic, public, line, mode=_PUBLIC_MODE)
    # Without force the private file goes first, written only where there is none: that
    # claims the name from another keygen. With force the public one does: where it cannot
    # be written, the old private key is still there, and the pair as it was.
    for write in (public_line, private) if force else (private, public_line):
        write()
    return public
