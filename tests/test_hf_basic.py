"""Hugging Face kernels' own ``tests/test_basic.py``, ported to this API.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and assertions follow the
original; what differs:

- The Hub repos are pure-torch kernels of the same names on the loopback CDN
  (``support/hf_kernels.py``), built for this machine. Branches become versions:
  ``revision="main"`` / ``"v1"`` -> ``"v1"``; flattened-build's ``pre-flattening``,
  ``main`` and ``without-compat-module`` -> ``v1``, ``v2``, ``v3``.
- ``device``: test_basic's own fixture skips without CUDA, and ``cuda_only`` marks tests
  whose Hub builds are GPU builds. These kernels run on any device, so those tests run
  on this machine's (HF's conftest choice: the accelerator, else ``"cpu"``). The Metal,
  Neuron and TPU tests, which put tensors on those devices, keep HF's skip markers.
- ``install_kernel`` gives the cache entry ``<repo>/v<N>/<variant>`` (HF: a snapshot's
  ``build/<variant>``): the local-kernel fixture loads the entry's version directory,
  which holds the variants as a ``build`` directory does, and the path-type test uses
  a kernel repo in the builder's layout.
- Errors are this client's: ``KernelNotFoundError`` (an ``ImportError``) where HF raises
  ``HfHubHTTPError`` or ``FileNotFoundError``; ``OfflineError`` (a ``ValueError``, as HF
  raises) offline; ``version=0`` is malformed here (a ``ValueError`` before any
  request), so the list of published versions is checked on a missing version 3: a
  ``VersionNotFoundError``, both a ``KernelNotFoundError`` and the ``ValueError`` HF
  raises.
- ``has_kernel`` without a version asks about the newest version in ``versions.json``,
  where HF (and 0.1.2) raise.
- The outdated-version notice is a ``NewerVersionWarning`` (off with
  ``FLASHHUB_NO_VERSION_CHECK=1``), not a log record, and it comes from a load that
  downloads; the test asserts the warning.
- ``LOCAL_KERNELS``: a module once imported stays for the process here (HF resolves on
  every call), so each case starts from a fresh import state, as a new process would.
- Trust: HF trusts an org by a Hub flag (``trustedKernelPublisher``); here a publisher
  is trusted by its signing key (``FLASHHUB_TRUSTED_KEYS``), and
  ``FLASHHUB_REQUIRE_SIGNATURES=1`` refuses every unsigned kernel. ``trust_remote_code``
  is taken but lets nothing through: ``test_trust_remote_code_flag_allows_untrusted``
  asserts the refusal where HF asserts the load (the setting is the operator's, and a
  keyword in the caller's code must not undo it).
- Offline: ``local_files_only=True`` and ``FLASHHUB_OFFLINE=1``; that no request is made
  is read from the CDN's request log rather than a patched ``HfApi``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import _forget_kernels, run_python
from flashhub_kernels import (
    get_kernel,
    get_kernel_variants,
    get_local_kernel,
    has_kernel,
    install_kernel,
)
from flashhub_kernels._signing.signing_keys import generate_signing_key, write_key_pair
from flashhub_kernels.errors import (
    KernelNotFoundError,
    NewerVersionWarning,
    OfflineError,
    SignatureError,
)
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.hf_kernels import (
    FLATTENED,
    FLATTENED_REVISIONS,
    ONLY_TORCH_24,
    RELU,
    SILU_AND_MUL,
    VERSIONS,
    darwin_only,
    device_name,
    neuron_only,
    publish_flattened_build,
    publish_only_torch_24,
    publish_relu,
    publish_silu_and_mul,
    publish_versions,
    tpu_only,
)

UNTRUSTED = "kernels-test-untrusted/not-a-trused-org-kernel"


@pytest.fixture
def hub(cdn: CdnServer) -> CdnServer:
    """The CDN, serving the repos test_basic loads from the Hub."""
    publish_relu(cdn.root)
    publish_versions(cdn.root)
    publish_silu_and_mul(cdn.root)
    publish_flattened_build(cdn.root)
    publish_only_torch_24(cdn.root)
    return cdn


@pytest.fixture
def kernel(hub: CdnServer) -> object:
    return get_kernel(RELU, version=1)


@pytest.fixture
def local_kernel_path(hub: CdnServer) -> Path:
    # install_kernel works with resolved revisions, so explicitly use v1 here.
    return install_kernel(RELU, revision="v1")


@pytest.fixture
def local_kernel(local_kernel_path: Path) -> object:
    # The entry's version directory holds the variants, as a snapshot's build/ does.
    return get_local_kernel(local_kernel_path.parent)


@pytest.fixture
def metal_kernel(cdn: CdnServer) -> object:
    publish_relu(cdn.root, repo_id="kernels-test/relu-metal")
    return get_kernel("kernels-test/relu-metal", version=1)


@pytest.fixture
def device() -> str:
    return device_name()


def test_relu(kernel: object, device: str) -> None:
    x = torch.arange(-4, 5, dtype=torch.float32, device=device).view(3, 3)
    y = kernel.relu(x)  # type: ignore[attr-defined]
    torch.testing.assert_close(y, F.relu(x))


def test_local_kernel(local_kernel: object, device: str) -> None:
    x = torch.arange(-4, 5, dtype=torch.float32, device=device).view(3, 3)
    y = local_kernel.relu(x)  # type: ignore[attr-defined]
    torch.testing.assert_close(y, F.relu(x))


@pytest.mark.parametrize(
    "repo_revision",
    [
        (FLATTENED, "pre-flattening"),
        (FLATTENED, "main"),
        (FLATTENED, "without-compat-module"),
    ],
)
def test_local_kernel_path_types(
    repo_revision: tuple[str, str], device: str, hub: CdnServer, tmp_path: Path
) -> None:
    repo_id, revision = repo_revision
    path = install_kernel(repo_id, revision=FLATTENED_REVISIONS[revision])
    # A kernel repo as the builder leaves it: <repo>/build/<variant>, this entry inside.
    repo = tmp_path / "flattened-build"
    (repo / "build").mkdir(parents=True)
    (repo / "build" / path.name).symlink_to(path)

    # Top-level repo path
    kernel = get_local_kernel(repo)
    x = torch.arange(0, 32, dtype=torch.float16, device=device).view(2, 16)
    torch.testing.assert_close(kernel.silu_and_mul(x), silu_and_mul_torch(x))

    # Build directory path
    kernel = get_local_kernel(repo / "build")
    torch.testing.assert_close(kernel.silu_and_mul(x), silu_and_mul_torch(x))

    # Explicit package path: the variant directory
    kernel = get_local_kernel(path)
    torch.testing.assert_close(kernel.silu_and_mul(x), silu_and_mul_torch(x))


@darwin_only
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_relu_metal(metal_kernel: object, dtype: torch.dtype) -> None:
    x = torch.arange(-10, 10, dtype=dtype, device="mps")
    y = metal_kernel.relu(x)  # type: ignore[attr-defined]
    assert torch.allclose(y, torch.relu(x))


@pytest.mark.parametrize(
    "kernel_exists",
    [
        (RELU, "v1", True),
        (SILU_AND_MUL, "v1", True),
        # Repo only contains Torch 2.4 kernels (and we don't
        # support/test against this version).
        (ONLY_TORCH_24, "v1", False),
        (FLATTENED, "v2", True),
        (FLATTENED, "v3", True),
    ],
)
def test_has_kernel(kernel_exists: tuple[str, str, bool], hub: CdnServer) -> None:
    repo_id, revision, kernel = kernel_exists
    assert has_kernel(repo_id, revision=revision) == kernel


def test_version(hub: CdnServer) -> None:
    kernel = get_kernel(VERSIONS, version=1)
    assert kernel.version() == 1
    kernel = get_kernel(VERSIONS, version=2)
    assert kernel.version() == 2

    # Numerical ordering, so 2 should come before 10.
    with pytest.raises(KernelNotFoundError, match=r"published versions: 1, 2, 10\b"):
        kernel = get_kernel(VERSIONS, version=3)


def test_a_version_the_repo_lacks_is_a_value_error_too(hub: CdnServer) -> None:
    """HF raises ValueError for it: code that catches that keeps working; so does code
    that catches ImportError."""
    with pytest.raises(ValueError, match=r"published versions: 1, 2, 10\b") as info:
        get_kernel(VERSIONS, version=3)
    assert isinstance(info.value, KernelNotFoundError)
    with pytest.raises(ValueError, match="use a published version; the newest is v10"):
        install_kernel(VERSIONS, version=3)
    with pytest.raises(ValueError, match=r"published versions: 1, 2, 10\b"):
        get_kernel_variants(VERSIONS, version=3)


def test_version_outdated_warning(hub: CdnServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHHUB_NO_VERSION_CHECK")  # conftest turns the check off
    with pytest.warns(NewerVersionWarning) as caught:
        kernel = get_kernel(VERSIONS, version=1)
    assert kernel.version() == 1
    assert f"You are using version 1 of '{VERSIONS}', but version 10 is available." in str(
        caught[0].message
    )

    _forget_kernels()  # the check runs once per repo and process: start another
    with warnings.catch_warnings(record=True) as caught_newest:
        warnings.simplefilter("always")
        kernel = get_kernel(VERSIONS, version=10)
    assert kernel.version() == 10
    assert not [w for w in caught_newest if issubclass(w.category, NewerVersionWarning)]


def test_no_version_or_revision_error(hub: CdnServer) -> None:
    with pytest.raises(ValueError, match="give exactly one of version= or revision="):
        get_kernel(VERSIONS)
    # Here a missing version asks about the newest one.
    assert has_kernel(VERSIONS) is True


def test_noarch_kernel(device: str, hub: CdnServer) -> None:
    supported_devices = ["cpu", "cuda", "xpu"]
    if device not in supported_devices:
        pytest.skip(f"Device is not one of: {','.join(supported_devices)}")
    get_kernel(SILU_AND_MUL, version=1)


def test_get_kernel_with_backend(device: str, hub: CdnServer) -> None:
    x = torch.randn((16, 16), device=device)
    assert has_kernel(RELU, version=1)
    relu = get_kernel(RELU, version=1)
    torch.testing.assert_close(relu.relu(x), F.relu(x))

    if device in ("cpu", "cuda", "rocm", "xpu", "metal"):  # the backends one may force
        assert has_kernel(RELU, version=1, backend=device)
        relu = get_kernel(RELU, version=1, backend=device)
        torch.testing.assert_close(relu.relu(x), F.relu(x))

    if device != "xpu":
        with pytest.raises(ValueError, match="cannot select backend 'xpu'"):
            get_kernel(RELU, version=1, backend="xpu")

    assert has_kernel(RELU, version=1, backend="cpu")
    relu = get_kernel(RELU, version=1, backend="cpu")
    x = x.cpu()
    torch.testing.assert_close(relu.relu(x), F.relu(x))


@pytest.mark.parametrize(
    "repo_revision",
    [
        (FLATTENED, "pre-flattening"),
        (FLATTENED, "main"),
        (FLATTENED, "without-compat-module"),
    ],
)
def test_flattened_build(repo_revision: tuple[str, str], device: str, hub: CdnServer) -> None:
    repo_id, revision = repo_revision
    kernel = get_kernel(repo_id, revision=FLATTENED_REVISIONS[revision])

    x = torch.arange(0, 32, dtype=torch.float16, device=device).view(2, 16)
    torch.testing.assert_close(kernel.silu_and_mul(x), silu_and_mul_torch(x))


def test_local_overrides(
    monkeypatch: pytest.MonkeyPatch, local_kernel_path: Path, hub: CdnServer
) -> None:
    kernel_path = local_kernel_path

    # Ensure that we are testing with a non-existing kernel, so that we know
    # that the kernel must be local.
    with pytest.raises(KernelNotFoundError):
        get_kernel("kernels-test/activation", revision="v1")

    with monkeypatch.context() as m:
        m.setenv(
            "LOCAL_KERNELS",
            f"kernels-test/activation={kernel_path!s}:kernels-test/non-existing2=/non/existing",
        )
        hub.clear_log()
        assert get_kernel("kernels-test/activation", revision="v1").relu is not None
        assert hub.requests == []

    _forget_kernels()
    with monkeypatch.context() as m:
        m.setenv(
            "LOCAL_KERNELS",
            f"kernels-test/non-existing2=/non/existing:kernels-test/activation={kernel_path!s}",
        )
        get_kernel("kernels-test/activation", revision="v1")

    _forget_kernels()
    with monkeypatch.context() as m:
        # Using a non-existing path should error.
        m.setenv(
            "LOCAL_KERNELS",
            "kernels-test/non-existing2=/non/existing:kernels-test/activation=/non/existing",
        )
        with pytest.raises(FileNotFoundError, match=r"Cannot find a build variant.* /non/existing"):
            get_kernel("kernels-test/activation", revision="v1")

    with monkeypatch.context() as m:
        # Malformed entries must be rejected.
        m.setenv(
            "LOCAL_KERNELS",
            "kernels-test/non-existing2=/non/existing:kernels-test/activation",
        )
        with pytest.raises(ValueError, match=r"LOCAL_KERNELS entry 'kernels-test/activation'"):
            get_kernel("kernels-test/activation", revision="v1")


@neuron_only
def test_neuron(cdn: CdnServer) -> None:
    publish_relu(cdn.root, repo_id="kernels-test/relu-nki")
    relu = get_kernel("kernels-test/relu-nki", version=1)
    x = torch.randn((16, 16), dtype=torch.float16).to(device="neuron")
    torch.testing.assert_close(relu.relu(x), x.relu())


@tpu_only
def test_tpu(cdn: CdnServer) -> None:
    publish_relu(cdn.root, repo_id="kernels-test/relu-tpu")
    relu = get_kernel("kernels-test/relu-tpu", version=1)
    x = torch.randn((16, 16), device="tpu")
    torch.testing.assert_close(relu.relu(x), x.relu())


@pytest.fixture
def trusted_publisher(hub: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kernels-community's kernels signed by a trusted key; every signature required;
    a kernel of another org published unsigned."""
    pytest.importorskip("cryptography", reason="signing needs the 'signing' extra")
    key = generate_signing_key()
    write_key_pair(key, tmp_path / "publisher.key")
    signed = flashhub(
        "sign", hub.root / "kernels" / "kernels-community", "--key", tmp_path / "publisher.key"
    )
    assert signed.returncode == 0, signed.stderr
    publish_relu(hub.root, repo_id=UNTRUSTED)
    monkeypatch.setenv("FLASHHUB_TRUSTED_KEYS", key.public_line)
    monkeypatch.setenv("FLASHHUB_REQUIRE_SIGNATURES", "1")


