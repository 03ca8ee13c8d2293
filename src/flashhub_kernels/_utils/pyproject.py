"""A project's ``pyproject.toml``: the TOML reader, and a key looked up in its tables.

The lock files (:mod:`~.._lockfiles.project`) read ``[tool.flashhub.dependencies]``
through :func:`load_toml`, the trusted keys
(:func:`~.._signing.trusted_keys.read_trusted_keys`) ``[tool.flashhub] trusted-keys``.
"""

from __future__ import annotations

import sys
from typing import Any

from ..errors import LockfileError
from .parsing import parse_capped


def lookup(document: dict[str, Any], *keys: str) -> object:
    """``document[keys[0]][keys[1]]...``, or ``None`` where a table or key is missing."""
    value: object = document
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def load_toml(data: bytes) -> dict[str, Any]:
    """``data`` as TOML; ``ValueError`` saying why not (see
    :func:`~.parsing.parse_capped`)."""
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
