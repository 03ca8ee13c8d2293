"""Build acme/tensor-tricks versions 1 and 2 into build/v<N>/<variant>/tensor_tricks/.

Each version is the same C++ file compiled with ``-DTENSOR_TRICKS_VERSION=<N>``; its build
root ``build/v<N>`` is what gets published as version ``N``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
import _buildlib as bl  # noqa: E402

REPO_ID = "acme/tensor-tricks"
PY_PKG = "tensor_tricks"
SRC = HERE / "src"
BUILD_DIR = HERE / "build"
VERSIONS = (1, 2)


def build(
    *, verbose: bool = True, cuda: bool = False, versions: tuple[int, ...] = VERSIONS
) -> list[bl.BuiltKernel]:
    """Build the CPU variant of each of ``versions`` (``cuda`` is ignored: CPU only)."""
    built = []
    for version in versions:
        if version not in VERSIONS:
            raise bl.BuildError(f"unknown tensor-tricks version {version}; known: {VERSIONS}")
        root = BUILD_DIR / f"v{version}"
        bl.log(f"{REPO_ID} v{version} -> {root}", verbose)
        bl.build_native(
            py_pkg=PY_PKG,
            sources=[SRC / "tensor_tricks.cpp"],
            python_files={"__init__.py": SRC / PY_PKG / "__init__.py"},
            build_root=root,
            obj_root=BUILD_DIR / ".obj",
            probe_op="version",
            defines={"TENSOR_TRICKS_VERSION": str(version)},
            verbose=verbose,
        )
        built.append(bl.BuiltKernel(REPO_ID, version, root))
    return built


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--version", type=int, choices=VERSIONS, help="build one version only")
    parser.add_argument("--clean", action="store_true", help="delete build/ and exit")
    parser.add_argument("-q", "--quiet", action="store_true", help="print less")
    args = parser.parse_args(argv)
    versions = (args.version,) if args.version else VERSIONS
    return bl.run_cli(
        lambda: build(verbose=not args.quiet, versions=versions),
        clean=args.clean,
        build_dir=BUILD_DIR,
    )


if __name__ == "__main__":
    sys.exit(main())
