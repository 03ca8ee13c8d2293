"""Errors and warnings point at the next step that works here, and at the right line.

- no variant for this system: advise ``backend='cpu'`` only where a CPU build exists and
  forcing it changes something (a GPU machine), else name the build this system needs;
- not found on the CDN: name the URL that was asked;
- the library gives Python arguments (``version=``), the ``flashhub`` command its options
  (``--version N``; the command's own advice, a doubled prefix included, is in test_cli.py);
- the plain-http warning names the caller's line, not a line in the library.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings

import pytest

import flashhub_kernels as fk
from flashhub_kernels._network import transport as _transport
from flashhub_kernels._variants.probing import build_variant_name
from flashhub_kernels._variants.system import SystemInfo
from flashhub_kernels.errors import CacheError, KernelNotFoundError, NoCompatibleVariantError
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.machines import (
    CPU_BUILD,
    CPU_MACHINE,
    CUDA_BUILD,
    CUDA_MACHINE,
    OLD_CUDA_BUILD,
    run_as,
)
from support.trees import write_kernel

REPO = "acme/tensor-tricks"


def no_variant(version: int = 1) -> NoCompatibleVariantError:
    with pytest.raises(NoCompatibleVariantError) as info:
        fk.get_kernel(REPO, version=version)
    return info.value


# -- no variant for this system --------------------------------------------------------------


def test_a_cpu_machine_is_told_which_build_it_needs_not_to_force_a_backend(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, CPU_MACHINE)
    write_kernel(cdn.root, REPO, 1, [CUDA_BUILD])
    write_kernel(cdn.root, REPO, 2, [CUDA_BUILD], with_variants_json=False)  # probed

    for error in (no_variant(1), no_variant(2)):
        assert error.hint is not None
        assert "backend=" not in error.hint and error.cli_hint is None
        assert build_variant_name(CPU_MACHINE) in error.hint  # torch213-cxx11-cpu-x86_64-linux
        assert "ask the publisher" in error.hint


@pytest.mark.parametrize(
    ("builds", "needs"),
    [
        ([CUDA_BUILD, OLD_CUDA_BUILD, "torch-cuda"], "a CUDA build of torch"),
        ([CUDA_BUILD, "torch212-cxx11-rocm63-x86_64-linux"], "a CUDA or ROCm build of torch"),
    ],
    ids=["cuda", "cuda-or-rocm"],
)
def test_a_cpu_only_torch_is_told_the_published_builds_need_a_gpu_torch(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, builds: list[str], needs: str
) -> None:
    run_as(monkeypatch, CPU_MACHINE)
    write_kernel(cdn.root, REPO, 1, builds)
    write_kernel(cdn.root, REPO, 2, [CUDA_BUILD, "torch212-metal-aarch64-darwin"])

    hint = no_variant(1).hint or ""
    assert f"every published build needs {needs}" in hint
    assert "ask the publisher" in hint  # the other way out, still
    assert "needs a" not in (no_variant(2).hint or "")  # a Metal build is no GPU torch to get


def test_a_gpu_machine_is_told_to_force_the_cpu_build_that_is_published(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, CUDA_MACHINE)
    write_kernel(cdn.root, REPO, 1, [OLD_CUDA_BUILD, CPU_BUILD])

    error = no_variant()

    assert error.hint is not None and error.cli_hint is not None
    assert f"pass backend='cpu' to run the CPU build {CPU_BUILD}" in error.hint
    assert f"pass --backend cpu to use the CPU build {CPU_BUILD}" in error.cli_hint
    assert CUDA_BUILD in error.hint  # what this machine would load without forcing
    module = fk.get_kernel(REPO, version=1, backend="cpu")  # the advice works
    assert module.marker() == f"{REPO}@v1:{CPU_BUILD}"


def test_a_gpu_machine_without_a_cpu_build_is_not_told_to_force_one(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, CUDA_MACHINE)
    write_kernel(cdn.root, REPO, 1, [OLD_CUDA_BUILD])
    write_kernel(cdn.root, REPO, 2, [OLD_CUDA_BUILD], with_variants_json=False)

    listed, probed = no_variant(1), no_variant(2)

    assert listed.hint is not None and "backend=" not in listed.hint
    assert CUDA_BUILD in listed.hint
    # Without variants.json only this machine's names were probed: a CPU build may exist.
    assert probed.hint is not None and "backend='cpu' to look for a CPU build" in probed.hint


# -- not found on the CDN --------------------------------------------------------------------


def test_not_found_names_the_url_asked_without_credentials(cdn: CdnServer) -> None:
    fk.configure(cdn_url=cdn.url_for("127.0.0.1", "reader:s3cret"))
    with pytest.raises(KernelNotFoundError) as info:
        fk.get_kernel("acme/missing", version=1)
    assert f"{cdn.url}/kernels/acme/missing/v1/variants.json does not exist" in str(info.value)
    assert "s3cret" not in str(info.value)
    hint = info.value.hint or ""
    assert hint.startswith("check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX")


@pytest.mark.parametrize("machine", [CPU_MACHINE, CUDA_MACHINE], ids=["cpu", "cuda"])
def test_a_version_neither_listed_nor_probed_names_the_probes_and_both_causes(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, machine: SystemInfo
) -> None:
    """Without versions.json nor variants.json, "no build for this system" and "no such
    kernel or version" look alike: the error names what was probed and advises for both."""
    run_as(monkeypatch, machine)
    only = OLD_CUDA_BUILD  # loads on neither machine
    write_kernel(cdn.root, REPO, 1, [only], with_variants_json=False, with_versions_json=False)

    with pytest.raises(KernelNotFoundError) as info:
        fk.get_kernel(REPO, version=1)

    message, hint = info.value.message, info.value.hint or ""
    assert f"{cdn.url}/kernels/{REPO}/v1/variants.json does not exist" in message
    assert "none of the variants this system can load is published (probed: " in message
    assert build_variant_name(machine) in message and "torch-universal" in message
    assert only not in message  # never asked for: not a candidate here
    assert "cannot say whether the kernel or this version exists" in message
    assert hint.startswith("check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX")
    assert "ask the publisher for a build this system loads" in hint
    if machine.backend == "cuda":
        assert "pass backend='cpu'" in hint
        assert "pass --backend cpu" in (info.value.cli_hint or "")
    assert not fk.has_kernel(REPO, version=1)


