"""The ``flashhub_kernels`` logger: silent by default, and with ``flashhub -v`` it says
what a load did (downloads with mirror, size and time; resumes), never a credential."""

from __future__ import annotations

import logging

import pytest

import flashhub_kernels as fk
from cdn_server import CdnServer, drop_after
from cli_runner import flashhub
from trees import write_blob_kernel

REPO = "acme/tensor-tricks"
VARIANT = "torch-universal"
BLOB = bytes(range(256)) * 4096  # 1 MiB
BLOB_PATH = f"kernels/{REPO}/v1/build/{VARIANT}/tensor_tricks/blob.bin"


@pytest.fixture
def blob_kernel(cdn: CdnServer) -> CdnServer:
    write_blob_kernel(cdn.root, BLOB)
    return cdn


def test_flashhub_v_says_what_the_load_did_without_credentials(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(BLOB_PATH, drop_after(1000))
    cdn_url = f"http://user:s3cret@127.0.0.1:{blob_kernel.port}"
    result = flashhub("-v", "get", REPO, "--version", "1", env={"FLASHHUB_CDN_URL": cdn_url})
    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert f"downloaded {REPO}/v1/build/{VARIANT}/tensor_tricks/blob.bin from " in log
    assert f"127.0.0.1:{blob_kernel.port}: {len(BLOB)} bytes in " in log
    assert "broke off at byte 1000; asking again from there" in log
    assert "s3cret" not in log


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
