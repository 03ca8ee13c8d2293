"""The error of a path that no CDN mirror served: what each mirror answered, and what to
try next (:mod:`.transport` asks the mirrors, in turn, and records their answers here).
Also the failures :mod:`.http_mirror` makes of answers no CDN should give (most often a
caching edge's in front of it), each saying what to do about it."""

from __future__ import annotations

from collections.abc import Sequence

from .._utils.logs import logger
from .._utils.urls import redact_queries, redact_url
from ..errors import (
    FlashhubError,
    IntegrityError,
    LockMismatchError,
    ManifestError,
    RollbackError,
    TransportError,
)
from .mirrors import (
    AccessDenied,
    BadBytes,
    FileMirror,
    Mirror,
    MirrorFailed,
    OverCap,
    ProxyFailed,
)


class Answers:
    """What each mirror answered for one path, for the error raised when none served it."""

    def __init__(self, relpath: str) -> None:
        self.relpath = relpath
        self._lines: list[str] = []
        self._proxied = self._capped = self._denied = False
        self._on_disk = True  # every mirror that failed is a file:// tree
        # Documents that did not parse, were stale, or held other content than a lock pins.
        self._refused: list[IntegrityError] = []
        self._bad_bytes_hints: list[str] = []  # what to do about each kind of bad bytes sent
        self._netrc_problems: list[str] = []
        self._credential_hints: list[str] = []  # where each refusing mirror takes them from
        # What to do about the other answers that show it (an untrusted CA, an edge's bug).
        self._hints: list[str] = []

    def failed(self, mirror: Mirror, exc: MirrorFailed) -> None:
        via = f" (through the proxy {mirror.via})" if mirror.via else ""
        self._proxied = self._proxied or bool(mirror.via) or isinstance(exc, ProxyFailed)
        self._capped = self._capped or isinstance(exc, OverCap)
        self._on_disk = self._on_disk and isinstance(mirror, FileMirror)
        if isinstance(exc, AccessDenied):
            self._denied = True
            if (hint := exc.hint or CREDENTIALS_HINT) not in self._credential_hints:
                self._credential_hints.append(hint)
            if exc.netrc_problem and exc.netrc_problem not in self._netrc_problems:
                self._netrc_problems.append(exc.netrc_problem)
        elif exc.hint is not None and exc.hint not in self._hints:
            self._hints.append(exc.hint)
        self._lines.append(f"{mirror.label}{via}: {exc}")
        logger.info("mirror %s could not serve %s: %s", mirror.label, self.relpath, exc)

    def bad_bytes(self, mirror: Mirror, exc: BadBytes) -> None:
        if exc.hint not in self._bad_bytes_hints:
            self._bad_bytes_hints.append(exc.hint)
        self._lines.append(f"{mirror.label}: {exc}")
        logger.info("mirror %s sent bad bytes for %s: %s", mirror.label, self.relpath, exc)

    def refused(
        self, mirror: Mirror, exc: ManifestError | RollbackError | LockMismatchError
    ) -> None:
        self._refused.append(exc)
        self._lines.append(f"{mirror.label}: {exc.message}")
        logger.info("mirror %s served a %s that was refused: %s", mirror.label, self.relpath, exc)

    def error(self) -> FlashhubError:
        """When a mirror served a document that was refused (it does not parse, is older
        than one seen, or holds other content than a lock pins, which the caller names),
        that error, of its class (the one mirror's own :class:`RollbackError`, when only
        one was asked); an :class:`IntegrityError` when a mirror sent bad bytes; else a
        :class:`TransportError`. Each names every mirror and its answer."""
        answers = "\n  ".join(self._lines)
        if self._refused:
            first = self._refused[0]
            if isinstance(first, LockMismatchError):
                return LockMismatchError(
                    f"no CDN mirror serves {self.relpath!r} with that content; nothing was "
                    f"fetched:\n  {answers}"
                )
            stale = isinstance(first, RollbackError)
            if stale and len(self._lines) == 1:
                return first
            return type(first)(
                f"no CDN mirror served {self.relpath!r} as a valid"
                f"{', current' if stale else ''} document:\n  {answers}",
                hint=first.hint if stale else MALFORMED_HINT,
                cli_hint=first.cli_hint if stale else None,
            )
        if self._bad_bytes_hints:
            return IntegrityError(
                f"no CDN mirror served {self.relpath!r} intact, and nothing of what they "
                f"sent was kept:\n  {answers}",
                hint="; ".join(self._bad_bytes_hints),
            )
        return TransportError(
            f"could not fetch {self.relpath!r} from any CDN mirror:\n  {answers}",
            hint=self._hint(),
        )

    def _hint(self) -> str:
        """What to try when every mirror failed for the path."""
        if self._capped:
            return (
                "if the kernel really ships a file this large, raise FLASHHUB_MAX_FILE_BYTES; "
                "otherwise the CDN sends a broken answer: report it to the CDN's operator"
            )
        if self._denied:
            return "; ".join([*self._credential_hints, *self._netrc_problems])
        if self._hints:
            return "; ".join(self._hints)
        if self._on_disk:
            return FILE_MIRROR_HINT
        return _network_hint(proxied=self._proxied)


