"""Hugging Face kernels' own ``tests/test_validate.py`` (the checks a load makes of a
build's ``metadata.json``: ``kernels-minver`` and the device archs), ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0). Test names and cases follow the
original; what differs:

- HF calls its validators (``MinverValidator``, ``ArchValidator``) on a metadata document
  in a stand-in dependency tree. Here each document is a kernel's ``metadata.json`` on the
  loopback CDN, in the builder's layout (``support/builder.py``), loaded with
  ``get_kernel``: a check that passes is a load, one that fails is the load's error.
- The exception types are HF's: ``RuntimeError`` for a build that needs a newer client
  and for one whose archs lack the device. The messages are this client's; they name
  what HF's do (the version required and the one installed; the variant, the device's
  capability or gfx target and the build's archs).
- ``kernels-minver`` is compared with the Hugging Face kernels version whose API this
  client implements (0.19.1), and ``flashhub-kernels-minver`` with this client's own
  version, which is the one the tests that change the installed version patch
  (``kernels.__version__`` in HF).
- HF fakes a CUDA device of capability 10.0 and a ROCm device ``gfx90a`` by patching
  torch; here the process resolves kernels as such a machine (``support/machines.py``),
  with the device given, since this client reads the device without torch (docs/
  kernel-requirements.md). HF's arch check comes after the variant is chosen; here it is
  part of the choice, so a build for other devices is passed over and the error lists
  each build passed over.
- ``test_arch_validator_checks_entire_dependency_tree`` loads a kernel whose dependency
  is built for other devices, where HF records the calls its validator gets.
- ``test_supports_cuda_capability`` is HF's ``tests/test_archs.py`` table, checked
  against :func:`cuda_archs_support`, and ``test_get_kernel_rejects_unsupported_capability``
  its end-to-end test (``cuda_only`` in HF, where the relu build's archs come from the Hub;
  here the build's archs lack the device's capability 99.9 by construction).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels import _constants
from flashhub_kernels._variants.archs import cuda_archs_support
from flashhub_kernels._variants.system import SystemInfo
from support.builder import ran, ran_label, write_builder_kernel
from support.cdn_server import CdnServer
from support.machines import run_as

REPO = "kernels-test/validate"
DEPENDENCY = "kernels-test/validate-dep"


pytestmark = pytest.mark.usefixtures("ran_dir")  # each test's kernels record that they ran


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


def loads_as(
    installed: str, minver: str, cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> bool:
    """Whether the kernel, asking for ``flashhub-kernels-minver`` ``minver``, loads where
    this client's version is ``installed``."""
    monkeypatch.setattr(_constants, "__version__", installed)
    write_builder_kernel(cdn.root, REPO, 1, extra={"flashhub-kernels-minver": minver})
    fk.get_kernel(REPO, version=1)
    return loads(ran_dir)


