"""Build acme/silu-layers (pure Python) into build/torch-universal/silu_layers/."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
import _buildlib as bl  # noqa: E402

REPO_ID = "acme/silu-layers"
PY_PKG = "silu_layers"
SRC = HERE / "src"
BUILD_DIR = HERE / "build"


def build(*, verbose: bool = True, cuda: bool = False) -> list[bl.BuiltKernel]:
    """Write the torch-universal variant (``cuda`` is ignored: pure Python)."""
    bl.log(f"{REPO_ID} v1 -> {BUILD_DIR}", verbose)
    pkg = SRC / PY_PKG
    bl.build_universal(
        py_pkg=PY_PKG,
        python_files={"__init__.py": pkg / "__init__.py", "layers.py": pkg / "layers.py"},
        build_root=BUILD_DIR,
        verbose=verbose,
    )
    return [bl.BuiltKernel(REPO_ID, 1, BUILD_DIR)]


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clean", action="store_true", help="delete build/ and exit")
    parser.add_argument("-q", "--quiet", action="store_true", help="print less")
    args = parser.parse_args(argv)
    return bl.run_cli(lambda: build(verbose=not args.quiet), clean=args.clean, build_dir=BUILD_DIR)


if __name__ == "__main__":
    sys.exit(main())
