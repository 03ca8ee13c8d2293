"""What installing the hook and a warm kernel load import: only what they need.

Every process that imports ``flashhub`` pays for the modules the hook's installation
imports, and every job start for those of the first warm kernel import. Timings are the
benchmark's business (``benchmarks/``); these tests pin down the modules.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from cdn_server import CdnServer
from conftest import run_python
from trees import write_kernel

# All that `import flashhub` imports of this library: the package, the finder and the
# module-name grammar it parses with.
HOOK_MODULES = {
    "flashhub",
    "flashhub_kernels",
    "flashhub_kernels._finder",
    "flashhub_kernels._lazy",
    "flashhub_kernels._names",
    "flashhub_kernels._record",
}

# Slow to import, or not needed until something is loaded: none of them may come with
# the hook. (typing, re, dataclasses or threading alone cost more than the hook.)
NOT_WITH_THE_HOOK = [
    "packaging",
    "dataclasses",
    "typing",
    "re",
    "threading",
    "pathlib",
    "importlib.abc",
    "importlib.util",
    "json",
    "torch",
    "requests",
    "urllib3",
    "filelock",
    "http.client",
    "flashhub_kernels._api",
    "flashhub_kernels._config",
    "flashhub_kernels._variants",
    "flashhub_kernels._store",
    "flashhub_kernels._cache",
    "flashhub_kernels._manifest",
    "flashhub_kernels.errors",
]

# Modules of the cold path, of local directories and of lock files: a warm load from
# the cache imports none of them.
NOT_WITH_A_WARM_LOAD = [
    "packaging",
    "tomllib",
    "flashhub_kernels._download",
    "flashhub_kernels._cdn_documents",
    "flashhub_kernels._transport",
    "flashhub_kernels._local",
    "flashhub_kernels._lock",
    "flashhub_kernels._lockfile",
    "flashhub_kernels._native",  # the kernel loaded here has no native library
]


def _imported_by(statement: str, *, setup: str = "", cwd: Path | None = None) -> set[str]:
    """The modules that ``statement`` adds to ``sys.modules`` in a fresh interpreter
    that has run ``setup``."""
    code = "\n".join(
        [
            f"import sys\n{setup}",
            "before = set(sys.modules)",
            statement,
            "added = sorted(set(sys.modules) - before)",
            "import json\nprint(json.dumps(added))",
        ]
    )
    return set(json.loads(run_python(code, cwd=cwd).splitlines()[-1]))


def test_import_flashhub_imports_the_hook_and_nothing_heavy() -> None:
    added = _imported_by("import flashhub")
    assert {m for m in added if m.startswith("flashhub")} == HOOK_MODULES
    assert [m for m in NOT_WITH_THE_HOOK if m in added] == []


def test_import_flashhub_kernels_imports_no_more_than_the_hook() -> None:
    added = _imported_by("import flashhub_kernels")
    assert {m for m in added if m.startswith("flashhub")} == HOOK_MODULES - {"flashhub"}


@pytest.mark.parametrize("pyproject", [None, '[project]\nname = "app"\n[tool.flashhub]\n'])
def test_a_warm_load_imports_neither_the_cold_path_nor_packaging(
    cdn: CdnServer, tmp_path: Path, pyproject: str | None
) -> None:
    """Nor TOML, in a project whose pyproject.toml lists no trusted keys."""
    write_kernel(cdn.root, "acme/tensor-tricks", 1)
    load = "import flashhub.acme.tensor_tricks.v1"
    run_python(load)  # cold: downloads it
    project = tmp_path / "project"
    project.mkdir()
    if pyproject is not None:
        (project / "pyproject.toml").write_text(pyproject)
    added = _imported_by(load, setup="import torch", cwd=project)
    assert "flashhub.acme.tensor_tricks.v1" in added
    assert [m for m in NOT_WITH_A_WARM_LOAD if m in added] == []


def test_lazy_names_are_listed_and_resolve() -> None:
    code = textwrap.dedent(
        """
        import json, flashhub_kernels as fk
        listed = set(dir(fk))
        print(json.dumps([listed >= set(fk.__all__), fk.errors.__name__, fk.RepoInfo.__module__]))
        """
    )
    listed, errors, repo_info = json.loads(run_python(code))
    assert listed
    assert errors == "flashhub_kernels.errors"
    assert repo_info == "flashhub_kernels._names"
