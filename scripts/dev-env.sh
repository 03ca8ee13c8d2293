#!/usr/bin/env bash
# Create (or refresh) .venv with the CPU build of torch and this project, editable, with
# its dev tools, and the example kernels compiled. Idempotent: a second run only checks
# that everything is there. A torch already in .venv is kept. Where PYTHON (default
# python3) has a torch of its own (a GPU machine's CUDA build, say), a new .venv sees
# that Python's packages and uses its torch instead of downloading one;
# FLASHHUB_TORCH_SPEC picks the torch a new .venv gets instead.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
# The CPU wheel of torch 2.13.0: an unpinned torch would pull a multi-GB CUDA build.
TORCH_SPEC=${FLASHHUB_TORCH_SPEC:-torch==2.13.0}

if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
  # PYTHON's own torch, and the packages beside it, serve .venv too (after its own), by
  # a .pth file: --system-site-packages would miss them where PYTHON is itself a venv.
  if [ -z "${FLASHHUB_TORCH_SPEC:-}" ] && torch_site=$("$PYTHON" -c \
    "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))" 2>/dev/null); then
    .venv/bin/python -c "import sys, sysconfig; open(sysconfig.get_path('purelib') + '/torch-of-python.pth', 'w').write(sys.argv[1] + '\n')" "$torch_site"
  fi
fi
. .venv/bin/activate
if ! python -c "import torch" 2>/dev/null; then
  pip install --quiet --disable-pip-version-check "$TORCH_SPEC"
fi
if ! pip install --quiet --disable-pip-version-check -e '.[dev]'; then
  # Offline, say, on a Python that has the packages a run needs (a GPU machine's image):
  # the project alone; the tests that need a dev package it lacks skip, saying which.
  echo "dev-env: the dev extra could not be installed; installing the project alone" >&2
  pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
  python -c "import requests, filelock, packaging, tqdm, pytest, xdist"
fi
# Compile the example kernels (their C++ op, with torch.utils.cpp_extension) once here,
# so neither the quickstart nor the tests wait for the compiler; cached in their build/.
# (The quickstart adds the CUDA variant where it can: a broken CUDA toolchain must not
# stop the CPU build here.)
python examples/kernels/build_all.py -q
