"""No import cycles between the library's modules, counting imports inside functions.

Read from the source (AST), not by importing. Every ``import`` statement that can run is
an edge: at module level, under ``try``, or inside a function (a lazy edge, marked so in
the report). Only an import under ``if TYPE_CHECKING:`` is none, since it never runs. A
cycle through any mix of lazy and module-level edges fails: a lazy import hides a cycle
from the interpreter, not from the reader, and the modules on it still depend on each
other both ways.

Between packages (each subpackage of ``flashhub_kernels``, and each of its top-level
modules, as one node) only module-level imports count: a function's import may reach back
into a package whose module-level imports reach this one, as long as no module does.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGES = ("flashhub", "flashhub_kernels")


@dataclass(frozen=True)
class Edge:
    """Where a module first imports another: a module-level import when it has one."""

    lazy: bool
    path: Path
    line: int


# Importer -> imported -> the edge.
Graph = dict[str, dict[str, Edge]]


def _modules(src: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of the packages under ``src``, by dotted name."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((src / package).rglob("*.py")):
            parts = list(path.relative_to(src).with_suffix("").parts)
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
    """The import statements of ``body`` that can run, and whether each is in a function."""
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
    """The modules of ``known`` that an import statement of ``module`` imports."""
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


def read_graph(src: Path, packages: Iterable[str]) -> Graph:
    """The import edges between the modules of ``packages`` under ``src``."""
    modules = _modules(src, packages)
    known = set(modules)
    graph: Graph = {name: {} for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node, lazy in _imports(tree.body, False):
            for target in _targets(node, name, path.name == "__init__.py", known):
                seen = graph[name].get(target)
                if seen is None or (seen.lazy and not lazy):
                    graph[name][target] = Edge(lazy, path, node.lineno)
    return graph


def _shortest_path(graph: Graph, start: str, goal: str) -> list[str] | None:
    """The shortest chain of imports from ``start`` to ``goal``, or None."""
    previous: dict[str, str] = {}
    todo = deque([start])
    while todo:
        node = todo.popleft()
        for nxt in sorted(graph[node]):
            if nxt in previous or nxt == start:
                continue
            previous[nxt] = node
            if nxt == goal:
                path = [goal]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return path[::-1]
            todo.append(nxt)
    return None


def find_cycles(graph: Graph) -> list[list[str]]:
    """A shortest cycle through each edge that is on one, as ``[a, b, ..., a]``; a cycle
    found through several of its edges is listed once."""
    cycles = []
    seen: set[frozenset[tuple[str, str]]] = set()
    for importer in sorted(graph):
        for imported in sorted(graph[importer]):
            path = _shortest_path(graph, imported, importer)
            if path is None:
                continue
            cycle = [importer, *path]
            edges = frozenset(pairwise(cycle))
            if edges not in seen:
                seen.add(edges)
                cycles.append(cycle)
    return cycles


def describe(cycle: list[str], graph: Graph, src: Path = SRC) -> str:
    """``a -> b -[lazy]-> c -> a``, then each edge's file and line."""
    chain = cycle[0]
    where = []
    for importer, imported in pairwise(cycle):
        edge = graph[importer][imported]
        chain += f" {'-[lazy]->' if edge.lazy else '->'} {imported}"
        where.append(f"\n    {edge.path.relative_to(src)}:{edge.line} imports {imported}")
    return chain + "".join(where)


