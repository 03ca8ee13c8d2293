"""A CDN behind HTTP Basic auth: credentials from the URL or from netrc, wrong ones that
fail without showing the secret anywhere, and redirects that must not carry them away."""

from __future__ import annotations

import logging
import os
import ssl
import traceback
import urllib.parse
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import MakeCdn, StartProxy, import_in_child, refused_port
from flashhub_kernels.errors import ConfigError, TransportError
from support import cli_runner
from support.cdn_server import CdnServer, basic_auth, redirect, status
from support.preloaded import run_code
from support.trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"
MODULE = "flashhub.acme.tensor_tricks.v1"
VARIANTS = f"kernels/{REPO}/v1/variants.json"
FILES_PER_LOAD = 6
USER, SECRET = "user", "s3cret-Pa55"
WRONG = "wr0ng-Pa55word"


@pytest.fixture
def auth_cdn(make_cdn: MakeCdn) -> CdnServer:
    """A CDN that answers 401 unless a request carries ``USER:SECRET``; the kernel on it."""
    server = make_cdn(auth=basic_auth(USER, SECRET))
    write_kernel(server.root, REPO, 1)
    return server


def loads() -> None:
    assert fk.get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{local_variant()}"


def write_netrc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, password: str) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {password}\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))


@pytest.mark.parametrize(
    "user, password", [(USER, SECRET), ("us er", "p@ss:w/rd%")], ids=["plain", "quoted"]
)
def test_credentials_in_the_cdn_url(make_cdn: MakeCdn, user: str, password: str) -> None:
    server = make_cdn(auth=basic_auth(user, password))
    write_kernel(server.root, REPO, 1)
    quoted = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
    fk.configure(cdn_url=server.url_for("127.0.0.1", quoted))
    loads()
    assert len(server.gets(missed_guesses=False)) == FILES_PER_LOAD
    assert 401 not in {r.status for r in server.requests}  # sent up front, not after a 401