@pytest.mark.usefixtures("trusted_publisher")
def test_trust_remote_code_blocks_untrusted_org() -> None:
    """Kernels from untrusted orgs should be rejected by default."""
    with pytest.raises(SignatureError, match=r"is not signed"):
        get_kernel(UNTRUSTED, version=1)


@pytest.mark.usefixtures("trusted_publisher")
def test_trust_remote_code_flag_allows_untrusted() -> None:
    """Where signatures are required, trust_remote_code lets no unsigned kernel through."""
    for trust in (True, [UNTRUSTED]):
        with pytest.raises(SignatureError, match=r"is not signed"):
            get_kernel(UNTRUSTED, version=1, trust_remote_code=trust)
    kernel = "flashhub.kernels_test_untrusted.not_a_trused_org_kernel.v"  # its versions' modules
    assert not [name for name in sys.modules if name.startswith(kernel)]


@pytest.mark.usefixtures("trusted_publisher")
def test_trust_remote_code_allows_trusted_org() -> None:
    """Kernels from trusted orgs should not raise a trust error."""
    get_kernel(RELU, version=1)


def test_install_kernel_offline_with_revision(local_kernel_path: Path) -> None:
    """install_kernel should resolve a cached entry with local_files_only=True."""
    expected_path = local_kernel_path

    path = install_kernel(RELU, revision="v1", local_files_only=True)
    assert path == expected_path


