"""Proxies from the environment, resolved as requests resolves them: ``http_proxy``,
``https_proxy``, ``ALL_PROXY`` (socks5 too), and ``no_proxy`` in each of its forms.

The proxies are real (pproxy in a subprocess); ``Proxy.targets()`` reads its log of the
connections it relayed.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import flashhub_kernels as fk
from conftest import MakeCdn, StartProxy, import_in_child, refused_port, run_python
from flashhub_kernels._utils.urls import redact_url
from flashhub_kernels.errors import ConfigError, TransportError
from support import cli_runner
from support.cdn_server import (
    CONNECTED,
    CdnServer,
    Fault,
    redirect,
    trickled_handshake,
    trickled_headers,
)
from support.trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"
PROXY_SECRET = "Prx-s3cret"
FILES_PER_LOAD = 6  # variants.json, metadata.json and the four files of the test kernel


def loads(marker_of: str = REPO) -> None:
    assert fk.get_kernel(REPO, version=1).marker() == f"{marker_of}@v1:{local_variant()}"


def test_plain_http_cdn_through_an_http_proxy(
    cdn: CdnServer, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("http")
    monkeypatch.setenv("http_proxy", proxy.url)
    write_kernel(cdn.root, REPO, 1)
    loads()
    assert len(cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    targets = proxy.targets(at_least=1)
    assert targets and set(targets) == {f"127.0.0.1:{cdn.port}"}


def test_https_cdn_is_tunnelled_through_an_http_proxy(
    tls_cdn: CdnServer, ca_pem: Path, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("http")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    monkeypatch.setenv("https_proxy", proxy.url)
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{refused_port()}")  # not for https
    fk.configure(cdn_url=tls_cdn.url)
    write_kernel(tls_cdn.root, REPO, 1)
    loads()
    assert len(tls_cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    targets = proxy.targets(at_least=1)
    assert targets and set(targets) == {f"127.0.0.1:{tls_cdn.port}"}


def test_proxy_credentials_go_to_the_proxy_not_through_the_tunnel(
    tls_cdn: CdnServer, ca_pem: Path, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("http", auth="user:p@ss")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    fk.configure(cdn_url=tls_cdn.url)
    write_kernel(tls_cdn.root, REPO, 1)
    monkeypatch.setenv("https_proxy", proxy.url)  # no credentials: the proxy says 407
    with pytest.raises(TransportError):
        fk.get_kernel(REPO, version=1)
    assert tls_cdn.requests == []
    monkeypatch.setenv("https_proxy", f"http://user:p%40ss@127.0.0.1:{proxy.port}")
    loads()
    assert len(tls_cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    assert [r for r in tls_cdn.requests if "Proxy-Authorization" in r.headers] == []
    assert set(proxy.targets(at_least=1)) == {f"127.0.0.1:{tls_cdn.port}"}


@pytest.mark.parametrize(
    "no_proxy, host",
    [
        ("127.0.0.1", "127.0.0.1"),
        ("example.com, 127.0.0.0/8", "127.0.0.1"),  # CIDR, in a list
        ("localhost:{port}", "localhost"),  # host:port
        (".example.com,localhost", "localhost"),
    ],
)
def test_no_proxy_bypasses_the_proxy(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, no_proxy: str, host: str
) -> None:
    # The proxy's port is dead: a load only succeeds if it went around the proxy.
    dead = f"http://127.0.0.1:{refused_port()}"
    monkeypatch.setenv("http_proxy", dead)
    monkeypatch.setenv("https_proxy", dead)
    monkeypatch.setenv("no_proxy", no_proxy.format(port=cdn.port))
    fk.configure(cdn_url=cdn.url_for(host))
    write_kernel(cdn.root, REPO, 1)
    loads()
    assert len(cdn.gets(missed_guesses=False)) == FILES_PER_LOAD


@pytest.mark.parametrize("origin, target", [("localhost", "127.0.0.1"), ("127.0.0.1", "localhost")])
def test_a_redirect_to_another_host_takes_that_hosts_route(
    cdn: CdnServer,
    make_cdn: MakeCdn,
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    origin: str,
    target: str,
) -> None:
    # no_proxy exempts localhost: an internal CDN hands a file over to a host outside (an
    # object store's signed URL), which only the proxy reaches; and the other way round.
    proxy = start_proxy("http")
    other = make_cdn()  # the same files, on another port
    monkeypatch.setenv("http_proxy", proxy.url)
    monkeypatch.setenv("no_proxy", "localhost")
    write_kernel(cdn.root, REPO, 1)
    variants = f"kernels/{REPO}/v1/variants.json"
    cdn.inject(variants, redirect(f"{other.url_for(target)}/{variants}"))
    fk.configure(cdn_url=cdn.url_for(origin))
    loads()
    assert other.gets() == [f"/{variants}"]
    relayed = set(proxy.targets(at_least=1))
    if target == "localhost":
        assert relayed == {f"127.0.0.1:{cdn.port}"}
    else:
        assert relayed == {f"127.0.0.1:{other.port}"}


def test_a_proxy_a_redirect_takes_is_named_when_it_fails(
    cdn: CdnServer, tls_cdn: CdnServer, ca_pem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An http CDN, which no proxy is set for, redirects to an https one, which
    ``https_proxy`` reaches; that proxy is dead. The failure names it (no password),
    not a proxy of the CDN's own, which has none."""
    where = f"127.0.0.1:{refused_port()}"
    monkeypatch.setenv("https_proxy", f"http://user:{PROXY_SECRET}@{where}")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    write_kernel(tls_cdn.root, REPO, 1)
    variants = f"kernels/{REPO}/v1/variants.json"
    cdn.inject(variants, *(redirect(f"{tls_cdn.url}/{variants}") for _ in range(4)))
    fk.configure(cdn_url=cdn.url)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert f"the proxy http://user:****@{where} failed: " in message, message
    assert "Connection refused" in message, message
    assert "check the proxy settings" in message, message
    assert PROXY_SECRET not in message
    assert tls_cdn.requests == []


