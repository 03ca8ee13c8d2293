"""A CUDA build of torch on a machine with one GPU, for the processes a test starts with
this directory on ``PYTHONPATH``: torch 2.13 built for CUDA 12.6 on x86_64 Linux, whatever
the real torch and machine, so the builds a test publishes are judged alike everywhere.
``torch.cuda`` answers as torch does, and every call that would create a CUDA context
raises and is written to ``STAND_IN_CUDA_LOG``.

``torch.cuda.init()`` stands for a context made on purpose: the process that made it
is initialized (``torch.cuda.get_device_capability()`` then answers
``STAND_IN_TORCH_CAPABILITY``), and a process forked from it fails as a real one does,
with "Cannot re-initialize CUDA in forked subprocess".
"""

from __future__ import annotations

import os
import platform

import torch

_initialized_in: int | None = None


def _init() -> None:
    global _initialized_in
    _initialized_in = os.getpid()


def _is_initialized() -> bool:
    return _initialized_in == os.getpid()


def _context(*args: object, **kwargs: object) -> tuple[int, int]:
    if _is_initialized():
        major, minor = os.environ.get("STAND_IN_TORCH_CAPABILITY", "8.6").split(".")
        return int(major), int(minor)
    with open(os.environ["STAND_IN_CUDA_LOG"], "a") as log:
        log.write(f"{os.getpid()} asked for a CUDA context\n")
    if _initialized_in is not None:
        raise RuntimeError(
            "Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
            "multiprocessing, you must use the 'spawn' start method"
        )
    raise RuntimeError("stand-in: this call would create a CUDA context")


torch.__version__ = "2.13.0+cu126"
torch.version.cuda = "12.6"
torch.compiled_with_cxx11_abi = lambda: True
platform.machine = lambda: "x86_64"
torch.cuda.init = _init
torch.cuda.is_initialized = _is_initialized
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.current_device = lambda: 0
torch.cuda._lazy_init = _context
torch.cuda.get_device_capability = _context
torch.cuda.get_device_properties = _context
