"""https CDNs: which certificates are trusted (REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, a CA
directory), what an untrusted or misconfigured one does (and what its error says to do),
and redirects between schemes.

The CDN's certificate comes from a throwaway CA (trustme) that nothing trusts by default.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import refused_port
from flashhub_kernels.errors import TransportError
from support.cdn_server import CdnServer, redirect
from support.preloaded import run_code
from support.trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"
VARIANTS = f"kernels/{REPO}/v1/variants.json"
FILES_PER_LOAD = 6


@pytest.fixture
def published(tls_cdn: CdnServer) -> CdnServer:
    """The https CDN, with the test kernel, set as FLASHHUB_CDN_URL's override."""
    write_kernel(tls_cdn.root, REPO, 1)
    fk.configure(cdn_url=tls_cdn.url)
    return tls_cdn


def loads() -> None:
    assert fk.get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{local_variant()}"


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_a_ca_bundle_from_the_environment_is_trusted(
    published: CdnServer, ca_pem: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, str(ca_pem))
    loads()
    assert len(published.gets(missed_guesses=False)) == FILES_PER_LOAD


def test_an_untrusted_certificate_fails_before_any_request(published: CdnServer) -> None:
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value).lower()
    assert any(word in message for word in ("certificate", "tls", "ssl")), message
    assert published.url.removeprefix("https://") in str(info.value)
    assert published.requests == []  # the handshake failed: nothing was asked


def test_a_missing_ca_bundle_is_named_before_any_request(
    published: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(missing))
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert "REQUESTS_CA_BUNDLE" in message
    assert str(missing) in message
    assert published.requests == []


def _subject_hash(pem: Path) -> str:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl CLI is not on PATH")
    return subprocess.run(
        [openssl, "x509", "-hash", "-noout", "-in", str(pem)],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()


def test_a_ca_directory_is_trusted(
    published: CdnServer, ca_pem: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_dir = tmp_path / "certs"
    ca_dir.mkdir()
    shutil.copy(ca_pem, ca_dir / f"{_subject_hash(ca_pem)}.0")  # as c_rehash names it
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_dir))
    loads()
    assert len(published.gets(missed_guesses=False)) == FILES_PER_LOAD


def test_a_ca_directory_without_the_ca_is_an_untrusted_certificate(
    published: CdnServer, ca_pem: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca_dir = tmp_path / "certs"
    ca_dir.mkdir()
    shutil.copy(ca_pem, ca_dir / "ca.pem")  # not under its hash: OpenSSL never finds it
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_dir))
    with pytest.raises(TransportError) as info:  # not IsADirectoryError
        fk.get_kernel(REPO, version=1)
    message = str(info.value).lower()
    assert any(word in message for word in ("certificate", "tls", "ssl")), message
    assert published.requests == []


# -- redirects between schemes --------------------------------------------------------------


def test_a_redirect_from_http_to_https_is_followed(
    cdn: CdnServer, tls_cdn: CdnServer, ca_pem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    write_kernel(cdn.root, REPO, 1)  # both serve tmp_path / "cdn"
    cdn.inject(VARIANTS, redirect(f"{tls_cdn.url}/{VARIANTS}"))
    loads()
    assert tls_cdn.gets() == [f"/{VARIANTS}"]
    asked = cdn.gets(missed_guesses=False)
    assert f"/{VARIANTS}" in asked and len(asked) == FILES_PER_LOAD


def test_a_redirect_from_https_to_http_is_refused(
    cdn: CdnServer, published: CdnServer, ca_pem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    signed = f"{cdn.url}/{VARIANTS}?X-Amz-Signature=s3cr3t&token=t0ken"  # a signed URL
    published.inject(VARIANTS, *[redirect(signed)] * 10)
    with pytest.raises(TransportError, match="refused") as refused:
        fk.get_kernel(REPO, version=1)
    assert cdn.requests == []  # the downgrade never happened
    assert "s3cr3t" not in str(refused.value) and "t0ken" not in str(refused.value)
    assert f"{cdn.url}/{VARIANTS}?X-Amz-Signature=****" in str(refused.value)


def test_a_signed_https_url_that_redirects_to_plain_http_is_refused_unseen(
    cdn: CdnServer, tls_cdn: CdnServer, ca_pem: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca_pem))
    write_kernel(cdn.root, REPO, 1)  # both serve tmp_path / "cdn"
    cdn.inject(VARIANTS, *[redirect(f"{tls_cdn.url}/{VARIANTS}?X-Amz-Signature=s3cr3t")] * 10)
    tls_cdn.inject(VARIANTS, *[redirect(f"{cdn.url}/elsewhere.json")] * 10)
    with pytest.raises(TransportError, match="refused") as refused:
        fk.get_kernel(REPO, version=1)
    assert "/elsewhere.json" not in cdn.gets()
    assert f"{tls_cdn.url}/{VARIANTS}?X-Amz-Signature=**** redirected" in str(refused.value)
    assert "s3cr3t" not in str(refused.value)


# -- a certificate no trusted CA signed: the hint says which bundle, and how to trust it -------

LOAD_ONCE = f"import flashhub_kernels as fk; fk.get_kernel({REPO!r}, version=1)"


def load_fails_in_child(cdn_url: str, env: dict[str, str]) -> str:
    """The last line of the error a new process prints when its load fails: the hint."""
    result = run_code(LOAD_ONCE, env={**os.environ, "FLASHHUB_CDN_URL": cdn_url, **env})
    assert result.returncode == 1, result.stdout
    assert "TransportError" in result.stderr, result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_a_ca_given_only_to_openssl_is_said_to_go_in_requests_ca_bundle(
    published: CdnServer, ca_pem: Path
) -> None:
    # A private CA set up for curl and OpenSSL, which requests does not read.
    hint = load_fails_in_child(published.url, {"SSL_CERT_FILE": str(ca_pem)})
    assert hint.startswith("  hint: no CA of the default bundle (certifi's) signed the CDN's")
    assert "point REQUESTS_CA_BUNDLE at a PEM file" in hint
    assert "requests reads neither SSL_CERT_FILE nor SSL_CERT_DIR" in hint
    assert published.requests == []


def test_a_ca_bundle_without_the_cdns_ca_is_named_in_the_hint(
    published: CdnServer, tmp_path: Path
) -> None:
    trustme = pytest.importorskip("trustme")
    other = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other))  # a bundle, of another CA
    hint = load_fails_in_child(published.url, {"CURL_CA_BUNDLE": str(other)})
    assert hint == (
        f"  hint: CURL_CA_BUNDLE={other} holds no CA that signed the CDN's certificate: "
        "add that CA's certificate to it, or point CURL_CA_BUNDLE at a PEM file that holds it"
    )


@pytest.mark.parametrize("content", [b"", b"garbage\n", b"-----BEGIN CERTIFICATE-----\nabc\n"])
def test_a_ca_bundle_that_holds_no_readable_certificate_is_named_in_the_hint(
    published: CdnServer, tmp_path: Path, content: bytes
) -> None:
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(content)
    hint = load_fails_in_child(published.url, {"REQUESTS_CA_BUNDLE": str(bundle)})
    assert hint.startswith(
        f"  hint: REQUESTS_CA_BUNDLE={bundle} holds no certificate OpenSSL can read"
    )
    assert published.requests == []


def test_an_untrusted_mirror_after_one_that_refuses_connections_gets_the_certificate_hint(
    published: CdnServer,
) -> None:
    mirrors = f"https://127.0.0.1:{refused_port()},{published.url}"
    hint = load_fails_in_child(mirrors, {})
    assert "REQUESTS_CA_BUNDLE" in hint and "check the network" not in hint
