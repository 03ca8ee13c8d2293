"""A project's ``pyproject.toml``: the TOML reader, and the trusted keys it may list.

The settings (:mod:`~.._config`) read ``[tool.flashhub] trusted-keys`` here, the lock files
(:mod:`~.._lockfiles.format`) ``[tool.flashhub.dependencies]`` through :func:`load_toml`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from .._constants import PROJECT_FILE_BYTES
from .._models.manifest import parse_capped
from .._signing.trusted_keys import no_key_error, parse_trusted_keys
from ..errors import ConfigError, LockfileError
from .filesystem import read_regular

if TYPE_CHECKING:
    from pathlib import Path

    from .._signing.trusted_keys import TrustedKey


def read_trusted_keys(path: Path) -> tuple[TrustedKey, ...]:
    """``[tool.flashhub] trusted-keys`` of a ``pyproject.toml``: a list of public keys,
    each ``flashhub-ed25519:<base64>`` or ``<org>:flashhub-ed25519:<base64>`` (or one
    string of them, as ``FLASHHUB_TRUSTED_KEYS`` takes it).

    Raises:
        ConfigError: the file cannot be read (not TOML, nested too deeply), the list
            is malformed, as for a malformed ``FLASHHUB_*`` setting, or it names no key
            (``[]``, ``","``).
    """
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


def lookup(document: dict[str, Any], *keys: str) -> object:
    """``document[keys[0]][keys[1]]...``, or ``None`` where a table or key is missing."""
    value: object = document
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def load_toml(data: bytes) -> dict[str, Any]:
    """``data`` as TOML; ``ValueError`` saying why not (see
    :func:`~.._models.manifest.parse_capped`)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        tomllib = _tomli()

    def parse(data: bytes) -> Any:
        return tomllib.loads(data.decode("utf-8"))

    document: dict[str, Any] = parse_capped(data, parse, "TOML", tomllib.TOMLDecodeError)
    return document


def _tomli() -> Any:  # pragma: no cover - Python 3.10
    """Python 3.10's TOML reader: the ``tomli`` package; or, in a build by setuptools older
    than 71 (a newer one puts the copy it carries on ``sys.path``), the copy it carries.

    Raises:
        LockfileError: neither is there.
    """
    try:
        import tomli  # type: ignore[import-not-found, unused-ignore]
    except ModuleNotFoundError:
        pass
    else:
        return tomli
    if "setuptools" in sys.modules:  # importing it would take longer than a load
        try:
            from setuptools.extern import tomli as carried  # type: ignore[import-untyped, unused-ignore]
        except ImportError:
            pass
        else:
            return carried
    raise LockfileError(
        "reading TOML on Python 3.10 needs the 'tomli' package",
        hint="pip install tomli, or use Python 3.11 or newer",
    )
