"""What installing the hook and a warm kernel load import: only what they need.

Every process that imports ``flashhub`` pays for the modules the hook's installation
imports, and every job start for those of the first warm kernel import. Timings are the
benchmark's business (``benchmarks/``); these tests pin down the modules.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import json
import re
import sys
import textwrap
from pathlib import Path

import pytest

import test_cli
import test_import_hook
import test_lock
from conftest import run_python
from support.cdn_server import CdnServer
from support.trees import kernel_files, local_variant, write_kernel, write_variant

# All that `import flashhub` imports of this library: the package, the finder and the
# module-name grammar it parses with.
HOOK_MODULES = {
    "flashhub",
    "flashhub_kernels",
    "flashhub_kernels._finder",
    "flashhub_kernels._lazy",
    "flashhub_kernels._models",
    "flashhub_kernels._models.names",
    "flashhub_kernels._models.record",
}

# Slow to import, or not needed until something is loaded: none of them may come with
# the hook. (typing, re, dataclasses, functools or threading alone cost more than the hook.)
NOT_WITH_THE_HOOK = [
    "packaging",
    "dataclasses",
    "typing",
    "re",
    "functools",
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
    "flashhub_kernels._loading.api",
    "flashhub_kernels._config",
    "flashhub_kernels._variants.system",
    "flashhub_kernels._cache.obtain",
    "flashhub_kernels._cache.layout",
    "flashhub_kernels._models.manifest",
    "flashhub_kernels.errors",
]

# What a warm load that the cache's import table answers adds to the hook's modules, for a
# kernel without a native library, signatures or archs.
TABLE_HIT_MODULES = {
    "flashhub_kernels._constants",
    "flashhub_kernels._cache_imports",
    "flashhub_kernels._models.kernel_dir",
}

# Modules of the cold path, of local directories and of lock files: no warm load from the
# cache imports them, not even one that looks its kernel up in full and records it.
NOT_WITH_A_WARM_LOAD = [
    "packaging",
    "tomllib" if sys.version_info >= (3, 11) else "tomli",  # the TOML reader
    "flashhub_kernels._network.download",
    "flashhub_kernels._network.choosing",
    "flashhub_kernels._network.variant_index",
    "flashhub_kernels._network.versions",
    "flashhub_kernels._network.documents",
    "flashhub_kernels._network.transport",
    "flashhub_kernels._network.object_store",  # and fsspec, s3fs, botocore: object stores only
    "flashhub_kernels._network.fsspec_mirror",
    "flashhub_kernels._loading.local",
    "flashhub_kernels._loading.local_digest",  # a cached kernel was verified when fetched
    "flashhub_kernels._lockfiles.format",
    "flashhub_kernels._lockfiles.project",
    "flashhub_kernels._lockfiles.discovery",
    "flashhub_kernels._lockfiles.cache_check",
    "flashhub_kernels._lockfiles.locked_loading",
    "flashhub_kernels._lockfiles.predownload",
    "flashhub_kernels._lockfiles.pinning",
    "flashhub_kernels._lockfiles.offline_check",
    "flashhub_kernels._lockfiles.egg_lockfile",
    "flashhub_kernels._native",  # the kernel loaded here has no native library
    "flashhub_kernels._native_conflicts",
    "flashhub_kernels._twin_names",  # imported under one name only
    "flashhub_kernels._loading.api",  # the documented functions: not an import statement's
    "flashhub_kernels._loading.offline",
    "flashhub_kernels._cache.staging",
    "flashhub_kernels._cache.mutex",  # and filelock: a warm load takes no mutex
    "flashhub_kernels._cache.bytecode",
    "flashhub_kernels._models.manifest",  # the CDN's documents are parsed when fetched
    "flashhub_kernels._variants.verdicts",
    "flashhub_kernels._variants.choice",
    "flashhub_kernels._variants.archs",  # the kernel loaded here lists no archs
    "flashhub_kernels._utils.escaping",  # an error's text is escaped when it is raised
    "flashhub_kernels._loading.zip_layout",  # the kernel loaded here is not a zip build
    "flashhub_kernels._variants.compat",  # the index records the variant this system takes
    "flashhub_kernels.errors",  # imported when something fails
]


def _imported_by(
    statement: str, *, setup: str = "", cwd: Path | None = None, fresh: bool = False
) -> set[str]:
    """The modules that ``statement`` adds to ``sys.modules`` in a fresh process (with
    torch imported; with ``fresh``, a new interpreter, which has not) that has run
    ``setup``."""
    code = "\n".join(
        [
            f"import sys\n{setup}",
            "before = set(sys.modules)",
            statement,
            "added = sorted(set(sys.modules) - before)",
            "import json\nprint(json.dumps(added))",
        ]
    )
    return set(json.loads(run_python(code, cwd=cwd, fresh=fresh).splitlines()[-1]))


def test_import_flashhub_imports_the_hook_and_nothing_heavy() -> None:
    added = _imported_by("import flashhub", fresh=True)  # torch imports most of the list
    assert {m for m in added if m.startswith("flashhub")} == HOOK_MODULES
    assert [m for m in NOT_WITH_THE_HOOK if m in added] == []


def test_import_flashhub_kernels_imports_no_more_than_the_hook() -> None:
    added = _imported_by("import flashhub_kernels", fresh=True)
    assert {m for m in added if m.startswith("flashhub")} == HOOK_MODULES - {"flashhub"}


@pytest.mark.parametrize("pyproject", [None, '[project]\nname = "app"\n[tool.flashhub]\n'])
def test_a_warm_load_imports_neither_the_cold_path_nor_packaging(
    cdn: CdnServer, tmp_path: Path, pyproject: str | None
) -> None:
    """Nor TOML, in a project whose pyproject.toml lists no trusted keys. The first warm
    load there looks the kernel up in full; the next one is the import table's."""
    write_kernel(cdn.root, "acme/tensor-tricks", 1)
    load = "import flashhub.acme.tensor_tricks.v1"
    run_python(load)  # cold: downloads it
    project = tmp_path / "project"
    project.mkdir()
    if pyproject is not None:
        (project / "pyproject.toml").write_text(pyproject)
    in_full = _imported_by(load, setup="import torch", cwd=project)
    assert "flashhub.acme.tensor_tricks.v1" in in_full
    assert "flashhub_kernels._cache.obtain" in in_full
    assert [m for m in NOT_WITH_A_WARM_LOAD if m in in_full] == []
    from_the_table = _imported_by(load, setup="import flashhub, torch", cwd=project)
    assert "flashhub.acme.tensor_tricks.v1" in from_the_table
    assert {m for m in from_the_table if m.startswith("flashhub_kernels")} == TABLE_HIT_MODULES


