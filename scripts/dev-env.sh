#!/usr/bin/env bash
# Create (or refresh) .venv with the CPU build of torch and this project, editable, with
# its dev tools, and the example kernels compiled. Idempotent: a second run only checks
# that everything is there. A torch already in .venv is kept. Where PYTHON (default
# python3) has a torch of its own (a GPU machine's CUDA build, say), a new .venv sees
# that Python's packages and uses its torch instead of downloading one;
# FLASHHUB_TORCH_SPEC picks the torch a new .venv gets instead. PYTHON and the spec
# apply to a new .venv: remove .venv to change them.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_GIVEN=${PYTHON:-}
PYTHON=${PYTHON:-python3}
# The CPU wheel of torch 2.13.0: a torch without "+cpu" would pull a multi-GB CUDA build
# where the package index has no CPU wheel for this Python.
TORCH_SPEC=${FLASHHUB_TORCH_SPEC:-torch==2.13.0+cpu}

say() { echo "dev-env: $*" >&2; }
fail() {
  say "$1"
  exit 1
}

# torch.utils.cpp_extension links against torch's libraries with an unquoted -L path,
# so the example kernels cannot be compiled where .venv's path holds a space.
case "$PWD" in
*[[:space:]]*) fail "the example kernels' C++ build cannot link under a path with a space ($PWD): clone the project into a path without one" ;;
esac

version_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

if [ -x .venv/bin/python ]; then
  if [ -n "$PYTHON_GIVEN" ] && [ "$(version_of "$PYTHON")" != "$(version_of .venv/bin/python)" ]; then
    fail ".venv is Python $(version_of .venv/bin/python), not PYTHON's $(version_of "$PYTHON"): remove .venv (rm -rf .venv) to make a new one"
  fi
else
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    fail "$PYTHON is Python $(version_of "$PYTHON"): this project needs Python 3.10 or newer (set PYTHON)"
  say "creating .venv with $PYTHON (Python $(version_of "$PYTHON"))"
  "$PYTHON" -m venv .venv
  # PYTHON's own torch, and the packages beside it, serve .venv too (after its own), by
  # a .pth file: --system-site-packages would miss them where PYTHON is itself a venv.
  # It adds them as a site directory, so that their own .pth files run too: the import
  # hook of a package installed there in editable mode, whose metadata pip reads.
  if [ -z "${FLASHHUB_TORCH_SPEC:-}" ] && torch_site=$("$PYTHON" -c \
    "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" 2>/dev/null); then
    say "using the torch of $PYTHON ($torch_site)"
    .venv/bin/python -c "import sys, sysconfig; open(sysconfig.get_path('purelib') + '/torch-of-python.pth', 'w').write(f'import site; site.addsitedir({sys.argv[1]!r})\n')" "$torch_site"
  fi
fi
. .venv/bin/activate
if ! python -c "import torch" 2>/dev/null; then
  say "installing $TORCH_SPEC into .venv (a few minutes the first time)"
  pip install --quiet --disable-pip-version-check "$TORCH_SPEC" ||
    fail "could not install $TORCH_SPEC for Python $(version_of python): use a Python the index has that wheel for (PYTHON=python3.11, after rm -rf .venv), or set FLASHHUB_TORCH_SPEC"
fi
if ! pip install --quiet --disable-pip-version-check -e '.[dev]'; then
  # Offline, say, on a Python that has the packages a run needs (a GPU machine's image):
  # the project alone; the tests that need a dev package it lacks skip, saying which.
  say "the dev extra could not be installed; installing the project alone"
  # The setuptools that venv gave .venv may predate the project's license field: then
  # PYTHON's own, which the .pth file lets through, builds it.
  python -c 'import sys, setuptools; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' 2>/dev/null ||
    pip uninstall --quiet --yes setuptools
  pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
  python -c "import requests, filelock, packaging, tqdm, pytest, xdist, ninja"
fi
# Compile the example kernels (their C++ op, with torch.utils.cpp_extension) once here,
# so neither the quickstart nor the tests wait for the compiler; cached in their build/.
# (The quickstart adds the CUDA variant where it can: a broken CUDA toolchain must not
# stop the CPU build here.)
python examples/kernels/build_all.py -q
