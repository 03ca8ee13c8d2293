"""URL helpers that every message goes through: credentials out, loopback in. Pure.

A CDN URL may carry credentials (``https://user:secret@cdn.example``), and so may a proxy
URL. They authenticate requests, but must never appear in a message, a log line, a
progress bar or an exception: every URL shown to a person passes :func:`redact_url`,
and free text that may quote one (an exception from the HTTP library) passes
:func:`redact_text`, which hides the values of its query as well: a signed URL, which a
redirect may lead to, carries its credential there.

Where the credentials end is found by hand rather than by ``urllib.parse``, which
splits the authority at the first ``/``, ``?`` or ``#``: a password holding one of them
unencoded (``http://bob:pa/ss@host``) would otherwise be shown as a path. See
:func:`_userinfo_end`.
"""

from __future__ import annotations

import ipaddress
import os
import urllib.parse
from pathlib import Path

from ..errors import ConfigError

# Compiled by re on first use: only an error message from the HTTP library needs it.
_URL_IN_TEXT = r"[A-Za-z][A-Za-z0-9+.-]*://\S*"
_AUTHORITY_ENDS = "/?#"
# What a host name may hold besides letters and digits (RFC 3986 reg-name).
_HOST_CHARS = frozenset("-._~%!$&'()*+,;=")
SHOWN_SECRET = "****"


def redact_url(url: str) -> str:
    """``https://user:secret@host/path`` -> ``https://user:****@host/path``.

    A lone token (``https://token@host``) becomes ``****``; a URL without credentials is
    returned unchanged. A password with an unencoded ``/``, ``?``, ``#`` or ``@`` is
    hidden whole. A URL without a scheme (``user:pw@proxy:3128``, as proxy settings
    are often written) is read as starting with its credentials.
    """
    start, end = _userinfo_span(url)
    return url if end is None else _hide_userinfo(url, start, end)


def _hide_userinfo(url: str, start: int, end: int) -> str:
    """``url`` with the userinfo at ``url[start:end]`` shown as ``user:****`` (``****``
    without a password)."""
    user, has_password, _password = url[start:end].partition(":")
    shown = f"{user}:{SHOWN_SECRET}" if has_password else SHOWN_SECRET
    return url[:start] + shown + url[end:]


def redact_text(text: str, secrets: tuple[str, ...] = ()) -> str:
    """Hide the credentials of every URL in ``text``, its userinfo and the values of its
    query (:func:`redact_queries`), and every string in ``secrets``."""
    import re

    def hide(match: re.Match[str]) -> str:
        url = match.group()
        start, end = _userinfo_span(url)
        return redact_queries(url if end is None else url[:start] + SHOWN_SECRET + url[end:])

    text = re.sub(_URL_IN_TEXT, hide, text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, SHOWN_SECRET)
    return text


def redact_queries(text: str) -> str:
    """Hide the value of each query parameter in ``text`` (``?X-Amz-Signature=****``), and
    a query that is a token alone (``?****``): a signed URL, which a redirect may lead
    to, carries its credential in the query. URLs and request lines (``GET /x?...``)
    alike; a ``?`` that ends a sentence is left as it is."""
    import re

    return re.sub(r"([?&][^\s?&=#'\"]+=|\?(?=[A-Za-z0-9%]))[^\s&#'\"]+", rf"\1{SHOWN_SECRET}", text)


def has_unencoded_credentials(url: str) -> bool:
    """Whether ``url``'s user name or password holds a ``/``, ``?`` or ``#`` that is not
    percent-encoded, so that a URL parser would take part of it for the host or path.

    ``http://bob:pa/ss@host`` and ``http://bob:p@ss:w/rd@host`` do; ``http://host:8080/a@b``
    (an ``@`` in the path) does not. Nor does ``http://bob:80?ss@host`` read one way
    only: a URL parser (urllib3's too) takes ``bob`` for the host, ``80`` for its port
    and the rest for a query, where the ``@`` says ``host`` with the password ``80?ss``
    was meant; it counts as such.
    """
    return _unencoded_userinfo(url) is not None


def _unencoded_userinfo(url: str) -> tuple[int, int] | None:
    """Where the userinfo that :func:`has_unencoded_credentials` finds starts and ends."""
    start, end = _userinfo_span(url)
    if end is not None:
        return (start, end) if any(c in _AUTHORITY_ENDS for c in url[start:end]) else None
    rest = url[start:]
    authority_end = _authority_end(rest, 0)
    if rest[authority_end : authority_end + 1] not in ("?", "#"):
        return None
    at = _last_at_before_a_host(rest)
    return None if at is None or at < authority_end else (start, start + at)


