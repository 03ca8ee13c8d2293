"""Checks of a build before it is published: its imports (none of the kernel itself by
name, none of a package it does not declare), the paths a zip build makes from
``__file__``, the compiled modules it leaves out, and the native libraries it shares
with versions already published."""

from __future__ import annotations

import ast
import contextlib
import re
import sys
from collections.abc import Iterator, Sequence

from .._constants import MANIFEST_NAME
from .._models.kernel_dir import NATIVE_SUFFIXES
from .._models.manifest import Manifest, parse_metadata
from .._models.names import ROOT_PACKAGE
from .._variants.grammar import as_variant
from ..errors import ManifestError, PublishError
from .build import VariantBuild
from .destination import Destination
from .layout import VERSION_DIR
from .report import FileRelativePath, SharedNativeLibrary, SourcelessModule, UndeclaredImport

# What a kernel imports without declaring it (its own package, by name, is refused): the
# standard library, torch, this library (get_kernel_dep), and on the backends whose torch
# depends on it, Triton.
_PROVIDED = frozenset({*sys.stdlib_module_names, "torch", ROOT_PACKAGE, "flashhub_kernels"})
_WITH_TRITON = frozenset({"cuda", "rocm"})
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The exceptions an except clause names that catch a failed import (ModuleNotFoundError
# is an ImportError).
_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})
# Calls that make a location of the path they are given (os.path.dirname, Path, open, by
# any spelling): given __file__ in a zip build, a location inside the archive.
_LOCATING_CALLS = frozenset(
    {"Path", "PurePath", "PosixPath", "abspath", "dirname", "join", "normpath", "open", "realpath"}
)


def check_sources(build: VariantBuild, py_pkg: str) -> list[UndeclaredImport]:
    """Refuse a build whose Python files are not valid Python or import the kernel's own
    package absolutely; return the packages they import that the build does not declare.

    What a kernel may import without declaring it: the standard library, torch, and
    itself (relatively). Each other package must be in the variant's ``python-depends``
    (compared by normalised name: ``Some-Pkg`` declares ``some_pkg``), unless each import
    of it is optional (:func:`_optional_imports`).
    """
    declared = _declared_modules(build.python_depends)
    with_triton = as_variant(build.name).backend in _WITH_TRITON
    provided = _PROVIDED | ({"triton"} if with_triton else set())
    undeclared: dict[str, UndeclaredImport] = {}
    for rel, tree in _parsed_sources(build):
        optional = _optional_imports(tree)
        for line, module in _checked_imports(tree, f"{build.name}/{rel}", py_pkg):
            top = module.partition(".")[0]
            known = top in provided or _normalized(top) in declared
            if known or top in undeclared or (line, module) in optional:
                continue
            undeclared[top] = UndeclaredImport(top, f"build/{build.name}/{rel}", line)
    return list(undeclared.values())


def file_relative_paths(build: VariantBuild) -> list[FileRelativePath]:
    """The Python files of a build published in the zip layout that make a path from
    ``__file__`` (passed straight to a call in :data:`_LOCATING_CALLS`), each with the
    first line that does; none for a build published as files."""
    if not build.zipped:
        return []
    lines = {
        rel: [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and _locates_file(node)
        ]
        for rel, tree in _parsed_sources(build)
    }
    return [
        FileRelativePath(f"build/{build.name}/{rel}", min(at)) for rel, at in lines.items() if at
    ]


def sourceless_modules(build: VariantBuild) -> list[SourcelessModule]:
    """The ``.pyc`` files of ``build`` without their ``.py``: modules of a local load that
    the published version lacks."""
    return [SourcelessModule(f"build/{build.name}/{rel}") for rel in build.sourceless]


