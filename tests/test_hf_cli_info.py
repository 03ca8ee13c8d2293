"""Hugging Face kernels' own ``tests/test_cli_info.py``, ported to ``flashhub info``.

Ported from Hugging Face kernels 0.17 (Apache-2.0). Test names and assertions follow the
original; what differs:

- ``kernels-community/activation`` is a pure-torch kernel on the loopback CDN, published
  for this machine and as a CUDA build (the Hub's builds are GPU builds), its
  ``metadata.json`` carrying the builder's ``license``.
- HF calls its CLI's ``print_kernel_info``; this runs the ``flashhub info`` command, whose
  output is this client's (docs/cli.md): the repo and version head the text, and each
  variant's ``metadata.json`` fields are listed under it (``license: Apache-2.0``). In
  ``--json`` they are each variant's ``"metadata"``, spelled as in ``metadata.json``.
- ``flashhub`` takes ``--version`` alone: a ``--revision`` is a usage error (status 2,
  HF's ``SystemExit``) before any request.
- A local directory (``test_info_local*``) lists each variant under its ``build``
  directory, judged against this machine, with the same ``metadata`` fields. HF's
  top-level ``variant`` and ``backends`` are there too; the builder's fields are each
  variant's. As HF's command, it exits 1 when no variant fits this machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashhub_kernels._variants.grammar import parse_variant
from support.cdn_server import CdnServer
from support.cli_runner import flashhub, ok_json
from support.hf_kernels import RELU, RELU_INIT, package, publish_relu, this_machine, write_hf_kernel
from support.trees import local_variant

ACTIVATION = "kernels-community/activation"


@pytest.fixture
def hub(cdn: CdnServer) -> CdnServer:
    """``kernels-community/activation`` v1 on the CDN, built for this machine and CUDA."""
    files = package("activation", {"__init__.py": RELU_INIT})
    variants = sorted({*this_machine(), "torch-cuda"})
    write_hf_kernel(cdn.root, ACTIVATION, 1, variants, files, {"license": "Apache-2.0"})
    return cdn


def test_info_hub(hub: CdnServer) -> None:
    result = flashhub("info", ACTIVATION, "--version", "1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"{ACTIVATION}@v1 ")
    assert "name: activation (version 1" in out
    assert "license: Apache-2.0" in out
    assert "backend: cuda" in out


def test_info_hub_json(hub: CdnServer) -> None:
    info = ok_json(flashhub("info", ACTIVATION, "--version", "1", "--json"))
    assert info["repo_id"] == ACTIVATION
    assert info["version"] == 1
    # Hugging Face's keys for the build: the variant chosen, the revision, the backends.
    assert (info["variant"], info["revision"]) == (info["chosen"], "v1")
    built_for = {parse_variant(variant).backend for variant in [*this_machine(), "torch-cuda"]}
    assert info["variant"] in this_machine() and info["backends"] == sorted(built_for)
    metadata = [variant["metadata"] for variant in info["variants"]]
    assert {fields["name"] for fields in metadata} == {"activation"}
    assert {fields["version"] for fields in metadata} == {1}
    assert {fields["license"] for fields in metadata} == {"Apache-2.0"}
    assert "cuda" in {fields["backend"]["type"] for fields in metadata}


def test_info_exits_1_when_no_variant_fits_this_machine(cdn: CdnServer) -> None:
    """As ``flashhub variants`` and Hugging Face's ``kernels info`` do; it lists them all."""
    files = package("activation", {"__init__.py": RELU_INIT})
    torch_24 = "torch24-cxx98-cpu-x86_64-linux"  # a torch nothing here runs
    write_hf_kernel(cdn.root, ACTIVATION, 1, [torch_24], files)
    for json_option in ((), ("--json",)):
        result = flashhub("info", ACTIVATION, "--version", "1", *json_option)
        assert (result.returncode, result.stderr) == (1, "")
        assert torch_24 in result.stdout