def test_no_proxy_uppercase_and_for_another_port_does_not_bypass(
    cdn: CdnServer, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("http")
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", f"localhost:{refused_port()}")  # another port: no bypass
    fk.configure(cdn_url=cdn.url_for("localhost"))
    write_kernel(cdn.root, REPO, 1)
    loads()
    assert len(cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    assert set(proxy.targets(at_least=1)) == {f"localhost:{cdn.port}"}


@pytest.mark.parametrize("variable", ["ALL_PROXY", "all_proxy", "http_proxy"])
def test_socks5_proxy(
    cdn: CdnServer, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    pytest.importorskip("socks")
    proxy = start_proxy("socks5")
    monkeypatch.setenv(variable, proxy.url)
    write_kernel(cdn.root, REPO, 1)
    loads()
    assert len(cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    targets = proxy.targets(at_least=1)
    assert targets and set(targets) == {f"127.0.0.1:{cdn.port}"}


# Run in a new interpreter: requests looks for PySocks as it is imported.
WITHOUT_PYSOCKS = """
import sys
sys.modules["socks"] = None  # PySocks is not installed
import flashhub_kernels as fk
from flashhub_kernels.errors import TransportError
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except TransportError as exc:
    print("TransportError")
    print(exc)
else:
    print("loaded")
"""


def test_socks_proxy_without_pysocks_says_which_extra_to_install(
    cdn: CdnServer, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("socks5")
    monkeypatch.setenv("ALL_PROXY", proxy.url)
    write_kernel(cdn.root, REPO, 1)
    output = run_python(WITHOUT_PYSOCKS, timeout=60, torch_only=True)
    assert output.startswith("TransportError\n"), output
    assert "flashhub-kernels[socks]" in output
    assert cdn.requests == []


def test_a_socks_proxy_for_https_only_is_no_matter_to_an_http_cdn_without_pysocks(
    cdn: CdnServer, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("socks5")
    monkeypatch.setenv("https_proxy", proxy.url)
    write_kernel(cdn.root, REPO, 1)
    assert run_python(WITHOUT_PYSOCKS, timeout=60, torch_only=True) == "loaded\n"
    assert len(cdn.gets(missed_guesses=False)) == FILES_PER_LOAD


def test_a_redirect_to_https_through_a_socks_proxy_without_pysocks_says_which_extra(
    cdn: CdnServer,
    tls_cdn: CdnServer,
    ca_pem: Path,
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = start_proxy("socks5")
    monkeypatch.setenv("https_proxy", proxy.url)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    write_kernel(cdn.root, REPO, 1)  # both serve tmp_path / "cdn"
    variants = f"kernels/{REPO}/v1/variants.json"
    cdn.inject(variants, redirect(f"{tls_cdn.url}/{variants}"))
    output = run_python(WITHOUT_PYSOCKS, timeout=60, torch_only=True)
    assert output.startswith("TransportError\n"), output
    assert "flashhub-kernels[socks]" in output
    assert tls_cdn.requests == []


def test_a_dead_proxy_is_blamed_not_the_cdn(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = f"http://127.0.0.1:{refused_port()}"
    monkeypatch.setenv("http_proxy", proxy)
    write_kernel(cdn.root, REPO, 1)
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert time.monotonic() - start < 30  # does not hang
    message = str(info.value)
    assert "proxy" in message.lower()
    assert proxy.removeprefix("http://") in message
    assert "Connection refused" in message
    assert "NewConnectionError" not in message  # the reason, not urllib3's wrapping
    assert "FLASHHUB_CDN_URL" not in message
    assert cdn.requests == []


def variants_json_trickling_its_headers(
    server: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> list[threading.Event]:
    """Load from ``server``, whose variants.json sends its headers a byte at a time (twice:
    the request and its retry), with 1 s timeouts; the events say that the client hung up."""
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "1")
    fk.configure(cdn_url=server.url)
    write_kernel(server.root, REPO, 1)
    hung_up = [threading.Event() for _ in range(2)]
    server.inject(
        f"kernels/{REPO}/v1/variants.json",
        *(trickled_headers(0.5, limit=120, hung_up=event) for event in hung_up),
    )
    return hung_up


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_headers_that_trickle_through_a_proxy_are_the_cdns_fault_and_retried(
    scheme: str,
    cdn: CdnServer,
    tls_cdn: CdnServer,
    ca_pem: Path,
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CDN behind the proxy (forwarded to, or tunnelled to with CONNECT) sends its
    headers a byte at a time: each request is cut at the deadline and retried once, and
    the load fails naming the late headers, not the proxy, which did its job."""
    server = tls_cdn if scheme == "https" else cdn
    proxy = start_proxy("http")
    monkeypatch.setenv(f"{scheme}_proxy", proxy.url)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    hung_up = variants_json_trickling_its_headers(server, monkeypatch)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert "headers were not all in after 2 s" in message, message
    assert f"the proxy {proxy.url} failed" not in message, message
    assert len(server.gets("variants.json")) == 2
    assert all(event.wait(10) for event in hung_up)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_kept_alive_connection_the_cdn_closed_behind_a_proxy_is_replaced(
    scheme: str,
    make_cdn: MakeCdn,
    tls_context: Any,
    ca_pem: Path,
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The CDN's idle timeout fires just as a connection through the proxy (forwarded,
    or a tunnel) is reused: the request is never answered. It is sent again on a new
    connection, as without a proxy, not taken for the proxy's failure and the load's."""
    server = make_cdn(tls=tls_context if scheme == "https" else None, drop_reused=1)
    proxy = start_proxy("http")
    monkeypatch.setenv(f"{scheme}_proxy", proxy.url)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    fk.configure(cdn_url=server.url)
    write_kernel(server.root, REPO, 1)
    loads()
    assert server.dropped == 1  # the race happened
    paths = server.gets(missed_guesses=False)
    assert len(paths) == len(set(paths)) == FILES_PER_LOAD  # each answered once


def test_headers_that_trickle_through_a_tls_proxy_are_cut(
    tls_cdn: CdnServer,
    ca_pem: Path,
    certificate_authority: tuple[Any, Path],
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """An https:// proxy tunnels to an https CDN: TLS inside the proxy's TLS, whose
    connection is no socket object. The deadline cuts it all the same (its thread used to
    die of it, and no request of the process had a deadline after)."""
    pem = tmp_path / "proxy.pem"
    certificate_authority[0].issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
        str(pem)
    )
    proxy = start_proxy("http", pem=pem)
    monkeypatch.setenv("https_proxy", proxy.url)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    hung_up = variants_json_trickling_its_headers(tls_cdn, monkeypatch)
    with pytest.raises(TransportError, match="headers were not all in after 2 s"):
        fk.get_kernel(REPO, version=1)
    assert len(tls_cdn.gets("variants.json")) == 2
    assert all(event.wait(10) for event in hung_up)


LoadThroughAProxy = Callable[[Callable[..., Fault]], tuple[CdnServer, str, list[threading.Event]]]


@pytest.fixture(params=["http", "https"])
def load_through_a_proxy_playing(
    request: pytest.FixtureRequest,
    tls_cdn: CdnServer,
    make_cdn: MakeCdn,
    tls_context: Any,
    ca_pem: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> LoadThroughAProxy:
    """``load(fault)``: load from ``tls_cdn`` through a proxy (a second server, an
    ``http://`` and an ``https://`` one) that answers each CONNECT with
    ``fault(hung_up=event)``, with 1 s timeouts; it returns the proxy, the load's error
    message, and the events that say the client hung up."""
    tls = tls_context if request.param == "https" else None
    proxy = make_cdn(tls_cdn.root.parent / "proxy", tls=tls)
    assert proxy.url.startswith(f"{request.param}://")
    monkeypatch.setenv("https_proxy", proxy.url)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "1")
    fk.configure(cdn_url=tls_cdn.url)
    write_kernel(tls_cdn.root, REPO, 1)

    def load(fault: Callable[..., Fault]) -> tuple[CdnServer, str, list[threading.Event]]:
        hung_up = [threading.Event() for _ in range(8)]
        proxy.inject(f"127.0.0.1:{tls_cdn.port}", *(fault(hung_up=event) for event in hung_up))
        with pytest.raises(TransportError) as info:
            fk.get_kernel(REPO, version=1)
        assert tls_cdn.requests == []
        return proxy, str(info.value), hung_up

    return load


def test_a_proxy_whose_answer_to_connect_never_ends_is_cut_and_named(
    load_through_a_proxy_playing: LoadThroughAProxy,
) -> None:
    """The proxy answers CONNECT a byte at a time: each read is in time, the whole never
    is. The tunnel must be open within the connect timeout plus the read timeout (2 s
    here); past that the load fails naming the proxy, instead of waiting for as long as
    the bytes keep coming."""
    fault = functools.partial(trickled_headers, 0.5, limit=60, opening=CONNECTED + b"X-Padding: ")
    proxy, message, hung_up = load_through_a_proxy_playing(fault)
    assert f"the proxy {proxy.url} failed" in message, message
    assert "the tunnel was not open after 2 s" in message, message
    assert "ProtocolError" not in message, message  # the reason, not urllib3's wrapping
    assert hung_up[0].wait(10)


def test_a_tls_handshake_through_a_tunnel_that_never_ends_is_cut(
    load_through_a_proxy_playing: LoadThroughAProxy,
) -> None:
    """The tunnel opens, and the server behind it sends its TLS handshake a byte at a
    time. Through an ``http://`` proxy, Python's ``ssl`` bounds the handshake as a whole
    (by the connect timeout); through an ``https://`` proxy urllib3's own TLS layer runs
    it, a read at a time, and the tunnel's deadline cuts it."""
    _proxy, message, hung_up = load_through_a_proxy_playing(
        functools.partial(trickled_handshake, 0.5, limit=60)
    )
    assert re.search("the tunnel was not open after 2 s|timed out", message), message
    assert hung_up[0].wait(10)


def test_a_proxy_setting_without_a_scheme_is_an_http_proxy(
    cdn: CdnServer, start_proxy: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = start_proxy("http", auth=f"user:{PROXY_SECRET}")
    monkeypatch.setenv("http_proxy", f"user:{PROXY_SECRET}@127.0.0.1:{proxy.port}")  # as curl takes
    write_kernel(cdn.root, REPO, 1)
    loads()
    assert len(cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    assert set(proxy.targets(at_least=1)) == {f"127.0.0.1:{cdn.port}"}


def test_a_dead_proxy_without_a_scheme_is_named_without_its_password(cdn: CdnServer) -> None:
    where = f"127.0.0.1:{refused_port()}"
    env = {"http_proxy": f"user:{PROXY_SECRET}@{where}"}
    write_kernel(cdn.root, REPO, 1)
    raised, printed = import_in_child("flashhub.acme.tensor_tricks.v1", env=env)
    command = cli_runner.flashhub("-v", "get", REPO, "--version", "1", env=env)
    assert issubclass(raised, TransportError) and command.returncode == 1
    for shown in (printed, command.stderr):
        assert f"the proxy http://user:****@{where} failed" in shown
        assert PROXY_SECRET not in shown
    assert "could not serve" in command.stderr  # the -v log line names the proxy too
    assert cdn.requests == []


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        # urllib3 ends the host at the '\\': it would send the credentials ('127.0.0.1',
        # '<port>\\') to 127.0.0.1:<port>, where the messages name 127.0.0.2:3128.
        ("http://127.0.0.1:{port}\\@127.0.0.2:3128", "'http://127.0.0.1:****@127.0.0.2:3128'"),
        ("http://127.0.0.%31:{port}", "'http://127.0.0.%31:{port}'"),  # decoded by urllib3
    ],
)
def test_a_proxy_that_urllib3_reads_as_another_host_is_refused_before_any_request(
    cdn: CdnServer,
    start_proxy: StartProxy,
    monkeypatch: pytest.MonkeyPatch,
    written: str,
    shown: str,
) -> None:
    proxy = start_proxy("http")
    monkeypatch.setenv("http_proxy", written.format(port=proxy.port))
    write_kernel(cdn.root, REPO, 1)
    raised, printed = import_in_child("flashhub.acme.tensor_tricks.v1")
    assert raised is ConfigError
    assert f"the proxy {shown.format(port=proxy.port)} has a '\\'" in printed
    assert "%5C" in printed and "http_proxy" in printed
    assert proxy.targets() == [] and cdn.requests == []


def test_a_proxy_password_that_is_not_percent_encoded_is_refused_unseen(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", f"http://user:Pr/xy-{PROXY_SECRET}@127.0.0.1:3128")
    write_kernel(cdn.root, REPO, 1)
    with pytest.raises(ConfigError) as info:
        fk.get_kernel(REPO, version=1)
    assert "http://user:****@127.0.0.1:3128" in str(info.value)
    assert "percent-encode" in str(info.value) and "http_proxy" in str(info.value)
    assert "Pr/xy" not in str(info.value) and PROXY_SECRET not in str(info.value)
    assert cdn.requests == []


@pytest.mark.parametrize(
    ("written", "why"),
    [
        (f"http://user:{PROXY_SECRET}@[::1:3128", "is malformed: its host is neither"),
        (f"http://user:{PROXY_SECRET}@proxy:port", "has an invalid port"),
        ("http://proxy:99999", "has an invalid port"),
    ],
    ids=["open-bracket", "port-word", "port-out-of-range"],
)
def test_a_proxy_whose_host_or_port_does_not_parse_is_a_config_error(
    cdn: CdnServer, written: str, why: str
) -> None:
    """An open IPv6 bracket escaped a load as Python's bare ``ValueError: Invalid IPv6
    URL``, naming no setting (no ImportError for an ``import``), and a port that is no
    number failed as the proxy being down."""
    env = {"http_proxy": written}
    write_kernel(cdn.root, REPO, 1)
    raised, printed = import_in_child("flashhub.acme.tensor_tricks.v1", env=env)
    command = cli_runner.flashhub("get", REPO, "--version", "1", env=env)
    assert raised is ConfigError
    assert command.returncode == 2 and command.stdout == ""
    for shown in (printed, command.stderr):
        assert f"the proxy {redact_url(written)!r} {why}" in shown
        assert "hint: fix https_proxy / http_proxy / all_proxy" in shown
        assert PROXY_SECRET not in shown
    assert cdn.requests == []
