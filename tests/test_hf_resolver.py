"""Hugging Face kernels' own ``tests/test_resolver.py``, ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0; the test file is the newest stored
version, whose resolvers the 0.19.1 wheel ships in ``kernels/_internals/resolver.py``).
Test names follow the original; what differs:

- HF tests its private resolver classes (``RepoPathsResolver``, ``HubResolver``,
  ``HubCacheResolver``, ``LockedHubResolver``, ...) one by one. Here each resolver is the
  public path that uses it: ``LOCAL_KERNELS`` (``RepoPathsResolver``), ``get_kernel``
  from the loopback CDN (``HubResolver``), ``get_kernel`` offline from the cache
  (``HubCacheResolver``), ``get_locked_kernel`` / ``load_kernel`` (the locked ones).
- ``location.variant_path`` is the directory the loaded module came from
  (``get_loaded_kernels()``), and ``location.metadata`` that entry's ``metadata``.
- Where the exception differs, the test asserts this client's documented type and says
  which doc line: HF's ``FileNotFoundError("Cannot find a build variant ...")`` is
  ``KernelNotFoundError`` for a local path without a build for this system
  (docs/layers.md, LOCAL_KERNELS) and ``NoCompatibleVariantError`` for a published kernel
  (docs/layers.md "What differs"); HF's "local snapshot" ``FileNotFoundError`` is
  ``OfflineError`` (also a ``ValueError``).

Left out: the equality/immutability tests of ``LocalKernel``/``RemoteKernel``,
``NoopResolver`` and ``SequentialResolver`` (private classes with no counterpart);
``KernelPathsResolver`` (a per-version path map: ``LOCAL_KERNELS`` maps a repo for every
version, docs/layers.md); ``test_hub_resolver_trust_remote_code_bypasses_check``
(``cuda_only``; and ``trust_remote_code`` changes nothing here); the
``resolve_hub_kernel`` upgrade-hint tests (ported in ``test_hf_upgrade_hint.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels.errors import (
    KernelNotFoundError,
    NoCompatibleVariantError,
    OfflineError,
)
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.hf_kernels import (
    ONLY_TORCH_24,
    RELU,
    package,
    publish_only_torch_24,
    publish_relu,
    write_hf_kernel,
)
from support.projects import write_project
from support.trees import local_variant

TEST_KERNEL = "test/kernel"


def _write_variant(repo_path: Path, variant: str | None = None) -> Path:
    """A kernel build variant under ``repo_path/build`` (by default this machine's own
    build: HF's test writes ``torch-cpu``, which a CUDA build of torch does not take), with
    the builder's digest so a local load accepts it."""
    variant = variant or local_variant()
    staging = repo_path / "_staging"
    write_hf_kernel(
        staging,
        TEST_KERNEL,
        1,
        [variant],
        package("test", {"__init__.py": "VALUE = 'test'\n"}),
        {"id": "test_1_cpu", "name": "test", "license": "Apache-2.0", "python-depends": ["torch"]},
    )
    built = staging / "kernels" / TEST_KERNEL / "v1" / "build" / variant
    variant_dir = repo_path / "build" / variant
    variant_dir.parent.mkdir(parents=True, exist_ok=True)
    built.rename(variant_dir)
    return variant_dir


def _loaded_from(module: object) -> fk.LoadedKernel:
    (entry,) = [e for e in fk.get_loaded_kernels() if e.module is module]
    return entry


@pytest.mark.parametrize("path_kind", ["repo", "build", "variant"])
def test_repo_paths_resolver_path_layouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path_kind: str
) -> None:
    repo = tmp_path / "repo"
    variant_dir = _write_variant(repo)
    repo_path = {"repo": repo, "build": repo / "build", "variant": variant_dir}[path_kind]
    monkeypatch.setenv("LOCAL_KERNELS", f"{TEST_KERNEL}={repo_path}")

    module = fk.get_kernel(TEST_KERNEL, version=1)

    assert module.VALUE == "test"
    entry = _loaded_from(module)
    assert Path(entry.path).resolve().is_relative_to(variant_dir.resolve())
    assert entry.metadata.name == "test"
    assert entry.metadata.name.python_name == "test"


