"""The public keys a user trusts to vouch for kernels, parsed from their text form.

A public key is one line, ``flashhub-ed25519:<base64 of the 32 raw key bytes>``, the form
``flashhub keygen`` prints, optionally scoped to one org: ``<org>:flashhub-ed25519:...``.
Its key id is the first 16 hex digits of the sha256 of the raw key.

A process that trusts keys parses them once, at its first load, warm loads included, so
this module is kept as light as the import hook: the standard library's ``base64``,
``hashlib`` and ``os`` only, and no ``re``, ``dataclasses`` or ``typing``. The
signatures themselves are :mod:`.verification`'s business, on the cold path. The keys a
project's ``pyproject.toml`` lists are read here too (:func:`read_trusted_keys`), which
imports the TOML reader when it runs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat

from .._constants import PROJECT_FILE_BYTES, TRUSTED_KEYS_VAR
from .._models.names import module_segment, parse_repo_id
from .._models.record import Record

# Not typing.TYPE_CHECKING: importing typing would cost the warm path more than this module.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ..errors import ConfigError

__all__ = [
    "KEY_PREFIX",
    "TrustedKey",
    "decode_base64",
    "is_key_id",
    "key_id_of",
    "load_trusted_keys",
    "no_key_error",
    "parse_trusted_keys",
    "public_key_line",
    "read_trusted_keys",
    "shown_key_id",
]

KEY_PREFIX = "flashhub-ed25519:"
_PUBLIC_KEY_BYTES = 32
_HEX_DIGITS = frozenset("0123456789abcdef")
_KEY_ID_LENGTH = 16


def is_key_id(text: object) -> bool:
    """Whether ``text`` is a key id: 16 lowercase hex digits."""
    return isinstance(text, str) and len(text) == _KEY_ID_LENGTH and _HEX_DIGITS.issuperset(text)


def shown_key_id(key_id: str) -> str:
    """A key id read from a ``.sig`` file, fit to print: as it is if well-formed, else
    escaped (its ``repr``, cut to 40 characters); the file is the CDN's, not the user's."""
    return key_id if is_key_id(key_id) else repr(key_id[:40])


def key_id_of(public_key: bytes) -> str:
    """The key id of a raw Ed25519 public key: the first 16 hex digits of its sha256."""
    return hashlib.sha256(public_key).hexdigest()[:_KEY_ID_LENGTH]


def public_key_line(public_key: bytes) -> str:
    """``flashhub-ed25519:<base64>``, the one-line form of a public key."""
    return KEY_PREFIX + base64.b64encode(public_key).decode("ascii")


def decode_base64(text: str, size: int) -> bytes | None:
    """Strict standard base64 of exactly ``size`` bytes, or ``None``."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == size else None


class TrustedKey(Record):
    """A public key the user trusts to vouch for kernels.

    Attributes:
        key_id: The first 16 hex digits of the sha256 of ``public_key``.
        public_key: The 32 raw bytes of the Ed25519 public key.
        orgs: The orgs whose kernels the key may vouch for; ``None``: every org.
    """

    key_id: str
    public_key: bytes
    orgs: frozenset[str] | None = None

    @property
    def public_line(self) -> str:
        """The key as ``flashhub-ed25519:<base64>``."""
        return public_key_line(self.public_key)

    def trusted_for(self, org: str) -> bool:
        """Whether the key may vouch for the kernels of ``org``.

        Orgs whose names differ only in ``-`` and ``_`` count as one org: both are
        ``flashhub.<org>`` to the import hook, which may load either spelling. A key
        scoped to ``acme_corp`` thus covers ``acme-corp`` too, and the other way round.
        """
        if self.orgs is None:
            return True
        wanted = module_segment(org)
        return any(module_segment(scoped) == wanted for scoped in self.orgs)


def _refused(message: str, *, hint: str) -> ConfigError:
    """A :class:`~flashhub_kernels.errors.ConfigError`: the errors are imported only when
    a list of keys is wrong, not by every load that parses a right one."""
    from ..errors import ConfigError

    return ConfigError(message, hint=hint)


def _entries(text: str) -> Iterator[str]:
    """The entries of a trusted-key list: ``#`` starts a comment to the end of its line;
    commas, spaces and line breaks separate entries."""
    for line in text.splitlines():
        yield from line.split("#", 1)[0].replace(",", " ").split()


