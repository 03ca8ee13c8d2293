"""The transport's pure parts, without a server: URL redaction, the stall guard, the retry
policy's Retry-After handling, and what the environment resolves to for a mirror."""

from __future__ import annotations

import socket
import sys
import time
import types
from pathlib import Path

import pytest
import requests

from flashhub_kernels._config import get_config, parse_cdn_urls
from flashhub_kernels._network import header_deadline
from flashhub_kernels._network.certificates import ca_bundle
from flashhub_kernels._network.http_mirror import _PLAIN_URL
from flashhub_kernels._network.session import retry_policy, route_for
from flashhub_kernels._network.stall_guard import MIN_BYTES_PER_SECOND, StallGuard
from flashhub_kernels._utils.urls import (
    has_unencoded_credentials,
    redact_queries,
    redact_text,
    redact_url,
    split_credentials,
)
from flashhub_kernels.errors import ConfigError, TransportError

PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    return monkeypatch


@pytest.mark.parametrize(
    "url, shown",
    [
        ("https://user:secret@cdn.example/k", "https://user:****@cdn.example/k"),
        ("https://token@cdn.example:8443", "https://****@cdn.example:8443"),
        ("https://cdn.example/a@b", "https://cdn.example/a@b"),  # '@' in the path only
        ("file:///srv/mirror", "file:///srv/mirror"),
        # passwords that are not percent-encoded: hidden whole, whatever they hold
        ("http://bob:pa/ssword@host", "http://bob:****@host"),
        ("http://bob:p@ss:w/rd@host/x", "http://bob:****@host/x"),
        ("http://bob:pa/ss@w/ord@host:81/k", "http://bob:****@host:81/k"),
        ("http://bob:pa#ss?wd@host/k", "http://bob:****@host/k"),
        ("http://user:p@ss@host/x", "http://user:****@host/x"),
        ("http://u:p%2Fw@h/x", "http://u:****@h/x"),
        ("http://u:p@[::1]:80/x", "http://u:****@[::1]:80/x"),
        # no scheme, as proxy settings are often written
        ("user:pw@127.0.0.1:3128", "user:****@127.0.0.1:3128"),
        # no credentials, an '@' or ':' in the path or query: left as they are
        ("http://host:8080/a@b", "http://host:8080/a@b"),
        ("http://host/a:b@c", "http://host/a:b@c"),
        ("https://cdn.example/@scope/x?who=a@b", "https://cdn.example/@scope/x?who=a@b"),
        ("http://[::1]:80/x@y", "http://[::1]:80/x@y"),
        ("file:///srv/a@b:c", "file:///srv/a@b:c"),
        ("127.0.0.1:3128", "127.0.0.1:3128"),
        ("http://127.0.0.1:876S", "http://127.0.0.1:876S"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url, unencoded",
    [
        ("http://bob:pa/ssword@host", True),
        ("http://bob:p@ss:w/rd@host/x", True),
        ("http://bob:pass?word@host", True),
        ("http://bob:pass#word@host", True),
        ("http://bob:p%2Fss@host/x", False),
        ("http://user:p@ss@host/x", False),  # an '@' alone: parsers split at the last one
        ("http://host:8080/a@b", False),
        ("http://127.0.0.1:876S", False),
    ],
)
def test_unencoded_credentials_are_told_from_an_at_in_the_path(url: str, unencoded: bool) -> None:
    assert has_unencoded_credentials(url) is unencoded


def test_redact_text_removes_userinfo_and_named_secrets() -> None:
    text = "GET http://bob:pw1@a.example/x failed via socks5://u:pw2@proxy:1080; pw3 leaked"
    assert redact_text(text, ("pw3",)) == (
        "GET http://****@a.example/x failed via socks5://****@proxy:1080; **** leaked"
    )


def test_redact_text_hides_a_password_that_is_not_percent_encoded() -> None:
    text = "ProxyError('http://bob:pa/ss@proxy:80/', x) for 'http://cdn/k/a@b'"
    assert redact_text(text) == "ProxyError('http://****@proxy:80/', x) for 'http://cdn/k/a@b'"


def test_redact_text_hides_the_query_of_a_signed_url() -> None:
    text = "No connection adapters were found for 'ftp://o.example/b?X-Amz-Signature=s1&t=s2'"
    assert redact_text(text) == (
        "No connection adapters were found for 'ftp://o.example/b?X-Amz-Signature=****&t=****'"
    )


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (
            '"GET /b?X-Amz-Signature=s1&t=s2 HTTP/1.1" 200',
            '"GET /b?X-Amz-Signature=****&t=**** HTTP/1.1" 200',
        ),
        ('"GET /b?s3cr3t HTTP/1.1" 200', '"GET /b?**** HTTP/1.1" 200'),  # a token alone
        ("http://h/b?%2Fs1", "http://h/b?****"),
        ("is FLASHHUB_CDN_URL right? (it is)", "is FLASHHUB_CDN_URL right? (it is)"),
        ("right?)", "right?)"),
    ],
)
def test_redact_queries(text: str, shown: str) -> None:
    assert redact_queries(text) == shown


