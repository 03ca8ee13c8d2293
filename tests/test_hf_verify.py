"""Hugging Face kernels' own ``tests/test_verify.py``, ported to this API: the part about
the digests in ``metadata.json``.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names follow the original; what
differs:

- ``kernels-test/signatures``' branches (``invalid-digest``, ``invalid-metadata``, ...)
  become ``kernels-community/relu`` v1 on the loopback CDN with one variant's files
  broken that way, by the server's side.
- HF downloads with ``install_kernel`` and checks afterwards with ``verify_variant``,
  which returns a verdict. Here ``install_kernel`` checks every file against
  ``metadata.json`` while downloading: the verdict is the error it raises (an
  ``IntegrityError``, or a ``TransportError`` for a document the CDN lacks), and the test
  checks that nothing of the broken variant was kept in the cache.

Left out: ``test_correctly_signed_kernel_passes*``, ``test_unsigned_kernel_fails``,
``test_broken_signature_bundle_fails`` and ``test_invalid_signature_fails``: HF checks
Sigstore bundles against an OIDC identity; this client checks Ed25519 signatures against
the keys it trusts (docs/signing.md), tested in test_signing_load.py and
test_signing_verify.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from flashhub_kernels import install_kernel
from flashhub_kernels.errors import IntegrityError, ManifestError, TransportError
from support.cdn_server import CdnServer
from support.hf_kernels import RELU, publish_relu


def broken(cdn: CdnServer, breaking: Callable[[Path], object]) -> None:
    """relu v1 on the CDN, each variant's ``metadata.json`` passed to ``breaking``."""
    publish_relu(cdn.root)
    for metadata in (cdn.root / "kernels" / RELU / "v1" / "build").glob("*/metadata.json"):
        breaking(metadata)


def nothing_cached(cache_dir: Path) -> bool:
    """No file of any variant reached the cache."""
    return not list(cache_dir.glob(f"kernels/{RELU}/v1/*/relu"))


def test_invalid_digest_fails(cdn: CdnServer, cache_dir: Path) -> None:
    def tamper(metadata: Path) -> None:
        code = metadata.parent / "relu" / "__init__.py"
        code.write_text(code.read_text() + "raise SystemExit('tampered code ran')\n")

    broken(cdn, tamper)
    with pytest.raises(IntegrityError, match=r"relu/__init__\.py' intact") as raised:
        install_kernel(RELU, version=1)
    assert "does not match metadata.json" in str(raised.value)
    assert isinstance(raised.value, RuntimeError)  # what Hugging Face kernels raises
    assert nothing_cached(cache_dir)


def test_invalid_metadata_fails(cdn: CdnServer, cache_dir: Path) -> None:
    broken(cdn, lambda metadata: metadata.write_text("{not json"))
    with pytest.raises(ManifestError, match=r"metadata\.json is not valid JSON"):
        install_kernel(RELU, version=1)
    assert nothing_cached(cache_dir)


def test_missing_digest_fails(cdn: CdnServer, cache_dir: Path) -> None:
    def drop_digest(metadata: Path) -> None:
        document = json.loads(metadata.read_text())
        del document["digest"]
        metadata.write_text(json.dumps(document))

    broken(cdn, drop_digest)
    with pytest.raises(ManifestError, match=r'metadata\.json must be an object with a "digest"'):
        install_kernel(RELU, version=1)
    assert nothing_cached(cache_dir)


def test_missing_metadata_fails(cdn: CdnServer, cache_dir: Path) -> None:
    broken(cdn, Path.unlink)
    with pytest.raises(TransportError, match=r"metadata\.json does not exist"):
        install_kernel(RELU, version=1)
    assert nothing_cached(cache_dir)
