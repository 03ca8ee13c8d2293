"""URL helpers that every message goes through: credentials out, loopback in. Pure.

A CDN URL may carry credentials (``https://user:secret@cdn.example``), and so may a proxy
URL. They authenticate requests, but must never appear in a message, a log line, a
progress bar or an exception: every URL shown to a person passes :func:`redact_url`,
and free text that may quote one (an exception from the HTTP library) passes
:func:`redact_text`.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

# scheme://userinfo@ inside free text; userinfo stops at the first '/', '@' or space.
# Compiled by re on first use: only an error message from the HTTP library needs it.
_USERINFO_IN_TEXT = r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@"


def redact_url(url: str) -> str:
    """``https://user:secret@host/path`` -> ``https://user:****@host/path``.

    A lone token (``https://token@host``) becomes ``****``; a URL without credentials is
    returned unchanged.
    """
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, has_password, _password = userinfo.partition(":")
    shown = f"{user}:****" if has_password else "****"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{shown}@{hostport}"))


def redact_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Remove the userinfo of every URL in ``text``, and every string in ``secrets``."""
    import re

    text = re.sub(_USERINFO_IN_TEXT, r"\g<scheme>****@", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "****")
    return text


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http://u:p@host/x`` -> (``http://host/x``, (``u``, ``p``)); percent-escapes decoded."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    hostport = parts.netloc.rpartition("@")[2]
    bare = urllib.parse.urlunsplit(parts._replace(netloc=hostport))
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    return bare, (user, password)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if host == "localhost":
        return True
    import ipaddress  # here: _config imports this module on every load, warm ones too

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def file_url_path(url: str) -> Path:
    """The local path a ``file://`` URL names."""
    import urllib.request  # pulls in http.client and email: only file:// mirrors need it

    return Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
