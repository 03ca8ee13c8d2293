"""Build CDN trees for tests, including the broken and hostile ones a publisher never writes."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from flashhub_kernels._variants.grammar import parse_variant
from flashhub_kernels._variants.probing import build_variant_name
from flashhub_kernels._variants.system import detect_system, with_backend


def local_variant() -> str:
    """The exact-build variant name of this machine, e.g. torch213-cxx11-cpu-x86_64-linux."""
    return build_variant_name(detect_system())


def cpu_variant() -> str:
    """The exact CPU build of this machine's torch: what ``backend="cpu"`` loads, and what
    this machine loads as a CPU-only one (``machines.run_as_cpu_only``). It is
    :func:`local_variant` where torch is a CPU-only build."""
    return build_variant_name(with_backend(detect_system(), "cpu"))


# Variant names a hostile variants.json lists: an ESC colour sequence and a CR, and a
# newline that would forge a hint line of the message printing it.
ESCAPE = "torch-\x1b[31mred\x1b[0m\r"
FORGED = "torch-x\n  hint: run rm -rf ~"


def b64sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def kernel_files(py_pkg: str, marker: str) -> dict[str, bytes]:
    """A small kernel package: relative imports, a submodule, a resource, a picklable class."""
    init = f'''"""Test kernel {marker}."""
import torch

from ._ops import MARKER, double
from . import helpers


class Thing:
    def __init__(self, value):
        self.value = value


def some_function(x):
    """Return x + 1."""
    return x + 1


def marker():
    return MARKER
'''
    return {
        f"{py_pkg}/__init__.py": init.encode(),
        f"{py_pkg}/_ops.py": f"MARKER = {marker!r}\n\ndef double(x):\n    return x * 2\n".encode(),
        f"{py_pkg}/helpers.py": (
            b"from ._ops import MARKER\n\ndef shout():\n    return MARKER.upper()\n"
        ),
        f"{py_pkg}/data/table.txt": f"table of {marker}\n".encode(),
    }


def write_variant(
    root: Path,
    repo_id: str,
    version: int,
    variant: str,
    files: dict[str, bytes],
    *,
    prefix: str = "kernels",
    manifest: object | None = None,
    with_sizes: bool = False,
) -> Path:
    """Write one variant and its metadata.json (``manifest`` overrides the honest one);
    ``with_sizes`` records each file's size in it, as ``flashhub publish`` does."""
    variant_dir = root / prefix / repo_id / f"v{version}" / "build" / variant
    for relpath, data in files.items():
        path = variant_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if manifest is None:
        manifest = {"digest": {"files": {p: b64sha256(d) for p, d in sorted(files.items())}}}
        if with_sizes:
            manifest["sizes"] = {p: len(d) for p, d in sorted(files.items())}
    variant_dir.mkdir(parents=True, exist_ok=True)
    (variant_dir / "metadata.json").write_text(json.dumps(manifest))
    return variant_dir


def write_kernel(
    root: Path,
    repo_id: str,
    version: int,
    variants: list[str] | None = None,
    *,
    prefix: str = "kernels",
    with_variants_json: bool = True,
    with_versions_json: bool = True,
) -> dict[str, dict[str, bytes]]:
    """Publish a test kernel whose ``marker()`` returns ``"<repo_id>@v<N>:<variant>"``."""
    py_pkg = repo_id.split("/")[1].replace("-", "_")
    variants = variants if variants is not None else [local_variant()]
    written = {}
    for variant in variants:
        files = kernel_files(py_pkg, f"{repo_id}@v{version}:{variant}")
        write_variant(root, repo_id, version, variant, files, prefix=prefix)
        written[variant] = files
    version_dir = root / prefix / repo_id / f"v{version}"
    if with_variants_json:
        (version_dir / "variants.json").write_text(json.dumps(variants))
    if with_versions_json:
        versions_file = root / prefix / repo_id / "versions.json"
        old = json.loads(versions_file.read_text()) if versions_file.exists() else []
        versions_file.write_text(json.dumps(sorted({*old, version})))
    return written


BLOB_REPO = "acme/tensor-tricks"
BLOB_VARIANT = "torch-universal"
MIB_BLOB = bytes(range(256)) * 4096  # 1 MiB


def write_blob_kernel(
    root: Path, blob: bytes, *, name: str = "blob", with_sizes: bool = False
) -> str:
    """``acme/tensor-tricks`` v1 as ``torch-universal`` (listed in variants.json): the test
    kernel (marker ``name``) plus ``tensor_tricks/<name>.bin`` holding ``blob``, a file
    large enough for faults to land mid-transfer. Returns that file's path on the CDN."""
    files = {**kernel_files("tensor_tricks", name), f"tensor_tricks/{name}.bin": blob}
    write_variant(root, BLOB_REPO, 1, BLOB_VARIANT, files, with_sizes=with_sizes)
    (root / f"kernels/{BLOB_REPO}/v1/variants.json").write_text(f'["{BLOB_VARIANT}"]')
    return f"kernels/{BLOB_REPO}/v1/build/{BLOB_VARIANT}/tensor_tricks/{name}.bin"


def todays_name(legacy: str, python: str = "3.9") -> str:
    """This machine's exact build (``torch213-cxx11-cpu-x86_64-linux``) in today's
    spelling: ``torch-2.13-cxx11-cpu-cpython-<python>-abi3-x86_64-linux``."""
    variant = parse_variant(legacy)
    assert variant.torch is not None and variant.backend is not None
    torch = "{}.{}".format(*variant.torch)
    abi = f"-{variant.abi}" if variant.abi else ""
    backend = variant.backend_tag
    if variant.backend_version is not None:  # cu130 -> cuda-13.0
        backend = "{}-{}.{}".format(variant.backend, *variant.backend_version)
    tail = f"cpython-{python}-abi3-{variant.arch}-{variant.os}"
    return f"torch-{torch}{abi}-{backend}-{tail}"