def test_repo_paths_resolver_unknown_repo(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repo LOCAL_KERNELS does not list loads from the CDN as usual."""
    _write_variant(tmp_path / "repo")
    publish_relu(cdn.root, repo_id="other/repo")
    monkeypatch.setenv("LOCAL_KERNELS", f"{TEST_KERNEL}={tmp_path / 'repo'}")

    module = fk.get_kernel("other/repo", version=1)

    assert any("other/repo" in g for g in cdn.gets())
    assert _loaded_from(module).repo_id == "other/repo"


def test_repo_paths_resolver_no_matching_variant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF: FileNotFoundError "Cannot find a build variant". docs/layers.md (LOCAL_KERNELS):
    "A path that holds no kernel package for this system is a KernelNotFoundError"."""
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setenv("LOCAL_KERNELS", f"{TEST_KERNEL}={repo}")
    with pytest.raises(KernelNotFoundError):
        fk.get_kernel(TEST_KERNEL, version=1)


def test_repo_paths_resolver_variant_for_another_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As above, with a build/ that holds only a build for another backend."""
    repo = tmp_path / "repo"
    _write_variant(repo, "torch-metal")
    monkeypatch.setenv("LOCAL_KERNELS", f"{TEST_KERNEL}={repo}")
    with pytest.raises(ImportError) as caught:
        fk.get_kernel(TEST_KERNEL, version=1)
    assert isinstance(caught.value, (KernelNotFoundError, NoCompatibleVariantError))


def test_hub_resolver_resolves_remote_kernel(cdn: CdnServer) -> None:
    publish_relu(cdn.root)
    module = fk.get_kernel(RELU, version=1, backend="cpu")
    entry = _loaded_from(module)
    assert entry.repo_id == RELU
    assert entry.repo_info is not None and entry.repo_info.revision == "v1"
    assert entry.metadata.name == "relu"


def test_hub_resolver_revision_passthrough(cdn: CdnServer) -> None:
    publish_relu(cdn.root)
    module = fk.get_kernel(RELU, revision="v1", backend="cpu")
    assert _loaded_from(module).repo_info.revision == "v1"


def test_hub_resolver_blocks_untrusted_org(cdn: CdnServer) -> None:
    """HF raises ValueError "not from a trusted publisher". Documented deviation
    (docs/layers.md): "there is no Hub flag of trusted publishers to widen, so `False`
    refuses no kernel your CDN serves"."""
    repo = "kernels-test-untrusted/not-a-trused-org-kernel"
    publish_relu(cdn.root, repo_id=repo)
    assert fk.get_kernel(repo, version=1, trust_remote_code=False) is not None


def test_hub_resolver_no_matching_variant(cdn: CdnServer) -> None:
    """HF: FileNotFoundError "Cannot find a build variant". Here NoCompatibleVariantError
    (a ValueError and RuntimeError, no OSError: docs/layers.md "What differs")."""
    publish_only_torch_24(cdn.root)
    with pytest.raises(NoCompatibleVariantError) as caught:
        fk.get_kernel(ONLY_TORCH_24, version=1, backend="cpu")
    assert isinstance(caught.value, ValueError)
    assert not isinstance(caught.value, OSError)


def test_hub_cache_resolver_resolves_cached_kernel(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_relu(cdn.root)
    installed = fk.install_kernel(RELU, version=1, backend="cpu")
    cdn.stop()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    module = fk.get_kernel(RELU, version=1, backend="cpu")
    assert Path(_loaded_from(module).path).resolve().is_relative_to(installed.resolve())


def test_hub_cache_resolver_revision_passthrough(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_relu(cdn.root)
    installed = fk.install_kernel(RELU, revision="v1", backend="cpu")
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    again = fk.install_kernel(RELU, revision="v1", backend="cpu")
    assert again == installed


def test_hub_cache_resolver_uncached_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF: FileNotFoundError "local snapshot". Here OfflineError, also a ValueError
    (docs/layers.md: "Offline, a kernel the cache lacks is an OfflineError")."""
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    with pytest.raises(OfflineError) as caught:
        fk.install_kernel("kernels-test/this-repo-should-not-exist", version=1, backend="cpu")
    assert isinstance(caught.value, ValueError)


@pytest.fixture
def relu_locks(cdn: CdnServer, tmp_path: Path) -> Path:
    """A project locking ``kernels-community/relu`` version 1, as HF's lock fixture."""
    publish_relu(cdn.root)
    project = tmp_path / "project"
    write_project(project, {RELU: 1})
    locked = flashhub("lock", project)
    assert locked.returncode == 0, locked.stderr
    return project


def test_locked_hub_resolver_resolves_locked_revision(
    relu_locks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(relu_locks)
    module = fk.get_locked_kernel(RELU, backend="cpu")
    assert _loaded_from(module).repo_info.revision == "v1"


def test_locked_hub_resolver_requires_lock(relu_locks: Path, cdn: CdnServer) -> None:
    """HF: ValueError "is not locked" for a kernel the lock does not hold."""
    publish_relu(cdn.root, repo_id="kernels-community/not-locked")
    with pytest.raises(ValueError) as caught:
        fk.get_locked_kernel("kernels-community/not-locked", lockfile=relu_locks / "flashhub.lock")
    assert "kernels-community/not-locked" in str(caught.value)


def test_locked_hub_cache_resolver_resolves_locked_kernel(
    relu_locks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(relu_locks)
    installed = fk.install_kernel(RELU, version=1, backend="cpu")
    module = fk.load_kernel(RELU, backend="cpu")
    assert Path(_loaded_from(module).path).resolve().is_relative_to(installed.resolve())


def test_locked_hub_cache_resolver_requires_lock(relu_locks: Path) -> None:
    with pytest.raises(ValueError) as caught:
        fk.load_kernel("kernels-community/not-locked", lockfile=relu_locks / "flashhub.lock")
    assert "kernels-community/not-locked" in str(caught.value)
