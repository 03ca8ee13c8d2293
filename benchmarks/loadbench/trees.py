"""The synthetic CDN trees: kernels written the way the publisher lays them out.

``build_trees(work, size_mib, small_files, realistic_mib)`` writes every kernel the rows
load under ``work/cdn`` (serve it with :func:`loadbench.servers.serve`), signs the warm and
the small-files kernels (:mod:`loadbench.signed`), publishes the small files once more as
a zip build (:mod:`loadbench.zip_tree`), and writes the warm kernel's package once more
as a plain directory for ``sys.path``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from .common import MIB
from .signed import sign_kernels
from .zip_tree import publish_zip

ORG = "bench"
PREFIX = "kernels"
VARIANT = "torch-universal"  # pure Python: fits every system, so no variant logic differs
SMALL_FILE_BYTES = 10 * 1024
# Row 7: a realistic kernel variant, one compiled extension and the package's Python files.
REALISTIC_SO = "_realistic_cpu_abc123.so"
REALISTIC_PY_FILES = (  # __init__.py among them: 10 Python files
    "__init__.py",
    "_ops.py",
    "layers.py",
    "functional.py",
    "utils.py",
    "_meta.py",
    "_dispatch.py",
    "_autotune.py",
    "_shapes.py",
    "testing.py",
)
REALISTIC_PY_BYTES = 3 * 1024  # each Python file: about this size
WARM_PACKAGE = "warm_import"  # the warm kernel's Python package (rows 3 and 8)
WARM_FILES = {
    "__init__.py": b'"""A small kernel package."""\n\nimport torch\n\n'
    b"from . import layers\nfrom ._ops import add, scale\n\n__all__ = ['add', 'layers', 'scale']\n",
    "_ops.py": b"import torch\n\n\ndef add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
    b"    return a + b\n\n\ndef scale(a: torch.Tensor, k: float) -> torch.Tensor:\n"
    b"    return a * k\n",
    "layers.py": b"import torch\n\nfrom ._ops import add\n\n\nclass Add(torch.nn.Module):\n"
    b"    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
    b"        return add(a, b)\n",
}


@dataclass(frozen=True)
class Blob:
    """A file already written (and hashed) once, hard-linked into further variants."""

    path: Path
    digest: str


Files: TypeAlias = Mapping[str, bytes | Blob]  # path relative to the variant dir -> content


@dataclass(frozen=True)
class Kernel:
    """One published kernel: version 1, one ``torch-universal`` variant."""

    name: str
    files: Mapping[str, str]  # path relative to the variant dir -> base64 sha256

    @property
    def repo_id(self) -> str:
        return f"{ORG}/{self.name}"

    @property
    def py_pkg(self) -> str:
        return self.name.replace("-", "_")

    @property
    def module(self) -> str:
        return f"flashhub.{ORG}.{self.py_pkg}.v1"

    @property
    def variant_path(self) -> str:
        """URL path of the variant directory on the server."""
        return f"/{PREFIX}/{ORG}/{self.name}/v1/build/{VARIANT}"

    def file_paths(self) -> list[str]:
        return [f"{self.variant_path}/{relpath}" for relpath in self.files]


@dataclass(frozen=True)
class Trees:
    cdn: Path
    big: Kernel  # one large file (plus its __init__.py)
    small: Kernel  # many 10 KiB files
    warm: Kernel  # a small package for the warm import
    crowd: Kernel  # the large file and the small files together, for the 16 processes
    realistic: Kernel  # one .so and 10 small Python files
    plain_dir: Path  # the warm kernel's package as a plain directory for sys.path
    # The public line of the key that signed small and warm (None: no cryptography). A load
    # that does not trust it fetches no .sig: to it, they are unsigned kernels.
    trusted_key: str | None
    small_zip: Kernel  # the files of small, in the zip build layout (row 11)
    # warm's files in a package of its own, published without variants.json (row 10f)
    unlisted: Kernel


def b64_sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def random_blob(path: Path, size: int) -> Blob:
    """Write ``size`` random bytes (incompressible, unlike zeros) and hash them on the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hasher = hashlib.sha256()
    with open(path, "wb") as file:
        for offset in range(0, size, MIB):
            chunk = os.urandom(min(MIB, size - offset))
            hasher.update(chunk)
            file.write(chunk)
    return Blob(path, base64.b64encode(hasher.digest()).decode())