def _locates_file(call: ast.Call) -> bool:
    """Whether ``call`` is a locating call given ``__file__`` itself."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
    return name in _LOCATING_CALLS and any(
        isinstance(arg, ast.Name) and arg.id == "__file__" for arg in call.args
    )


def _parsed_sources(build: VariantBuild) -> Iterator[tuple[str, ast.Module]]:
    """The Python files of ``build``, parsed, by relative path; refused if one is not
    valid Python."""
    for rel, source in sorted(build.sources.items()):
        if rel.endswith(".py"):
            shown = f"{build.name}/{rel}"
            try:
                tree = ast.parse(source.path.read_bytes(), filename=shown)
            except SyntaxError as exc:
                raise PublishError(f"{shown}:{exc.lineno}: not valid Python: {exc.msg}") from None
            yield rel, tree


def _checked_imports(tree: ast.Module, shown: str, py_pkg: str) -> list[tuple[int, str]]:
    """The absolute imports of the file ``tree``, by line; refused if it imports the
    kernel's own package absolutely: by its build name, or under the import hook's
    namespace, where the kernel really lives once loaded."""
    imports = sorted(_absolute_imports(tree))
    bad = [
        f"{shown}:{line}: {module}"
        for line, module in imports
        if module.split(".")[0] in (py_pkg, ROOT_PACKAGE)
    ]
    if bad:
        raise PublishError(
            "absolute self-import in the kernel (it must import its own modules relatively):\n  "
            + "\n  ".join(bad),
            hint=f"write 'from . import x' or 'from .x import y' instead of 'import {py_pkg}...': "
            "a loaded kernel lives under a unique module name, not under its package name",
        )
    return imports


def _declared_modules(python_depends: Sequence[str]) -> set[str]:
    """The modules ``python_depends`` provide, normalised: each entry's name, and the
    module a load checks for it where the two differ (``pyyaml``: ``yaml``)."""
    from .._loading.requirements import python_package

    names = {_requirement_name(entry) for entry in python_depends}
    modules = {python_package(entry)[1] for entry in python_depends}
    return {_normalized(name) for name in names | modules if name}


def _requirement_name(entry: str) -> str:
    """The package name of a ``python-depends`` entry (``einops>=0.7`` -> ``einops``)."""
    match = _REQUIREMENT_NAME.match(entry.strip())
    return match[0] if match else entry


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _absolute_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        yield from _imported(node)


def _imported(node: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of what ``node`` imports absolutely, if it is an import."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.lineno, node.module


def _optional_imports(tree: ast.AST) -> set[tuple[int, str]]:
    """The absolute imports of ``tree`` that run in the body of a ``try`` (at any depth,
    in a function too) whose except clause catches their ``ImportError`` and does not
    raise again: the module is optional, not a dependency."""
    return {
        found
        for node in ast.walk(tree)
        if isinstance(node, ast.Try) and any(map(_tolerates_import_error, node.handlers))
        for inner in _run_with(node.body)
        for found in _imported(inner)
    }


def _tolerates_import_error(handler: ast.ExceptHandler) -> bool:
    """Whether ``handler`` catches an ``ImportError`` (bare, by a name of
    :data:`_IMPORT_ERRORS`, or a tuple holding one) and goes on without raising."""
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    catches = caught is None or any(
        isinstance(name, ast.Name) and name.id in _IMPORT_ERRORS for name in names
    )
    return catches and not any(isinstance(statement, ast.Raise) for statement in handler.body)


def _run_with(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``statements`` that run when they do: not the bodies of the
    functions they define, which run when called, outside the ``try``."""
    pending: list[ast.AST] = list(statements)
    while pending:  # not recursive: a long expression nests deeper than the stack
        node = pending.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            pending.extend(ast.iter_child_nodes(node))


def shared_natives(
    destination: Destination, pkg_rel: str, version: int, builds: Sequence[VariantBuild]
) -> Iterator[SharedNativeLibrary]:
    """The native libraries of ``builds`` that another version under ``pkg_rel`` ships:
    the same bytes in any variant, or the same file name in the same variant."""
    ours = [
        (f"build/{build.name}/{rel}", build.name, source.digest)
        for build in builds
        for rel, source in sorted(build.files.items())
        if rel.endswith(NATIVE_SUFFIXES)
    ]
    if not ours:
        return
    for other_version, variant, manifest in _published_manifests(
        destination, pkg_rel, exclude=version
    ):
        for rel, digest in sorted(manifest.files.items()):
            if not rel.endswith(NATIVE_SUFFIXES):
                continue
            theirs = f"build/{variant}/{rel}"
            for file, our_variant, our_digest in ours:
                same_bytes = our_digest == digest
                same_name = (
                    our_variant == variant and file.rpartition("/")[2] == rel.rpartition("/")[2]
                )
                if same_bytes or same_name:
                    yield SharedNativeLibrary(file, other_version, theirs, same_bytes)


def _published_manifests(
    destination: Destination, pkg_rel: str, *, exclude: int
) -> Iterator[tuple[int, str, Manifest]]:
    """``(version, variant, manifest)`` of every variant published under ``pkg_rel``
    but those of version ``exclude``; unreadable manifests are passed over."""
    for name in destination.subdirs(pkg_rel):
        match = VERSION_DIR.fullmatch(name)
        if match is None or int(match[1]) == exclude:
            continue
        builds = f"{pkg_rel}/{name}/build"
        for variant in (v for v in destination.subdirs(builds) if not v.startswith(".")):
            data = destination.read(f"{builds}/{variant}/{MANIFEST_NAME}")
            if data is not None:
                with contextlib.suppress(ManifestError):
                    yield int(match[1]), variant, parse_metadata(data)
