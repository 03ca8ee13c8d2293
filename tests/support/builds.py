"""A kernel's build directory as the builder leaves it (``build/<variant>/my_kern/``), for
the publisher tests and those of ``flashhub publish``; the ``kernel`` fixture in
conftest.py writes one."""

from __future__ import annotations

from pathlib import Path

REPO = "acme/my-kern"
PY_PKG = "my_kern"
UNIVERSAL = "torch-universal"
CPU = "torch213-cxx11-cpu-x86_64-linux"
SO_NAME = "_my_kern_cpu_1a2b3c.so"
SO_BYTES = b"\x7fELF" + bytes(range(256)) * 4

INIT = "from ._ops import ops\nfrom .helpers import double\n\n__all__ = ['double', 'ops']\n"
HELPERS = """\
from __future__ import annotations

import torch

from . import _ops


def double(x):
    return x * 2
"""


def ops_source(variant: str) -> str:
    if variant == UNIVERSAL:
        return "import torch\n\nops = torch.ops\n"
    return (
        "import os\n\nimport torch\n\n"
        f"torch.ops.load_library(os.path.join(os.path.dirname(__file__), {SO_NAME!r}))\n"
        "ops = torch.ops._my_kern_cpu_1a2b3c\n"
    )


def make_kernel(root: Path, variants: tuple[str, ...] = (UNIVERSAL, CPU)) -> Path:
    """A kernel dir with ``build/<variant>/my_kern/`` per variant, plus junk to be skipped."""
    for variant in variants:
        package = root / "build" / variant / PY_PKG
        (package / "__pycache__").mkdir(parents=True)
        (package / "__init__.py").write_text(INIT)
        (package / "_ops.py").write_text(ops_source(variant))
        (package / "helpers.py").write_text(HELPERS)
        (package / "__pycache__" / "_ops.cpython-311.pyc").write_bytes(b"junk")
        (package / ".DS_Store").write_bytes(b"junk")
        (package / "__init__.pyc").write_bytes(b"junk")  # stray bytecode beside its source
        if variant != UNIVERSAL:
            (package / SO_NAME).write_bytes(SO_BYTES)
    (root / "build" / ".hidden").write_text("junk")
    return root


def package_dir(kernel: Path, variant: str = CPU) -> Path:
    """The package directory of ``variant`` in the build directory ``kernel``."""
    return kernel / "build" / variant / PY_PKG


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative posix path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