def test_split_credentials_decodes_percent_escapes() -> None:
    assert split_credentials("https://me%40corp:p%3Ass@cdn.example/kernels") == (
        "https://cdn.example/kernels",
        ("me@corp", "p:ss"),
    )
    assert split_credentials("https://cdn.example") == ("https://cdn.example", None)


def test_config_repr_hides_cdn_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHHUB_CDN_URL", "https://bob:hunter2@cdn.example")
    shown = repr(get_config())
    assert "hunter2" not in shown and "cdn.example" in shown


@pytest.mark.parametrize("url", ["http://127.0.0.1:876S", "https://cdn.example:99999"])
def test_a_bad_port_is_caught_when_the_setting_is_read(url: str) -> None:
    with pytest.raises(ConfigError, match="invalid port\n  hint: fix FLASHHUB_CDN_URL"):
        parse_cdn_urls(url)


@pytest.mark.parametrize(
    "value",
    [
        "http://bob:pa/ssword@127.0.0.1",
        "http://bob:p@ss:w/rd@127.0.0.1/k",
        "http://bob:80?ssword@127.0.0.1",  # parsers read bob as the host, 80 as its port
        "http://bob:80#ssword@127.0.0.1/k",
    ],
)
def test_a_password_that_is_not_percent_encoded_is_refused_unseen(value: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_cdn_urls(value)
    message = str(info.value)
    assert "http://bob:****@127.0.0.1" in message and "percent-encode" in message
    assert "FLASHHUB_CDN_URL" in message and "invalid port" not in message
    for fragment in ("pa/ssword", "ssword", "p@ss", "ss:w", "w/rd"):
        assert fragment not in message


@pytest.mark.parametrize("value", ["https://cdn.example\\.evil.com", "https://u:pw@cdn\\x/k"])
def test_a_backslash_in_the_host_is_refused(value: str) -> None:
    # requests would connect to cdn.example (urllib3 ends the host at the '\'), where
    # Python's parser, and so the messages, would show the host cdn.example\.evil.com.
    with pytest.raises(ConfigError, match=r"has a '\\' or a '%' in its host part") as info:
        parse_cdn_urls(value)
    assert "%5C" in str(info.value) and "pw" not in str(info.value)


def test_a_backslash_in_a_secret_is_no_matter() -> None:
    assert parse_cdn_urls("https://u:p\\w@cdn.example") == ("https://u:p\\w@cdn.example",)


def test_an_ipv6_address_with_a_zone_is_refused_saying_so() -> None:
    # urllib3 resolves '[fe80::1%25eth0]' as a host name, and fails: a DNS error later.
    with pytest.raises(ConfigError, match=r"an IPv6 address's zone .* cannot connect through"):
        parse_cdn_urls("http://[fe80::1%25eth0]:8080")
    assert parse_cdn_urls("http://[fe80::1]:8080") == ("http://[fe80::1]:8080",)


@pytest.mark.parametrize("scheme", ["HTTP", "Https", "FILE", "S3"])
def test_a_scheme_is_read_in_any_case(scheme: str) -> None:
    (url,) = parse_cdn_urls(f"{scheme}://u:PaSS@Cdn.example/Kernels")
    assert url == f"{scheme.lower()}://u:PaSS@Cdn.example/Kernels"


def test_a_comma_in_a_password_is_reported_by_the_part_after_it() -> None:
    # 'http://bob:pa,ss@host' splits into 'http://bob:pa' (a bad port) and 'ss@host'.
    with pytest.raises(ConfigError, match="must start with") as info:
        parse_cdn_urls("http://bob:Zq,Xw@127.0.0.1")
    assert "Zq" not in str(info.value) and "Xw" not in str(info.value)


def test_stall_guard_cuts_a_trickle_after_one_window() -> None:
    guard = StallGuard(window=3.0, now=0.0)
    verdicts = [guard.stalled(1, now=t * 0.5) for t in range(1, 12)]  # 2 bytes a second
    assert verdicts.index(True) == 5  # at 3.0 s: the first full window


def test_stall_guard_lets_a_steady_transfer_run_and_judges_the_last_window_only() -> None:
    guard = StallGuard(window=2.0, now=0.0)
    fast = [guard.stalled(64 << 10, now=t * 0.1) for t in range(1, 100)]  # 640 KiB/s
    assert not any(fast)
    # Then it slows to a trickle: cut once a whole window has been slow, not before.
    slow = [guard.stalled(10, now=9.9 + t * 0.1) for t in range(1, 40)]
    first_cut = slow.index(True)
    assert 1.9 <= (first_cut + 1) * 0.1 <= 2.3
    assert MIN_BYTES_PER_SECOND == 1024


def test_stall_guard_leaves_out_a_time_between_reads_no_read_waits() -> None:
    """Longer than the read timeout (the window): the process was stopped, not the server."""
    guard = StallGuard(window=1.0, now=0.0)
    assert not guard.stalled(1000, now=0.5)
    assert not guard.stalled(1000, now=5.0)  # stopped for 4 s
    trickle = [guard.stalled(1, now=5.0 + t * 0.5) for t in range(1, 6)]  # 2 bytes a second
    assert trickle.index(True) == 1  # a window after the stop, as without one


@pytest.mark.parametrize(
    "url, plain",
    [
        ("http://127.0.0.1:8080/kernels/acme/x/v1/build/torch-universal/x/__init__.py", True),
        ("https://cdn.example/k/a%20b/%C3%A9%25/c", True),
        ("https://[::1]:443/k/@scope/a=b;c,d!e*f(g)'h$i&j+k~l:m", True),
        ("https://cdn.example/k/%2F%3A", True),
        ("https://cdn.example/k/a b", False),
        ("https://cdn.example/k/\u00e9", False),
        ("https://cdn.example/k/%zz", False),
        ("https://cdn.example/k/a%4", False),
        ("https://cdn.example/k/%", False),
        ("https://cdn.example/k?x=1", False),
        ("https://cdn.example/k#x", False),
        ("https://cdn.example/k/%20%2", False),
        ("ftp://cdn.example/k", False),
    ],
)
def test_a_url_sent_as_it_is_is_one_requests_would_send_unchanged(url: str, plain: bool) -> None:
    assert bool(_PLAIN_URL.fullmatch(url)) is plain
    if plain:  # sent as it is: what prepare_url would have made of it
        prepared = requests.PreparedRequest()
        prepared.prepare_url(url, None)
        assert prepared.url == url


class _Answer:
    """The one attribute of a urllib3 response that Retry reads: its headers."""

    def __init__(self, retry_after: str) -> None:
        self.headers = {"Retry-After": retry_after}


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("2", 2),
        ("3600", 3600),  # past MAX_RETRY_AFTER: read, for the request to end at once
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0),
        ("Mon, 32 Dec 2026 25:61:61 GMT", None),  # no such day: urllib3 reads January 2nd
    ],
)
def test_retry_after_is_read_and_an_unreadable_one_ignored(
    value: str, seconds: float | None
) -> None:
    assert retry_policy().get_retry_after(_Answer(value)) == seconds  # type: ignore[arg-type]


