"""A kernel's native library that cannot be loaded at all.

The dynamic loader maps a truncated ELF library and then crashes the process (SIGBUS)
reading past its end. One published so matches its digest all the same, so the cache
must refuse it before any code runs. The library is the compiled example tensor-tricks,
published to the loopback CDN; the loads run in child processes, which such a crash kills.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import run_python
from flashhub_kernels._utils.elf import missing_bytes
from flashhub_kernels._variants.probing import UNIVERSAL
from support.cdn_server import CdnServer
from support.trees import cpu_variant, kernel_files, write_variant
from test_native_conflicts import REPO, native_library, publish_quietly, run_child


@pytest.fixture
def tricks(built: list[Any]) -> dict[int, Path]:
    """The build directories of the example tensor-tricks, by version."""
    return {b.version: b.build_dir for b in built if b.repo_id == REPO}


def test_a_library_published_truncated_is_refused_and_the_process_goes_on(
    cdn: CdnServer, tricks: dict[int, Path], cache_dir: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tricks[1], broken)
    library = native_library(broken)
    whole = library.read_bytes()
    library.write_bytes(whole[: len(whole) // 2])
    publish_quietly(broken, 1, cdn)
    publish_quietly(tricks[2], 2, cdn)
    result = run_child(
        """
        import importlib
        load(lambda: importlib.import_module("flashhub.acme.tensor_tricks.v1_cpu"))
        v2 = importlib.import_module("flashhub.acme.tensor_tricks.v2_cpu")
        result["v2"] = float(v2.scale_shift(torch.ones(1), 2.0)[0])
        """
    )
    (error,) = result["errors"]
    assert error["type"] == "IntegrityError" and error["kernel_error"]
    assert f"{library.name} is truncated ({len(whole) // 2} bytes" in error["message"]
    assert "crash" in error["message"] and "publisher" in error["message"]
    assert result["v2"] == 1.0
    assert not (cache_dir / f"kernels/{REPO}/v1" / cpu_variant()).exists()
    assert (cache_dir / f"kernels/{REPO}/v2" / cpu_variant()).is_dir()


def test_whole_libraries_are_whole_and_cut_ones_are_not(
    tricks: dict[int, Path], tmp_path: Path
) -> None:
    import torch

    torch_lib = Path(torch.__file__).parent / "lib"
    for whole in (native_library(tricks[1]), *sorted(torch_lib.glob("libc10*.so"))[:1]):
        assert missing_bytes(whole) is None, whole
    data = native_library(tricks[1]).read_bytes()
    cut = tmp_path / "cut.so"
    for size in (len(data) - 1, len(data) // 2, 64):
        cut.write_bytes(data[:size])
        assert missing_bytes(cut) == (len(data), size)
    for junk in (b"", b"\x7fELF", b"not a library at all\n" * 10):
        cut.write_bytes(junk)
        assert missing_bytes(cut) is None


def _elf64_header(phoff: int, phentsize: int, phnum: int) -> bytes:
    """The 64 bytes of a little-endian ELF64 header whose program header table lies at
    ``phoff`` and holds ``phnum`` entries of ``phentsize`` bytes."""
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    fields = (3, 62, 1, 0, phoff, 0, 0, 64, phentsize, phnum, 64, 0, 0)
    return ident + struct.pack("<HHIQQQIHHHHHH", *fields)


@pytest.mark.parametrize(
    "header",
    [_elf64_header(2**63, 56, 1), _elf64_header(64, 0xFFFF, 0xFFFE)],
    ids=["table-past-any-offset", "table-of-4-gib"],
)
def test_headers_naming_a_table_past_the_end_refuse_the_load_without_reading_it(
    cdn: CdnServer, cache_dir: Path, header: bytes
) -> None:
    """A small library whose headers put the program header table at an offset no file
    has, or make it gigabytes long: an IntegrityError, not a ValueError from ``seek`` nor
    the table's size allocated."""
    files = {**kernel_files("tensor_tricks", "x"), "tensor_tricks/_native.so": header + bytes(200)}
    write_variant(cdn.root, REPO, 1, UNIVERSAL, files)
    outcome = run_python(BOUNDED_LOAD).strip()
    assert outcome == "IntegrityError truncated"
    assert not (cache_dir / f"kernels/{REPO}/v1/{UNIVERSAL}").exists()


# A load in a child whose address space may grow by 1 GiB at most: the class of the error
# it raises, and whether it says the library is truncated.
BOUNDED_LOAD = """
import re, resource, flashhub_kernels as fk
with open("/proc/self/status") as status:
    mapped = int(re.search(r"VmSize:\\s+(\\d+) kB", status.read()).group(1)) * 1024
resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), resource.RLIM_INFINITY))
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
    print("loaded -")
except Exception as exc:
    print(type(exc).__name__, "truncated" if "truncated" in str(exc) else "-")
"""


LOADED_FROM_A_NOEXEC_CACHE = """
import flashhub_kernels as fk
try:
    fk.get_kernel("acme/tensor-tricks", version=1, backend="cpu")  # its builds are CPU ones
except OSError as exc:
    print(*[note for note in exc.__notes__ if "noexec" in note])
"""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="notes on exceptions need Python 3.11")
def test_a_native_library_in_a_cache_mounted_noexec_is_said_to_be_why_it_fails(
    tricks: dict[int, Path], cdn: CdnServer, tmp_path: Path
) -> None:
    """A hardened /tmp or home is mounted noexec: dlopen cannot map the cached library.
    In a process of its own: one that loaded the library already runs on that copy."""
    mount = tmp_path / "noexec"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m,noexec", "tmpfs", str(mount)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip("mounting a noexec tmpfs needs root and a mount namespace that allows it")
    try:
        publish_quietly(tricks[1], 1, cdn)
        env = {"FLASHHUB_CACHE_DIR": str(mount / "cache")}
        hint = run_python(LOADED_FROM_A_NOEXEC_CACHE, env=env)
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=True)
    assert "point FLASHHUB_CACHE_DIR at a file system that allows executing" in hint