README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_lists(start: str, end: str) -> set[str]:
    """The modules the README's layout section names between ``start`` and ``end``."""
    text = " ".join(README.read_text().split())
    listed = text[text.index(start) + len(start) : text.index(end, text.index(start))]
    names = re.findall(r"`([\w.]+)`", listed)
    return {name if name.startswith("flashhub") else f"flashhub_kernels.{name}" for name in names}


def test_the_readme_lists_what_the_hook_imports() -> None:
    listed = _readme_lists("`import flashhub` imports ", ", none of which")
    assert listed == HOOK_MODULES - {"flashhub"}


def test_the_readme_lists_what_a_warm_load_imports(cdn: CdnServer) -> None:
    """Of a kernel without a native library, signatures or archs: the README lists what
    those add after."""
    write_kernel(cdn.root, "acme/tensor-tricks", 1)
    load = "import flashhub.acme.tensor_tricks.v1"
    run_python(load)  # cold: downloads it
    in_full = _imported_by(load, setup="import flashhub, torch")
    from_the_table = _imported_by(load, setup="import flashhub, torch")
    looks_up = _readme_lists("looks its kernel up in full adds ", ", then records")
    records = _readme_lists("then records the answer with ", ". Either adds")
    assert {m for m in in_full if m.startswith("flashhub_kernels")} == looks_up | records
    answered = _readme_lists("and torch) adds ", "; a warm load")
    assert answered == TABLE_HIT_MODULES
    assert {m for m in from_the_table if m.startswith("flashhub_kernels")} == answered


# The most lines of library code a warm load of a kernel with a native library may import,
# the hook's included, where the import table answers it: every line of them is read,
# compiled or unmarshalled by every job that loads a kernel.
WARM_PATH_LINES = 1_443


