"""The ``requests`` session of one download run, with the environment resolved once.

``requests`` re-reads the environment on every request of a session that trusts it:
proxies and ``no_proxy`` (``proxy_bypass`` walks ``os.environ`` each time), the netrc
file (opened and parsed each time), and the CA bundle variables. For a variant of 200
small files that is most of the client's CPU per request. So the session here does not
trust the environment (``trust_env = False``); instead :func:`new_session` and
:func:`route_for` resolve the same settings, with requests' own functions, once per run
and once per mirror, and every request passes them explicitly.

What each mirror gets, as requests itself would decide it:

- proxies from ``http_proxy`` / ``https_proxy`` / ``all_proxy`` (any case), unless
  ``no_proxy`` exempts the host (names, suffixes, ``host:port``, CIDR blocks);
  ``socks5://`` and ``socks4://`` proxies need the ``socks`` extra (PySocks) once a
  request goes through one (``https_proxy`` for an ``http://`` mirror needs it only
  where a redirect leads to https);
- credentials from the URL (``https://user:pass@cdn``), else from ``~/.netrc`` (or
  ``$NETRC``); requests drops them on a redirect to another host, which gets its own
  netrc entry instead, if it has one;
- TLS verified against ``REQUESTS_CA_BUNDLE``, else ``CURL_CA_BUNDLE``, else certifi's
  bundle; a directory of hashed certificates works too.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import http.client
import netrc
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import requests
import requests.adapters
import requests.structures
import requests.utils
import urllib3.exceptions
from urllib3.connectionpool import ConnectionPool, HTTPConnectionPool
from urllib3.exceptions import ConnectTimeoutError, InvalidHeader
from urllib3.poolmanager import PoolManager
from urllib3.util.retry import Retry
from urllib3.util.timeout import Timeout

from .._constants import __version__
from .._models.record import Record
from .._utils.log_redaction import hide_queries_in_urllib3_logs, sending_request
from .._utils.urls import (
    has_unencoded_credentials,
    malformed_url_error,
    read_two_ways,
    redact_queries,
    redact_url,
    split_credentials,
    split_url,
)
from .._utils.user_agent import appended_user_agent
from ..errors import TransportError
from .answers import retry_later
from .certificates import ca_bundle
from .header_deadline import end_watchdog_when_idle, with_header_deadline
from .mirrors import MirrorFailed, wait_to_retry
from .reachability import connections_retried

if TYPE_CHECKING:
    from typing_extensions import Self

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
MAX_RETRY_AFTER = 60  # seconds: a longer Retry-After is not waited for at all
USER_AGENT = f"flashhub-kernels/{__version__}"
SOCKS_EXTRA_HINT = "pip install 'flashhub-kernels[socks]'"
PROXY_SETTINGS = "https_proxy / http_proxy / all_proxy"
REDIRECT_BODY_BYTES = 64 << 10  # read of a redirect's body, then dropped: see _drop_redirect_body
# What can break a body on the wire: urllib3's errors (timeouts, resets, short bodies,
# undecodable bytes) and what the socket or http.client raise beneath it.
BODY_ERRORS = (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


class _Retry(Retry):
    """urllib3's retry policy, with four changes:

    - ``increment``: a connection that fails is not tried again while another mirror
      remains to be asked (:func:`~.reachability.connections_retried`), and an answer whose
      ``Retry-After`` is longer than ``MAX_RETRY_AFTER`` is returned at once, not waited
      for, for the caller to name the wait (:func:`unwaited_retry_after`) and ask the next
      mirror;
    - ``get_retry_after``: an unreadable ``Retry-After`` is ignored and the policy backs
      off, where urllib3 would end the request (``InvalidHeader``; ``ValueError`` for
      thousands of digits or a date past the year 9999; ``OverflowError`` for a year of
      twenty digits);
    - ``parse_retry_after``: a date that is no date (a 32nd day, a 25th hour) is such an
      unreadable one, where urllib3 reads a 32nd day as the next month's first;
    - ``sleep``: its waits end as the download's do (:func:`~.mirrors.wait_to_retry`).
    """

    def increment(self, *args: Any, **kwargs: Any) -> Self:
        if isinstance(kwargs.get("error"), ConnectTimeoutError) and not connections_retried():
            # As if no connection retry were left: urllib3 raises MaxRetryError.
            return Retry.increment(self.new(connect=0), *args, **kwargs)
        response = kwargs.get("response")
        if response is not None and (self.get_retry_after(response) or 0) > MAX_RETRY_AFTER:
            # As if no status retry were left: urllib3 returns the answer (raise_on_status=False).
            return Retry.increment(self.new(status=0), *args, **kwargs)
        return super().increment(*args, **kwargs)

    def get_retry_after(self, response: Any) -> float | None:
        try:
            return super().get_retry_after(response)
        except (InvalidHeader, ValueError, OverflowError):
            return None

    def parse_retry_after(self, retry_after: str) -> float:
        if not retry_after.strip().isdigit():  # urllib3 reads a 32nd day as the next month's
            email.utils.parsedate_to_datetime(retry_after)  # ValueError for no date
        return super().parse_retry_after(retry_after)

    def sleep(self, response: Any = None) -> None:
        retry_after = None
        if response is not None and self.respect_retry_after_header:
            retry_after = self.get_retry_after(response)
        wait_to_retry(retry_after or self.get_backoff_time())


def unwaited_retry_after(response: requests.Response, failed: str) -> MirrorFailed | None:
    """The failure of ``response`` (``failed`` names it) when its ``Retry-After`` asks
    for a longer wait than ``MAX_RETRY_AFTER``, which the retry policy did not wait for,
    naming when it asks to be retried: "after N seconds", or "at" the date in UTC, as
    parsed (never the header's own text). ``None`` for a shorter one, or none."""
    seconds = retry_policy().get_retry_after(response.raw)
    if seconds is None or seconds <= MAX_RETRY_AFTER:
        return None
    value = response.headers["Retry-After"].strip()
    if value.isdigit():
        return retry_later(failed, f"after {int(value)} seconds", MAX_RETRY_AFTER)
    date = email.utils.parsedate_to_datetime(value).astimezone(datetime.timezone.utc)
    return retry_later(failed, f"at {date:%Y-%m-%d %H:%M:%S} UTC", MAX_RETRY_AFTER)


def retry_policy() -> Retry:
    """Up to two retries of a failed connection and four of a 429/5xx answer, with backoff.

    A failed connection is retried only once no other mirror remains to be asked for the
    path (until then the next mirror is asked at once), and an answer whose ``Retry-After``
    asks for more than ``MAX_RETRY_AFTER`` seconds is not retried at all: see
    :class:`_Retry`. One more try covers a request whose connection broke before any
    answer came: a kept-alive connection the server closed just as it was reused (or,
    rarely, a read timeout while waiting for the answer). A 5xx that persists is returned
    rather than raised, so the caller can name the status and move on to the next mirror.
    A body cut off mid-way is not retried here: the downloader resumes it with ``Range``.
    """
    return _Retry(
        total=None,
        connect=2,
        read=1,
        other=0,
        redirect=None,
        status=4,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET", "HEAD"}),
        backoff_factor=0.25,
        backoff_max=8.0,
        raise_on_status=False,
        respect_retry_after_header=True,
    )


class PoolPerOrigin(requests.adapters.HTTPAdapter):
    """requests' transport adapter, with the work it repeats for every request of a
    download run done once, or skipped where it has nothing to do.

    Three of ``HTTPAdapter``'s steps are the hooks it documents for subclasses; on a
    10 KiB GET from loopback they took a quarter of the client's CPU time:

    - the connection pool: ``HTTPAdapter`` looks it up anew on every send (it parses
      the URL, selects the proxy, builds the pool's key and takes the pool manager's
      lock). A run asks the same origin, through the same proxies and TLS settings, for
      every file, so the pool found for the first request serves the others for as
      long as the adapter lives (a pool closed in the meantime is looked up again);
    - the request target: without a proxy it is the URL's path, cut off the URL
      rather than parsed out of it three times;
    - the response: a response that sets no cookie has none to parse (a CDN's answers
      set none), so it is built without the cookie jar's parser.

    And the pools it makes, directly or through a proxy, give each request's headers a
    deadline, and each tunnel through a proxy (see ``header_deadline``), for which they
    keep the run's ``timeouts`` (connect, read) as their default.
    """

    def __init__(
        self,
        *,
        pool_connections: int,
        pool_maxsize: int,
        max_retries: Retry,
        timeouts: tuple[float, float],
    ) -> None:
        self._timeout = Timeout(connect=timeouts[0], read=timeouts[1])
        super().__init__(
            pool_connections=pool_connections, pool_maxsize=pool_maxsize, max_retries=max_retries
        )
        self._pools: dict[tuple[object, ...], HTTPConnectionPool] = {}

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, timeout=self._timeout, **kwargs)
        with_header_deadline(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        manager: PoolManager = super().proxy_manager_for(
            proxy, timeout=self._timeout, **proxy_kwargs
        )
        with_header_deadline(manager)
        return manager

    def get_connection_with_tls_context(
        self,
        request: requests.PreparedRequest,
        verify: bool | str | None,
        proxies: Mapping[str, str] | None = None,
        cert: tuple[str, str] | str | None = None,
    ) -> ConnectionPool:
        origin, _path = _split_origin(request.url or "")
        key = (origin, verify, cert, tuple(proxies.items()) if proxies else ())
        pool = self._pools.get(key)
        if pool is not None and pool.pool is not None:  # None once the pool is closed
            return pool
        found = super().get_connection_with_tls_context(request, verify, proxies, cert)
        if isinstance(found, HTTPConnectionPool):  # (and HTTPS): all that HTTPAdapter makes
            self._pools[key] = found
        return found

    def request_url(
        self, request: requests.PreparedRequest, proxies: Mapping[str, str] | None
    ) -> str:
        path = _split_origin(request.url or "")[1]
        if proxies or "#" in path or path.startswith("//"):
            return super().request_url(request, proxies)
        return path or "/"

    def build_response(self, req: requests.PreparedRequest, resp: Any) -> requests.Response:
        if "Set-Cookie" in resp.headers or "Set-Cookie2" in resp.headers:
            return super().build_response(req, resp)
        response = requests.Response()
        response.status_code = resp.status
        response.headers = requests.structures.CaseInsensitiveDict(resp.headers)
        response.encoding = requests.utils.get_encoding_from_headers(response.headers)
        response.raw = resp
        response.reason = resp.reason
        response.url = req.url or ""
        response.request = req
        response.connection = self  # as HTTPAdapter sets it
        return response

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        token = sending_request.set(True)  # urllib3's lines about it hide its query
        try:
            return super().send(request, *args, **kwargs)
        finally:
            sending_request.reset(token)

    def close(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        super().close()
        for pool in pools:  # urllib3 2 drops its pools without closing their connections,
            pool.close()  # which stay open until the collector frees the pool
        end_watchdog_when_idle()  # this session's requests are over


def _split_origin(url: str) -> tuple[str, str]:
    """``https://host:port/a/b?q`` -> ``("https://host:port", "/a/b?q")``."""
    path_at = url.find("/", url.find("//") + 2)
    return (url, "") if path_at < 0 else (url[:path_at], url[path_at:])


class Route(Record):
    """How requests to one mirror go: its bare base URL and what to send them with."""

    base_url: str  # without credentials: they travel in ``auth``, never inside a URL
    auth: tuple[str, str] | None
    proxies: dict[str, str]  # scheme -> proxy URL, as requests' ``proxies=`` takes it

    @property
    def proxy(self) -> str | None:
        """The proxy (credentials redacted) that requests to the base URL go through."""
        return _shown_proxy(self.base_url, self.proxies)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Passwords that must never be shown: the mirror's and its proxies'."""
        found = [self.auth[1]] if self.auth else []
        for proxy in self.proxies.values():
            credentials = split_credentials(proxy)[1]
            if credentials:
                found.append(credentials[1])
        return tuple(found)


def route_for(mirror_url: str) -> Route:
    """Resolve credentials and proxies for one mirror from its URL and the environment."""
    base_url, auth = split_credentials(mirror_url)
    if auth is None:
        auth = _netrc_auth(base_url)
    return Route(base_url, auth, proxies_for(base_url))


def _netrc_auth(url: str) -> tuple[str, str] | None:
    """The login and password of ``url``'s netrc entry, if it has one."""
    found = requests.utils.get_netrc_auth(url)
    return (found[0], found[1]) if found else None


def proxies_for(url: str) -> dict[str, str]:
    """The proxies the environment gives requests to ``url`` (none where ``no_proxy``
    exempts its host), as requests' ``proxies=`` takes them. A redirect to another
    origin asks again, so only the proxy that ``url`` itself takes must be usable."""
    proxies = {
        scheme: _proxy_url(proxy)
        for scheme, proxy in requests.utils.get_environ_proxies(url).items()
        if scheme != "no"
    }
    _check_socks_support(requests.utils.select_proxy(url, proxies))
    return proxies


def proxy_of(url: str) -> str | None:
    """The proxy (credentials redacted) that a request to ``url`` goes through, as the
    session takes it for a redirect there."""
    return _shown_proxy(url, proxies_for(url))


def _shown_proxy(url: str, proxies: dict[str, str]) -> str | None:
    """Which of ``proxies`` a request to ``url`` goes through, credentials redacted."""
    proxy = requests.utils.select_proxy(url, proxies)
    return redact_url(proxy) if proxy else None


def netrc_problem(base_url: str) -> str | None:
    """Why the netrc file gives no credentials for ``base_url``, when it exists but
    cannot be used: requests skips a file that does not parse, or cannot be read,
    without a word. Called only to explain a refused request, never on success.

    The parser's own message is left out: it quotes the token it choked on, which may
    be a password.
    """
    try:
        requests.utils.get_netrc_auth(base_url, raise_errors=True)
    except netrc.NetrcParseError as exc:
        return f"the netrc file {exc.filename} does not parse (line {exc.lineno}), so it is ignored"
    except OSError as exc:
        return f"the netrc file {exc.filename} cannot be read ({exc.strerror}), so it is ignored"
    return None


def _proxy_url(proxy: str) -> str:
    """A proxy setting as a URL: ``user:pw@proxy:3128``, a common way to write one, is
    ``http://user:pw@proxy:3128``, as curl reads it. (requests would take ``user`` for
    the scheme and fail, quoting the setting, password and all.)"""
    url = proxy if "://" in proxy else f"http://{proxy}"
    if has_unencoded_credentials(url) or read_two_ways(url) or not _host_and_port_parse(url):
        raise malformed_url_error(url, "the proxy", PROXY_SETTINGS)
    return url


def _host_and_port_parse(url: str) -> bool:
    """Whether the host (an IPv6 address's brackets closed) and the port of ``url`` parse:
    else requests fails on it, or a message that shows it does."""
    try:
        split_url(url).port  # noqa: B018  # parses the port, or raises
    except ValueError:
        return False
    return True


def _check_socks_support(proxy: str | None) -> None:
    """Refuse a SOCKS ``proxy`` where PySocks is missing, naming the extra to install."""
    if proxy is None or not proxy.lower().startswith("socks"):
        return
    try:
        with warnings.catch_warnings():  # urllib3 warns before it raises; the error says more
            warnings.simplefilter("ignore")
            import urllib3.contrib.socks  # noqa: F401  # needs PySocks
    except ImportError:
        raise TransportError(
            f"the proxy {redact_url(proxy)} is a SOCKS proxy, and SOCKS support is not installed",
            hint=f"{SOCKS_EXTRA_HINT}, or use an http:// proxy",
        ) from None


class _Session(requests.Session):
    """A session whose redirects to another host take that host's proxies and netrc
    credentials.

    requests keeps the proxies of the first URL on a redirect, and adds the
    environment's, and the netrc entry of the host redirected to, only where the
    session trusts the environment, which this one does not: an internal CDN that
    ``no_proxy`` exempts would hand a file over to a host outside (an object store's
    signed URL) without the proxy that alone reaches it, and a private CDN that
    redirects to another private host would reach it without the credentials netrc
    holds for it. The environment is read once per origin redirected to.
    """

    def __init__(self) -> None:
        super().__init__()
        self._proxies: dict[str, dict[str, str]] = {}
        self._netrc_logins: dict[str, tuple[str, str] | None] = {}

    def rebuild_proxies(
        self, prepared_request: requests.PreparedRequest, proxies: dict[str, str] | None
    ) -> dict[str, str]:
        origin = _split_origin(prepared_request.url or "")[0]
        if origin not in self._proxies:
            self._proxies[origin] = proxies_for(origin)
        # requests' stubs leave rebuild_proxies untyped.
        rebuilt: dict[str, str] = super().rebuild_proxies(  # type: ignore[no-untyped-call]
            prepared_request, self._proxies[origin]
        )
        return rebuilt

    def rebuild_auth(
        self, prepared_request: requests.PreparedRequest, response: requests.Response
    ) -> None:
        # requests strips the credentials on a redirect to another origin (trust_env is
        # off, so that is all it does); a request left without any takes its netrc entry.
        super().rebuild_auth(prepared_request, response)  # type: ignore[no-untyped-call]
        if "Authorization" in prepared_request.headers:
            return
        origin = _split_origin(prepared_request.url or "")[0]
        if origin not in self._netrc_logins:
            self._netrc_logins[origin] = _netrc_auth(origin)
        auth = self._netrc_logins[origin]
        if auth is not None:
            prepared_request.prepare_auth(auth)


def new_session(pool_size: int, timeouts: tuple[float, float]) -> requests.Session:
    """A session for one download run: pooled connections, retries, TLS, no env lookups.

    ``pool_size`` is the number of connections kept per host: the parallel downloads.
    ``timeouts`` (connect, read) are the run's, as its requests are sent with them.
    """
    hide_queries_in_urllib3_logs()
    session = _Session()
    session.trust_env = False  # resolved once by route_for() and ca_bundle()
    session.verify = ca_bundle()
    # Two headers in all. Identity: bytes exactly as published, so a Range offset means
    # the same in every response (an object stored compressed still arrives with
    # Content-Encoding and is decoded). requests' other defaults say what HTTP/1.1
    # already means ("Accept: */*", "Connection: keep-alive"), and every header is
    # parsed again on both sides of every request.
    extra = appended_user_agent.get()  # the caller's user_agent=
    session.headers = requests.structures.CaseInsensitiveDict(
        {
            "User-Agent": f"{USER_AGENT}; {extra}" if extra else USER_AGENT,
            "Accept-Encoding": "identity",
        }
    )
    adapter = PoolPerOrigin(
        pool_connections=4, pool_maxsize=pool_size, max_retries=retry_policy(), timeouts=timeouts
    )
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.hooks["response"] += [_drop_redirect_body, _refuse_https_downgrade]
    return session


def _drop_redirect_body(response: requests.Response, **_kwargs: object) -> None:
    """Drop a redirect's body before requests follows it: requests reads the whole of it
    into memory, decoded, to free the connection, and a hostile server's body may never
    end, or be a compression bomb (a few KiB that inflate to gigabytes). Up to
    ``REDIRECT_BODY_BYTES`` are read as sent, so that the connection of a short one is
    used again; a longer one's is closed."""
    if not response.is_redirect:
        return
    with contextlib.suppress(*BODY_ERRORS):  # a body that breaks off is dropped all the same
        response.raw.read(REDIRECT_BODY_BYTES, decode_content=False)
    response.close()


class DowngradeRefused(requests.RequestException):
    """An https URL redirected to plain http."""


def _refuse_https_downgrade(response: requests.Response, **_kwargs: object) -> None:
    """Stop a redirect from https to http before it is followed: the bytes (and the
    manifest's digests) would then travel unprotected."""
    if not response.is_redirect or not response.url.startswith("https://"):
        return
    location = requests.utils.requote_uri(response.headers.get("Location", ""))
    if location.lower().startswith("http://"):
        raise DowngradeRefused(
            f"{redact_queries(redact_url(response.url))} redirected to plain http "
            f"({redact_queries(redact_url(location))}); refused"
        )