def _parse_entry(entry: str, source: str) -> tuple[bytes, str | None]:
    """``(raw public key, org or None)`` of one entry; ``ConfigError`` naming it if bad."""
    if "ed25519-private" in entry:
        # Never echo it: it is a secret that ended up in the wrong place.
        raise _refused(
            f"{source} holds a private key (flashhub-ed25519-private:...); trusted keys are "
            "public keys (flashhub-ed25519:...): remove it, and treat that key as leaked",
            hint=f"fix {source}",
        )
    shown = repr(entry if len(entry) <= 120 else entry[:117] + "...")
    org: str | None = None
    key_text = entry
    if not entry.startswith(KEY_PREFIX):
        org, _, key_text = entry.partition(":")
        try:
            parse_repo_id(f"{org}/pkg")
        except ValueError:
            raise _refused(
                f"{source}: entry {shown} is neither {KEY_PREFIX}<base64> nor "
                f"<org>:{KEY_PREFIX}<base64> with an org that starts with a letter or '_' and "
                "holds only letters, digits, '-' and '_'",
                hint=f"fix {source}",
            ) from None
        if not key_text.startswith(KEY_PREFIX):
            raise _refused(
                f"{source}: entry {shown} must be {KEY_PREFIX}<base64> or "
                f"<org>:{KEY_PREFIX}<base64>",
                hint=f"fix {source}",
            )
    raw = decode_base64(key_text.removeprefix(KEY_PREFIX), _PUBLIC_KEY_BYTES)
    if raw is None:
        raise _refused(
            f"{source}: entry {shown} is not a public key: the part after {KEY_PREFIX!r} must "
            f"be standard base64 of {_PUBLIC_KEY_BYTES} bytes, as `flashhub keygen` prints it",
            hint=f"fix {source}",
        )
    return raw, org


def parse_trusted_keys(text: str, *, source: str) -> tuple[TrustedKey, ...]:
    """Parse a list of trusted public keys.

    Entries are separated by commas, spaces or line breaks, and ``#`` starts a comment.
    Each entry is ``flashhub-ed25519:<base64>`` (trusted for every org) or
    ``<org>:flashhub-ed25519:<base64>`` (trusted for that org only). A key listed
    several times is trusted for the union of its orgs (every org if any entry is
    unscoped). Keys come back in the order of their first entry.

    Args:
        text: The list.
        source: Where it comes from, for error messages (``FLASHHUB_TRUSTED_KEYS``, a path).

    Raises:
        ConfigError: An entry is malformed; the message names ``source`` and the entry
            (never a private key that was pasted by mistake).
    """
    scopes: dict[bytes, set[str] | None] = {}
    for entry in _entries(text):
        raw, org = _parse_entry(entry, source)
        if org is None:
            scopes[raw] = None
        elif raw not in scopes:
            scopes[raw] = {org}
        elif (scope := scopes[raw]) is not None:
            scope.add(org)
    return tuple(
        TrustedKey(key_id_of(raw), raw, None if scope is None else frozenset(scope))
        for raw, scope in scopes.items()
    )


def no_key_error(what: str, undo: str) -> ConfigError:
    """The error for a list of trusted keys that is given but names none.

    Such a list is a mistake (a file emptied, a variable set to ``,``), and taking it for
    "no key" would switch every signature check off. ``what`` says which list; ``undo``
    how to trust no key on purpose.
    """
    return _refused(
        f"{what} lists no key, so no signature would be checked",
        hint=f"add the publisher's public key ({KEY_PREFIX}..., as `flashhub keygen` prints "
        f"it), or {undo} to trust no key",
    )


