"""Hugging Face kernels' test repos, served by the loopback CDN, for the ported tests
(``test_hf_*.py``); and the accelerators this machine has, detected as that suite does,
with its skip markers.

The Hub repos the suite loads (``kernels-community/relu``, ``kernels-test/versions``,
``kernels-test/flattened-build``, ...) become small pure-torch kernels of the same names
and shapes, published for this machine, with ``metadata.json`` carrying the builder's
fields besides the digests. Hub branches become versions (:data:`FLATTENED_REVISIONS`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flashhub_kernels._variants.grammar import as_variant
from support.trees import b64sha256, cpu_variant, local_variant

RELU = "kernels-community/relu"
VERSIONS = "kernels-test/versions"
SILU_AND_MUL = "kernels-test/silu-and-mul"
FLATTENED = "kernels-test/flattened-build"
# kernels-test/only-torch-2.4 on the Hub: a repo id here holds no "." (it names a module)
ONLY_TORCH_24 = "kernels-test/only-torch-24"
# The Hub's branches of kernels-test/flattened-build, as the versions published here.
FLATTENED_REVISIONS = {"pre-flattening": "v1", "main": "v2", "without-compat-module": "v3"}
PUBLISHED_VERSIONS = (1, 2, 10)  # of kernels-test/versions: 10 sorts after 2

# -- the accelerators, as HF's conftest.py detects them ---------------------------------------

has_cuda = torch.version.cuda is not None and torch.cuda.device_count() > 0
has_rocm = getattr(torch.version, "hip", None) is not None and torch.cuda.device_count() > 0
has_xpu = (
    getattr(torch.version, "xpu", None) is not None
    and hasattr(torch, "xpu")
    and torch.xpu.device_count() > 0
)
has_npu = torch._C._get_privateuse1_backend_name() == "npu"
has_neuron = hasattr(torch, "neuron") and torch.neuron.device_count() > 0
has_tpu = hasattr(torch, "tpu") and torch.tpu.device_count() > 0
has_mps = torch.backends.mps.is_available()

cuda_only = pytest.mark.skipif(not has_cuda, reason="skipping CUDA-only test on host without CUDA")
darwin_only = pytest.mark.skipif(not has_mps, reason="skipping macOS-only test without Metal")
neuron_only = pytest.mark.skipif(
    not has_neuron, reason="skipping Neuron-only test on host without Neuron"
)
tpu_only = pytest.mark.skipif(not has_tpu, reason="skipping TPU-only test on host without TPU")


def device_name() -> str:
    """The device HF's ``device`` fixture picks: the accelerator, else ``"cpu"``."""
    for present, name in ((has_cuda, "cuda"), (has_xpu, "xpu"), (has_npu, "npu")):
        if present:
            return name
    return "tpu" if has_tpu else "cpu"


# -- writing the repos ------------------------------------------------------------------------


def this_machine() -> list[str]:
    """The variants a build for this machine publishes: its own and the CPU build."""
    return sorted({local_variant(), cpu_variant()})


def write_hf_variant(
    root: Path,
    repo_id: str,
    version: int,
    variant: str,
    files: dict[str, str],
    metadata: dict[str, object],
) -> Path:
    """One variant whose ``metadata.json`` holds the digests and the builder's ``metadata``
    fields (``python-depends``, ``backend``, ``provenance``, ...)."""
    variant_dir = root / "kernels" / repo_id / f"v{version}" / "build" / variant
    data = {relpath: text.encode() for relpath, text in files.items()}
    for relpath, content in data.items():
        (variant_dir / relpath).parent.mkdir(parents=True, exist_ok=True)
        (variant_dir / relpath).write_bytes(content)
    digests = {p: b64sha256(d) for p, d in sorted(data.items())}
    document = {**metadata, "digest": {"algorithm": "sha256", "files": digests}}
    variant_dir.mkdir(parents=True, exist_ok=True)
    (variant_dir / "metadata.json").write_text(json.dumps(document))
    return variant_dir