def test_route_takes_credentials_from_the_url_before_netrc(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine cdn.example login fromnetrc password n3trc\n")
    netrc.chmod(0o600)
    clean_env.setenv("NETRC", str(netrc))
    assert route_for("https://cdn.example").auth == ("fromnetrc", "n3trc")
    route = route_for("https://url:pw@cdn.example")
    assert (route.base_url, route.auth) == ("https://cdn.example", ("url", "pw"))
    assert route.secrets == ("pw",)


@pytest.mark.parametrize(
    "url, no_proxy, proxied",
    [
        ("http://10.1.2.3:8080", "", True),
        ("http://10.1.2.3:8080", "10.0.0.0/8", False),  # CIDR
        ("http://cdn.corp:8080", "cdn.corp:8080", False),  # host:port
        ("http://cdn.corp:8080", "cdn.corp:9090", True),
        ("http://cdn.corp:8080", "other.example,.corp", False),  # a domain suffix
        ("http://cdn.corp:8080", "other.example", True),
    ],
)
def test_route_resolves_proxies_as_requests_does(
    clean_env: pytest.MonkeyPatch, url: str, no_proxy: str, proxied: bool
) -> None:
    clean_env.setenv("HTTP_PROXY", "http://puser:ppw@proxy.corp:3128")
    if no_proxy:
        clean_env.setenv("NO_PROXY", no_proxy)
    route = route_for(url)
    assert (route.proxy == "http://puser:****@proxy.corp:3128") is proxied
    assert route.proxy is None or "ppw" in route.secrets


def test_a_socks_proxy_without_pysocks_names_the_extra(
    clean_env: pytest.MonkeyPatch,
) -> None:
    clean_env.setenv("ALL_PROXY", "socks5://127.0.0.1:1080")
    clean_env.setitem(sys.modules, "socks", None)  # PySocks unimportable, as if not installed
    clean_env.delitem(sys.modules, "urllib3.contrib.socks", raising=False)
    with pytest.raises(TransportError, match=r"flashhub-kernels\[socks\]"):
        route_for("https://cdn.example")


def test_a_missing_ca_bundle_names_its_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CURL_CA_BUNDLE", "/nonexistent/ca.pem")
    with pytest.raises(TransportError, match=r"CURL_CA_BUNDLE=/nonexistent/ca\.pem"):
        ca_bundle()
    clean_env.setenv("REQUESTS_CA_BUNDLE", "/etc")  # a directory is a valid bundle
    assert ca_bundle() == "/etc"


@pytest.mark.parametrize(
    "name, raw, expected",
    [
        ("FLASHHUB_LOCK_TIMEOUT", "", None),
        ("FLASHHUB_LOCK_TIMEOUT", "0", 0.0),
        ("FLASHHUB_LOCK_TIMEOUT", "2.5", 2.5),
        ("FLASHHUB_READ_TIMEOUT", "", 60.0),
        ("FLASHHUB_READ_TIMEOUT", "3", 3.0),
    ],
)
def test_timeouts_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str, expected: float | None
) -> None:
    monkeypatch.setenv(name, raw)
    config = get_config()
    assert getattr(config, name.removeprefix("FLASHHUB_").lower()) == expected