def test_install_kernel_offline_avoids_network(local_kernel_path: Path, hub: CdnServer) -> None:
    """When offline, install_kernel must not make any CDN requests."""
    expected_path = local_kernel_path

    # The online path must touch the CDN for a kernel the cache does not hold. (A cached
    # one it serves without a request too: the cache verified it when it was stored.)
    hub.clear_log()
    install_kernel(VERSIONS, revision="v1")
    assert hub.requests != []

    # Offline mode resolves entirely from the local cache.
    hub.clear_log()
    path = install_kernel(RELU, revision="v1", local_files_only=True)
    assert path == expected_path
    with pytest.raises(OfflineError, match="local_files_only=True allows no download"):
        install_kernel(VERSIONS, revision="v2", local_files_only=True)
    assert hub.requests == []


def test_install_kernel_offline_in_a_fresh_process(local_kernel_path: Path, hub: CdnServer) -> None:
    """Beyond the HF suite: a new interpreter, with the CDN gone, finds the cached entry."""
    hub.stop()
    code = (
        "from flashhub_kernels import install_kernel\n"
        f"print(install_kernel({RELU!r}, version=1, local_files_only=True))"
    )
    assert run_python(code).strip() == str(local_kernel_path)


def test_install_kernel_offline_with_version(
    monkeypatch: pytest.MonkeyPatch, local_kernel_path: Path, hub: CdnServer
) -> None:
    """get_kernel(version=) should resolve from the cache when FLASHHUB_OFFLINE=1."""
    expected_path = local_kernel_path
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    hub.clear_log()
    # The module's __file__ is <entry>/<py_pkg>/__init__.py.
    path = Path(get_kernel(RELU, version=1).__file__).parent.parent
    assert path == expected_path
    assert hub.requests == []