def test_info_hub_rejects_revision_and_version(hub: CdnServer) -> None:
    result = flashhub("info", ACTIVATION, "--revision", "main", "--version", "1")
    assert result.returncode == 2
    assert "--revision" in result.stderr
    assert not hub.requests
    alone = flashhub("info", ACTIVATION, "--revision=v1")
    assert alone.returncode == 2
    assert "a version is --version N here" in alone.stderr  # what to give instead


def write_local_variant(repo: Path, variant: str, metadata: dict[str, object]) -> Path:
    """``repo/build/<variant>`` with ``metadata`` as its ``metadata.json``."""
    variant_dir = repo / "build" / variant
    variant_dir.mkdir(parents=True)
    (variant_dir / "metadata.json").write_text(json.dumps(metadata))
    return variant_dir


def test_info_local(tmp_path: Path) -> None:
    write_local_variant(
        tmp_path,
        "torch28-cxx11-cu128-x86_64-linux",
        {
            "id": "activation_1_cuda",
            "name": "activation",
            "version": 1,
            "license": "Apache-2.0",
            "upstream": "https://github.com/example/activation",
            "python-depends": ["torch"],
            "backend": {"type": "cuda"},
        },
    )

    result = flashhub("info", tmp_path, "--json")
    assert result.returncode == 1  # no variant fits this machine, as `kernels info` exits
    info = json.loads(result.stdout)
    assert info["path"] == str(tmp_path)
    assert (info["variant"], info["backends"]) == (None, ["cuda"])  # HF's keys
    (variant,) = info["variants"]
    metadata = variant["metadata"]
    assert metadata["name"] == "activation"
    assert metadata["version"] == 1
    assert metadata["license"] == "Apache-2.0"
    assert metadata["upstream"] == "https://github.com/example/activation"
    assert "source" not in metadata
    assert metadata["python-depends"] == ["torch"]
    assert metadata["backend"]["type"] == "cuda"
    assert not variant["compatible"] and info["chosen"] is None  # a torch 2.8 build


def test_info_local_rejects_revision(tmp_path: Path) -> None:
    for option in ("--revision", "--version"):
        result = flashhub("info", tmp_path, option, "1")
        assert result.returncode == 2
        assert option in result.stderr


def test_info_local_no_variants(tmp_path: Path) -> None:
    result = flashhub("info", tmp_path)
    assert result.returncode == 1
    assert f"no build variant found in {tmp_path}" in result.stderr
    assert "Traceback" not in result.stderr


def test_info_local_lists_the_build_a_load_takes_and_what_it_depends_on(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """The variant ``get_local_kernel`` would load is chosen, its files listed with their
    sizes; ``--dep-tree`` follows its ``kernel-depends`` onto the CDN."""
    publish_relu(cdn.root)
    variants = this_machine()
    for variant in variants:
        variant_dir = write_local_variant(
            tmp_path,
            variant,
            {"name": "uses-relu", "kernel-depends": [{"repo-id": RELU, "version": 1}]},
        )
        (variant_dir / "uses_relu").mkdir()
        (variant_dir / "uses_relu" / "__init__.py").write_text("X = 1\n")
    write_local_variant(tmp_path, "torch24-cxx11-cu121-x86_64-linux", {"name": "uses-relu"})
    chosen = local_variant()  # as relu's on the CDN: both are built for this machine

    result = flashhub("info", tmp_path, "--dep-tree")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{tmp_path} on torch ")
    assert lines[1] == f"chosen variant: {chosen}"
    assert f"  + {chosen}: 1 file, 6 B" in lines
    assert f"      {'6 B':>10}  uses_relu/__init__.py" in lines
    assert "  - torch24-cxx11-cu121-x86_64-linux: 0 files, 0 B" in lines
    assert lines[-2:] == [f"{tmp_path} ({chosen})", f"`-- {RELU} v1 ({chosen})"]

    info = ok_json(flashhub("info", tmp_path, "--dep-tree", "--json"))
    assert info["chosen"] == chosen
    tree = info["dependency_tree"]
    assert (tree["path"], tree["variant"]) == (str(tmp_path), chosen)
    assert [(d["repo_id"], d["version"], d["depends"]) for d in tree["depends"]] == [(RELU, 1, [])]