def test_no_error_for_dev_version_of_required_release(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A development version implements the release it leads up to.
    assert loads_as("0.3.0.dev0", "0.3.0", cdn, ran_dir, monkeypatch)


@pytest.mark.parametrize(
    "installed", ["0.3.0.dev0", "0.3.0rc1", "0.3.0.post1", "0.3.0+cu121", "0.3"]
)
def test_installed_version_uses_release_segment(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch, installed: str
) -> None:
    assert loads_as(installed, "0.3.0", cdn, ran_dir, monkeypatch)


def test_unparseable_installed_version_does_not_fail_validation(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A version that cannot be compared must not turn this check into a failure.
    assert loads_as("0.3.0-dirty", "999.1.0", cdn, ran_dir, monkeypatch)


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


# -- device archs ------------------------------------------------------------------------------

CUDA_BUILD = "torch213-cxx11-cu126-x86_64-linux"
ROCM_BUILD = "torch213-cxx11-rocm63-x86_64-linux"


def cuda_node(capability: tuple[int, int] | None = (10, 0)) -> SystemInfo:
    """A CUDA machine whose device has ``capability`` (``None``: no device seen)."""
    return SystemInfo((2, 13), True, "cuda", "cu126", "x86_64", "linux", capability)


ROCM_NODE = SystemInfo(
    (2, 13), True, "rocm", "rocm63", "x86_64", "linux", rocm_arch="gfx90a:sramecc+:xnack-"
)


def publish(
    root: Path, backend: str, archs: list[str] | None, *, repo_id: str = REPO, **kwargs: object
) -> str:
    """``repo_id`` v1 with one build for ``backend``'s machine, declaring ``archs``."""
    variant = ROCM_BUILD if backend == "rocm" else CUDA_BUILD
    target: dict[str, object] = {"type": backend, "archs": archs}
    write_builder_kernel(root, repo_id, 1, variants=[variant], extra={"backend": target}, **kwargs)  # type: ignore[arg-type]
    return variant


def test_cuda_incompatible_arch_is_rejected(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, cuda_node())
    variant = publish(cdn.root, "cuda", ["8.0", "9.0a"])
    with pytest.raises(RuntimeError) as exc_info:
        fk.get_kernel(REPO, version=1)
    assert variant in str(exc_info.value)
    assert "this device is 10.0" in str(exc_info.value)
    assert "8.0, 9.0a" in str(exc_info.value)
    assert not loads(ran_dir)


@pytest.mark.parametrize("archs", [["8.0", "10.0"], ["10.0a"], ["10.0f"]])
def test_cuda_compatible_arch_is_accepted(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch, archs: list[str]
) -> None:
    run_as(monkeypatch, cuda_node())
    publish(cdn.root, "cuda", archs)
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


@pytest.mark.parametrize("archs", [None, []])
def test_noarch_build_is_accepted(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch, archs: list[str] | None
) -> None:
    # Builds for a backend with archs that declare none (pure Triton builds, say) are
    # never rejected.
    run_as(monkeypatch, cuda_node())
    publish(cdn.root, "cuda", archs)
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


@pytest.mark.parametrize(
    ("archs", "accepted"), [(["gfx90a", "gfx942"], True), (None, True), (["gfx942"], False)]
)
def test_rocm_arch_check(
    cdn: CdnServer,
    ran_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    archs: list[str] | None,
    accepted: bool,
) -> None:
    run_as(monkeypatch, ROCM_NODE)
    publish(cdn.root, "rocm", archs)
    if accepted:
        fk.get_kernel(REPO, version=1)
    else:
        with pytest.raises(RuntimeError) as exc_info:
            fk.get_kernel(REPO, version=1)
        assert "this device is gfx90a" in str(exc_info.value)
        assert "gfx942" in str(exc_info.value)
    assert loads(ran_dir) is accepted


def test_check_skipped_without_device(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, cuda_node(None))
    publish(cdn.root, "cuda", ["8.0"])
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


@pytest.mark.parametrize(("backend", "archs"), [("cpu", None), ("metal", ["applegpu_g13"])])
def test_check_skipped_for_backends_without_archs(
    cdn: CdnServer,
    ran_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    archs: list[str] | None,
) -> None:
    # Archs of other backends cannot be checked against the current device.
    run_as(monkeypatch, cuda_node())
    write_builder_kernel(
        cdn.root,
        REPO,
        1,
        variants=[CUDA_BUILD],
        extra={"backend": {"type": backend, "archs": archs}},
    )
    fk.get_kernel(REPO, version=1)
    assert loads(ran_dir)


def test_arch_validator_checks_entire_dependency_tree(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, cuda_node((8, 0)))
    dependency_variant = publish(cdn.root, "cuda", ["9.0"], repo_id=DEPENDENCY)
    publish(cdn.root, "cuda", ["8.0"], kernel_depends=((DEPENDENCY, 1),))
    with pytest.raises(RuntimeError) as exc_info:
        fk.get_kernel(REPO, version=1)
    assert DEPENDENCY in str(exc_info.value)
    assert f"{dependency_variant}: built for CUDA archs 9.0" in str(exc_info.value)
    assert ran(ran_dir) == []

    fk.get_kernel(REPO, version=1, check_arch=False)
    assert ran(ran_dir) == [ran_label(DEPENDENCY, 1), ran_label(REPO, 1)]


def test_issue_707_fa3_on_b200(cdn: CdnServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # flash-attn3 declares only sm_80/sm_90a archs; on a B200 (capability 10.0) its
    # first launch ended the process. The declared archs must be rejected for this device.
    run_as(monkeypatch, cuda_node((10, 0)))
    publish(cdn.root, "cuda", ["8.0", "9.0a"])
    with pytest.raises(RuntimeError, match="no variant for this system"):
        fk.get_kernel(REPO, version=1)


# -- tests/test_archs.py -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("archs", "capability", "supported"),
    [
        # Base archs run on the same generation with the same or a newer minor capability.
        (["8.0"], (8, 0), True),
        (["8.0"], (8, 6), True),
        (["8.6"], (8, 0), False),
        (["8.0"], (7, 5), False),
        (["8.0"], (9, 0), False),
        (["8.0", "9.0"], (9, 0), True),
        # Architecture-specific archs only run on that exact capability.
        (["9.0a"], (9, 0), True),
        (["9.0a"], (9, 1), False),
        (["8.0", "9.0a"], (10, 0), False),
        # Family-specific archs run on the same generation, the same or a newer minor.
        (["10.0f"], (10, 0), True),
        (["10.0f"], (10, 3), True),
        (["10.0f"], (12, 0), False),
        # PTX is JIT-compiled for the device, so +PTX builds run on any newer capability...
        (["9.0+PTX"], (9, 0), True),
        (["9.0+PTX"], (9, 1), True),
        (["9.0+PTX"], (10, 0), True),
        (["9.0+PTX"], (12, 1), True),
        (["9.0+PTX"], (8, 6), False),
        # ...but the a and f suffixes keep their own meaning.
        (["9.0a+PTX"], (9, 0), True),
        (["9.0a+PTX"], (10, 0), False),
        (["10.0f+PTX"], (10, 3), True),
        (["10.0f+PTX"], (12, 0), False),
        # An arch of an unknown form does not count as a match...
        (["garbage", "8.0"], (9, 0), False),
        # ...but when none can be parsed, the build is not rejected.
        (["garbage"], (9, 0), True),
    ],
)
def test_supports_cuda_capability(
    archs: list[str], capability: tuple[int, int], supported: bool
) -> None:
    assert cuda_archs_support(archs, capability) is supported


def test_get_kernel_rejects_unsupported_capability(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, cuda_node((99, 9)))
    publish(cdn.root, "cuda", ["8.0", "9.0"])

    with pytest.raises(RuntimeError, match=r"this device is 99\.9"):
        fk.get_kernel(REPO, version=1)
    assert not fk.has_kernel(REPO, version=1)

    # The opt-out only checks that a compatible build variant exists.
    assert fk.has_kernel(REPO, version=1, check_arch=False)
    kernel = fk.get_kernel(REPO, version=1, check_arch=False)
    assert kernel is not None
