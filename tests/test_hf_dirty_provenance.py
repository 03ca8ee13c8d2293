"""Hugging Face kernels' own ``tests/test_dirty_provenance.py``, ported to this API.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and the provenance
documents follow the original; what differs:

- HF calls its internal ``_warn_if_dirty(metadata, variant)`` and
  ``_import_from_path(variant_dir)``; here the variant is loaded through the public
  paths: ``get_kernel`` from the loopback CDN, and ``get_local_kernel`` for a variant
  directory.
- The warning must name the kernel (its repo id, or the directory of a local kernel)
  as well as what is dirty; its wording is this client's.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from flashhub_kernels import get_kernel, get_local_kernel
from support.cdn_server import CdnServer
from support.hf_kernels import package, this_machine, write_hf_kernel

ACTIVATION = "kernels-test/activation"

CLEAN_PROVENANCE = {
    "kernel-builder": {"version": "0.1.0", "commit": "a" * 40, "dirty": False},
    "kernel": {"commit": "b" * 40, "dirty": False},
}
DIRTY_KERNEL = {
    "kernel-builder": {"version": "0.1.0", "commit": "a" * 40, "dirty": False},
    "kernel": {"commit": "b" * 40, "dirty": True},
}
DIRTY_BUILDER = {
    "kernel-builder": {"version": "0.1.0", "commit": "a" * 40, "dirty": True},
    "kernel": {"commit": "b" * 40, "dirty": False},
}


def _publish(root: Path, provenance: dict[str, object] | None) -> None:
    metadata: dict[str, object] = {
        "id": "activation_1_cuda",
        "license": "Apache-2.0",
        "python-depends": ["torch"],
    }
    if provenance is not None:
        metadata["provenance"] = provenance
    files = package("activation", {"__init__.py": "value = 42\n"})
    write_hf_kernel(root, ACTIVATION, 1, this_machine(), files, metadata)


def _write_variant(tmp_path: Path, provenance: dict[str, object]) -> Path:
    """A variant directory as the builder writes it, flattened."""
    variant_dir = tmp_path / "build" / "torch28-cxx11-cu128-x86_64-linux"
    variant_dir.mkdir(parents=True)
    metadata = {
        "id": "activation_1_cuda",
        "name": "activation",
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": ["torch"],
        "backend": {"type": "cuda"},
        "provenance": provenance,
    }
    (variant_dir / "metadata.json").write_text(json.dumps(metadata))
    (variant_dir / "__init__.py").write_text("value = 42\n")
    return variant_dir


@pytest.mark.parametrize("provenance", [None, CLEAN_PROVENANCE])
def test_no_warning_when_clean(cdn: CdnServer, provenance: dict[str, object] | None) -> None:
    _publish(cdn.root, provenance)
    with warnings.catch_warnings(record=True) as recwarn:
        warnings.simplefilter("always")
        assert get_kernel(ACTIVATION, version=1).value == 42
    assert [str(w.message) for w in recwarn] == []


def test_warns_on_dirty_kernel_source(cdn: CdnServer) -> None:
    _publish(cdn.root, DIRTY_KERNEL)
    with pytest.warns(UserWarning, match=rf"{ACTIVATION}[\s\S]*dirty"):
        get_kernel(ACTIVATION, version=1)


def test_warns_names_dirty_sources(cdn: CdnServer) -> None:
    _publish(cdn.root, DIRTY_BUILDER)
    with pytest.warns(UserWarning, match="kernel-builder"):
        get_kernel(ACTIVATION, version=1)


def test_import_from_path_warns_on_dirty(tmp_path: Path) -> None:
    variant_dir = _write_variant(tmp_path, DIRTY_KERNEL)
    with pytest.warns(UserWarning, match="dirty"):
        module = get_local_kernel(variant_dir)
    assert module.value == 42