def load_trusted_keys(value: str, *, source: str = TRUSTED_KEYS_VAR) -> tuple[TrustedKey, ...]:
    """The keys ``value`` gives: the keys in the file it names, or the keys it lists.

    This is what ``FLASHHUB_TRUSTED_KEYS`` accepts: a path to a file of keys (one per
    line, as :func:`parse_trusted_keys` reads them; a ``KEYFILE.pub`` works), or the keys
    themselves. An empty value is an error, unlike for other ``FLASHHUB_*`` variables: a
    launcher's ``FLASHHUB_TRUSTED_KEYS=$KEYS`` with ``KEYS`` unset would otherwise switch
    every signature check off.

    Raises:
        ConfigError: The value, or the file, lists no key; the file may be written by
            another user (refused as ssh refuses such an ``authorized_keys``), or cannot
            be read; or an entry is malformed.
    """
    text = value.strip()
    listed = KEY_PREFIX in text or "ed25519-private" in text  # a private one: never echoed
    path = os.path.expanduser(text)
    try:
        is_file = not listed and os.path.isfile(path)
    except (OSError, ValueError):  # a name too long, a NUL: not a path
        is_file = False
    if is_file:
        keys = parse_trusted_keys(_read_keys_file(path, source), source=f"{source} file {path}")
        if not keys:
            raise no_key_error(f"{source} names the file {path}, which", f"unset {source}")
        return keys
    if not listed and (os.sep in text or "/" in text):
        raise _refused(
            f"{source}: {text!r} is neither an existing file nor a list of "
            f"{KEY_PREFIX}<base64> keys",
            hint=f"fix {source}: the path of a file of keys, or the keys themselves",
        )
    keys = parse_trusted_keys(text, source=source)
    if not keys:
        raise no_key_error(f"{source}={value!r}", f"unset {source}")
    return keys


def read_trusted_keys(path: Path) -> tuple[TrustedKey, ...]:
    """``[tool.flashhub] trusted-keys`` of a ``pyproject.toml``: a list of public keys,
    each ``flashhub-ed25519:<base64>`` or ``<org>:flashhub-ed25519:<base64>`` (or one
    string of them, as ``FLASHHUB_TRUSTED_KEYS`` takes it).

    Raises:
        ConfigError: the file cannot be read (not TOML, nested too deeply), the list
            is malformed, as for a malformed ``FLASHHUB_*`` setting, or it names no key
            (``[]``, ``","``).
    """
    # Only a project whose file may list keys comes here: the TOML reader and the errors.
    from .._utils.filesystem import read_regular
    from .._utils.pyproject import load_toml, lookup
    from ..errors import ConfigError, LockfileError

    source = f"{path} [tool.flashhub] trusted-keys"
    fix = f"fix [tool.flashhub] trusted-keys in {path}"
    try:
        data = read_regular(path, PROJECT_FILE_BYTES)
        keys = lookup(load_toml(data), "tool", "flashhub", "trusted-keys")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the trusted keys in {path}: {exc}", hint="make the file readable"
        ) from None
    except LockfileError as exc:  # no TOML parser: Python 3.10 without tomli
        message = f"cannot read the trusted keys in {path}: {exc.message}"
        raise ConfigError(message, hint=exc.hint) from None
    except ValueError as exc:
        raise ConfigError(
            f"cannot read the trusted keys in {path}: the file {exc}",
            hint="fix the file's TOML",
        ) from None
    if keys is None:
        return ()
    if isinstance(keys, str):
        keys = [keys]
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys):
        raise ConfigError(
            f"{source} must be a list of strings, e.g. "
            '["flashhub-ed25519:...", "<org>:flashhub-ed25519:..."]',
            hint=fix,
        )
    try:
        parsed = parse_trusted_keys("\n".join(keys), source=source)
    except ConfigError as exc:  # its hint names the source; this one says where it is
        raise ConfigError(exc.message, hint=fix) from None
    if not parsed:
        raise no_key_error(source, "remove the setting")
    return parsed


def _read_keys_file(path: str, source: str) -> str:
    """The text of a trusted keys file that only its owner (this user or root) may write."""
    try:
        with open(path, encoding="utf-8") as f:
            st = os.fstat(f.fileno())
            data = f.read().removeprefix("\ufeff")  # the BOM of a file saved by Notepad
    except (OSError, UnicodeDecodeError) as exc:
        raise _refused(
            f"{source}: cannot read the trusted keys file {path}: {exc}",
            hint=f"make the file readable, or fix {source}",
        ) from None
    if os.name != "posix":
        return data
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (os.getuid(), 0):
        problem, hint = "is owned by another user", f"chown $USER {path}; chmod go-w {path}"
    elif mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "its group" if not mode & stat.S_IWOTH else "every user"
        problem, hint = f"is writable by {who}", f"chmod go-w {path}"
    else:
        return data
    raise _refused(
        f"{source}: refusing the trusted keys file {path}: it {problem} (uid {st.st_uid}, "
        f"mode {mode:04o}), so whoever can write it could make this process trust their key",
        hint=hint,
    )