def test_install_kernel_offline_uncached_revision(hub: CdnServer) -> None:
    """install_kernel should fail with a helpful error when offline and uncached."""
    with pytest.raises(OfflineError, match=r"is not in the cache"):
        install_kernel(
            "kernels-test/this-repo-should-not-exist",
            revision="v1",
            local_files_only=True,
        )
    assert hub.requests == []


def test_version_resolution_offline_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolving the newest version should raise a clear error when offline."""
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    with pytest.raises(OfflineError, match=r"FLASHHUB_OFFLINE is set"):
        install_kernel("kernels-test/this-repo-should-not-exist")


def test_hugging_face_variables_leave_loading_to_the_flashhub_settings(
    hub: CdnServer, tmp_path: Path, cache_dir: Path
) -> None:
    """The variables a Hub user's environment sets for Hugging Face kernels change nothing
    of a load (docs/layers.md): it goes to the CDN although ``HF_HUB_OFFLINE`` is set,
    caches under ``FLASHHUB_CACHE_DIR``, takes the version asked for, and sends no token."""
    hf_dirs = {
        name: tmp_path / name.lower() for name in ("HF_HOME", "HF_HUB_CACHE", "KERNELS_CACHE")
    }
    token = "hf_NotForTheCdn0123456789"
    env = {
        **{name: str(path) for name, path in hf_dirs.items()},
        "HF_HUB_OFFLINE": "1",
        "HF_TOKEN": token,
        "UNSTABLE_KERNELS_ALL_LATEST": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    code = (
        "import flashhub_kernels as fk\n"
        f"kernel = fk.get_kernel({VERSIONS!r}, version=1, user_agent='my-app/1.0')\n"
        "print(kernel.version(), kernel.__file__)\n"
    )
    version, path = run_python(code, env=env).split()
    assert version == "1"  # UNSTABLE_KERNELS_ALL_LATEST would have taken v10
    assert Path(path).is_relative_to(cache_dir)
    assert [path for path in hf_dirs.values() if path.exists()] == []
    assert hub.requests
    for request in hub.requests:
        assert request.authorization is None
        assert token not in str(request.headers)
        assert request.headers["User-Agent"].endswith("; my-app/1.0")  # telemetry is not read


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]
