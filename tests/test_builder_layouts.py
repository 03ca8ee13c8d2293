"""Builds as the peer's builder lays them out: tagless variant names, flattened variants.

A flattened variant has its files directly in ``build/<variant>/`` (``__init__.py``,
``_ops.py``, ``layers.py``, the native ``_<name>_<hash>.abi3.so``), with no package
folder; builds for older loaders also ship the package folder beside them.
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import run_python
from flashhub_kernels._publish import publish as publish_build
from flashhub_kernels._variants.probing import build_variant_name
from flashhub_kernels._variants.system import detect_system
from support.cdn_server import CdnServer
from support.trees import b64sha256, write_variant

REPO = "kernels-community/activation"
MODULE = "flashhub.kernels_community.activation.v1"
NATIVE = "_activation_0f3c2a1.abi3.so"
# The keys the builder writes into its metadata.json; the publisher keeps them.
BUILDER_METADATA = {"name": "activation", "id": "_activation_0f3c2a1", "version": 1}


def tagless_variant() -> str:
    """This machine's exact-build name without the ABI tag, e.g. torch213-cpu-x86_64-linux."""
    return build_variant_name(detect_system(), abi_tag=False)


def activation_files(marker: str, prefix: str = "") -> dict[str, bytes]:
    """The activation kernel's files, under ``prefix`` (``""``: flattened).

    ``_ops.py`` is pure Python here: the builder's imports the native module and binds
    its ``torch.ops`` namespace, which a CPU test cannot build.
    """
    init = f'''"""Activation kernels ({marker})."""
import torch

from . import layers
from ._ops import add_op_namespace_prefix, ops

built_as = {marker!r}


def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
    ops.silu_and_mul(out, x)


__all__ = ["add_op_namespace_prefix", "layers", "silu_and_mul"]
'''
    ops = b"""import torch

_OPS_NAME = "_activation_0f3c2a1"


class _Ops:
    @staticmethod
    def silu_and_mul(out: torch.Tensor, x: torch.Tensor) -> None:
        d = x.shape[-1] // 2
        out.copy_(torch.nn.functional.silu(x[..., :d]) * x[..., d:])


ops = _Ops()


def add_op_namespace_prefix(op_name: str) -> str:
    return f"{_OPS_NAME}::{op_name}"
"""
    layers = b"""import torch
from torch import nn

from ._ops import ops


class SiluAndMul(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_empty(x.shape[:-1] + (x.shape[-1] // 2,))
        ops.silu_and_mul(out, x)
        return out
"""
    files = {
        "__init__.py": init.encode(),
        "_ops.py": ops,
        "layers.py": layers,
        NATIVE: b"\x7fELF: stands in for the native library, never imported here",
    }
    return {f"{prefix}{path}": data for path, data in files.items()}


def publish(root: Path, variant: str, files: dict[str, bytes]) -> Path:
    """Publish one variant with a manifest carrying the builder's own keys."""
    digests = {path: b64sha256(data) for path, data in sorted(files.items())}
    manifest = {**BUILDER_METADATA, "digest": {"algorithm": "sha256", "files": digests}}
    return write_variant(root, REPO, 1, variant, files, manifest=manifest)


def publish_activation(root: Path, layout: str) -> None:
    """``flat``, ``package`` (``activation/...``) or ``both`` (the two side by side)."""
    variants = [tagless_variant(), "torch-universal"]
    for variant in variants:
        files = {}
        if layout in ("flat", "both"):
            files |= activation_files(f"flat:{variant}")
        if layout in ("package", "both"):
            files |= activation_files(f"package:{variant}", "activation/")
        publish(root, variant, files)
    version_dir = root / "kernels" / REPO / "v1"
    (version_dir / "variants.json").write_text(json.dumps(variants))
    (version_dir.parent / "versions.json").write_text("[1]")


@pytest.mark.parametrize(
    ("layout", "loaded"), [("flat", "flat"), ("package", "package"), ("both", "package")]
)
def test_the_builders_activation_kernel_loads_in_either_layout(
    cdn: CdnServer, cache_dir: Path, layout: str, loaded: str
) -> None:
    torch = pytest.importorskip("torch")
    publish_activation(cdn.root, layout)
    k = fk.get_kernel(REPO, version=1)
    import flashhub.kernels_community.activation.v1 as by_statement

    assert by_statement is k and k.__name__ == MODULE
    expected = f"{loaded}:{tagless_variant()}"
    assert k.built_as == expected  # the tagless exact build, of the two that fit
    entry = cache_dir / "kernels" / REPO / "v1" / tagless_variant()
    package_dir = entry if loaded == "flat" else entry / "activation"
    assert k.__file__ == str(package_dir / "__init__.py")
    assert k.__path__ == [str(package_dir)]
    assert fk.get_loaded_kernels()[-1].path == package_dir
    assert (package_dir / NATIVE).is_file()
    x = torch.randn(3, 8)
    out = k.layers.SiluAndMul()(x)
    assert torch.allclose(out, torch.nn.functional.silu(x[:, :4]) * x[:, 4:])
    assert k.add_op_namespace_prefix("silu_and_mul") == "_activation_0f3c2a1::silu_and_mul"
    resources = importlib.resources.files(k)
    assert "class SiluAndMul" in resources.joinpath("layers.py").read_text()


