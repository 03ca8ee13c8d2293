"""Hugging Face kernels' own ``tests/test_cli_info.py``, ported to ``flashhub info``.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and assertions follow the
original; what differs:

- ``kernels-community/activation`` is a pure-torch kernel on the loopback CDN, published
  for this machine and as a CUDA build (the Hub's builds are GPU builds), its
  ``metadata.json`` carrying the builder's ``license``.
- HF calls its CLI's ``print_kernel_info``; this runs the ``flashhub info`` command, whose
  output is this client's (docs/cli.md): the repo and version head the text, and each
  variant's ``metadata.json`` fields are listed under it (``license: Apache-2.0``). In
  ``--json`` they are each variant's ``"metadata"``, spelled as in ``metadata.json``.
- ``flashhub`` takes ``--version`` alone: a ``--revision`` is a usage error (status 2,
  HF's ``SystemExit``) before any request.

Left out: ``test_info_local``, ``test_info_local_rejects_revision`` and
``test_info_local_no_variants``: ``flashhub info`` takes ``ORG/PKG`` only, not a local
kernel directory (``flashhub describe-api PATH`` reads one).
"""

from __future__ import annotations

import pytest

from support.cdn_server import CdnServer
from support.cli_runner import flashhub, ok_json
from support.hf_kernels import RELU_INIT, package, this_machine, write_hf_kernel

ACTIVATION = "kernels-community/activation"


@pytest.fixture
def hub(cdn: CdnServer) -> CdnServer:
    """``kernels-community/activation`` v1 on the CDN, built for this machine and CUDA."""
    files = package("activation", {"__init__.py": RELU_INIT})
    variants = sorted({*this_machine(), "torch-cuda"})
    write_hf_kernel(cdn.root, ACTIVATION, 1, variants, files, {"license": "Apache-2.0"})
    return cdn


def test_info_hub(hub: CdnServer) -> None:
    result = flashhub("info", ACTIVATION, "--version", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"{ACTIVATION}@v1 ")
    assert "name: activation (version 1" in out
    assert "license: Apache-2.0" in out
    assert "backend: cuda" in out


def test_info_hub_json(hub: CdnServer) -> None:
    info = ok_json(flashhub("info", ACTIVATION, "--version", "1", "--json"))
    assert info["repo_id"] == ACTIVATION
    assert info["version"] == 1
    metadata = [variant["metadata"] for variant in info["variants"]]
    assert {fields["name"] for fields in metadata} == {"activation"}
    assert {fields["version"] for fields in metadata} == {1}
    assert {fields["license"] for fields in metadata} == {"Apache-2.0"}
    assert "cuda" in {fields["backend"]["type"] for fields in metadata}


def test_info_hub_rejects_revision_and_version(hub: CdnServer) -> None:
    result = flashhub("info", ACTIVATION, "--revision", "main", "--version", "1")
    assert result.returncode == 2
    assert "--revision" in result.stderr
    assert not hub.requests
