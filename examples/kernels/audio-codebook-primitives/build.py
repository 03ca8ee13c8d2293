"""Build sdq/audio-codebook-primitives into build/<variant>/audio_codebook_primitives/.

Variants: the native CPU build for the local torch, torch-universal (pure torch) and, with
``--cuda`` on a CUDA torch with nvcc, the native CUDA build.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))
import _buildlib as bl  # noqa: E402

REPO_ID = "sdq/audio-codebook-primitives"
PY_PKG = "audio_codebook_primitives"
SRC = HERE / "src"
BUILD_DIR = HERE / "build"


def build(*, verbose: bool = True, cuda: bool = False) -> list[bl.BuiltKernel]:
    """Build the CPU and torch-universal variants (and CUDA when ``cuda``)."""
    pkg = SRC / PY_PKG
    common = {"__init__.py": pkg / "__init__.py", "_reference.py": pkg / "_reference.py"}
    bl.log(f"{REPO_ID} v1 -> {BUILD_DIR}", verbose)

    def native(sources: list[Path], backend: str | None = None) -> None:
        bl.build_native(
            py_pkg=PY_PKG,
            sources=sources,
            headers=[SRC / "audio_codebook.h", SRC / "registration.h"],
            python_files=common,
            build_root=BUILD_DIR,
            obj_root=BUILD_DIR / ".obj",
            probe_op="delayed_codebook_argmax_embed_bf16",
            cuda=backend,
            verbose=verbose,
        )

    native([SRC / "audio_codebook.cpp"])
    if cuda:
        backend, reason = bl.cuda_backend()
        if backend is None:
            bl.log(f"  skipping the CUDA variant: {reason}", verbose)
        else:
            native([SRC / "audio_codebook.cpp", SRC / "audio_codebook_cuda.cu"], backend)
    bl.build_universal(
        py_pkg=PY_PKG,
        python_files={**common, "_ops.py": pkg / "_ops_universal.py"},
        build_root=BUILD_DIR,
        verbose=verbose,
    )
    return [bl.BuiltKernel(REPO_ID, 1, BUILD_DIR)]


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cuda", action="store_true", help="also build the CUDA variant")
    parser.add_argument("--clean", action="store_true", help="delete build/ and exit")
    parser.add_argument("-q", "--quiet", action="store_true", help="print less")
    args = parser.parse_args(argv)
    return bl.run_cli(
        lambda: build(verbose=not args.quiet, cuda=args.cuda), clean=args.clean, build_dir=BUILD_DIR
    )


if __name__ == "__main__":
    sys.exit(main())