def publish(cdn: Path, name: str, files: Files, *, listed: bool = True) -> Kernel:
    """Write a kernel the way the publisher lays it out: files, metadata.json, index files
    (``listed``: ``variants.json`` too; without it, a client probes for the variant)."""
    version_dir = cdn / PREFIX / ORG / name / "v1"
    variant_dir = version_dir / "build" / VARIANT
    digests: dict[str, str] = {}
    for relpath, content in files.items():
        path = variant_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Blob):
            os.link(content.path, path)
            digests[relpath] = content.digest
        else:
            path.write_bytes(content)
            digests[relpath] = b64_sha256(content)
    sizes = {relpath: (variant_dir / relpath).stat().st_size for relpath in files}
    metadata = {"digest": {"files": digests}, "sizes": sizes}
    (variant_dir / "metadata.json").write_text(json.dumps(metadata))
    if listed:
        (version_dir / "variants.json").write_text(json.dumps([VARIANT]))
    (version_dir.parent / "versions.json").write_text("[1]")
    return Kernel(name, digests)


def init_py(what: str) -> bytes:
    source = f'"""Synthetic benchmark kernel: {what}."""\n\nfrom pathlib import Path\n\n'
    return (source + "HERE = Path(__file__).parent\n").encode()


def py_module(what: str, size: int) -> bytes:
    """Valid Python source of about ``size`` bytes: :func:`init_py`, then small functions.

    Nothing in it imports the package's other modules or its extension, so importing the
    package (as ``get_kernel`` does) costs about what it costs in the other rows.
    """
    source = init_py(what).decode()
    i = 0
    while len(source) < size:
        source += (
            f"\n\ndef op_{i}(x, k={i}):\n"
            f'    """Scale ``x`` by {i} and shift it by {i}: padding of a realistic size."""\n'
            f"    return x * k + {i}\n"
        )
        i += 1
    return source.encode()


def package(py_pkg: str, what: str, files: Files) -> dict[str, bytes | Blob]:
    """``files`` inside the Python package ``py_pkg``, with a small ``__init__.py``."""
    tree: dict[str, bytes | Blob] = {f"{py_pkg}/__init__.py": init_py(what)}
    tree.update({f"{py_pkg}/{rel}": content for rel, content in files.items()})
    return tree


def realistic_files(so_blob: Blob) -> dict[str, bytes | Blob]:
    """Row 7's package: 10 Python files of about 3 KiB and one ``.so``."""
    files: dict[str, bytes | Blob] = {
        f"realistic/{name}": py_module(f"realistic variant, {name}", REALISTIC_PY_BYTES)
        for name in REALISTIC_PY_FILES
    }
    files[f"realistic/{REALISTIC_SO}"] = so_blob
    return files


def write_plain_dir(work: Path) -> Path:
    """The warm kernel's package as a plain directory, for the plain-import baselines."""
    plain_dir = work / "plain"
    (plain_dir / WARM_PACKAGE).mkdir(parents=True)
    for rel, data in WARM_FILES.items():
        (plain_dir / WARM_PACKAGE / rel).write_bytes(data)
    return plain_dir


def build_trees(work: Path, size_mib: int, small_files: int, realistic_mib: int) -> Trees:
    cdn, blobs = work / "cdn", work / "blobs"
    big_blob = random_blob(blobs / "weights.bin", size_mib * MIB)
    so_blob = random_blob(blobs / REALISTIC_SO, realistic_mib * MIB)
    # ``small_files`` files in all: __init__.py and small_files - 1 data files.
    small_blobs = {
        f"data/part_{i:04d}.bin": random_blob(blobs / f"part_{i:04d}.bin", SMALL_FILE_BYTES)
        for i in range(small_files - 1)
    }
    big = publish(cdn, "big-file", package("big_file", "one big file", {"weights.bin": big_blob}))
    small = publish(cdn, "small-files", package("small_files", "small files", small_blobs))
    warm_files = {f"{WARM_PACKAGE}/{rel}": data for rel, data in WARM_FILES.items()}
    warm = publish(cdn, "warm-import", warm_files)
    crowd_files = {"weights.bin": big_blob, **small_blobs}
    crowd = publish(cdn, "crowd", package("crowd", "big and small files", crowd_files))
    realistic = publish(cdn, "realistic", realistic_files(so_blob))
    trusted_key = sign_kernels([cdn / PREFIX / kernel.repo_id for kernel in (small, warm)])
    zip_files = package("small_files_zip", "small files", small_blobs)
    small_zip = zip_kernel(cdn, "small-files-zip", zip_files)
    plain_dir = write_plain_dir(work)
    unlisted_files = {f"unlisted/{rel}": data for rel, data in WARM_FILES.items()}
    unlisted = publish(cdn, "unlisted", unlisted_files, listed=False)
    return Trees(
        cdn, big, small, warm, crowd, realistic, plain_dir, trusted_key, small_zip, unlisted
    )


def zip_kernel(cdn: Path, name: str, files: Files) -> Kernel:
    """``files`` published as a zip build (see :mod:`loadbench.zip_tree`)."""
    paths = {
        rel: content.path if isinstance(content, Blob) else content
        for rel, content in files.items()
    }
    return Kernel(name, publish_zip(cdn, PREFIX, f"{ORG}/{name}", VARIANT, paths))
