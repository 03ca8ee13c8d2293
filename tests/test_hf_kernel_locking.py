"""Hugging Face kernels' own ``tests/test_kernel_locking.py``, ported to this API.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and assertions follow the
original; what differs:

- The fixture projects (HF's ``kernel_locking/`` and ``layer_locking/``) are written per
  test, declaring the same kernels in this client's ``[tool.flashhub.dependencies]``,
  and locked with ``flashhub lock`` against the loopback CDN, which serves pure-torch
  ``kernels-community/relu`` and ``kernels-test/versions`` (``support/hf_kernels.py``).
  HF's committed ``kernels.lock`` pins the Hub's git hashes, which mean nothing here.
- ``download_kernels(DownloadArgs(...))`` is the ``flashhub download [--all-variants]``
  command, run as a shell runs it.
- ``test_load_locked`` is ``cuda_only`` in HF because the Hub's relu builds are GPU
  builds; these are built for this machine, so it runs here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.nn as nn

from flashhub_kernels import (
    LockedFuncRepository,
    LockedLayerRepository,
    Mode,
    get_locked_kernel,
    kernelize,
    load_kernel,
    use_kernel_forward_from_hub,
    use_kernel_func_from_hub,
    use_kernel_mapping,
)
from flashhub_kernels._config import get_config
from flashhub_kernels._lockfiles.format import LOCKFILE_NAME, read_lockfile
from flashhub_kernels.errors import LockfileError
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.hf_kernels import (
    RELU,
    VERSIONS,
    device_name,
    publish_relu,
    publish_versions,
    this_machine,
)
from support.projects import write_project


@pytest.fixture
def device() -> str:
    return device_name()


def locked_project(cdn: CdnServer, project_dir: Path, dependencies: dict[str, str | int]) -> Path:
    """``project_dir`` declaring ``dependencies``, locked against the CDN."""
    publish_relu(cdn.root)
    publish_versions(cdn.root)
    write_project(project_dir, dependencies)
    locked = flashhub("lock", project_dir)
    assert locked.returncode == 0, locked.stderr
    return project_dir


@pytest.fixture
def kernel_locking(cdn: CdnServer, tmp_path: Path) -> Path:
    return locked_project(cdn, tmp_path / "kernel_locking", {RELU: 1, VERSIONS: 2})


@pytest.fixture
def layer_locking(cdn: CdnServer, tmp_path: Path) -> Path:
    return locked_project(cdn, tmp_path / "layer_locking", {VERSIONS: 2})


def test_download_all_hash_validation(kernel_locking: Path) -> None:
    project_dir = kernel_locking
    downloaded = flashhub("download", project_dir, "--all-variants")
    assert downloaded.returncode == 0, downloaded.stderr
    # Every locked variant is in the cache, verified against the hash the lock pins.
    lock = read_lockfile(project_dir / LOCKFILE_NAME)
    entries = get_config().cache_dir / "kernels"
    for locked in lock.kernels.values():
        assert sorted(locked.variants) == this_machine()
        for variant in locked.variants:
            assert (entries / locked.repo_id / f"v{locked.version}" / variant).is_dir()


def test_load_locked(kernel_locking: Path) -> None:
    project_dir = kernel_locking
    # Also validates that hashing works correctly.
    downloaded = flashhub("download", project_dir)
    assert downloaded.returncode == 0, downloaded.stderr
    load_kernel(RELU, lockfile=project_dir / LOCKFILE_NAME)


def test_what_a_locked_load_cannot_find_is_a_file_not_found_error(
    kernel_locking: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not in HF's tests: code written for Hugging Face kernels catches FileNotFoundError
    # for a lock file that does not exist and for a locked kernel its cache lacks.
    with pytest.raises(FileNotFoundError, match="does not exist") as missing:
        load_kernel(RELU, lockfile=tmp_path / "elsewhere" / LOCKFILE_NAME)
    assert isinstance(missing.value, LockfileError)
    monkeypatch.chdir(tmp_path)  # nor is one found where a script's is looked for
    with pytest.raises(FileNotFoundError, match=f"no {LOCKFILE_NAME} found"):
        get_locked_kernel(RELU, lockfile=None)
    cached = sorted(get_config().cache_dir.rglob("*"))  # the variants.json locking read
    with pytest.raises(FileNotFoundError, match="cannot be loaded") as uncached:
        load_kernel(RELU, lockfile=kernel_locking / LOCKFILE_NAME)  # nothing downloaded
    assert isinstance(uncached.value, LockfileError)
    assert sorted(get_config().cache_dir.rglob("*")) == cached  # load_kernel fetched nothing


def test_layer_locked(device: str, layer_locking: Path) -> None:
    project_dir = layer_locking

    @use_kernel_forward_from_hub("Version")
    class Version(nn.Module):
        def forward(self) -> str:
            return "0.0.0"

    version = Version()

    with use_kernel_mapping(
        {
            "Version": {
                device: LockedLayerRepository(
                    repo_id=VERSIONS,
                    layer_name="Version",
                    lockfile=project_dir / LOCKFILE_NAME,
                )
            },
        }
    ):
        version = kernelize(version, device=device, mode=Mode.INFERENCE)
        assert version() == 2


@pytest.mark.filterwarnings("ignore:(use_kernel_func_from_hub|LockedFuncRepository) is deprecated")
def test_func_locked(device: str, layer_locking: Path) -> None:
    project_dir = layer_locking

    @use_kernel_func_from_hub("version")
    def version() -> int:
        return 0

    class Version(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.version = version

        def forward(self) -> str:
            return self.version()  # type: ignore[no-any-return]

    model = Version()

    with use_kernel_mapping(
        {
            "version": {
                device: LockedFuncRepository(
                    repo_id=VERSIONS,
                    func_name="version",
                    lockfile=project_dir / LOCKFILE_NAME,
                )
            },
        }
    ):
        model = kernelize(model, device=device, mode=Mode.INFERENCE)

    assert version() == 2

    with use_kernel_mapping({"version": {}}):
        model = kernelize(model, mode=Mode.INFERENCE, device=device)

    assert version() == 0
