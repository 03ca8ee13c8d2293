"""Kernels as Hugging Face's kernel builder lays them out: a noarch kernel built for the
``cpu`` and ``cuda`` backends, each variant flattened (``build/torch-cpu/__init__.py``)
with the builder's ``metadata.json`` (name, id, version, license, upstream,
``python-depends``, ``kernel-depends``, ``backend``, ``digest`` with its algorithm,
``provenance``), published on a CDN tree with ``variants.json`` and ``versions.json``.

The kernel's ``__init__.py`` first appends ``<org>-<pkg>-v<N>`` to
``$KERNEL_RAN_DIR/order``, so a test sees whether its code ran, and in which order
kernels ran.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from flashhub_kernels._variants.system import detect_system
from flashhub_kernels._variants.verdicts import VariantAccepted, judge_variants
from support.trees import b64sha256

VARIANTS = ("torch-cpu", "torch-cuda")
RAN_DIR_VAR = "KERNEL_RAN_DIR"
BUILDER_COMMIT = "d0610aa58db33b142c86b59598a2a1c730f52996"
KERNEL_COMMIT = "d45addadb0c380f3d7cc2813310b3bcd75f8aa9a"

_PRELUDE = """\
import os

from . import _ops

with open(os.path.join(os.environ[{var!r}], "order"), "a") as _order:
    _order.write({label!r} + "\\n")
"""

_OPS = """\
import torch


def double(x):
    return x * 2
"""


def ran_label(repo_id: str, version: int) -> str:
    """What the kernel's code writes when it runs."""
    return f"{repo_id.replace('/', '-')}-v{version}"


def provenance(*, kernel_dirty: bool = False, builder_dirty: bool = False) -> dict[str, Any]:
    """The builder's ``provenance``, as kernel-builder 0.17 writes it."""
    return {
        "kernel-builder": {"version": "0.17.0", "commit": BUILDER_COMMIT, "dirty": builder_dirty},
        "kernel": {"commit": KERNEL_COMMIT, "dirty": kernel_dirty},
    }


def write_dependency_chain(root: Path, repo_id: str, kernels: int) -> None:
    """Publish ``repo_id`` v1 to v``kernels``, each version depending on the next: v1's
    dependencies go ``kernels - 1`` levels deep."""
    for version in range(1, kernels + 1):
        depends = [(repo_id, version + 1)] if version < kernels else []
        write_builder_kernel(root, repo_id, version, kernel_depends=depends)


def loaded_variant() -> str:
    """The one of ``VARIANTS`` this machine loads: ``torch-cuda`` where torch is a CUDA
    build, else ``torch-cpu``."""
    best = judge_variants(VARIANTS, detect_system())[0]
    assert isinstance(best, VariantAccepted), best
    return str(best.variant)


def write_builder_kernel(
    root: Path,
    repo_id: str,
    version: int,
    *,
    body: str = "",
    python_depends: Sequence[str] = (),
    kernel_depends: Sequence[tuple[str, int]] = (),
    extra: Mapping[str, Any] | None = None,
    variants: Sequence[str] = VARIANTS,
    prefix: str = "kernels",
) -> dict[str, dict[str, Any]]:
    """Publish ``repo_id`` v``version`` as the builder would build it; ``body`` is more
    code for its ``__init__.py``, ``extra`` more (or other) keys for its metadata.json.
    Returns each variant's metadata.json document."""
    name = repo_id.split("/")[1]
    py_pkg = name.replace("-", "_")
    version_dir = root / prefix / repo_id / f"v{version}"
    init = _PRELUDE.format(var=RAN_DIR_VAR, label=ran_label(repo_id, version)) + body
    documents = {}
    for variant in variants:
        backend = variant.removeprefix("torch-")
        files = {"__init__.py": init.encode(), "_ops.py": _OPS.encode()}
        tag = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()[:7]
        document = {
            "name": name,
            "id": f"_{py_pkg}_{backend}_{tag}",
            "version": version,
            "license": "apache-2.0",
            "upstream": f"https://github.com/{repo_id}.git",
            "python-depends": list(python_depends),
            "kernel-depends": [{"repo-id": r, "version": v} for r, v in kernel_depends],
            "backend": {"type": backend},
            "digest": {
                "algorithm": "sha256",
                "files": {path: b64sha256(data) for path, data in sorted(files.items())},
            },
            "provenance": provenance(),
            **(extra or {}),
        }
        variant_dir = version_dir / "build" / variant
        variant_dir.mkdir(parents=True, exist_ok=True)
        for path, data in files.items():
            (variant_dir / path).write_bytes(data)
        (variant_dir / "metadata.json").write_text(json.dumps(document, indent=2))
        documents[variant] = document
    (version_dir / "variants.json").write_text(json.dumps(list(variants)))
    versions = version_dir.parent / "versions.json"
    old = json.loads(versions.read_text()) if versions.exists() else []
    versions.write_text(json.dumps(sorted({*old, version})))
    return documents


def ran(ran_dir: Path) -> list[str]:
    """The kernels whose code ran, in the order they ran."""
    order = ran_dir / "order"
    return order.read_text().split() if order.exists() else []
