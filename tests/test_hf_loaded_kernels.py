"""Hugging Face kernels' own ``tests/test_loaded_kernels.py``, ported to this API.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and assertions follow the
original; what differs:

- ``kernels-community/relu`` is a pure-torch kernel on the loopback CDN
  (``support/hf_kernels.py``); ``revision="main"`` becomes ``"v1"``.
- The record's fields are those of this client's ``LoadedKernel`` (kept from its 0.1.2
  release): ``repo_id, version, variant, path, module``, and ``RepoInfo(repo_id,
  version)``. HF's names are there as properties: ``repo_info`` (``None`` for a local
  kernel), ``metadata`` (its build's ``metadata.json``) and ``RepoInfo.revision``
  (``"v1"``). HF's ``metadata.name.python_name`` is also the package folder's name,
  ``path.name``.
- HF's registry is a dict keyed by variant path; here the finder holds it, and conftest
  gives every test a fresh one (``fresh_registry`` checks that it starts empty).
  Clearing it mid-test is a fresh import state, as in a new process.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields

import pytest

from conftest import _forget_kernels
from flashhub_kernels import (
    LoadedKernel,
    RepoInfo,
    get_kernel,
    get_loaded_kernels,
    get_local_kernel,
    install_kernel,
)
from support.cdn_server import CdnServer
from support.hf_kernels import RELU, cpu_variant, publish_relu

_REPO_ID = RELU
_PACKAGE_NAME = "relu"
_VERSION = 1


@pytest.fixture(autouse=True)
def relu(cdn: CdnServer) -> None:
    publish_relu(cdn.root)


@pytest.fixture
def fresh_registry() -> Iterator[None]:
    """Every test starts with a clean registry (conftest's fresh finder)."""
    assert get_loaded_kernels() == []
    yield


def test_dataclass_shape() -> None:
    assert tuple(f.name for f in fields(LoadedKernel)) == (
        "repo_id",
        "version",
        "variant",
        "path",
        "module",
    )
    assert tuple(f.name for f in fields(RepoInfo)) == (
        "repo_id",
        "version",
    )
    assert RepoInfo(_REPO_ID, _VERSION).revision == "v1"


def test_get_loaded_kernels_returns_copy(fresh_registry: None) -> None:
    kernel = get_kernel(_REPO_ID, version=_VERSION, backend="cpu")

    snapshot = get_loaded_kernels()
    assert len(snapshot) == 1

    snapshot.clear()
    snapshot.append("garbage")  # type: ignore[arg-type]

    again = get_loaded_kernels()
    assert len(again) == 1
    assert again[0].module is kernel


def test_get_kernel_registers_loaded_kernel(fresh_registry: None) -> None:
    kernel = get_kernel(_REPO_ID, version=_VERSION, backend="cpu")

    loaded = get_loaded_kernels()
    assert len(loaded) == 1

    entry = loaded[0]
    assert entry.module is kernel
    assert entry.metadata.name is not None
    assert entry.metadata.name.python_name == entry.path.name == _PACKAGE_NAME
    assert entry.variant == cpu_variant()
    assert entry.repo_info is not None
    assert entry.repo_info.repo_id == _REPO_ID
    assert isinstance(entry.repo_info.revision, str) and entry.repo_info.revision == "v1"


def test_repeated_get_kernel_is_cached(fresh_registry: None) -> None:
    first = get_kernel(_REPO_ID, version=_VERSION, backend="cpu")
    second = get_kernel(_REPO_ID, version=_VERSION, backend="cpu")

    assert first is second
    assert len(get_loaded_kernels()) == 1


def test_get_local_kernel_registers_with_null_repo_info(fresh_registry: None) -> None:
    # Populate the cache via get_kernel, grab the package path it registered,
    # then clear the registry and exercise get_local_kernel against that path.
    get_kernel(_REPO_ID, version=_VERSION, backend="cpu")
    (registered,) = get_loaded_kernels()
    variant_path = registered.path.parent

    _forget_kernels()

    kernel = get_local_kernel(variant_path, backend="cpu")

    loaded = get_loaded_kernels()
    assert len(loaded) == 1

    entry = loaded[0]
    assert entry.module is kernel
    assert entry.metadata.name is not None
    assert entry.metadata.name.python_name == entry.path.name == _PACKAGE_NAME
    assert entry.repo_info is None


def test_install_kernel_plus_import_does_not_set_repo_info(fresh_registry: None) -> None:
    # install_kernel alone does not import; it returns a path. Any loader
    # that does not go through get_kernel must leave repo_info as None.
    variant_path = install_kernel(_REPO_ID, revision="v1", backend="cpu")
    assert get_loaded_kernels() == []

    get_local_kernel(variant_path, backend="cpu")
    (entry,) = get_loaded_kernels()
    assert entry.repo_info is None
