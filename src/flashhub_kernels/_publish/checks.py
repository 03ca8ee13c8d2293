"""Checks of a build before it is published: its imports, and the native libraries it
shares with versions already published."""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from .._kernel_dir import NATIVE_SUFFIXES
from .._manifest import Manifest, parse_metadata
from ..errors import ManifestError, PublishError
from .build import VariantBuild
from .layout import METADATA, VERSION_DIR
from .report import SharedNativeLibrary

# Top-level modules a kernel must never import absolutely: itself (under its build name)
# and the import hook's namespace, under which the kernel really lives once loaded.
_HOOK_ROOT = "flashhub"


def check_imports(build: VariantBuild, py_pkg: str) -> None:
    """Refuse a build whose Python files are not valid Python or import the kernel's own
    package absolutely."""
    for rel, source in sorted(build.files.items()):
        if rel.endswith(".py"):
            _check_file_imports(source.path, f"{build.name}/{rel}", py_pkg)


def _check_file_imports(path: Path, shown: str, py_pkg: str) -> None:
    try:
        tree = ast.parse(path.read_bytes(), filename=shown)
    except SyntaxError as exc:
        raise PublishError(f"{shown}:{exc.lineno}: not valid Python: {exc.msg}") from None
    bad = [
        f"{shown}:{line}: {module}"
        for line, module in _absolute_imports(tree)
        if module.split(".")[0] in (py_pkg, _HOOK_ROOT)
    ]
    if bad:
        raise PublishError(
            "absolute self-import in the kernel (it must import its own modules relatively):\n  "
            + "\n  ".join(bad),
            hint=f"write 'from . import x' or 'from .x import y' instead of 'import {py_pkg}...': "
            "a loaded kernel lives under a unique module name, not under its package name",
        )


def _absolute_imports(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def shared_natives(
    pkg_dir: Path, version: int, builds: Sequence[VariantBuild]
) -> Iterator[SharedNativeLibrary]:
    """The native libraries of ``builds`` that another version under ``pkg_dir`` ships:
    the same bytes in any variant, or the same file name in the same variant."""
    ours = [
        (f"build/{build.name}/{rel}", build.name, source.digest)
        for build in builds
        for rel, source in sorted(build.files.items())
        if rel.endswith(NATIVE_SUFFIXES)
    ]
    if not ours:
        return
    for other_version, variant, manifest in _published_manifests(pkg_dir, exclude=version):
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


def _published_manifests(pkg_dir: Path, *, exclude: int) -> Iterator[tuple[int, str, Manifest]]:
    """``(version, variant, manifest)`` of every variant published under ``pkg_dir``
    but those of version ``exclude``; unreadable manifests are passed over."""
    if not pkg_dir.is_dir():
        return
    for child in sorted(pkg_dir.iterdir()):
        match = VERSION_DIR.fullmatch(child.name)
        if match is None or int(match[1]) == exclude or child.is_symlink():
            continue
        for path in sorted(child.glob(f"build/*/{METADATA}")):
            with contextlib.suppress(OSError, ManifestError):
                yield int(match[1]), path.parent.name, parse_metadata(path.read_bytes())