def write_hf_kernel(
    root: Path,
    repo_id: str,
    version: int,
    variants: list[str],
    files: dict[str, str],
    metadata: dict[str, object] | None = None,
) -> None:
    """``files`` published as each of ``variants`` of ``repo_id`` ``v<version>``, with its
    ``variants.json`` and the repo's ``versions.json``; ``metadata.json`` holds the
    builder's identifying fields and ``metadata``."""
    name = repo_id.split("/")[1]
    for variant in variants:
        backend = as_variant(variant).backend or "universal"
        fields = {"name": name, "version": version, "backend": {"type": backend}}
        write_hf_variant(root, repo_id, version, variant, files, {**fields, **(metadata or {})})
    version_dir = root / "kernels" / repo_id / f"v{version}"
    (version_dir / "variants.json").write_text(json.dumps(variants))
    versions = root / "kernels" / repo_id / "versions.json"
    known = json.loads(versions.read_text()) if versions.exists() else []
    versions.write_text(json.dumps(sorted({*known, version})))


def package(py_pkg: str, files: dict[str, str]) -> dict[str, str]:
    """``files`` inside the package folder ``py_pkg``."""
    return {f"{py_pkg}/{relpath}": text for relpath, text in files.items()}


RELU_INIT = (
    "import torch\n\n\ndef relu(x: torch.Tensor) -> torch.Tensor:\n    return torch.relu(x)\n"
)

SILU_AND_MUL_INIT = """import torch
import torch.nn.functional as F


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]
"""

# The compat module of a flattened build: the package folder older loaders import, which
# runs the flattened variant's own __init__.py and re-exports what it defines.
COMPAT_INIT = """import importlib.util
import sys
from pathlib import Path

_root = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(f"{__name__}._flat", _root / "__init__.py")
_flat = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _flat
_spec.loader.exec_module(_flat)
globals().update({k: v for k, v in vars(_flat).items() if not k.startswith("__")})
"""

VERSIONS_INIT = "from . import layers\n\n\ndef version() -> int:\n    return {version}\n"
VERSIONS_LAYERS = """from torch import nn


class Version(nn.Module):
    def forward(self) -> int:
        return {version}
"""


def publish_relu(root: Path, variants: list[str] | None = None, repo_id: str = RELU) -> None:
    """``repo_id`` (``kernels-community/relu``) v1: ``relu(x)``, for this machine."""
    py_pkg = repo_id.split("/")[1].replace("-", "_")
    files = package(py_pkg, {"__init__.py": RELU_INIT})
    write_hf_kernel(root, repo_id, 1, variants or this_machine(), files)


def publish_versions(root: Path) -> None:
    """``kernels-test/versions`` v1, v2 and v10: ``version()`` and the layer ``Version``
    return the version number."""
    for version in PUBLISHED_VERSIONS:
        files = {
            "__init__.py": VERSIONS_INIT.format(version=version),
            "layers.py": VERSIONS_LAYERS.format(version=version),
        }
        write_hf_kernel(root, VERSIONS, version, this_machine(), package("versions", files))


def publish_silu_and_mul(root: Path) -> None:
    """``kernels-test/silu-and-mul`` v1: noarch builds for cpu, cuda and xpu."""
    files = package("silu_and_mul", {"__init__.py": SILU_AND_MUL_INIT})
    write_hf_kernel(root, SILU_AND_MUL, 1, ["torch-cpu", "torch-cuda", "torch-xpu"], files)


def publish_flattened_build(root: Path) -> None:
    """``kernels-test/flattened-build`` in the builder's three layouts: v1 with the package
    folder (``pre-flattening``), v2 flattened with that folder kept as a compat module
    (``main``), v3 flattened only (``without-compat-module``)."""
    flat = {"__init__.py": SILU_AND_MUL_INIT}
    compat = package("flattened_build", {"__init__.py": COMPAT_INIT})
    layouts = {1: package("flattened_build", flat), 2: {**flat, **compat}, 3: flat}
    for version, files in layouts.items():
        write_hf_kernel(root, FLATTENED, version, this_machine(), files)


def publish_only_torch_24(root: Path) -> None:
    """``kernels-test/only-torch-2.4``: builds for torch 2.4 only, which nothing here runs."""
    variants = ["torch24-cxx11-cu121-x86_64-linux", "torch24-cxx98-cpu-x86_64-linux"]
    files = package("only_torch_24", {"__init__.py": RELU_INIT})
    write_hf_kernel(root, ONLY_TORCH_24, 1, variants, files)
