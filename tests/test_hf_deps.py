"""Hugging Face kernels' own dependency tests, ported to this API: ``tests/test_deps.py``
as it tests ``kernel-depends`` (the kernels a kernel loads first), and
``tests/test_python_deps.py``, which holds the ``python-depends`` tests that were in
``tests/test_deps.py`` before.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0). Test names follow the original; what
differs:

- ``kernels-test/python-dep`` is a pure-torch kernel on the loopback CDN whose
  ``metadata.json`` declares ``python-depends`` as the builder writes it
  (``support/hf_kernels.py``), one kernel per dependency; ``revision="main"`` becomes
  ``version=1``. It is ``cuda_only`` in HF because the Hub's builds are GPU builds; this
  one is built for this machine.
- A missing dependency is an ``ImportError`` naming the package and its ``pip install``
  line, raised before the kernel's code runs (the kernel's ``__init__.py`` would raise
  otherwise); the exact wording is this client's.
- ``snapshot_download`` becomes a kernel repo written in the builder's layout.
- HF tests ``resolve_kernel_tree`` with a stand-in resolver and metadata documents, and
  ``get_kernel_dep`` inside its private ``use_kernel_deps`` context. Here the same trees
  (a chain, a cycle, a diamond, a dependency nobody publishes) are kernels on the
  loopback CDN in the builder's layout (``support/builder.py``), loaded with
  ``get_kernel``; each kernel's code reaches its dependencies with ``get_kernel_dep``.
  The node a tree holds is the module a dependency loaded as. The messages are this
  client's; the exception types are HF's (``ValueError`` for a cycle, ``RuntimeError``
  for ``get_kernel_dep``). A dependency nobody publishes is the ``ImportError`` of a
  kernel the CDN lacks, naming the repo and version (HF's ``ValueError`` "Could not
  resolve kernel" is for a resolver that finds nothing; its Hub resolver raises the
  Hub's error).

Left out: ``test_illegal_dep`` and ``test_deps_validated_before_download``: HF refuses
dependencies missing from its own allow-list (``python_depends.json``), which this
client does not keep; a kernel may name any package.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import pytest

from flashhub_kernels import get_kernel, get_kernel_dep, get_local_kernel, install_kernel
from support.builder import ran, ran_label, write_builder_kernel
from support.cdn_server import CdnServer
from support.hf_kernels import package, this_machine, write_hf_kernel

PYTHON_DEP = "kernels-test/python-dep"
# The module each dependency installs, as HF's python_depends.json lists it.
IMPORT_NAMES = {"einops": "einops", "nvidia-cutlass-dsl": "cutlass"}
RAN = "raise RuntimeError('the kernel ran although a dependency is missing')\n"


def publish_python_dep(root: Path, dependency: str) -> None:
    """``kernels-test/python-dep`` v1, declaring ``dependency``; its code imports it."""
    init = f"import {IMPORT_NAMES[dependency]}\n" if find_spec(IMPORT_NAMES[dependency]) else RAN
    files = package("python_dep", {"__init__.py": init})
    write_hf_kernel(root, PYTHON_DEP, 1, this_machine(), files, {"python-depends": [dependency]})


@pytest.mark.parametrize("dependency", ["einops", "nvidia-cutlass-dsl"])
def test_python_deps(dependency: str, cdn: CdnServer) -> None:
    publish_python_dep(cdn.root, dependency)
    must_raise = find_spec(IMPORT_NAMES[dependency]) is None
    if must_raise:
        with pytest.raises(ImportError, match=rf"{dependency}[\s\S]*pip install[^\n]*{dependency}"):
            get_kernel(PYTHON_DEP, version=1)
    else:
        get_kernel(PYTHON_DEP, version=1)


def test_install_kernel_skips_validation_by_default(cdn: CdnServer) -> None:
    """``install_kernel`` downloads a kernel whose dependency is missing without raising:
    it imports nothing."""
    publish_python_dep(cdn.root, "nvidia-cutlass-dsl")
    variant_path = install_kernel(PYTHON_DEP, version=1)
    assert (variant_path / "metadata.json").exists()


def test_local_kernel_validates_deps(cdn: CdnServer, tmp_path: Path) -> None:
    """``get_local_kernel`` checks the dependencies too."""
    publish_python_dep(cdn.root, "nvidia-cutlass-dsl")
    repo_path = cdn.root / "kernels" / PYTHON_DEP / "v1"  # holds build/<variant>/
    with pytest.raises(ImportError, match=r"nvidia-cutlass-dsl[\s\S]*pip install"):
        get_local_kernel(repo_path)


# -- kernel-depends: tests/test_deps.py ---------------------------------------------------------

A, B, C, D = (f"kernels-test/dep-{name}" for name in "abcd")


def uses(*repo_ids: str) -> str:
    """Kernel code that keeps each of ``repo_ids`` as ``deps[repo_id]``."""
    got = "".join(f"deps[{r!r}] = get_kernel_dep({r!r})\n" for r in repo_ids)
    return f"from flashhub_kernels import get_kernel_dep\n\ndeps = {{}}\n{got}"


def test_resolve_kernel_tree_no_dependencies(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, A, 1, body=uses())
    kernel = get_kernel(A, version=1)
    assert kernel.deps == {}
    assert ran(ran_dir) == [ran_label(A, 1)]


def test_resolve_kernel_tree_builds_tree(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, C, 1, body=uses())
    write_builder_kernel(cdn.root, B, 1, body=uses(C), kernel_depends=[(C, 1)])
    write_builder_kernel(cdn.root, A, 1, body=uses(B), kernel_depends=[(B, 1)])

    tree = get_kernel(A, version=1)

    assert set(tree.deps) == {B}
    node_b = tree.deps[B]
    assert node_b is get_kernel(B, version=1)
    assert set(node_b.deps) == {C}
    node_c = node_b.deps[C]
    assert node_c is get_kernel(C, version=1)
    assert node_c.deps == {}
    assert ran(ran_dir) == [ran_label(C, 1), ran_label(B, 1), ran_label(A, 1)]


@pytest.mark.parametrize("missing", ["repo", "version"])
def test_resolve_kernel_tree_unresolvable(cdn: CdnServer, ran_dir: Path, missing: str) -> None:
    if missing == "version":
        write_builder_kernel(cdn.root, B, 2)
    write_builder_kernel(cdn.root, A, 1, kernel_depends=[(B, 1)])
    with pytest.raises(ImportError) as exc_info:
        get_kernel(A, version=1)

    assert B in str(exc_info.value)
    assert "v1" in str(exc_info.value)
    assert ran(ran_dir) == []


def test_resolve_kernel_tree_detects_cycle(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, A, 1, kernel_depends=[(B, 1)])
    write_builder_kernel(cdn.root, B, 1, kernel_depends=[(A, 1)])

    with pytest.raises(ValueError, match=f"cycle: {A} v1 -> {B} v1 -> {A} v1"):
        get_kernel(A, version=1)
    assert ran(ran_dir) == []


def test_resolve_kernel_tree_diamond_is_not_a_cycle(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, D, 1, body=uses())
    write_builder_kernel(cdn.root, B, 1, body=uses(D), kernel_depends=[(D, 1)])
    write_builder_kernel(cdn.root, C, 1, body=uses(D), kernel_depends=[(D, 1)])
    write_builder_kernel(cdn.root, A, 1, body=uses(B, C), kernel_depends=[(B, 1), (C, 1)])

    tree = get_kernel(A, version=1)

    assert set(tree.deps) == {B, C}
    kernel_d = get_kernel(D, version=1)
    assert tree.deps[B].deps[D] is kernel_d
    assert tree.deps[C].deps[D] is kernel_d
    assert ran(ran_dir).count(ran_label(D, 1)) == 1


def test_get_kernel_dep_outside_loading_context() -> None:
    with pytest.raises(RuntimeError, match="works only while a kernel"):
        get_kernel_dep("test/kernel")


def test_get_kernel_dep_returns_module(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, B, 1)
    write_builder_kernel(cdn.root, A, 1, body=uses(B), kernel_depends=[(B, 1)])
    assert get_kernel(A, version=1).deps[B] is get_kernel(B, version=1)


def test_get_kernel_dep_unknown_repo_id(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, B, 1)
    write_builder_kernel(cdn.root, A, 1, body=uses(C), kernel_depends=[(B, 1)])
    with pytest.raises(RuntimeError, match="is not a dependency of the kernel") as exc_info:
        get_kernel(A, version=1)

    assert C in str(exc_info.value)


def test_use_kernel_deps_restores_previous_state(cdn: CdnServer, ran_dir: Path) -> None:
    """The dependencies a kernel's code sees are its own, also after one of them loaded
    dependencies of its own; once the load is over, ``get_kernel_dep`` works no more."""
    write_builder_kernel(cdn.root, C, 1)
    write_builder_kernel(cdn.root, B, 1, body=uses(C), kernel_depends=[(C, 1)])
    write_builder_kernel(cdn.root, A, 1, body=uses(B), kernel_depends=[(B, 1)])

    outer = get_kernel(A, version=1)
    assert set(outer.deps) == {B}
    assert set(outer.deps[B].deps) == {C}

    with pytest.raises(RuntimeError, match="works only while a kernel"):
        get_kernel_dep(B)