# The last thing the hints below offer: the cache alone.
_OFFLINE_HINT = "set FLASHHUB_OFFLINE=1 to use only what is cached"
# When a mirror served a web page in place of a document or a file.
_PORTAL_HINT = (
    "a mirror that answers every path with a web page is a captive portal or a login "
    "page in the way: log in, or drop that mirror from FLASHHUB_CDN_URL"
)
# When each mirror failed a document, and one at least answered with one that does not parse.
MALFORMED_HINT = (
    f"{_PORTAL_HINT}; otherwise the CDN serves a broken document: report it to the "
    "kernel's publisher"
)

# When each mirror failed and all are file:// trees: nothing of the network is at fault.
FILE_MIRROR_HINT = (
    "check the file:// trees FLASHHUB_CDN_URL names: a tree holds the files `flashhub "
    f"publish` wrote, readable, and nothing else; or {_OFFLINE_HINT}"
)

# Where requests takes a mirror's credentials from (the URL's win).
CREDENTIALS_HINT = (
    "the CDN wants credentials, or refused the ones sent: put them in FLASHHUB_CDN_URL "
    "(https://user:password@host, percent-encoded) or in ~/.netrc (or the file $NETRC "
    "names) as 'machine HOST login USER password PASSWORD'; a netrc file that does not "
    "parse is ignored"
)


def other_host_hint(host: str) -> str:
    """Where the credentials of ``host``, another than the CDN's that it redirected to,
    come from: its netrc entry, as requests takes it."""
    return (
        f"{host}, where the CDN redirected, wants credentials, or refused the ones sent: "
        "it gets those of its own netrc entry, never the CDN's; put them in ~/.netrc (or "
        f"the file $NETRC names) as 'machine {host} login USER password PASSWORD'"
    )


def _network_hint(*, proxied: bool) -> str:
    """What to try when the mirrors could not be reached."""
    if proxied:
        return (
            "check the proxy settings (https_proxy, http_proxy, all_proxy, no_proxy) and "
            f"that the proxy is up, or {_OFFLINE_HINT}"
        )
    return (
        "check the network and FLASHHUB_CDN_URL (comma-separate several mirrors), "
        f"or {_OFFLINE_HINT}"
    )


# -- answers no CDN should give, most often those of a caching edge or proxy in front ----


def not_modified(reason: str) -> MirrorFailed:
    """The failure of a ``304 Not Modified`` (``reason``) to a request without a condition,
    as every request for the CDN is: it names no copy of the client's to be current."""
    return MirrorFailed(
        f"HTTP 304 {reason} to a request without a condition (no If-None-Match or "
        "If-Modified-Since): a caching edge's bug",
        hint="purge the caching edge's (or proxy's) copy of the path, or bypass it: point "
        "FLASHHUB_CDN_URL at the origin, or add the CDN's host to no_proxy",
    )


