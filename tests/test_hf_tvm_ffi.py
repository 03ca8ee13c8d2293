"""Hugging Face kernels' own ``tests/test_tvm_ffi.py``, ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0; the newest stored version of the
test file). Test names follow the original; what differs:

- ``kernels-test/relu-tvm-ffi`` is published to the loopback CDN as ``tvm-ffi01`` builds
  for ``cpu`` and ``cu126`` (this machine's arch and OS), the variant names HF's builder
  writes for tvm-ffi 0.1 (docs/kernel-requirements.md, Variants). Its code is pure Python:
  it imports ``tvm_ffi`` (as the Hub build does to load its library) and computes
  ``relu(x, out)`` with torch.
- A tvm-ffi build loads only where tvm-ffi is installed (``apache-tvm-ffi``, as HF's dev
  dependencies install it); without it the tests skip, as HF's fail to import. Run with
  ``pip install 'apache-tvm-ffi>=0.1.9,<0.2'`` (or a ``--target`` dir on PYTHONPATH).
- Loads run in a new interpreter, which detects the installed tvm-ffi afresh.
"""

from __future__ import annotations

import importlib.util
import platform
import sys

import pytest

from conftest import run_python
from support.cdn_server import CdnServer
from support.hf_kernels import device_name, package, write_hf_kernel

REPO = "kernels-test/relu-tvm-ffi"
relu_supported_devices = ["cpu", "cuda"]

INIT = """import torch
import tvm_ffi  # noqa: F401  (the Hub build loads its library with it)


def relu(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    out.copy_(torch.relu(x))
    return out
"""

needs_tvm_ffi = pytest.mark.skipif(
    importlib.util.find_spec("tvm_ffi") is None, reason="apache-tvm-ffi is not installed"
)


@pytest.fixture
def device() -> str:
    return device_name()


def publish(cdn: CdnServer) -> list[str]:
    arch = platform.machine().lower()
    variants = [f"tvm-ffi01-cpu-{arch}-{sys.platform}", f"tvm-ffi01-cu126-{arch}-{sys.platform}"]
    write_hf_kernel(cdn.root, REPO, 1, variants, package("relu_tvm_ffi", {"__init__.py": INIT}))
    return variants


@needs_tvm_ffi
def test_relu_load(cdn: CdnServer, device: str) -> None:
    if device not in relu_supported_devices:
        pytest.skip(f"Device is not one of: {','.join(relu_supported_devices)}")
    publish(cdn)
    out = run_python(
        "import flashhub_kernels as fk\n"
        f"k = fk.get_kernel({REPO!r}, version=1)\n"
        "print([e.variant for e in fk.get_loaded_kernels()][0])\n",
    )
    assert out.split()[-1].startswith("tvm-ffi01-")


@needs_tvm_ffi
def test_relu_torch(cdn: CdnServer, device: str) -> None:
    if device not in relu_supported_devices:
        pytest.skip(f"Device is not one of: {','.join(relu_supported_devices)}")
    publish(cdn)
    run_python(
        "import torch, flashhub_kernels as fk\n"
        f"kernel = fk.get_kernel({REPO!r}, version=1)\n"
        f"x = torch.arange(-10, 10, dtype=torch.float32, device={device!r})\n"
        "out = kernel.relu(x, torch.empty_like(x))\n"
        "torch.testing.assert_close(out, torch.relu(x))\n",
    )


def test_relu_without_tvm_ffi_says_so(cdn: CdnServer) -> None:
    """Not in HF: where tvm-ffi is missing, no build loads, and the error says why."""
    publish(cdn)
    out = run_python(
        "import sys, importlib.util as u\n"
        "_find = u.find_spec\n"
        "u.find_spec = lambda name, *a, **k: None if name == 'tvm_ffi' else _find(name, *a, **k)\n"
        "import flashhub_kernels as fk\n"
        "try:\n"
        f"    fk.get_kernel({REPO!r}, version=1)\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__); print(exc)\n",
    )
    assert out.startswith("NoCompatibleVariantError")
    assert "tvm-ffi" in out