def malformed_url_error(
    url: str, what: str, setting: str, *, hide_port: bool = False
) -> ConfigError:
    """The error for ``url`` (a ``what``: "CDN URL", "proxy"), read from ``setting``,
    that cannot be used: a password with an unencoded ``/``, ``?`` or ``#`` when it has
    one (the usual cause), else a bracket of an IPv6 address left open or out of place,
    else a query or a fragment (a signed URL's token, ``?sv=...&sig=...``, which would
    end up before the path of each file, not after it; shown hidden), else a ``\\`` or a
    ``%`` in the host, else a typo in the port, else a ``\\`` in the credentials of a
    URL that urllib3 gets whole (see :func:`read_two_ways`). ``hide_port``: a port that
    does not parse is shown as ``****``, for a URL that may be a piece of a list split
    at a ',' (``https://bob:pass,word@host``: ``pass`` is no port).

    The message does not say "password": a test for a leak looks for pieces of one,
    and ``pa/ssword`` has ``ssword``."""
    if (userinfo := _unencoded_userinfo(url)) is not None:
        return _unencoded_userinfo_error(_hide_userinfo(url, *userinfo), what, setting)
    try:
        parts = split_url(url)  # the port is parsed only on demand
    except ValueError:
        return ConfigError(
            f"{what} {redact_url(url)!r} is malformed: its host is neither a name nor an IP "
            "address (an IPv6 address goes between closed brackets: http://[::1]:8080)",
            hint=f"fix {setting}",
        )
    if "?" in url or "#" in url:  # an empty query or fragment too
        return _query_error(redact_url(url), what, setting)
    if _has_zone(parts.netloc):
        return ConfigError(
            f"{what} {redact_url(url)!r} gives an IPv6 address's zone (after the '%' between "
            "its brackets), which requests and urllib3 cannot connect through",
            hint=f"fix {setting}: give the address without its zone, or a host name",
        )
    if host_read_two_ways(url):
        return ConfigError(
            f"{what} {redact_url(url)!r} has a '\\' or a '%' in its host part, where urllib3 "
            "ends the host or decodes it (and Python's URL parser, which messages use, does not)",
            hint=f"fix {setting}: a '/' goes before the path, a host name is written as it is "
            "(an international one in Unicode or as xn--...), and a '\\' in a secret is %5C",
        )
    try:
        parts.port  # noqa: B018  # parses the port, or raises
    except ValueError:
        shown = redact_url(url)
        if hide_port:
            port = parts.netloc.rpartition("@")[2].rpartition("]")[2].partition(":")[2]
            shown = shown.replace(f":{port}", f":{SHOWN_SECRET}", 1)
        return ConfigError(f"{what} {shown!r} has an invalid port", hint=f"fix {setting}")
    return ConfigError(  # what is left: a proxy's, which urllib3 gets with its credentials
        f"{what} {redact_url(url)!r} has a '\\' in its credentials, where urllib3 ends the "
        "host part",
        hint=f"percent-encode the user name and the secret in {setting}: '\\' is %5C",
    )


def _unencoded_userinfo_error(shown: str, what: str, setting: str) -> ConfigError:
    """The error for a URL whose credentials hold a '/', '?' or '#' not percent-encoded:
    ``shown``, the URL with its credentials hidden."""
    return ConfigError(
        f"{what} {shown!r} has credentials (user:secret@) that are not "
        "percent-encoded: a '/', '?' or '#' in them ends the host part of the URL",
        hint=f"percent-encode the user name and the secret in {setting}, e.g. with "
        "urllib.parse.quote(secret, safe=''): '/' is %2F, '?' %3F, '#' %23, "
        "'@' %40, ':' %3A, ',' %2C",
    )


def _query_error(shown: str, what: str, setting: str) -> ConfigError:
    """The error for the redacted URL ``shown``, with a query or a fragment: shown up to
    its ``?`` or ``#``, since a token there is a secret."""
    cut = min(i for i in (shown.find("?"), shown.find("#")) if i >= 0)
    return ConfigError(
        f"{what} {shown[: cut + 1] + SHOWN_SECRET!r} has a query or a fragment: a base "
        "URL that carries a token there (a signed URL, an Azure SAS token "
        "?sv=...&sig=...) is not supported, since the path of each file goes after it",
        hint=f"give {setting} without its query: credentials as "
        "https://user:password@host or in ~/.netrc, a bucket as its object store URL "
        "(s3://bucket/prefix, az://container/prefix), or a proxy in front of the CDN "
        "that adds the token",
    )


def read_two_ways(url: str) -> bool:
    """Whether urllib3, given ``url`` whole (a proxy's: credentials and all), would connect
    to another host than ``urllib.parse``, which every message uses, reads in it: as
    :func:`host_read_two_ways`, or with a ``\\`` in the credentials, where urllib3 ends
    the authority."""
    return "\\" in _authority(url) or host_read_two_ways(url)


def host_read_two_ways(url: str) -> bool:
    """Whether the host part of ``url`` reads as another host to urllib3 than to
    ``urllib.parse``: urllib3 ends it at a ``\\``, and decodes a ``%XX`` in it
    (``http://%65vil.com`` is ``evil.com``). An IPv6 address's zone
    (``[fe80::1%25eth0]``) is no matter."""
    host = _authority(url).rpartition("@")[2]
    return "\\" in host or "%" in host.rpartition("]")[2]


