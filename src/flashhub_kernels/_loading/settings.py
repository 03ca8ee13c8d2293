"""``configure()``: the settings of this process, over those of its environment and its
project (see ``_config``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from .._config import Config, get_config, normalize_prefix, overrides, parse_cdn_urls


def configure(
    cdn_url: str | Sequence[str] | None = None,
    prefix: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    trusted_keys: str | Sequence[str] | None = None,
) -> Config:
    """Override CDN settings for this process; ``None`` leaves a setting as it is.

    Args:
        cdn_url: Base URL of the CDN, or several mirrors, tried in order: a list, or one
            string separated by commas.
        prefix: Path prefix of the kernel tree on the CDN (``""`` for the root).
        cache_dir: Local cache root.
        trusted_keys: Public keys whose signatures vouch for kernels, each
            ``flashhub-ed25519:<base64>`` or ``<org>:flashhub-ed25519:<base64>`` (one
            string may list several). They replace ``FLASHHUB_TRUSTED_KEYS`` and the
            project's ``[tool.flashhub] trusted-keys``; ``[]`` trusts no key.

    Raises:
        ConfigError: ``trusted_keys`` is a string, or a list of entries, that names no key.
        ValueError: A setting is malformed.
        TypeError: ``cdn_url`` or ``trusted_keys`` is neither a string nor a list of them.

    Returns:
        The new effective :class:`Config`.
    """
    if cdn_url is not None:
        joined = _joined(cdn_url, ",", "cdn_url")
        parse_cdn_urls(joined)  # validate now, not at the first download
        overrides["cdn_url"] = joined
    if prefix is not None:
        overrides["prefix"] = normalize_prefix(prefix)
    if cache_dir is not None:
        overrides["cache_dir"] = os.fspath(cache_dir)
    if trusted_keys is not None:
        from .._signing.trusted_keys import no_key_error, parse_trusted_keys

        source = "configure(trusted_keys=)"
        listed = _joined(trusted_keys, "\n", "trusted_keys")
        keys = parse_trusted_keys(listed, source=source)
        if not keys and (isinstance(trusted_keys, str) or trusted_keys):  # [] means: no key
            raise no_key_error(source, "pass trusted_keys=[]")
        overrides["trusted_keys"] = keys
    return get_config()


def _joined(value: str | Iterable[str], separator: str, name: str) -> str:
    """``value``, or its items joined by ``separator``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Iterable) and not isinstance(value, bytes):
        items = list(value)
        if all(isinstance(item, str) for item in items):
            return separator.join(items)
    raise TypeError(f"{name} must be a string or a list of strings, got {value!r}")
