"""Hugging Face kernels' own ``tests/test_versions.py`` and ``tests/test_offline_install.py``
(offline installs from the cache), ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0). Test names follow the originals; what
differs:

- HF resolves a revision (branch, tag or commit) to a commit through its internal
  ``_resolve_ref``, records the ref in its cache for offline use, and tests both with a
  stand-in cache and a patched ``HfApi``. Here a revision is ``"v<N>"``, a version: the
  tests load ``kernels-community/relu`` from the loopback CDN and read the CDN's request
  log, then ask again with ``local_files_only=True`` or ``FLASHHUB_OFFLINE=1``.
- HF's offline miss is a ``ValueError`` ("not in the local cache"); here it is an
  ``OfflineError``, also a ``ValueError``, worded as this client words it. A revision that
  is no ``v<N>`` (``"../../../elsewhere"``) is a ``ValueError`` before any I/O.
- ``test_offline_install.py`` patches ``list_repo_tree`` and ``snapshot_download`` to see
  that the offline path makes no Hub call and lists the cached variants; here the CDN's
  request log is empty and the variant loaded is the one the cache holds.

Left out, as HF-internal: the ``Oid`` parser, a commit passed as the revision (a CDN
kernel has versions, not commits), ref files in the cache (this cache records each
version's variant list, not refs) and whether they can be written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flashhub_kernels import get_kernel, install_kernel
from flashhub_kernels.errors import OfflineError
from support.cdn_server import CdnServer
from support.hf_kernels import RELU, publish_relu
from support.trees import cpu_variant


@pytest.fixture
def hub(cdn: CdnServer) -> CdnServer:
    publish_relu(cdn.root)
    return cdn


def test_offline_resolution_reports_an_uncached_ref(hub: CdnServer) -> None:
    with pytest.raises(ValueError, match="is not in the cache") as error:
        install_kernel(RELU, revision="v1", local_files_only=True)
    assert isinstance(error.value, OfflineError)
    assert hub.requests == []


def test_offline_resolution_stays_inside_the_refs_directory(hub: CdnServer) -> None:
    """A revision names a version only: one that would be a path is refused as malformed."""
    with pytest.raises(ValueError, match="elsewhere"):
        install_kernel(RELU, revision="../../../elsewhere", local_files_only=True)
    assert hub.requests == []


@pytest.mark.parametrize("selection", [{"revision": "v1"}, {"version": 1}], ids=["rev", "ver"])
def test_a_downloaded_revision_resolves_offline(
    hub: CdnServer, selection: dict[str, object]
) -> None:
    expected = install_kernel(RELU, backend="cpu", **selection)  # type: ignore[arg-type]
    assert expected.name == cpu_variant()

    hub.clear_log()
    path = install_kernel(RELU, backend="cpu", local_files_only=True, **selection)  # type: ignore[arg-type]

    assert path == expected
    assert hub.requests == []


def test_a_downloaded_version_resolves_offline_by_revision(hub: CdnServer) -> None:
    """A version downloaded as ``version=1`` is there offline as ``revision="v1"``."""
    expected = install_kernel(RELU, version=1, backend="cpu")

    hub.clear_log()
    assert install_kernel(RELU, revision="v1", backend="cpu", local_files_only=True) == expected
    assert hub.requests == []


# -- test_offline_install.py ------------------------------------------------------------------


def test_hf_hub_offline_env_does_not_call_list_repo_tree(
    hub: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``FLASHHUB_OFFLINE=1`` (HF: ``HF_HUB_OFFLINE=1``) the cached kernel is found
    without a request, and loads."""
    expected = install_kernel(RELU, version=1)

    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    hub.clear_log()
    assert install_kernel(RELU, version=1) == expected
    assert Path(get_kernel(RELU, version=1).__file__).parent.parent == expected
    assert hub.requests == []


def test_missing_cache_raises_file_not_found(hub: CdnServer) -> None:
    """A kernel the cache lacks, offline: the ``ValueError`` HF raises for a version its
    cache lacks, saying how to get it."""
    with pytest.raises(OfflineError, match="is not in the cache") as error:
        install_kernel("kernels-community/not-cached", version=1, local_files_only=True)
    assert isinstance(error.value, ValueError)
    assert error.value.hint is not None
    assert hub.requests == []


def test_online_path_still_calls_get_variants(hub: CdnServer) -> None:
    """Online, the CDN's variant list is read (HF: ``get_variants``)."""
    install_kernel(RELU, version=1)
    assert any(path.endswith("/v1/variants.json") for path in hub.gets())