def test_credentials_from_netrc(
    auth_cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_netrc(tmp_path, monkeypatch, SECRET)
    fk.configure(cdn_url=auth_cdn.url)
    loads()
    assert len(auth_cdn.gets(missed_guesses=False)) == FILES_PER_LOAD
    assert {r.authorization for r in auth_cdn.requests} == {basic_auth(USER, SECRET)}


def test_no_credentials_is_a_transport_error(auth_cdn: CdnServer) -> None:
    fk.configure(cdn_url=auth_cdn.url)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert "401" in str(info.value)
    assert {r.status for r in auth_cdn.requests} == {401}


def _wrong_password_error(
    auth_cdn: CdnServer,
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> TransportError:
    caplog.set_level(logging.DEBUG, logger="flashhub_kernels")
    if source == "url":
        fk.configure(cdn_url=auth_cdn.url_for("127.0.0.1", f"{USER}:{WRONG}"))
    else:
        write_netrc(tmp_path, monkeypatch, WRONG)
        fk.configure(cdn_url=auth_cdn.url)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert {r.status for r in auth_cdn.requests} == {401}
    return info.value


@pytest.mark.parametrize("source", ["url", "netrc"])
def test_a_wrong_password_fails_without_showing_it(
    auth_cdn: CdnServer,
    source: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    exc = _wrong_password_error(auth_cdn, source, tmp_path, monkeypatch, caplog)
    assert f"127.0.0.1:{auth_cdn.port}" in str(exc)  # which CDN, still
    assert "401" in str(exc)
    for shown in (str(exc), repr(exc), caplog.text):
        assert WRONG not in shown
        assert urllib.parse.quote(WRONG) not in shown
    assert all(WRONG not in record.getMessage() for record in caplog.records)


def test_a_wrong_password_is_not_in_the_printed_traceback(
    auth_cdn: CdnServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What a user sees: the whole chain of exceptions (``raise ... from``, or the context).
    exc = _wrong_password_error(auth_cdn, "url", tmp_path, monkeypatch, caplog)
    printed = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert "TransportError" in printed
    assert WRONG not in printed


def refusals(env: dict[str, str]) -> tuple[str, str]:
    """What an import and ``flashhub -v get`` print under the settings ``env``, which
    both must refuse: the import with a ConfigError (an ImportError), the command with
    exit status 2."""
    raised, printed = import_in_child(MODULE, env=env)
    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    command = cli_runner.flashhub("-v", "get", REPO, "--version", "1", env=env)
    assert command.returncode == 2
    return printed, command.stderr + command.stdout


@pytest.mark.parametrize(
    ("password", "pieces"),
    [
        ("pa/ssword", ["pa/ssword", "ssword", "pa/"]),
        ("p@ss:w/rd", ["p@ss", "ss:w", "w/rd"]),
        ("pa#ss?wd", ["pa#ss", "ss?wd", "?wd"]),
        # Read as a URL parser reads it, 'user' would be the host and 80 its port.
        ("80?ssword", ["80?", "ssword"]),
        ("80#ssword", ["80#", "ssword"]),
    ],
)
def test_a_password_that_is_not_percent_encoded_is_refused_and_never_shown(
    auth_cdn: CdnServer, password: str, pieces: list[str]
) -> None:
    # Its '/', '?' or '#' ends the URL's host part: parsed as it stands, 'pa' would be a port.
    env = {"FLASHHUB_CDN_URL": f"{auth_cdn.url_for('127.0.0.1', f'{USER}:{password}')}/"}
    for shown in refusals(env):
        assert f"{USER}:****@127.0.0.1:{auth_cdn.port}" in shown
        assert "percent-encode" in shown and "FLASHHUB_CDN_URL" in shown
        assert "invalid port" not in shown
        for piece in pieces:
            assert piece not in shown
    assert auth_cdn.requests == []


@pytest.mark.parametrize(
    ("value", "pieces"),
    [
        ("https://ci-bot:Hunter2,Tail#Secret@cdn.example", ["Hunter2", "Tail", "Secret"]),
        ("https://ci-bot:Hunter2,Tail/Secret@cdn.example", ["Hunter2", "Tail", "Secret"]),
        ("https://ci-bot:FirstHalf,https://mirror2.example", ["FirstHalf"]),
    ],
    ids=["comma-then-hash", "comma-then-slash", "comma-then-url"],
)
def test_a_password_split_at_an_unencoded_comma_is_refused_and_never_shown(
    value: str, pieces: list[str]
) -> None:
    """A ',' separates mirrors, so it splits such a password into two "URLs": neither
    half may be shown as the URL the error is about."""
    for shown in refusals({"FLASHHUB_CDN_URL": value}):
        assert "FLASHHUB_CDN_URL" in shown
        for piece in pieces:
            assert piece not in shown


@pytest.mark.parametrize(
    ("tail", "shown"),
    [
        (f"/?sv=2024-01-01&sp=r&sig={SECRET}", "/?****"),  # an Azure SAS token
        (f"?X-Amz-Signature={SECRET}", "?****"),
        (f"/base#{SECRET}", "/base#****"),
        ("/base?", "/base?****"),  # an empty query or fragment still ends the path
        ("/base#", "/base#****"),
    ],
)
def test_a_cdn_url_with_a_token_in_its_query_is_refused_unseen(
    cdn: CdnServer, tail: str, shown: str
) -> None:
    # The path of each file would go after the query: nothing asked for could be found.
    write_kernel(cdn.root, REPO, 1)
    for output in refusals({"FLASHHUB_CDN_URL": cdn.url + tail}):
        assert f"'{cdn.url}{shown}' has a query or a fragment" in output
        assert "is not supported" in output and "FLASHHUB_CDN_URL" in output
        assert SECRET not in output
    assert cdn.requests == []


@pytest.mark.parametrize("host", ["127.0.0.%31", "%31%32%37.0.0.1"])
def test_a_cdn_host_with_a_percent_escape_is_refused_before_any_request(
    cdn: CdnServer, host: str
) -> None:
    # urllib3 decodes it and connects to 127.0.0.1, where every message (and no_proxy, and
    # netrc) would read the host as it is written.
    write_kernel(cdn.root, REPO, 1)
    for output in refusals({"FLASHHUB_CDN_URL": f"http://{host}:{cdn.port}"}):
        assert f"'http://{host}:{cdn.port}' has a '\\' or a '%' in its host part" in output
    assert cdn.requests == []


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_a_redirect_to_another_host_does_not_carry_the_credentials(
    auth_cdn: CdnServer, make_cdn: MakeCdn, host: str
) -> None:
    other = make_cdn()  # no auth, the same files; another host, or another port
    auth_cdn.inject(VARIANTS, redirect(f"{other.url_for(host)}/{VARIANTS}"))
    fk.configure(cdn_url=auth_cdn.url_for("127.0.0.1", f"{USER}:{SECRET}"))
    loads()
    assert other.gets() == [f"/{VARIANTS}"]
    assert [r.authorization for r in other.requests] == [None]
    assert {r.authorization for r in auth_cdn.requests} == {basic_auth(USER, SECRET)}


@pytest.mark.parametrize("listed", [True, False], ids=["its-entry", "no-entry"])
def test_a_redirect_to_another_host_takes_that_hosts_netrc_entry(
    auth_cdn: CdnServer,
    make_cdn: MakeCdn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    listed: bool,
) -> None:
    # As requests does where it trusts the environment; never the first host's entry.
    other = make_cdn(auth=basic_auth("bob", "0th3r-Pa55"))
    entry = "machine localhost login bob password 0th3r-Pa55\n" if listed else ""
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} password {SECRET}\n{entry}")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    redirected = f"{other.url_for('localhost')}/{VARIANTS}"
    auth_cdn.inject(VARIANTS, redirect(redirected))
    fk.configure(cdn_url=auth_cdn.url)
    if listed:
        loads()
        assert {r.authorization for r in other.requests} == {basic_auth("bob", "0th3r-Pa55")}
        return
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert f"HTTP 401 Unauthorized from {redirected}, redirected there" in str(info.value)
    assert "'machine localhost login USER password PASSWORD'" in (info.value.hint or "")
    assert "FLASHHUB_CDN_URL" not in (info.value.hint or "")
    assert [r.authorization for r in other.requests] == [None]


def test_a_redirect_to_a_signed_url_requests_cannot_fetch_fails_unseen(
    auth_cdn: CdnServer, caplog: pytest.LogCaptureFixture
) -> None:
    # requests refuses the scheme, quoting the whole URL, signature and all.
    caplog.set_level(logging.DEBUG, logger="flashhub_kernels")
    signed = f"ftp://objects.example/{VARIANTS}?X-Amz-Signature=sig-0b5e4"
    auth_cdn.inject(VARIANTS, *[redirect(signed)] * 10)
    fk.configure(cdn_url=auth_cdn.url_for("127.0.0.1", f"{USER}:{SECRET}"))
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    printed = "".join(traceback.format_exception(type(info.value), info.value, None))
    assert f"ftp://objects.example/{VARIANTS}?X-Amz-Signature=****" in printed
    for shown in (printed, repr(info.value), caplog.text):
        assert "sig-0b5e4" not in shown and SECRET not in shown


def test_a_refused_load_hints_at_credentials_not_the_network(
    auth_cdn: CdnServer, make_cdn: MakeCdn
) -> None:
    forbidden = make_cdn()  # a second mirror that answers 403 for the same document
    forbidden.inject(VARIANTS, status(403))
    fk.configure(cdn_url=f"{auth_cdn.url},{forbidden.url}")
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    hint = info.value.hint or ""
    assert "401" in str(info.value) and "403" in str(info.value)
    assert "FLASHHUB_CDN_URL" in hint and "netrc" in hint and "user:password@" in hint
    assert "check the network" not in hint
    assert "so it is ignored" not in hint  # there is no netrc file to blame


def test_a_malformed_netrc_is_named_in_the_hint(
    auth_cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine 127.0.0.1 login {USER} pasword {SECRET}\n")  # a typo
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    fk.configure(cdn_url=auth_cdn.url)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    hint = info.value.hint or ""
    assert f"the netrc file {netrc} does not parse (line 1), so it is ignored" in hint
    assert SECRET not in str(info.value)
    assert {r.authorization for r in auth_cdn.requests} == {None}


# A load in a process of its own, logging everything (urllib3's connections included).
LOAD_LOGGING_ALL = f"""
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
import flashhub_kernels as fk
print(fk.get_kernel({REPO!r}, version=1).marker())
"""


def test_a_private_cdn_behind_a_proxy_keeps_every_credential_to_its_own_host(
    make_cdn: MakeCdn,
    tls_context: ssl.SSLContext,
    ca_pem: Path,
    start_proxy: StartProxy,
    tmp_path: Path,
) -> None:
    # A fleet's settings: a private CA, https_proxy with credentials, no_proxy for the
    # CDN, whose credentials are in netrc; before it, a mirror with credentials in its URL
    # that refuses connections (reached through the proxy). The first mirror's
    # credentials reach no host, and no secret reaches any message or log line.
    cdn = make_cdn(tls=tls_context, auth=basic_auth(USER, SECRET))
    write_kernel(cdn.root, REPO, 1)
    url_secret, proxy_secret = "Url-s3cret-Pa55", "Prx-s3cret-Pa55"
    proxy = start_proxy("http", auth=f"proxyuser:{proxy_secret}")
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine localhost login {USER} password {SECRET}\n")
    netrc.chmod(0o600)
    dead = refused_port()
    env = {
        "FLASHHUB_CDN_URL": f"https://mirror:{url_secret}@127.0.0.1:{dead},{cdn.url_for('localhost')}",
        "NETRC": str(netrc),
        "REQUESTS_CA_BUNDLE": str(ca_pem),
        "https_proxy": f"http://proxyuser:{proxy_secret}@127.0.0.1:{proxy.port}",
        "no_proxy": "localhost",
    }
    result = run_code(LOAD_LOGGING_ALL, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{REPO}@v1:{local_variant()}"
    assert f"mirror https://127.0.0.1:{dead} could not serve" in result.stderr  # logged
    secrets = [SECRET, url_secret, proxy_secret]
    encoded = [basic_auth(USER, SECRET), basic_auth("mirror", url_secret)]
    for secret in [*secrets, *encoded, basic_auth("proxyuser", proxy_secret)]:
        assert secret.removeprefix("Basic ") not in result.stdout + result.stderr
    assert {r.authorization for r in cdn.requests} == {basic_auth(USER, SECRET)}
    assert set(proxy.targets(at_least=1)) == {f"127.0.0.1:{dead}"}  # the CDN: not proxied


# A program with logging at its default level (WARNING) loads a kernel, then sends a request
# of its own, to a refused port, with a query: urllib3 warns of each retry of either.
LOAD_THEN_OWN_REQUEST = """
import logging, sys
logging.basicConfig(stream=sys.stderr)
import requests, flashhub_kernels as fk
try:
    fk.get_kernel({repo!r}, version=1)
except fk.errors.TransportError as exc:
    print("load failed:", type(exc).__name__)
try:
    session = requests.Session()
    session.mount("http://", requests.adapters.HTTPAdapter(max_retries=1))
    session.get("http://127.0.0.1:{dead}/own?api_key=own-key-19", timeout=5)
except requests.ConnectionError:
    print("own request failed")
"""


def test_urllib3_warnings_about_a_load_hide_a_signed_url_redirected_to(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    dead = refused_port()
    signed = f"http://127.0.0.1:{dead}/obj?X-Amz-Signature=sig-5c21&X-Amz-Credential=cred-8d0"
    cdn.inject(VARIANTS, *[redirect(signed)] * 10)
    code = LOAD_THEN_OWN_REQUEST.format(repo=REPO, dead=dead)
    result = run_code(code, env=dict(os.environ))
    assert result.stdout.split("\n")[:2] == ["load failed: TransportError", "own request failed"]
    warned = [line for line in result.stderr.splitlines() if line.startswith("WARNING:urllib3")]
    assert any("/obj?X-Amz-Signature=****&X-Amz-Credential=****" in line for line in warned)
    assert "sig-5c21" not in result.stderr and "cred-8d0" not in result.stderr
    # The program's own request, sent from its code, is quoted as urllib3 quotes it.
    assert any("/own?api_key=own-key-19" in line for line in warned)