def retry_later(failed: str, when: str, longest_wait: int) -> MirrorFailed:
    """The failure of an answer (``failed`` names it) whose ``Retry-After`` asks to be
    retried ``when`` ("after N seconds", "at" a date), later than ``longest_wait``
    seconds from now: the load does not wait that long."""
    return MirrorFailed(
        f"{failed}, asking to be retried {when}: longer than the {longest_wait} s a load "
        "waits, so it was not retried",
        hint="the CDN is overloaded, limits this client's requests, or is down for "
        f"maintenance: load again {when}, or add another mirror to FLASHHUB_CDN_URL "
        f"(comma-separated), or {_OFFLINE_HINT}",
    )


def compressed_keeping_length(encoding: str, length: int, received: int) -> MirrorFailed:
    """The failure of a body sent with ``Content-Encoding: <encoding>`` whose
    ``Content-Length`` (``length``) is that of the body decoded: ``received`` bytes, which
    decode to ``length``, and nothing more came."""
    return MirrorFailed(
        f"the server sent {received} of the {length} bytes its Content-Length announced, "
        f"with Content-Encoding: {encoding}, and they decode to all {length}: the "
        "Content-Length is that of the body before it was compressed, which is what a "
        "caching edge that compresses a body and keeps its original length sends",
        hint="turn compression off at the edge for the CDN's paths (the client asks for "
        "Accept-Encoding: identity), or have it send the compressed length, then purge "
        "the copies the edge keeps",
    )


def range_ignored(failed: str) -> MirrorFailed:
    """The failure of a download that ``failed`` (broke off too often), where the server
    answered the requests for the rest of the file (``Range``) with all of it: no try
    continued another, so each started over."""
    return MirrorFailed(
        f"{failed}; the server answered the range requests with 200 (the whole file: no "
        "resume possible), so each try started over from byte 0",
        hint="a file can outlast broken transfers only from a host that honours Range: "
        "serve the files from a host, or through an edge, that supports Range requests; "
        "where every try breaks off at the same byte, a proxy in between with a body-size "
        "cap cuts them: raise the cap, or bypass the proxy (docs/hosting.md, 'Range "
        "requests')",
    )


def web_page(why: str) -> BadBytes:
    """The bytes of a web page (``text/html``) served for a file, which ``why`` shows they
    cannot be (their length is not the file's)."""
    return BadBytes(
        "it served a web page (text/html) in place of the file, most likely an error or "
        f"login page of an edge or proxy: {why}",
        hint=f"{_PORTAL_HINT}; otherwise an edge or proxy in front of the CDN serves its "
        "error page in the file's stead: retry later, or report it to the CDN's operator",
    )


def redirect_loop(urls: Sequence[str]) -> MirrorFailed:
    """The failure of a request that requests gave up on, redirected through ``urls``
    (the first the one asked for): the URLs that loop, or the first and last where none
    comes again, each without its credentials or query values."""
    shown = [redact_queries(redact_url(url)) for url in urls]
    again = next((n for n, url in enumerate(urls) if url in urls[:n]), None)
    if again is None:
        failed = f"redirected {len(urls) - 1} times, from {shown[0]} to {shown[-1]}"
    else:
        failed = "redirected in a loop: " + " -> ".join(shown[urls.index(urls[again]) : again + 1])
    return MirrorFailed(
        failed,
        hint="fix the redirects of the CDN, or of the edge or proxy in front of it (rules "
        "that undo each other: http and https, with and without a trailing slash), or "
        "report them to its operator",
    )


def stale_404_hint(published: str) -> str:
    """What to do about a ``404`` for a path that another document lists: ``published``
    (a version) may be newer than the ``404`` a caching edge cached for the path."""
    return (
        f"if {published} was published just now, a caching edge in front of the CDN may "
        "still serve the 404 it cached before then: purge it there, or wait for the "
        "edge's cache time (TTL) for 404s to pass"
    )


def listed_404_hint(published: str) -> str:
    """What to do about a ``404`` for a path that a document of ``published`` lists."""
    return (
        f"{stale_404_hint(published)}; otherwise the CDN is incomplete: report it to the "
        "kernel's publisher, or add a complete mirror to FLASHHUB_CDN_URL"
    )
