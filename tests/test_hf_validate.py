"""Hugging Face kernels' own ``tests/test_validate.py`` (the checks a load makes of a
build's ``metadata.json``): ``kernels-minver``, ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0). Test names and cases follow the
original; what differs:

- HF calls its validator (``MinverValidator``) on a metadata document in a stand-in
  dependency tree. Here each document is a kernel's ``metadata.json`` on the loopback
  CDN, in the builder's layout (``support/builder.py``), loaded with ``get_kernel``: a
  check that passes is a load, one that fails is the load's error.
- The exception type is HF's: ``RuntimeError`` for a build that needs a newer client.
  The messages are this client's; they name what HF's do (the version required and the
  one installed).
- ``kernels-minver`` is compared with the Hugging Face kernels version whose API this
  client implements (0.19.1), and ``flashhub-kernels-minver`` with this client's own
  version, which is the one the tests that change the installed version patch
  (``kernels.__version__`` in HF).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels import _constants
from support.builder import RAN_DIR_VAR, ran, ran_label, write_builder_kernel
from support.cdn_server import CdnServer

REPO = "kernels-test/validate"


@pytest.fixture(autouse=True)
def ran_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the kernels' code records that it ran (see ``support/builder.py``)."""
    path = tmp_path / "ran"
    path.mkdir()
    monkeypatch.setenv(RAN_DIR_VAR, str(path))
    return path


def loads(ran_dir: Path, repo_id: str = REPO) -> bool:
    """Whether the kernel's code ran."""
    return ran_label(repo_id, 1) in ran(ran_dir)


# -- kernels-minver ----------------------------------------------------------------------------


@pytest.mark.parametrize("minver", [None, "0.0.1"])
def test_no_error_when_minver_met(cdn: CdnServer, ran_dir: Path, minver: str | None) -> None:
    extra = {} if minver is None else {"kernels-minver": minver}
    write_builder_kernel(cdn.root, REPO, 1, extra=extra)
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


def test_no_error_for_dev_version_of_required_release(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A development version implements the release it leads up to.
    monkeypatch.setattr(_constants, "__version__", "0.3.0.dev0")
    write_builder_kernel(cdn.root, REPO, 1, extra={"flashhub-kernels-minver": "0.3.0"})
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


@pytest.mark.parametrize(
    "installed", ["0.3.0.dev0", "0.3.0rc1", "0.3.0.post1", "0.3.0+cu121", "0.3"]
)
def test_installed_version_uses_release_segment(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    monkeypatch.setattr(_constants, "__version__", installed)
    write_builder_kernel(cdn.root, REPO, 1, extra={"flashhub-kernels-minver": "0.3.0"})
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


def test_unparseable_installed_version_does_not_fail_validation(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A version that cannot be compared must not turn this check into a failure.
    monkeypatch.setattr(_constants, "__version__", "0.3.0-dirty")
    write_builder_kernel(cdn.root, REPO, 1, extra={"flashhub-kernels-minver": "999.1.0"})
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


@pytest.mark.parametrize(
    ("minver", "met"), [("0.9", True), ("0.19", True), ("0.19.1.0", True), ("0.19.2", False)]
)
def test_version_ordering_is_numeric_not_lexicographic(
    cdn: CdnServer, ran_dir: Path, minver: str, met: bool
) -> None:
    # 0.9 < 0.19 only holds for numeric comparison; 0.19 == 0.19.0.
    write_builder_kernel(cdn.root, REPO, 1, extra={"kernels-minver": minver})
    if met:
        fk.get_kernel(REPO, version=1)
    else:
        with pytest.raises(RuntimeError):
            fk.get_kernel(REPO, version=1)
    assert loads(ran_dir) is met


@pytest.mark.parametrize("key", ["kernels-minver", "flashhub-kernels-minver"])
def test_raises_when_minver_not_met(cdn: CdnServer, ran_dir: Path, key: str) -> None:
    write_builder_kernel(cdn.root, REPO, 1, extra={key: "999.1.0"})
    with pytest.raises(RuntimeError, match=f"requires {key.removesuffix('-minver')}>=999.1"):
        fk.get_kernel(REPO, version=1)
    assert not loads(ran_dir)


def test_error_mentions_installed_version(cdn: CdnServer) -> None:
    write_builder_kernel(cdn.root, REPO, 1, extra={"flashhub-kernels-minver": "999.1.0"})
    with pytest.raises(RuntimeError, match=f"version {re.escape(fk.__version__)} is installed"):
        fk.get_kernel(REPO, version=1)
