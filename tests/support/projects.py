"""Projects that lock kernels, and a CDN to lock them against, for the lock and CLI tests.

The fixtures that write them (``project``, ``make_project``, ``probed_project``) are in
conftest.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from flashhub_kernels._config import get_config
from flashhub_kernels._lockfiles.format import LOCKFILE_NAME
from flashhub_kernels._models.manifest import parse_metadata
from support.trees import b64sha256, local_variant, write_kernel

REPO = "acme/tensor-tricks"
PY_PKG = "tensor_tricks"
UNIVERSAL = "torch-universal"
CUDA = "torch212-cxx11-cu126-x86_64-linux"  # published, but never loadable on the test machine
NOARCH_CUDA = "torch-cuda"  # likewise


def publish_tensor_tricks(cdn_root: Path) -> None:
    """v1 and v3 hold two variants, v2 three: a range ``>=1,<3`` locks v2."""
    write_kernel(cdn_root, REPO, 1, [local_variant(), UNIVERSAL])
    write_kernel(cdn_root, REPO, 2, [local_variant(), UNIVERSAL, CUDA])
    write_kernel(cdn_root, REPO, 3, [UNIVERSAL])


def write_project(project_dir: Path, dependencies: dict[str, str | int]) -> Path:
    """A ``pyproject.toml`` declaring ``dependencies`` under ``[tool.flashhub.dependencies]``."""
    project_dir.mkdir(parents=True, exist_ok=True)
    lines = ['[project]\nname = "demo"\nversion = "1.0"\n', "[tool.flashhub.dependencies]"]
    lines += [f"{json.dumps(repo)} = {json.dumps(spec)}" for repo, spec in dependencies.items()]
    (project_dir / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return project_dir


def lockfile_of(project: Path) -> Path:
    return project / LOCKFILE_NAME


def entry(version: int, variant: str) -> Path:
    """The cache entry of ``acme/tensor-tricks`` ``v<version>`` ``variant``."""
    return get_config().cache_dir / "kernels" / REPO / f"v{version}" / variant


def variant_dir(cdn_root: Path, version: int, variant: str) -> Path:
    return cdn_root / "kernels" / REPO / f"v{version}" / "build" / variant


def published_hash(cdn_root: Path, variant: str) -> str:
    """The content hash of v1's ``variant`` as published, which a lock pins."""
    return parse_metadata(
        (variant_dir(cdn_root, 1, variant) / "metadata.json").read_bytes()
    ).content_hash


def change_published_file(cdn_root: Path, version: int, variant: str) -> None:
    """Change a file after publication and its digest to match: the manifest still verifies."""
    directory = variant_dir(cdn_root, version, variant)
    ops = directory / PY_PKG / "_ops.py"
    ops.write_bytes(ops.read_bytes() + b"\nCHANGED_AFTER_LOCKING = True\n")
    manifest = json.loads((directory / "metadata.json").read_text())
    manifest["digest"]["files"][f"{PY_PKG}/_ops.py"] = b64sha256(ops.read_bytes())
    (directory / "metadata.json").write_text(json.dumps(manifest))


def replayable_versions(cdn_root: Path) -> Callable[[], None]:
    """A snapshot of acme/tensor-tricks' ``versions.json`` (and its ``.sig``, if signed) as
    published now; calling the result serves them again, as an edge replaying them would."""
    document = cdn_root / "kernels" / REPO / "versions.json"
    saved = {
        path: path.read_bytes()
        for path in (document, document.with_name("versions.json.sig"))
        if path.exists()
    }

    def replay() -> None:
        for path, data in saved.items():
            path.write_bytes(data)

    return replay


def skip_unless_this_checkout_builds() -> None:
    """Skip where setuptools cannot build this checkout without build isolation, as the
    tests build it: from 77 it reads the project's license expression with
    ``packaging.licenses``, new in packaging 24.2 (the dev extra asks for it)."""
    pytest.importorskip(
        "packaging.licenses",
        reason="building this project needs packaging>=24.2: pip install 'packaging>=24.2'",
    )