def test_a_flattened_kernel_loads_warm_with_zero_requests(cdn: CdnServer) -> None:
    publish_activation(cdn.root, "flat")
    code = f"import {MODULE} as k; print(k.built_as, k.layers.SiluAndMul.__module__)"
    expected = [f"flat:{tagless_variant()}", f"{MODULE}.layers"]
    assert run_python(code).split() == expected
    cdn.clear_log()
    # The entry's own files (metadata.json, the receipt, __pycache__) share the package
    # directory: the receipt still vouches for the kernel's files.
    assert run_python(code).split() == expected
    assert cdn.requests == []


def test_get_local_kernel_takes_a_flattened_build(cdn: CdnServer) -> None:
    publish_activation(cdn.root, "flat")
    version_dir = cdn.root / "kernels" / REPO / "v1"
    variant_dir = version_dir / "build" / "torch-universal"
    best = f"flat:{tagless_variant()}"
    assert fk.get_local_kernel(variant_dir).built_as == "flat:torch-universal"
    assert fk.get_local_kernel(version_dir).built_as == best
    assert fk.get_local_kernel(version_dir / "build").built_as == best


@pytest.mark.parametrize("layout", ["flat", "both"])
def test_flashhub_publish_takes_the_builders_flattened_output(tmp_path: Path, layout: str) -> None:
    build = tmp_path / "activation" / "build"
    for variant in (tagless_variant(), "torch-universal"):
        files = activation_files(f"published:{variant}")
        if layout == "both":  # the package folder older loaders import, beside the files
            files |= activation_files(f"published-package:{variant}", "activation/")
        for path, data in files.items():
            (build / variant / path).parent.mkdir(parents=True, exist_ok=True)
            (build / variant / path).write_bytes(data)
        (build / variant / "metadata.json").write_text(json.dumps(BUILDER_METADATA))
    out = tmp_path / "cdn"
    report = publish_build(build, repo_id=REPO, version=1, out=out)
    assert {v.name for v in report.variants} == {tagless_variant(), "torch-universal"}
    manifest = json.loads(
        (out / "kernels" / REPO / "v1" / "build" / tagless_variant() / "metadata.json").read_text()
    )
    assert "__init__.py" in manifest["digest"]["files"] and manifest["name"] == "activation"
    fk.configure(cdn_url=out.as_uri())
    marker = "published" if layout == "flat" else "published-package"  # the folder wins
    assert fk.get_kernel(REPO, version=1).built_as == f"{marker}:{tagless_variant()}"


@pytest.mark.parametrize("layout", ["flat", "package"])
def test_flashhub_publish_leaves_out_the_builders_sigstore_signature(
    tmp_path: Path, layout: str
) -> None:
    # A build downloaded from the Hub (`hf download ... --include 'build/*'`) holds the
    # sigstore bundle of each variant's metadata.json beside it: the builder's signature of
    # its own manifest, which the builder's digest leaves out, not a file of the kernel.
    build = tmp_path / "activation" / "build"
    prefix = "" if layout == "flat" else "activation/"
    for path, data in activation_files(f"published:{layout}", prefix).items():
        (build / "torch-universal" / path).parent.mkdir(parents=True, exist_ok=True)
        (build / "torch-universal" / path).write_bytes(data)
    (build / "torch-universal" / "metadata.json").write_text(json.dumps(BUILDER_METADATA))
    (build / "torch-universal" / "metadata.json.sigstore").write_text('{"mediaType": "bundle"}')
    out = tmp_path / "cdn"
    publish_build(build, repo_id=REPO, version=1, out=out)
    published = out / "kernels" / REPO / "v1" / "build" / "torch-universal"
    manifest = json.loads((published / "metadata.json").read_text())
    assert not [p for p in manifest["digest"]["files"] if "sigstore" in p]
    assert not list(published.rglob("*.sigstore"))
    fk.configure(cdn_url=out.as_uri())
    assert fk.get_kernel(REPO, version=1).built_as == f"published:{layout}"


def test_flashhub_publish_takes_what_build_and_copy_leaves_in_build(tmp_path: Path) -> None:
    # The builder's bundle, which `kernel-builder build-and-copy` copies into build/,
    # holds the kernel's filled model card and its benchmarks beside the variants.
    build = tmp_path / "activation" / "build"
    for path, data in activation_files("published:bundle").items():
        (build / "torch-universal" / path).parent.mkdir(parents=True, exist_ok=True)
        (build / "torch-universal" / path).write_bytes(data)
    (build / "torch-universal" / "metadata.json").write_text(json.dumps(BUILDER_METADATA))
    (build / "CARD.md").write_text("# activation\n")
    (build / "benchmarks").mkdir()
    (build / "benchmarks" / "benchmark.py").write_text("import torch\n")
    out = tmp_path / "cdn"
    report = publish_build(build.parent, repo_id=REPO, version=1, out=out)
    assert [v.name for v in report.variants] == ["torch-universal"]
    published = sorted(p.name for p in (out / "kernels" / REPO).rglob("*"))
    assert "CARD.md" not in published and "benchmarks" not in published
    fk.configure(cdn_url=out.as_uri())
    assert fk.get_kernel(REPO, version=1).built_as == "published:bundle"
