"""HTTP requests through urllib3: pooled keep-alive connections, retries, proxies.

urllib3 is the engine under ``requests``; the transport uses it directly because a
``requests.Session`` spends about 3x the CPU per request (request preparation, hooks,
environment merging), which decides the load time of a variant with many small files.
What ``requests`` would add is provided here: proxies from ``*_proxy`` / ``no_proxy``
and a CA bundle from ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` (``SSL_CERT_FILE``
works through OpenSSL itself).
"""

from __future__ import annotations

import os
import threading
import urllib.parse
import urllib.request

import urllib3
from urllib3.util.retry import Retry

POOL_SIZE = 16  # connections kept per host: the parallel file downloads, with room
RETRY_STATUSES = (429, 500, 502, 503, 504)
_USER_AGENT = "flashhub-kernels"


def _retry_policy() -> Retry:
    return Retry(
        total=6,
        connect=2,  # a dead mirror should fail over fast, not after a long backoff
        read=2,
        status=4,
        backoff_factor=0.25,
        backoff_max=8,
        status_forcelist=RETRY_STATUSES,
        allowed_methods=frozenset({"GET", "HEAD"}),
        respect_retry_after_header=True,
        raise_on_status=False,  # the caller reports the final status with its URL
        redirect=0,  # redirects are the caller's decision (same scheme only)
    )


def _ca_bundle() -> str | None:
    return os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or None


Opener = urllib3.PoolManager | urllib3.HTTPConnectionPool


class HttpClient:
    """GET and HEAD through keep-alive connection pools, one per origin, made on first use.

    Direct connections go straight to the origin's pool (what ``PoolManager.request``
    would look up again on every request, about 70 us each); proxied ones go through a
    ``ProxyManager``, which needs the whole URL.
    """

    def __init__(self, connect_timeout: float, read_timeout: float) -> None:
        self._timeout = urllib3.Timeout(connect=connect_timeout, read=read_timeout)
        self._retries = _retry_policy()
        self._proxies = urllib.request.getproxies_environment()
        self._managers: dict[str | None, urllib3.PoolManager] = {}
        self._routes: dict[tuple[str, str, int | None], tuple[Opener, bool]] = {}
        self._lock = threading.Lock()

    def request(
        self, method: str, url: str, headers: dict[str, str] | None = None
    ) -> urllib3.BaseHTTPResponse:
        """Send one request; the body is left unread (stream it, then release or close).

        Raises:
            urllib3.exceptions.HTTPError: the connection failed after all retries.
        """
        parts = urllib.parse.urlsplit(url)
        opener, whole_url = self._route(parts)
        target = url if whole_url else parts.path + (f"?{parts.query}" if parts.query else "")
        return opener.urlopen(
            method,
            target,
            headers={"User-Agent": _USER_AGENT, **(headers or {})},
            preload_content=False,
            redirect=False,
            retries=self._retries,
            timeout=self._timeout,
        )

    def close(self) -> None:
        with self._lock:
            for manager in self._managers.values():
                manager.clear()
            self._managers.clear()
            self._routes.clear()

    def _route(self, parts: urllib.parse.SplitResult) -> tuple[Opener, bool]:
        """The opener for an origin, and whether it wants the whole URL (a proxy does)."""
        origin = (parts.scheme, parts.hostname or "", parts.port)
        with self._lock:
            route = self._routes.get(origin)
            if route is None:
                proxy = self._proxy_for(parts)
                manager = self._manager(proxy)
                if proxy:
                    route = (manager, True)
                else:
                    route = (manager.connection_from_host(origin[1], origin[2], origin[0]), False)
                self._routes[origin] = route
        return route

    def _manager(self, proxy: str | None) -> urllib3.PoolManager:
        manager = self._managers.get(proxy)
        if manager is None:
            ca_certs = _ca_bundle()
            if proxy:
                manager = urllib3.ProxyManager(proxy, maxsize=POOL_SIZE, ca_certs=ca_certs)
            else:
                manager = urllib3.PoolManager(num_pools=8, maxsize=POOL_SIZE, ca_certs=ca_certs)
            self._managers[proxy] = manager
        return manager

    def _proxy_for(self, parts: urllib.parse.SplitResult) -> str | None:
        proxy = self._proxies.get(parts.scheme) or self._proxies.get("all")
        if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
            return None
        return proxy
