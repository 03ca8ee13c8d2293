"""Hugging Face kernels' own ``tests/test_offline_install.py`` (issue #553: offline,
``install_kernel`` finds the variants in the local cache instead of listing the repo),
ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0; the newest stored version of the
test file). Test names follow the original; what differs:

- HF patches its private ``_get_hf_api``, ``get_variants``, ``get_variants_local``,
  ``resolve_variant`` and ``_find_kernel_in_repo_path`` with mocks and checks which were
  called. Here the kernel is published to the loopback CDN and installed first; "does
  not call list_repo_tree" becomes "makes no request to the CDN" (its request log).
- ``HF_HUB_OFFLINE`` is not read by this client (docs/layers.md, "Hugging Face's
  environment variables"): ``FLASHHUB_OFFLINE=1`` is its counterpart, and a test checks
  that ``HF_HUB_OFFLINE=1`` alone does not keep a load off the network.
- A kernel the cache lacks is HF's ``FileNotFoundError`` ("not available in the local
  cache", for a revision) / ``ValueError`` (for a version); here it is ``OfflineError``,
  a ``ValueError`` and no ``OSError`` (docs/layers.md, "What differs").
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels.errors import OfflineError
from support.cdn_server import CdnServer
from support.hf_kernels import RELU, publish_relu


@pytest.fixture
def installed(cdn: CdnServer) -> Path:
    publish_relu(cdn.root)
    path = fk.install_kernel(RELU, version=1, backend="cpu")
    cdn.clear_log()
    return path


class TestOfflineInstallKernel:
    def test_local_files_only_does_not_call_list_repo_tree(
        self, cdn: CdnServer, installed: Path
    ) -> None:
        assert fk.install_kernel(RELU, version=1, backend="cpu", local_files_only=True) == installed
        assert cdn.gets() == []

    def test_hf_hub_offline_env_does_not_call_list_repo_tree(
        self, cdn: CdnServer, installed: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
        assert fk.install_kernel(RELU, version=1, backend="cpu") == installed
        assert cdn.gets() == []

    def test_local_files_only_with_the_cdn_gone(self, cdn: CdnServer, installed: Path) -> None:
        """HF's ``snapshot_download(local_files_only=True)``: the cache alone answers."""
        cdn.stop()
        assert fk.install_kernel(RELU, version=1, backend="cpu", local_files_only=True) == installed
        assert (
            fk.install_kernel(RELU, revision="v1", backend="cpu", local_files_only=True)
            == installed
        )

    def test_local_files_only_uses_get_variants_local(self, installed: Path) -> None:
        """The variant found offline is the one installed online, and the cache entry
        ``get_local_kernel`` loads (``installed.parent``, docs/layers.md)."""
        module = fk.get_local_kernel(installed.parent, backend="cpu")
        assert module.relu is not None

    @pytest.mark.parametrize("how", ["version", "revision"])
    def test_missing_cache_raises_file_not_found(self, cdn: CdnServer, how: str) -> None:
        publish_relu(cdn.root, repo_id="kernels-community/not-cached")
        ask = {"version": 1} if how == "version" else {"revision": "v1"}
        with pytest.raises(OfflineError) as caught:
            fk.install_kernel("kernels-community/not-cached", local_files_only=True, **ask)
        assert isinstance(caught.value, ValueError)
        assert cdn.gets() == []

    def test_online_path_still_calls_get_variants(self, cdn: CdnServer) -> None:
        publish_relu(cdn.root)
        fk.install_kernel(RELU, version=1, backend="cpu", local_files_only=False)
        assert cdn.gets() != []

    def test_hf_hub_offline_is_not_read(
        self, cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Documented deviation: HF_HUB_OFFLINE is not read by a load."""
        publish_relu(cdn.root)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        fk.install_kernel(RELU, version=1, backend="cpu")
        assert cdn.gets() != []
