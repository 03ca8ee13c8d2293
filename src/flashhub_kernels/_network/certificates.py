"""TLS trust: the CA bundle a CDN's certificate is verified against, as requests finds it,
and what to do when no CA of it signed the certificate."""

from __future__ import annotations

import os
import ssl

from ..errors import TransportError

_CA_BUNDLE_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")  # as requests reads them
# OpenSSL's verify codes for a chain that ends at no trusted CA (X509_V_ERR_*): the
# server's CA is unknown here, unlike an expired certificate or another host's.
_ISSUER_UNKNOWN = frozenset({2, 18, 19, 20, 21})


def ca_bundle() -> str | bool:
    """The CA bundle to verify TLS with: ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, or
    ``True`` (certifi's). A path that does not exist is an error now, naming the
    variable, rather than a TLS failure blamed on the network at every request."""
    for name in _CA_BUNDLE_VARIABLES:
        path = os.environ.get(name)
        if not path:
            continue
        if not os.path.exists(path):
            raise TransportError(
                f"{name}={path} does not exist, so no TLS certificate can be verified",
                hint=f"point {name} at a PEM file or a directory of hashed certificates, "
                "or unset it to use the default bundle",
            )
        return path
    return True


def untrusted_certificate_hint(error: BaseException, verify: str | bool) -> str | None:
    """What to do where TLS failed with ``error`` (the one urllib3 wraps) because no CA of
    ``verify`` (what :func:`ca_bundle` gave) signed the certificate, a private CDN's most
    often, or OpenSSL read no certificate from the bundle (an empty file, not PEM);
    ``None`` where it failed otherwise (an expired certificate, another host's)."""
    unreadable = _bundle_unreadable(error)
    if not (unreadable or _issuer_unknown(error)):
        return None
    for name in _CA_BUNDLE_VARIABLES:
        if verify is not True and os.environ.get(name) == verify:
            if unreadable:
                return (
                    f"{name}={verify} holds no certificate OpenSSL can read (an empty file, "
                    f"or not PEM): point {name} at a PEM file of the CA that signed the "
                    "CDN's certificate, or unset it to use the default bundle"
                )
            return (
                f"{name}={verify} holds no CA that signed the CDN's certificate: add that "
                f"CA's certificate to it, or point {name} at a PEM file that holds it"
            )
    # OpenSSL and curl read these, and users of a private CA often set them.
    unread = any(os.environ.get(name) for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"))
    note = " (requests reads neither SSL_CERT_FILE nor SSL_CERT_DIR)" if unread else ""
    return (
        "no CA of the default bundle (certifi's) signed the CDN's certificate: point "
        f"REQUESTS_CA_BUNDLE at a PEM file of the CA that did{note}"
    )


def _issuer_unknown(error: BaseException) -> bool:
    """Whether the server's certificate failed because no trusted CA signed it."""
    return any(
        isinstance(inner, ssl.SSLCertVerificationError) and inner.verify_code in _ISSUER_UNKNOWN
        for inner in _ssl_errors(error)
    )


def _bundle_unreadable(error: BaseException) -> bool:
    """Whether TLS failed before the handshake: OpenSSL read no CA from the bundle."""
    return any(
        type(inner) is ssl.SSLError and inner.library in ("X509", "PEM")
        for inner in _ssl_errors(error)
    )


def _ssl_errors(error: BaseException) -> tuple[object, ...]:
    """Where ``ssl``'s error may be: urllib3's ``SSLError`` itself, or what it holds."""
    return (error, *error.args[:1])
