"""The ``flashhub_kernels`` logger: silent by default, its records there for whoever
configures logging. What ``flashhub -v`` shows of them is tested in test_cli.py."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

import flashhub_kernels as fk
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.preloaded import run_code
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


def test_records_name_the_library_line_that_logged(
    blob_kernel: CdnServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="flashhub_kernels"):
        fk.get_kernel(REPO, version=1)
    places = {Path(r.pathname).name for r in caplog.records}
    assert "choosing.py" in places and "transport.py" in places
    assert "logs.py" not in places and "__init__.py" not in places


# A handler of the library's records that does not deal with its own errors, as
# logging's own handlers do. (Other libraries' records, filelock's and urllib3's, are
# theirs: a handler for those must not raise.)
RAISING_HANDLER = """
import logging, sys
class Gone(logging.Handler):
    def emit(self, record):
        print("emit", record.name, file=sys.stderr)
        raise OSError("the log collector is gone")
logging.getLogger("flashhub_kernels").addHandler(Gone())
logging.getLogger("flashhub_kernels").setLevel(logging.DEBUG)
"""


def test_a_log_handler_that_raises_loses_its_records_not_the_load(blob_kernel: CdnServer) -> None:
    # The first mirror refuses connections: its failure is logged, then the second serves.
    env = {**os.environ, "FLASHHUB_CDN_URL": f"http://127.0.0.1:9,{blob_kernel.url}"}
    load = "import flashhub.acme.tensor_tricks.v1 as k; print(k.__name__)"
    child = run_code(RAISING_HANDLER + load, env=env)
    assert child.returncode == 0, child.stderr
    assert child.stdout.startswith("flashhub.acme.tensor_tricks.v1")
    assert "emit flashhub_kernels" in child.stderr  # the handler was called, and raised
