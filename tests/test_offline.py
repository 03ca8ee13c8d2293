"""``FLASHHUB_OFFLINE=1``: every question is answered from the cache, or refused, with
zero requests.

Each test runs against a live loopback CDN and asserts that it saw no request at all,
once with a cache an earlier online run primed (it can answer) and once without. The
commands offline (``flashhub variants``, ``info``, and ``lock``, which never rewrites a
lock file) are tested in test_cli.py and test_cli_lock.py.
"""

from __future__ import annotations

import shutil

import pytest

import flashhub_kernels as fk
from conftest import has_then_get, run_python
from flashhub_kernels.errors import OfflineError
from support.cdn_server import CdnServer
from support.projects import CUDA, REPO, UNIVERSAL, entry, publish_tensor_tricks
from support.trees import local_variant, write_kernel

LOCAL = local_variant()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")


# -- has_kernel and get_kernel_variants ------------------------------------------------------


def test_variants_come_from_the_cache_a_load_primed(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_tensor_tricks(cdn.root)
    write_kernel(cdn.root, "acme/gpu-only", 1, [CUDA])
    fk.get_kernel(REPO, version=2)
    with pytest.raises(fk.errors.NoCompatibleVariantError):
        fk.get_kernel("acme/gpu-only", version=1)  # records the variant list all the same
    online = fk.get_kernel_variants(REPO, version=2)
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    assert fk.get_kernel_variants(REPO, version=2) == online
    assert fk.has_kernel(REPO, version=2)
    assert not fk.has_kernel("acme/gpu-only", version=1)
    assert cdn.requests == []


def test_a_probed_version_answers_what_its_probe_learnt(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL], with_variants_json=False)
    fk.get_kernel(REPO, version=1)  # probes until the first hit: later names stay unknown
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    assert fk.has_kernel(REPO, version=1)
    with pytest.raises(OfflineError, match="every variant this system could load"):
        fk.get_kernel_variants(REPO, version=1)
    assert cdn.requests == []


def test_a_load_offline_that_no_recorded_variant_fits_says_so_as_online(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not "run flashhub get with network access": online, the same load fails alike.
    write_kernel(cdn.root, "acme/gpu-only", 1, [CUDA])
    with pytest.raises(fk.errors.NoCompatibleVariantError) as online:
        fk.get_kernel("acme/gpu-only", version=1)  # records the variant list all the same
    cdn.clear_log()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    with pytest.raises(fk.errors.NoCompatibleVariantError) as offline:
        fk.get_kernel("acme/gpu-only", version=1)
    assert "(as recorded in the cache)" in offline.value.message
    assert (
        offline.value.message.replace(" (as recorded in the cache)", "").split(":")[0]
        == (online.value.message.split(":")[0])
    )
    assert offline.value.hint == online.value.hint
    assert not fk.has_kernel("acme/gpu-only", version=1)
    assert cdn.requests == []


def test_has_kernel_offline_is_false_or_raises_as_get_kernel_does(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    run_python(f"import flashhub_kernels as fk; fk.get_kernel({REPO!r}, version=2)")
    assert has_then_get(REPO, 2) == ["bool", "module"]
    (entry(2, LOCAL) / "tensor_tricks" / "_ops.py").write_text("changed = True\n")
    assert has_then_get(REPO, 2) == ["IntegrityError", "IntegrityError"]
    shutil.rmtree(entry(2, LOCAL))  # the list of its variants stays recorded
    cdn.clear_log()

    assert has_then_get(REPO, 2) == ["OfflineError", "OfflineError"]
    assert cdn.requests == []


def test_variants_offline_without_a_cache_are_an_offline_error(
    cdn: CdnServer, offline: None
) -> None:
    publish_tensor_tricks(cdn.root)

    for ask in (fk.has_kernel, fk.get_kernel_variants):
        with pytest.raises(OfflineError, match="FLASHHUB_OFFLINE") as info:
            ask(REPO, version=2)
        assert f"flashhub get {REPO} --version 2" in str(info.value.hint)
        with pytest.raises(OfflineError, match="newest version") as info:
            ask(REPO)
        assert "version=" in str(info.value.hint)
    assert cdn.requests == []


def test_an_offline_miss_is_the_value_error_hugging_face_code_catches(
    cdn: CdnServer, offline: None
) -> None:
    publish_tensor_tricks(cdn.root)
    code = f"""
import flashhub_kernels as kernels

calls = {{
    "get_kernel": lambda: kernels.get_kernel({REPO!r}, version=2),
    "has_kernel": lambda: kernels.has_kernel({REPO!r}, version=2),
    "install_kernel": lambda: kernels.install_kernel({REPO!r}, version=2),
    "get_kernel_variants": lambda: kernels.get_kernel_variants({REPO!r}, version=2),
}}
for name, call in calls.items():
    try:
        call()
    except ValueError as exc:  # as Hugging Face kernels raises it with HF_HUB_OFFLINE=1
        print(name, type(exc).__name__)
"""
    assert run_python(code).split("\n")[:-1] == [
        f"{name} OfflineError"
        for name in ("get_kernel", "has_kernel", "install_kernel", "get_kernel_variants")
    ]
    assert cdn.requests == []
