"""Hugging Face kernels' own ``tests/test_upgrade_hint.py``, ported to this API: the
version a no-variant error suggests.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0), whose loader suggests the newest
version when it has a build for this system. Test names and cases follow the original,
which tests a later helper (``maybe_upgrade_hint``) with a patched version list and
variant resolver; what differs:

- The versions are published on the loopback CDN, each with a build for this machine or
  only torch 2.4 builds, which nothing here runs; a failing CDN is a fault the server
  injects.
- The error is a ``NoCompatibleVariantError`` (HF: ``FileNotFoundError``; no
  ``ImportError`` can be one, docs/layers.md). What it suggests is the newest other
  version, among the newest eight, with a build for this system: ``<repo>@v<N> is the
  newest published version with a build for it``, and its hint ``load version=<N>``
  (HF: "However, version v<N> of '<repo>' has a build compatible with your system").
- Left out: the environment's wording (``torch 2.13, cuda 12.8``: the error names this
  system as this client does) and revisions that are no ``v<N>`` (a revision here is
  one).
"""

from __future__ import annotations

import pytest

from flashhub_kernels import get_kernel, install_kernel
from flashhub_kernels.errors import NoCompatibleVariantError
from support.cdn_server import CdnServer, status
from support.hf_kernels import RELU_INIT, package, this_machine, write_hf_kernel

ACTIVATION = "kernels-community/activation"
TORCH_24 = ["torch24-cxx11-cu121-x86_64-linux", "torch24-cxx98-cpu-x86_64-linux"]
SUGGESTS = "is the newest published version with a build for it"


def _publish(cdn: CdnServer, compatible: dict[int, bool]) -> None:
    """``ACTIVATION`` at each version, built for this machine where ``compatible``."""
    files = package("activation", {"__init__.py": RELU_INIT})
    for version, fits in compatible.items():
        write_hf_kernel(cdn.root, ACTIVATION, version, this_machine() if fits else TORCH_24, files)


def _no_variant(version: int = 3) -> str:
    with pytest.raises(NoCompatibleVariantError) as error:
        get_kernel(ACTIVATION, version=version)
    assert "torch24-cxx98-cpu-x86_64-linux" in str(error.value)  # the trace stands
    return str(error.value)


def test_suggests_newest_compatible(cdn: CdnServer) -> None:
    _publish(cdn, {3: False, 4: True, 5: True})
    message = _no_variant()
    assert f"{ACTIVATION}@v5 {SUGGESTS}" in message
    assert "load version=5" in message
    assert "@v4" not in message


def test_no_suggestion_when_none_compatible(cdn: CdnServer) -> None:
    _publish(cdn, {3: False, 4: False, 5: False})
    message = _no_variant()
    assert SUGGESTS not in message
    assert "version=" not in message


def test_suggestion_path_swallows_errors(cdn: CdnServer) -> None:
    """CDN failures while looking for a version to suggest must not escape: the
    no-variant error stands, without a suggestion. (A refusal fails at once, without the
    retries and their backoff that a 5xx gets: test_faults.py covers those.)"""
    _publish(cdn, {3: False, 4: True})
    cdn.inject(f"/kernels/{ACTIVATION}/versions.json", *[status(403)] * 20)
    assert SUGGESTS not in _no_variant()

    cdn.faults.clear()
    cdn.inject(f"/kernels/{ACTIVATION}/v4/variants.json", *[status(403)] * 20)
    assert SUGGESTS not in _no_variant()
    assert cdn.gets("/v4/variants.json")  # the suggestion path asked, and was refused


def test_offline_empty_cache_no_suggestion(cdn: CdnServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, with only v3's variant list cached: no hang, no request, no suggestion.
    The error is a ``ValueError``, as HF's offline errors are."""
    _publish(cdn, {3: False, 4: True})
    _no_variant()  # online: records v3's variant list in the cache
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    cdn.clear_log()
    with pytest.raises(ValueError) as error:
        get_kernel(ACTIVATION, version=3)
    assert SUGGESTS not in str(error.value)
    assert cdn.requests == []


def test_scan_cap_skips_beyond_the_newest_eight(cdn: CdnServer) -> None:
    """Only the newest eight other versions are looked at (HF: sixteen newer ones)."""
    _publish(cdn, {1: False, 2: True, **dict.fromkeys(range(3, 11), False)})
    cdn.clear_log()
    assert SUGGESTS not in _no_variant(1)
    looked_at = {p.split("/")[-2] for p in cdn.gets("/variants.json")}
    assert looked_at == {f"v{v}" for v in range(1, 11) if v != 2}


def test_install_kernel_appends_suggestion(cdn: CdnServer) -> None:
    _publish(cdn, {3: False, 5: True})
    with pytest.raises(NoCompatibleVariantError) as error:
        install_kernel(ACTIVATION, revision="v3")
    message = str(error.value)
    assert message.startswith(f"{ACTIVATION}@v3 has no variant for this system")
    assert "torch24-cxx11-cu121-x86_64-linux" in message
    assert f"{ACTIVATION}@v5 {SUGGESTS}" in message


def test_install_kernel_no_false_upgrade(cdn: CdnServer) -> None:
    _publish(cdn, {3: False, 4: False})
    with pytest.raises(NoCompatibleVariantError) as error:
        install_kernel(ACTIVATION, revision="v3")
    assert str(error.value).startswith(f"{ACTIVATION}@v3 has no variant for this system")
    assert SUGGESTS not in str(error.value)