def _package_of(module: str) -> str:
    """``flashhub_kernels._cache.obtain`` -> ``flashhub_kernels._cache``: the subpackage or
    top-level module of its package that ``module`` is part of."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: Graph) -> Graph:
    """The module-level imports of ``graph`` between packages, each with the first import
    (by importer, then imported module) that makes it."""
    packages: Graph = {_package_of(name): {} for name in graph}
    for importer, imported in sorted(graph.items()):
        for target, edge in sorted(imported.items()):
            source, destination = _package_of(importer), _package_of(target)
            if not edge.lazy and source != destination:
                packages[source].setdefault(destination, edge)
    return packages


def _write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_no_import_cycle() -> None:
    graph = read_graph(SRC, PACKAGES)
    cycles = [describe(cycle, graph) for cycle in find_cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_import_cycle_between_packages_at_module_level() -> None:
    graph = package_graph(read_graph(SRC, ["flashhub_kernels"]))
    cycles = [describe(cycle, graph) for cycle in find_cycles(graph)]
    assert not cycles, "import cycles between packages at module level:\n" + "\n".join(cycles)


def test_the_reader_sees_when_each_import_runs() -> None:
    """The reader itself: a function's import is lazy, TYPE_CHECKING's is none, and
    ``from . import x`` in a package reaches its submodule."""
    graph = read_graph(SRC, PACKAGES)

    def eager(importer: str, imported: str) -> bool:
        edge = graph[importer].get(imported)
        return edge is not None and not edge.lazy

    assert eager("flashhub", "flashhub_kernels._finder")
    assert eager("flashhub_kernels", "flashhub_kernels._lazy")
    assert eager("flashhub_kernels._network.session", "flashhub_kernels._constants")
    assert eager("flashhub_kernels.layers", "flashhub_kernels._lazy")  # from .._lazy import
    assert "flashhub_kernels._loading.api" not in graph["flashhub_kernels"]  # TYPE_CHECKING
    assert "flashhub_kernels.errors" not in graph["flashhub_kernels"]  # TYPE_CHECKING
    assert graph["flashhub_kernels._finder"]["flashhub_kernels._cache.obtain"].lazy


def test_a_cycle_closed_by_lazy_imports_is_found(tmp_path: Path) -> None:
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "def g():\n    from .a import name\n",
        },
    )
    graph = read_graph(tmp_path, ["pkg"])
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
    assert describe(find_cycles(graph)[0], graph, tmp_path) == (
        "pkg.a -> pkg.b -[lazy]-> pkg.c -[lazy]-> pkg.a"
        "\n    pkg/a.py:1 imports pkg.b"
        "\n    pkg/b.py:2 imports pkg.c"
        "\n    pkg/c.py:2 imports pkg.a"
    )


def test_a_cycle_through_a_try_block_is_found(tmp_path: Path) -> None:
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "try:\n    import pkg.b\nexcept ImportError:\n    pass\n",
            "pkg/b.py": "from .a import name\n",
        },
    )
    assert find_cycles(read_graph(tmp_path, ["pkg"])) == [["pkg.a", "pkg.b", "pkg.a"]]


def test_a_type_checking_import_closes_no_cycle(tmp_path: Path) -> None:
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "from . import a\n",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "def f():\n    from . import c\n",
            "pkg/c.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from .a import name\n",
        },
    )
    graph = read_graph(tmp_path, ["pkg"])
    assert graph["pkg.b"]["pkg.c"].lazy
    assert graph["pkg.c"] == {}
    assert find_cycles(graph) == []


def test_a_cycle_between_packages_is_found_at_module_level_only(tmp_path: Path) -> None:
    """No module reaches back to itself, yet the packages ``a`` and ``b`` import each
    other at module level; ``c`` imports ``a`` back only inside a function."""
    _write_package(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a/__init__.py": "",
            "pkg/a/x.py": "from ..b import y\n",
            "pkg/a/w.py": "from .. import c\n",
            "pkg/b/__init__.py": "",
            "pkg/b/y.py": "",
            "pkg/b/z.py": "from ..a import w\n",
            "pkg/c.py": "def f():\n    from .a import x\n",
        },
    )
    graph = read_graph(tmp_path, ["pkg"])
    assert find_cycles(graph) == []
    packages = package_graph(graph)
    assert find_cycles(packages) == [["pkg.a", "pkg.b", "pkg.a"]]
    assert describe(find_cycles(packages)[0], packages, tmp_path) == (
        "pkg.a -> pkg.b -> pkg.a\n    pkg/a/x.py:1 imports pkg.b\n    pkg/b/z.py:1 imports pkg.a"
    )