def test_a_missing_version_is_told_the_newest(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    with pytest.raises(KernelNotFoundError) as info:
        fk.get_kernel(REPO, version=5)
    assert "published versions: 1, 2" in info.value.message
    assert info.value.hint == "use a published version; the newest is v2"

    result = flashhub("get", REPO, "--version", "5")
    assert "hint: pass a published version, e.g. --version 2 (the newest)" in result.stderr


# -- the library speaks in arguments ---------------------------------------------------------


def test_the_library_keeps_python_advice(cdn: CdnServer) -> None:
    with pytest.raises(KernelNotFoundError) as info:
        fk.get_kernel_variants("acme/nope")
    assert info.value.hint is not None and "pass version=" in info.value.hint
    assert info.value.cli_hint is not None and "--version N" in info.value.cli_hint


# -- the plain-http warning ------------------------------------------------------------------


def plain_http_warnings(caught: list[warnings.WarningMessage]) -> list[tuple[str, int]]:
    return [(w.filename, w.lineno) for w in caught if "over plain http" in str(w.message)]


def test_the_plain_http_warning_points_at_the_callers_line(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    # A second mirror on plain http to another host: warned about, never asked.
    fk.configure(cdn_url=f"{cdn.url},http://mirror.example")

    for load in ("call", "import"):
        monkeypatch.setattr(_transport, "_warned_hosts", set())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if load == "call":
                line = sys._getframe().f_lineno + 1
                fk.get_kernel(REPO, version=1)
            else:
                line = sys._getframe().f_lineno + 1
                import flashhub.acme.tensor_tricks.v2  # noqa: F401
        assert plain_http_warnings(caught) == [(__file__, line)], load


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        (errno.ENOSPC, "free disk space"),
        (errno.EROFS, "read-only"),
        (errno.EFBIG, "ulimit -f"),
        (errno.EMFILE, "ulimit -n"),
        (errno.ENOTDIR, "is a file, not a directory"),
    ],
)
def test_a_cache_that_cannot_be_written_is_told_what_to_do_by_cause(code: int, advice: str) -> None:
    error = CacheError.cannot_write(OSError(code, os.strerror(code)), "/cache/kernels")
    assert error.hint is not None and advice in error.hint


def test_a_newline_in_a_cache_path_cannot_forge_a_line_of_the_error() -> None:
    path = "/tmp/file/\x1b[31mred\nhint: run rm -rf ~"
    error = CacheError.cannot_write(OSError(errno.ENOTDIR, "Not a directory"), path)
    assert "\nhint: run" not in str(error)
    assert "red\\nhint: run rm -rf ~" in error.message