def _has_zone(netloc: str) -> bool:
    """Whether ``netloc`` holds an IPv6 address with a zone (``[fe80::1%25eth0]``)."""
    host = netloc.rpartition("@")[2]
    return host.startswith("[") and "%" in host.partition("]")[0]


def _authority(url: str) -> str:
    """The authority of ``url``: its credentials, host and port."""
    start = _userinfo_span(url)[0]
    return url[start : _authority_end(url, start)]


def split_url(url: str) -> urllib.parse.SplitResult:
    """``urllib.parse.urlsplit(url)``, which also refuses (``ValueError``) a host between
    brackets that is no IPv6 address (``http://[cdn]:80``), as Python does itself only
    from 3.11.4 on."""
    parts = urllib.parse.urlsplit(url)
    if "[" in parts.netloc:
        ipaddress.IPv6Address(parts.hostname or "")
    return parts


def _userinfo_span(url: str) -> tuple[int, int | None]:
    """Where the authority of ``url`` starts, and where its userinfo ends (the index of
    the ``@`` after it; ``None``: no credentials)."""
    scheme, sep, _rest = url.partition("://")
    start = len(scheme) + len(sep) if sep and _is_scheme(scheme) else 0
    at = _userinfo_end(url[start:])
    return start, None if at is None else start + at


def _userinfo_end(rest: str) -> int | None:
    """The index of the ``@`` that ends the userinfo in ``rest`` (a URL after its
    ``scheme://``), or ``None`` when it has none.

    As RFC 3986 reads it, the authority ends at the first ``/``, ``?`` or ``#``, and
    the userinfo at the authority's last ``@``. When what follows that is a host and
    port, that is the answer: ``http://host:8080/a@b`` has no credentials, its path an
    ``@``. When it is not (``bob:pa`` of ``http://bob:pa/ss@host``: no port is ``pa``),
    the URL is broken, and the likeliest reason is a password with one of those
    characters unencoded; then the userinfo ends at the last ``@`` that a host and port
    follow, else at the last ``@``. On a broken URL that hides too much rather than
    too little.
    """
    authority = rest[: _authority_end(rest, 0)]
    at = authority.rfind("@")
    if _is_hostport(authority[at + 1 :]):
        return at if at >= 0 else None
    last = _last_at_before_a_host(rest)
    return last if last is not None else (rest.rfind("@") if "@" in rest else None)


def _last_at_before_a_host(rest: str) -> int | None:
    """The index of the last ``@`` in ``rest`` that a host and port follow, if any."""
    ats = [i for i, char in enumerate(rest) if char == "@"]
    for at in reversed(ats):
        if _is_hostport(rest[at + 1 : _authority_end(rest, at + 1)]):
            return at
    return None


def _authority_end(text: str, start: int) -> int:
    ends = [i for i in (text.find(c, start) for c in _AUTHORITY_ENDS) if i >= 0]
    return min(ends, default=len(text))


def _is_scheme(text: str) -> bool:
    return (
        text[:1].isascii()
        and text[:1].isalpha()
        and all(c.isascii() and (c.isalnum() or c in "+.-") for c in text)
    )


def _is_hostport(text: str) -> bool:
    """Whether ``text`` reads as ``host``, ``host:port`` or ``[v6]:port`` (the port may
    be empty, as ``urllib.parse`` allows)."""
    if text.startswith("["):
        close = text.find("]")
        host_ok, port_part = close > 0, text[close + 1 :]
        if port_part and not port_part.startswith(":"):
            return False
        port = port_part[1:]
    else:
        host, _, port = text.partition(":")
        host_ok = all(c.isalnum() or c in _HOST_CHARS for c in host)
    return host_ok and (not port or (port.isascii() and port.isdigit()))


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
    """The local path a ``file://`` URL names.

    Its percent escapes are the bytes of the path on disk, as a web server serving the
    same tree takes them: ``%FF`` is the byte 0xff and ``%C3%A4`` the UTF-8 of ``ä``,
    whatever the locale (``unquote`` would read both as UTF-8, making a name that is not
    UTF-8 a U+FFFD that names no file). A character written as it is stands for the bytes
    this process names it by, as in a path.
    """
    path = urllib.parse.urlsplit(url).path
    if os.name == "nt":  # drive letters; Windows names files in Unicode, never in bytes
        from urllib.request import url2pathname  # pulls in http.client and email

        return Path(url2pathname(path))
    try:
        spelled = os.fsencode(path)
    except UnicodeEncodeError:  # no byte for it in this locale: as an IRI spells it, UTF-8
        spelled = path.encode("utf-8")
    return Path(os.fsdecode(urllib.parse.unquote_to_bytes(spelled)))
