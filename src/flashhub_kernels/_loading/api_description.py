"""A kernel's public API read from its source, for ``flashhub describe-api``: the
functions its package exports and the layers its ``layers`` module defines, each with
its signature and the first line of its docstring.

Nothing of the kernel runs: its modules are parsed with :mod:`ast`, never imported, so
a kernel can be described before it is trusted, and on a machine that could not load
it. What is listed is what the source states:

- a function is a public name of the package (its ``__all__``, else every name not
  starting with ``_``) that a ``def`` binds, in ``__init__.py`` or, through relative
  imports (``from ._ops import double``, ``from .impl import *``), in another module of
  the kernel;
- a layer is a public class of ``layers`` (``layers.py`` or ``layers/__init__.py``)
  with a ``forward``, its own or a base class's in the kernel. Its ``has_backward`` and
  ``can_torch_compile`` are what the class (or such a base) sets them to, the defaults
  (``True`` and ``False``) for a class of ``nn.Module`` that sets neither, and unknown
  (``None``) when the value is not a literal or a base class lies outside the kernel.

A name bound any other way (an assignment, an import from another package) would take
running the code to tell, and is not listed.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .._models.record import Record
from ..errors import KernelImportError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

_Def = ast.FunctionDef | ast.AsyncFunctionDef
# What a layer inherits its markers from when it sets none: nn.Module, however imported.
_MODULE_BASES = frozenset({"nn.Module", "torch.nn.Module", "Module"})
# The markers a layer may set, and what kernelize assumes when it sets none.
_MARKER_DEFAULTS = {"has_backward": True, "can_torch_compile": False}


class _Unset:
    """A marker neither the class nor its bases set."""


_UNSET = _Unset()
# try: blocks, and (from Python 3.11) try/except* blocks.
_TRY = tuple(getattr(ast, name) for name in ("Try", "TryStar") if hasattr(ast, name))


class FunctionApi(Record):
    """A function the kernel exports: the name it is exported as, its parameters (and
    return annotation) as written, and the first line of its docstring."""

    name: str
    signature: str
    doc: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "signature": self.signature, "doc": self.doc}


class LayerApi(Record):
    """A layer of the kernel's ``layers`` module: its ``forward``'s signature, the first
    line of its docstring (else of its ``forward``'s), and its markers (``None``:
    unknown without running the code)."""

    name: str
    signature: str
    doc: str | None = None
    has_backward: bool | None = None
    can_torch_compile: bool | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "signature": self.signature,
            "doc": self.doc,
            "attributes": {
                "has_backward": self.has_backward,
                "can_torch_compile": self.can_torch_compile,
            },
        }


class KernelApi(Record):
    """The public functions and layers of a kernel package, each sorted by name."""

    functions: tuple[FunctionApi, ...]
    layers: tuple[LayerApi, ...]


def describe_package(package_dir: Path) -> KernelApi:
    """The public API of the kernel package in ``package_dir`` (the directory holding its
    ``__init__.py``), read from its source without running any of it.

    Raises:
        KernelImportError: a module the description needs does not parse (the kernel
            could not be imported either).
    """
    source = _Source(package_dir)
    init = package_dir / "__init__.py"
    functions = [
        FunctionApi(name, _signature(found.node), _first_line(found.node))
        for name in source.public_names(init)
        if isinstance(found := source.resolve(init, name), _Located)
        and isinstance(found.node, _Def)
    ]
    layers_module = source.module_file(package_dir, "layers")
    layers = [] if layers_module is None else list(_layers(source, layers_module))
    return KernelApi(
        tuple(sorted(functions, key=lambda f: f.name)),
        tuple(sorted(layers, key=lambda layer: layer.name)),
    )


class _Located(Record):
    """A ``def`` or ``class`` statement, and the module file it is in."""

    node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    module: Path


class _Imported(Record):
    """A name bound by ``from <module of the kernel> import <name>``."""

    module: Path
    name: str


# What a module binds a name to: a statement, another module's name, a module of the
# kernel (its file), or None for anything only running the code would tell.
_Binding = _Located | _Imported | Path | None


class _Source:
    """The modules of one kernel package, each parsed once, when first needed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._bindings: dict[Path, dict[str, _Binding]] = {}
        self._all: dict[Path, list[str] | None] = {}

    def module_file(self, package: Path, dotted: str) -> Path | None:
        """The file of module ``dotted`` under the directory ``package``, if the kernel
        has one: ``a/b.py`` or ``a/b/__init__.py``."""
        base = package.joinpath(*dotted.split("."))
        for path in (base.with_name(base.name + ".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def public_names(self, module: Path) -> list[str]:
        """What ``from module import *`` binds: its ``__all__``, else its names not
        starting with ``_``."""
        bindings = self.bindings(module)
        listed = self._all[module]
        return listed if listed is not None else [n for n in bindings if not n.startswith("_")]

    def bindings(self, module: Path) -> dict[str, _Binding]:
        if module not in self._bindings:
            self._bindings[module] = {}  # a star import of itself, directly or not, finds this
            self._all[module] = None
            self._bindings[module] = self._bind(module, _parse(module))
        return self._bindings[module]

    def resolve(
        self, module: Path, name: str, seen: frozenset[_Imported] = frozenset()
    ) -> _Binding:
        """What ``name`` is in ``module``, following imports within the kernel."""
        bindings = self.bindings(module)
        if name not in bindings:  # a submodule, when imported by its full name
            return self.module_file(module.parent, name) if module.name == "__init__.py" else None
        binding = bindings[name]
        if not isinstance(binding, _Imported):
            return binding
        if binding in seen:  # imports in a circle: nothing is bound at the end of it
            return None
        return self.resolve(binding.module, binding.name, seen | {binding})

    def _bind(self, module: Path, tree: ast.Module) -> dict[str, _Binding]:
        bindings: dict[str, _Binding] = {}
        for statement in _top_level(tree.body):
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bindings[statement.name] = _Located(statement, module)
            elif isinstance(statement, ast.ImportFrom) and statement.level:
                bindings.update(self._imported(module, statement))
            elif isinstance(statement, (ast.Import, ast.ImportFrom)):
                bindings.update((_bound_name(alias), None) for alias in statement.names)
            else:
                self._note_all(module, statement)
                bindings.update((name, None) for name in _assigned(statement))
        return bindings

    def _imported(self, module: Path, statement: ast.ImportFrom) -> Iterator[tuple[str, _Binding]]:
        """The names a relative ``from ... import ...`` binds in ``module``."""
        package = self._package(module, statement.level)
        if package is None:  # above the kernel: another package
            yield from ((_bound_name(alias), None) for alias in statement.names)
            return
        source = (
            self.module_file(package, statement.module)
            if statement.module
            else package / "__init__.py"
        )
        for alias in statement.names:
            if source is None:
                yield _bound_name(alias), None
            elif alias.name == "*":
                yield from ((name, _Imported(source, name)) for name in self.public_names(source))
            elif statement.module is None:  # from . import x: the module x, unless bound
                yield (
                    _bound_name(alias),
                    self.module_file(package, alias.name) or _Imported(source, alias.name),
                )
            else:
                yield _bound_name(alias), _Imported(source, alias.name)

    def _package(self, module: Path, level: int) -> Path | None:
        """The directory of the package ``level`` dots name from ``module``; ``None``
        above the kernel's own."""
        package = module.parent
        for _ in range(level - 1):
            if package == self.root:
                return None
            package = package.parent
        return package

    def _note_all(self, module: Path, statement: ast.stmt) -> None:
        """Record ``__all__ = [...]`` (and ``+= [...]``) when it is a literal list."""
        if isinstance(statement, ast.Assign) and _names(statement.targets) == ["__all__"]:
            self._all[module] = _literal_names(statement.value)
        elif (
            isinstance(statement, ast.AugAssign)
            and _names([statement.target]) == ["__all__"]
            and self._all[module] is not None
        ):
            more = _literal_names(statement.value)
            listed = self._all[module]
            self._all[module] = None if more is None or listed is None else [*listed, *more]


def _parse(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, RecursionError) as exc:
        where = f"{path}:{exc.lineno}" if isinstance(exc, SyntaxError) else str(path)
        what = exc.msg if isinstance(exc, SyntaxError) else str(exc) or type(exc).__name__
        raise KernelImportError(
            f"{where}: the kernel's source does not parse ({what})",
            hint="the kernel cannot be imported either; report it to the kernel's publisher",
        ) from None


def _top_level(body: Iterable[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run when the module is, blocks (``if``, ``try``, ``with``)
    flattened: a name any branch binds is a name the module may bind."""
    for statement in body:
        if isinstance(statement, ast.If):
            yield from _top_level([*statement.body, *statement.orelse])
        elif isinstance(statement, _TRY):
            handlers = [s for handler in statement.handlers for s in handler.body]
            blocks = [*statement.body, *handlers, *statement.orelse, *statement.finalbody]
            yield from _top_level(blocks)
        elif isinstance(statement, ast.With | ast.AsyncWith):
            yield from _top_level(statement.body)
        else:
            yield statement


def _bound_name(alias: ast.alias) -> str:
    return alias.asname or alias.name.partition(".")[0]


def _assigned(statement: ast.stmt) -> list[str]:
    """The names an assignment binds (an annotation without a value binds none)."""
    if isinstance(statement, ast.Assign):
        return _names(statement.targets)
    if isinstance(statement, ast.AugAssign) or (
        isinstance(statement, ast.AnnAssign) and statement.value is not None
    ):
        return _names([statement.target])
    return []


def _names(targets: Iterable[ast.expr]) -> list[str]:
    names = []
    for target in targets:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            names += _names(target.elts)
    return names


def _literal_names(value: ast.expr) -> list[str] | None:
    """The strings of a literal list or tuple (or a sum of them); ``None`` otherwise."""
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        left, right = _literal_names(value.left), _literal_names(value.right)
        return None if left is None or right is None else [*left, *right]
    if not isinstance(value, ast.List | ast.Tuple):
        return None
    names = [
        e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
    ]
    return names if len(names) == len(value.elts) else None


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    returns = f" -> {ast.unparse(node.returns)}" if node.returns is not None else ""
    return f"({ast.unparse(node.args)}){returns}"


def _first_line(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> str | None:
    doc = ast.get_docstring(node)
    lines = doc.strip().splitlines() if doc else []
    return lines[0].strip() if lines else None


def _layers(source: _Source, module: Path) -> Iterator[LayerApi]:
    for name in source.public_names(module):
        found = source.resolve(module, name)
        if not (isinstance(found, _Located) and isinstance(found.node, ast.ClassDef)):
            continue
        forward = _forward(source, found.node, found.module, set())
        if forward is None:
            continue
        yield LayerApi(
            name,
            _signature(forward),
            _first_line(found.node) or _first_line(forward),
            has_backward=_marker_value(source, found.node, found.module, "has_backward"),
            can_torch_compile=_marker_value(source, found.node, found.module, "can_torch_compile"),
        )


def _bases(
    source: _Source, cls: ast.ClassDef, module: Path
) -> Iterator[tuple[ast.ClassDef, Path] | None]:
    """Each base class of ``cls`` but ``nn.Module``, and its module: found in the
    kernel, or ``None``."""
    for base in cls.bases:
        if ast.unparse(base) in _MODULE_BASES:
            continue
        found = source.resolve(module, base.id) if isinstance(base, ast.Name) else None
        if isinstance(found, _Located) and isinstance(found.node, ast.ClassDef):
            yield found.node, found.module
        else:
            yield None


def _forward(
    source: _Source, cls: ast.ClassDef, module: Path, seen: set[int]
) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``forward`` that ``cls`` defines or inherits from a class of the kernel."""
    if id(cls) in seen:
        return None
    seen.add(id(cls))
    for statement in _top_level(cls.body):
        if isinstance(statement, _Def) and statement.name == "forward":
            return statement
    for base in _bases(source, cls, module):
        forward = None if base is None else _forward(source, *base, seen)
        if forward is not None:
            return forward
    return None


def _marker_value(source: _Source, cls: ast.ClassDef, module: Path, name: str) -> bool | None:
    """The marker ``name`` of the layer ``cls``: as set, else its default; ``None`` when
    only running the code would tell."""
    found = _marker(source, cls, module, name, set())
    return _MARKER_DEFAULTS[name] if isinstance(found, _Unset) else found


def _marker(
    source: _Source, cls: ast.ClassDef, module: Path, name: str, seen: set[int]
) -> bool | _Unset | None:
    if id(cls) in seen:  # classes deriving from each other: no such class can exist
        return None
    seen.add(id(cls))
    for statement in _top_level(cls.body):
        if name in _assigned(statement):
            value = getattr(statement, "value", None)
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                return value.value
            return None
    for base in _bases(source, cls, module):
        found = None if base is None else _marker(source, *base, name, seen)
        if not isinstance(found, _Unset):
            return found
    return _UNSET
