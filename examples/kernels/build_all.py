"""Build every example kernel (CPU and torch-universal variants; CUDA ones with ``--cuda``).

Run it (``python examples/kernels/build_all.py``) or load it by path and call
``build_all()``, which returns one ``BuiltKernel(repo_id, version, build_dir)`` per
publishable kernel version; ``build_dir`` contains ``<variant>/<py_pkg>/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import _buildlib as bl  # noqa: E402
from _buildlib import BuildError, BuiltKernel  # noqa: E402

__all__ = ["KERNELS", "BuildError", "BuiltKernel", "build_all"]

KERNELS = ("audio-codebook-primitives", "tensor-tricks", "silu-layers")


def _build_script(kernel: str) -> ModuleType:
    """Import ``<kernel>/build.py`` (folder names are not identifiers) once."""
    name = "_flashhub_example_build_" + kernel.replace("-", "_")
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / kernel / "build.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def build_all(*, verbose: bool = True, cuda: bool = False) -> list[BuiltKernel]:
    """Build all example kernels (also the CUDA variants when ``cuda`` and possible)."""
    built: list[BuiltKernel] = []
    for kernel in KERNELS:
        built.extend(_build_script(kernel).build(verbose=verbose, cuda=cuda))
    return built


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cuda", action="store_true", help="also build CUDA variants")
    parser.add_argument("-q", "--quiet", action="store_true", help="print less")
    args = parser.parse_args(argv)
    return bl.run_cli(
        lambda: build_all(verbose=not args.quiet, cuda=args.cuda), clean=False, build_dir=HERE
    )


if __name__ == "__main__":
    sys.exit(main())