def test_a_warm_load_of_a_native_kernel_stays_within_its_lines(cdn: CdnServer) -> None:
    files = kernel_files("tensor_tricks", "native") | {"tensor_tricks/_ops_cpu.so": b"\x7fELF"}
    write_variant(cdn.root, "acme/tensor-tricks", 1, local_variant(), files)
    variants = cdn.root / "kernels/acme/tensor-tricks/v1/variants.json"
    variants.write_text(json.dumps([local_variant()]))
    load = "import flashhub.acme.tensor_tricks.v1"
    run_python(load)  # cold: downloads it
    run_python(load)  # warm: looks it up in full, and records the answer
    added = _imported_by(load, setup="import torch")  # the hook's modules count too
    assert "flashhub_kernels._cache.obtain" not in added  # the table's answer
    library = sorted(m for m in added if m == "flashhub" or m.startswith("flashhub_kernels"))
    assert "flashhub_kernels._native" in library  # its native library was noted
    code = f"import importlib.util\nfor m in {library!r}: print(importlib.util.find_spec(m).origin)"
    lines = sum(len(Path(path).read_text().splitlines()) for path in run_python(code).split())
    assert lines <= WARM_PATH_LINES, f"a warm load imports {lines} lines: {library}"


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
    assert repo_info == "flashhub_kernels._models.names"


def _lazily_exporting_modules() -> list[str]:
    """The library's modules that define a module ``__getattr__`` (PEP 562)."""
    src = Path(__file__).resolve().parent.parent / "src"
    found = []
    for path in sorted(src.rglob("*.py")):
        tree = ast.parse(path.read_text())
        # What a module defines at its top, or in a top-level `if not TYPE_CHECKING:`.
        top = [n for node in tree.body for n in (node.body if isinstance(node, ast.If) else [node])]
        defined = {
            name.id
            for node in top
            if isinstance(node, ast.Assign)
            for target in node.targets
            for name in ast.walk(target)  # `__getattr__, __dir__ = ...` too
            if isinstance(name, ast.Name)
        } | {node.name for node in top if isinstance(node, ast.FunctionDef)}
        if "__getattr__" in defined:
            parts = path.relative_to(src).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def test_every_lazily_exporting_module_lists_its_lazy_names_before_loading_them() -> None:
    """``dir()`` (tab completion, discovery) shows what ``__all__`` exports, loaded or
    not; and listing loads nothing (``kernelize`` would import torch)."""
    modules = _lazily_exporting_modules()
    assert {"flashhub_kernels", "flashhub_kernels.layers"} <= set(modules)
    code = textwrap.dedent(
        f"""
        import importlib, json, sys
        missing = {{}}
        for name in {modules!r}:
            module = importlib.import_module(name)
            missing[name] = sorted(set(module.__all__) - set(dir(module)))
        print(json.dumps([missing, "torch" in sys.modules]))
        """
    )
    missing, torch_imported = json.loads(run_python(code, fresh=True))
    assert missing == {name: [] for name in modules}
    assert torch_imported is False


# What the tests of this file and of others check a process did not import (or did): a
# name that no longer exists would make such a check pass whatever gets imported.
MODULE_LISTS = {
    "HOOK_MODULES": sorted(HOOK_MODULES),
    "NOT_WITH_THE_HOOK": NOT_WITH_THE_HOOK,
    "TABLE_HIT_MODULES": sorted(TABLE_HIT_MODULES),
    "NOT_WITH_A_WARM_LOAD": NOT_WITH_A_WARM_LOAD,
    "test_lock.HTTP_MODULES": test_lock.HTTP_MODULES,
    "test_import_hook.HEAVY": list(test_import_hook.HEAVY),
    "test_import_hook.WARM_LOAD_LIBRARIES": list(test_import_hook.WARM_LOAD_LIBRARIES),
    "test_cli.HEAVY_FOR_THE_CLI": list(test_cli.HEAVY_FOR_THE_CLI),
}


@pytest.mark.parametrize("listed", MODULE_LISTS)
def test_every_module_the_import_checks_name_exists(listed: str) -> None:
    missing = [name for name in MODULE_LISTS[listed] if importlib.util.find_spec(name) is None]
    assert missing == []


def _resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute of one
    (``flashhub_kernels.errors.CacheError``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        module = ".".join(parts[:end])
        with contextlib.suppress(ModuleNotFoundError):  # raised below a plain module
            if importlib.util.find_spec(module) is not None:
                break
    value: object = importlib.import_module(module)
    for attribute in parts[end:]:
        if not hasattr(value, attribute):
            return False
        value = getattr(value, attribute)
    return True


def test_every_name_of_this_library_that_a_test_spells_exists() -> None:
    """Modules checked in a child's ``sys.modules``, ``monkeypatch`` targets, imports
    in code run in a child: each dotted ``flashhub_kernels`` name in the tests' text."""
    tests = Path(__file__).parent
    spelled = {
        (path.name, match)
        for path in sorted(tests.rglob("*.py"))
        for match in re.findall(r"\bflashhub_kernels(?:\.\w+)+", path.read_text())
    }
    assert len(spelled) > 20  # the pattern finds them
    assert sorted((file, name) for file, name in spelled if not _resolves(name)) == []