@pytest.mark.parametrize(
    "raw, expected",
    [
        *[("1", True), ("TRUE", True), (" yes ", True), ("on", True)],
        *[("", False), ("0", False), ("False", False), ("no", False), ("off", False)],
    ],
)
def test_switches_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("FLASHHUB_OFFLINE", raw)
    monkeypatch.setenv("FLASHHUB_DISABLE_PROGRESS_BARS", raw)
    config = get_config()
    assert (config.offline, config.progress_bars) == (expected, not expected)


def test_a_switch_of_what_shows_takes_any_other_value_as_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLASHHUB_DISABLE_PROGRESS_BARS", "2")
    monkeypatch.setenv("FLASHHUB_NO_VERSION_CHECK", "please")
    config = get_config()
    assert config.progress_bars and config.version_check


@pytest.mark.parametrize(
    "name, raw, message",
    [
        ("FLASHHUB_LOCK_TIMEOUT", "-1", "must be zero or more seconds"),
        ("FLASHHUB_READ_TIMEOUT", "0", "must be a positive number of seconds"),
        ("FLASHHUB_CONNECT_TIMEOUT", "soon", "must be a positive number of seconds"),
        ("FLASHHUB_LOCK_TIMEOUT", "nan", "must be zero or more seconds, at most a week"),
        ("FLASHHUB_READ_TIMEOUT", "604801", "at most a week"),
    ],
)
def test_a_bad_timeout_names_its_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, raw: str, message: str
) -> None:
    monkeypatch.setenv(name, raw)
    with pytest.raises(ValueError, match=f"{name}=.*{message}"):
        get_config()


