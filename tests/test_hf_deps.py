"""Hugging Face kernels' own ``tests/test_deps.py``, ported to this API: the part about
``python-depends``.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names follow the original; what
differs:

- ``kernels-test/python-dep`` is a pure-torch kernel on the loopback CDN whose
  ``metadata.json`` declares ``python-depends`` as the builder writes it
  (``support/hf_kernels.py``), one kernel per dependency; ``revision="main"`` becomes
  ``version=1``. It is ``cuda_only`` in HF because the Hub's builds are GPU builds; this
  one is built for this machine.
- A missing dependency is an ``ImportError`` naming the package and its ``pip install``
  line, raised before the kernel's code runs (the kernel's ``__init__.py`` would raise
  otherwise); the exact wording is this client's.
- ``snapshot_download`` becomes a kernel repo written in the builder's layout.

Left out: ``test_illegal_dep`` and ``test_deps_validated_before_download``: HF refuses
dependencies missing from its own allow-list (``python_depends.json``), which this
client does not keep; a kernel may name any package.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from flashhub_kernels import get_kernel, get_local_kernel, install_kernel
from support.cdn_server import CdnServer
from support.hf_kernels import package, this_machine, write_hf_kernel

PYTHON_DEP = "kernels-test/python-dep"
# The module each dependency installs, as HF's python_depends.json lists it.
IMPORT_NAMES = {"einops": "einops", "nvidia-cutlass-dsl": "cutlass"}
RAN = "raise RuntimeError('the kernel ran although a dependency is missing')\n"


def publish_python_dep(root: Path, dependency: str) -> None:
    """``kernels-test/python-dep`` v1, declaring ``dependency``; its code imports it."""
    init = f"import {IMPORT_NAMES[dependency]}\n" if find_spec(IMPORT_NAMES[dependency]) else RAN
    files = package("python_dep", {"__init__.py": init})
    write_hf_kernel(root, PYTHON_DEP, 1, this_machine(), files, {"python-depends": [dependency]})


@pytest.mark.parametrize("dependency", ["einops", "nvidia-cutlass-dsl"])
def test_python_deps(dependency: str, cdn: CdnServer) -> None:
    publish_python_dep(cdn.root, dependency)
    must_raise = find_spec(IMPORT_NAMES[dependency]) is None
    if must_raise:
        with pytest.raises(ImportError, match=rf"{dependency}[\s\S]*pip install[^\n]*{dependency}"):
            get_kernel(PYTHON_DEP, version=1)
    else:
        get_kernel(PYTHON_DEP, version=1)


def test_install_kernel_skips_validation_by_default(cdn: CdnServer) -> None:
    """``install_kernel`` downloads a kernel whose dependency is missing without raising:
    it imports nothing."""
    publish_python_dep(cdn.root, "nvidia-cutlass-dsl")
    variant_path = install_kernel(PYTHON_DEP, version=1)
    assert (variant_path / "metadata.json").exists()


def test_local_kernel_validates_deps(cdn: CdnServer, tmp_path: Path) -> None:
    """``get_local_kernel`` checks the dependencies too."""
    publish_python_dep(cdn.root, "nvidia-cutlass-dsl")
    repo_path = cdn.root / "kernels" / PYTHON_DEP / "v1"  # holds build/<variant>/
    with pytest.raises(ImportError, match=r"nvidia-cutlass-dsl[\s\S]*pip install"):
        get_local_kernel(repo_path)
