"""The ``flashhub_kernels`` logger: silent by default, its records there for whoever
configures logging. What ``flashhub -v`` shows of them is tested in test_cli.py."""

from __future__ import annotations

import logging

import pytest

import flashhub_kernels as fk
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.trees import MIB_BLOB, write_blob_kernel

REPO = "acme/tensor-tricks"


@pytest.fixture
def blob_kernel(cdn: CdnServer) -> CdnServer:
    write_blob_kernel(cdn.root, MIB_BLOB)
    return cdn


def test_the_library_is_silent_by_default(
    blob_kernel: CdnServer, caplog: pytest.LogCaptureFixture
) -> None:
    quiet = flashhub("get", REPO, "--version", "1")
    assert quiet.returncode == 0 and quiet.stderr == ""
    # The records exist for whoever configures logging, at INFO (not shown by default).
    fk.configure(cache_dir=str(blob_kernel.root.parent / "another-cache"))
    with caplog.at_level(logging.INFO, logger="flashhub_kernels"):
        fk.get_kernel(REPO, version=1)
    assert any(r.levelno == logging.INFO and "downloaded" in r.getMessage() for r in caplog.records)