@pytest.mark.parametrize("raw, expected", [("", 32 << 30), ("1048576", 1 << 20), (" 7 ", 7)])
def test_max_file_bytes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: int
) -> None:
    monkeypatch.setenv("FLASHHUB_MAX_FILE_BYTES", raw)
    assert get_config().max_file_bytes == expected


@pytest.mark.parametrize("raw", ["0", "-1", "1.5", "4G", "\u0661", "1" + "0" * 18])
def test_a_bad_max_file_bytes_names_its_variable(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("FLASHHUB_MAX_FILE_BYTES", raw)
    with pytest.raises(ValueError, match=r"FLASHHUB_MAX_FILE_BYTES=.*positive whole number"):
        get_config()


def test_a_deadline_passing_while_its_request_connects_cuts_the_socket_once_it_has_one() -> None:
    """Past its headers' deadline, a request still connecting has no socket to shut down:
    it is neither taken for cut (its answer, if it comes in time, is kept) nor forgotten
    (its socket is shut down as soon as the connection has one)."""
    connection = types.SimpleNamespace(sock=None)
    armed = header_deadline._WATCHDOG.arm(0.01, connection)
    ours, theirs = socket.socketpair()
    try:
        time.sleep(0.3)  # past the deadline: looked at, and again, with no socket to cut
        assert not armed.cut
        connection.sock = ours
        theirs.settimeout(10)
        assert theirs.recv(1) == b""  # shut down
        assert armed.cut
    finally:
        header_deadline._WATCHDOG.disarm(armed)
        ours.close()
        theirs.close()


def test_the_deadlines_thread_ends_once_a_run_is_over_and_no_request_is_in_flight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle, it would wait for another request (a minute here): a run that is over ends
    it, so that a program that forks next copies no thread of the load. A request still
    in flight (another run's) keeps it on."""
    monkeypatch.setattr(header_deadline, "_IDLE_SECONDS", 60.0)
    watchdog = header_deadline._Watchdog()
    armed = watchdog.arm(60, types.SimpleNamespace(sock=None))
    thread = watchdog._thread
    assert thread is not None
    watchdog.end_when_idle()
    assert thread.is_alive() and watchdog._thread is thread  # its request is in flight
    watchdog.disarm(armed)
    watchdog.end_when_idle()
    thread.join(10)
    assert not thread.is_alive()
    assert watchdog._thread is None


def test_time_the_watchdog_was_stopped_between_two_looks_moves_the_deadlines_on() -> None:
    """The process stopped (Ctrl-Z) while the watchdog's thread was between two looks, not
    asleep: its next look comes late all the same, and the deadlines move on by that long
    (a request's answer that came meanwhile is read, not cut)."""
    watchdog = header_deadline._Watchdog()
    armed = header_deadline._Armed(types.SimpleNamespace(sock=None))
    now = time.monotonic()
    watchdog._due = [(now - 1.0, 0, armed)]  # passed, by a clock that ran through the stop
    watchdog._looked, watchdog._slept = now - 10.0, 0.0  # its last look, with no sleep since
    with watchdog._changed:
        watchdog._credit_stop()
    assert watchdog._due[0][0] > now + 8
    with watchdog._changed:  # a look on time moves nothing
        watchdog._credit_stop()
    assert watchdog._due[0][0] < now + 10
