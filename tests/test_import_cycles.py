"""No import cycles between the library's modules.

Read from the source (AST), not by importing: an edge is an ``import`` that runs when
its module is imported. An import inside a function is lazy, and one under
``if TYPE_CHECKING:`` is no import at all. A module-level cycle fails the test. A lazy
import that closes a cycle is a cycle broken on purpose: each one is listed below, so
that none appears by accident and none of them becomes module-level unnoticed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGES = ("flashhub", "flashhub_kernels")

# Lazy imports whose module-level twin would close a cycle: (importer, imported), each
# with the reason it is lazy.
ALLOWED_LAZY_EDGES: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((SRC / package).rglob("*.py")):
            parts = list(path.relative_to(SRC).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    body: list[ast.stmt], lazy: bool
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """The import statements of ``body`` and whether each runs only inside a function."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, lazy
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _imports(node.body, True)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse, lazy)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, []):
                    if isinstance(child, ast.stmt):
                        yield from _imports([child], lazy)
                    elif hasattr(child, "body"):  # except handlers, match cases
                        yield from _imports(child.body, lazy)


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]
) -> Iterator[str]:
    """The library modules an import statement of ``module`` imports."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        # `from . import x` imports the submodule x when there is one.
        names = [
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
            for alias in node.names
        ]
    for name in names:
        while name and name not in known:  # `import a.b.c` of a non-module attribute
            name = name.rpartition(".")[0]
        if name and name != module:
            yield name


def _edges() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """The module-level edges, by importer, and the lazy edges."""
    modules = _modules()
    known = set(modules)
    eager: dict[str, set[str]] = {name: set() for name in modules}
    lazy: set[tuple[str, str]] = set()
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, is_lazy in _imports(tree.body, False):
            for target in _targets(node, name, path.name == "__init__.py", known):
                if is_lazy:
                    lazy.add((name, target))
                else:
                    eager[name].add(target)
    return eager, lazy


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path of edges from ``start`` to ``goal``, or None."""
    paths = {start: [start]}
    todo = [start]
    while todo:
        node = todo.pop()
        for nxt in sorted(graph[node]):
            if nxt == goal:
                return [*paths[node], nxt]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                todo.append(nxt)
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each module-level edge that is on one, as module lists."""
    cycles = []
    seen: set[frozenset[str]] = set()
    for importer in sorted(graph):
        for imported in sorted(graph[importer]):
            path = _reaches(graph, imported, importer)
            if path is not None and frozenset(path) not in seen:
                seen.add(frozenset(path))
                cycles.append([importer, *path])
    return cycles


def test_no_module_level_import_cycle() -> None:
    eager, _ = _edges()
    assert [" -> ".join(cycle) for cycle in _cycles(eager)] == []


def test_the_lazy_imports_that_break_cycles_are_the_listed_ones() -> None:
    eager, lazy = _edges()
    closing = {edge for edge in lazy if _reaches(eager, edge[1], edge[0]) is not None}
    assert sorted(closing) == sorted(ALLOWED_LAZY_EDGES)


def test_the_reader_sees_module_level_imports_only() -> None:
    """The reader itself: a function's import is lazy, TYPE_CHECKING's is none, and
    ``from . import x`` in a package reaches its submodule."""
    eager, lazy = _edges()
    assert "flashhub_kernels._finder" in eager["flashhub"]
    assert "flashhub_kernels._lazy" in eager["flashhub_kernels"]
    assert "flashhub_kernels._constants" in eager["flashhub_kernels._network.session"]
    assert "flashhub_kernels._lazy" in eager["flashhub_kernels.layers"]  # from .._lazy import
    assert "flashhub_kernels._loading.api" not in eager["flashhub_kernels"]  # TYPE_CHECKING
    assert "flashhub_kernels.errors" not in eager["flashhub_kernels"]  # TYPE_CHECKING
    assert ("flashhub_kernels._finder", "flashhub_kernels._cache.obtain") in lazy
    assert "flashhub_kernels._cache.obtain" not in eager["flashhub_kernels._finder"]
