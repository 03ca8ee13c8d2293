"""Reading a build directory: its variants, their files (hashed as they are scanned) and
the ``metadata.json`` each will be published with."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from .._constants import MANIFEST_NAME
from .._models.kernel_metadata import parse_python_depends
from .._models.manifest import (
    MAX_DOCUMENT_BYTES,
    MAX_FILES,
    check_relative_path,
    content_hash,
    dump_json,
    parse_metadata,
)
from .._models.record import Record
from .._utils.escaping import escape_controls
from .._utils.file_names import name_error, named_as_utf8
from .._utils.parsing import parse_capped
from .._variants.grammar import VariantNameError, is_variant_name, parse_variant
from ..errors import ManifestError, PublishError
from .layout import UNHASHED_FILES, VARIANTS, SourceFile, hash_file
from .metadata import variant_metadata, zip_archive_name
from .report import VariantReport
from .zipping import check_builders_archive, package_files, zip_package

_JUNK_NAMES = frozenset({"__pycache__", "Thumbs.db", "desktop.ini"})
# Python bytecode, and editors' backup (foo.py~) and swap files (vim's .foo.py.swp, the
# dot left out on Windows).
_JUNK_SUFFIXES = (".pyc", ".pyo", "~", ".swp", ".swo")
# What a kernel builder's bundle holds beside its variants (and so its build/ directory,
# which build-and-copy fills from the bundle): the filled model card and the kernel's
# benchmarks. The Hub gets them outside build/; a CDN tree has no place for them.
_BUNDLE_EXTRAS = frozenset({"CARD.md", "benchmarks"})


class VariantBuild(Record):
    """One variant of the build: its files (relative to the variant directory, ``/``
    separated), the ``metadata.json`` to publish, the ``python-depends`` its own
    ``metadata.json`` lists, its Python files as the build holds them (those that
    a zip build publishes in its archive), by the same relative paths, whether it is
    published in the zip layout, and the ``.pyc`` files it leaves out that a local load
    imports for want of their source (see :func:`_sourceless_bytecode`)."""

    name: str
    files: Mapping[str, SourceFile]
    metadata: bytes
    python_depends: tuple[str, ...]
    sources: Mapping[str, SourceFile]
    zipped: bool
    sourceless: tuple[str, ...]


def _is_junk(name: str) -> bool:
    auto_save = len(name) > 2 and name[0] == name[-1] == "#"  # Emacs's #foo.py#
    return name.startswith(".") or name in _JUNK_NAMES or name.endswith(_JUNK_SUFFIXES) or auto_save


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` worth publishing, sorted; symlinks are refused."""
    with os.scandir(directory) as scan:
        entries = sorted((e for e in scan if not _is_junk(e.name)), key=lambda e: e.name)
    for entry in entries:
        if not named_as_utf8(entry.name):  # its undecodable bytes escape as surrogates
            reason, hint = name_error()
            raise PublishError(f"cannot publish {entry.path}: {reason}", hint=hint)
        if escape_controls(entry.name) != entry.name:  # before a message shows it raw
            raise PublishError(
                f"cannot publish {escape_controls(entry.path)}: its name holds a control "
                "character (a newline, say)",
                hint="rename it",
            )
        if entry.is_symlink():
            raise _symlink_refused(entry.path)
        if not (entry.is_dir() or entry.is_file()):
            raise PublishError(
                f"{entry.path} is not a regular file or directory",
                hint="remove it, or move it out of the build: a build holds files and directories",
            )
    return entries


def _symlink_refused(path: str | Path) -> PublishError:
    return PublishError(
        f"{path} is a symlink; a published build holds only regular files",
        hint="copy the file into the build instead of linking to it",
    )


def variant_dirs(build_dir: Path) -> list[Path]:
    """The variant directories of ``build_dir`` (or of its ``build/``), checked."""
    if not build_dir.is_dir():
        raise PublishError(
            f"{build_dir} is not a directory",
            hint="pass a build directory (<variant>/<py_pkg>/...) or a kernel directory "
            "that contains build/",
        )
    builds = build_dir / "build"
    if builds.is_symlink():  # it would publish what it points to, maybe outside the kernel
        raise _symlink_refused(builds)
    if not builds.is_dir():
        _refuse_a_variant(build_dir)
    root = builds if builds.is_dir() else build_dir
    dirs: list[Path] = []
    for entry in _entries(root):
        if entry.name in _BUNDLE_EXTRAS:
            continue
        if not entry.is_dir():
            raise PublishError(
                f"unexpected file {entry.path}: the build directory {root} holds only "
                "variant directories such as torch-universal/",
                hint="move or delete the file",
            )
        dirs.append(Path(entry.path))
    if not dirs:
        raise PublishError(
            f"no build variants in {root}",
            hint="build the kernel first; expected <variant>/<py_pkg>/__init__.py under it",
        )
    return dirs


def _refuse_a_variant(build_dir: Path) -> None:
    """Refuse a directory one or two levels too deep: a variant's, or its package's,
    naming the directory to pass instead."""
    for variant, what in ((build_dir, "variant"), (build_dir.parent, "package")):
        if is_variant_name(variant.name):
            builds = variant.parent
            wanted, holding = (
                (builds.parent, "build/")
                if builds.name == "build"
                else (builds, f"{variant.name}/")
            )
            raise PublishError(
                f"{build_dir} is the {what} directory of the variant {variant.name}, not a "
                "build: publish takes all the variants at once",
                hint=f"pass {wanted}, the directory that holds {holding}",
            )


def scan_variant(
    variant_dir: Path,
    py_pkg: str,
    defaults: Mapping[str, object],
    *,
    layout: str | None = None,
    scratch: Path | None = None,
) -> VariantBuild:
    """Read and hash the files of one variant directory; ``defaults`` are the builder's
    fields its metadata.json gets where the build's own lacks them.

    ``layout="zip"`` lays a build of files out as a zip build, its archive written under
    ``scratch`` (see :mod:`.zipping`); a build that a builder laid out so (its own
    ``metadata.json`` says ``"build-layout": "zip"``) is published as it is, unless
    ``layout="files"`` asks for what it is not.
    """
    name = _checked_variant_name(variant_dir)
    metadata = variant_dir / MANIFEST_NAME
    extra = _read_build_metadata(metadata) if metadata.is_file() else {}
    builder_zipped = extra.get("build-layout") == "zip"
    if builder_zipped and layout == "files":
        raise PublishError(
            f"{metadata} lays the variant {name!r} out as a zip archive, not as files",
            hint="publish it without --layout files",
        )
    if _is_flattened(variant_dir) or builder_zipped:
        root, root_rel = variant_dir, ""
    else:
        root, root_rel = _package_dir(variant_dir, py_pkg), py_pkg
    files = {
        rel: hash_file(path) for rel, path in _walk(root, root_rel) if rel not in UNHASHED_FILES
    }
    sourceless = tuple(_sourceless_bytecode(root, root_rel))
    depends = _python_depends(extra, metadata)
    document = variant_metadata(name, files, extra, defaults, py_pkg, metadata)
    if builder_zipped:
        check_builders_archive(variant_dir / zip_archive_name(document, metadata))
    sources = files
    if layout == "zip" and not builder_zipped:
        assert scratch is not None, "a build laid out anew is written somewhere"
        sources = package_files(files, py_pkg)
        files, document = _zipped_anew(name, sources, document, py_pkg, metadata, scratch)
    zipped = builder_zipped or layout == "zip"
    data = _metadata_bytes(name, document, len(files), zipped)
    return VariantBuild(name, files, data, depends, sources, zipped, sourceless)


def _checked_variant_name(variant_dir: Path) -> str:
    """The name of ``variant_dir``, refused unless it is a variant name."""
    name = variant_dir.name
    try:
        parse_variant(name)
    except VariantNameError as exc:
        raise PublishError(
            f"bad variant directory name {name!r} in {variant_dir.parent}: {exc}",
            hint="rename it to the variant it was built for, e.g. torch213-cxx11-cpu-x86_64-linux",
        ) from None
    return name


def _zipped_anew(
    name: str,
    sources: Mapping[str, SourceFile],
    document: dict[str, object],
    py_pkg: str,
    metadata: Path,
    scratch: Path,
) -> tuple[dict[str, SourceFile], dict[str, object]]:
    """The files and ``metadata.json`` document of a build of files laid out in the zip
    layout: its package's ``sources`` in an archive written under ``scratch``."""
    archive = scratch / name / zip_archive_name(document, metadata)
    files = zip_package(sources, py_pkg, archive)
    own = {k: v for k, v in document.items() if k not in ("digest", "sizes")}
    zipped = variant_metadata(name, files, {**own, "build-layout": "zip"}, {}, py_pkg, metadata)
    return files, zipped


def _is_flattened(variant_dir: Path) -> bool:
    """Whether the build puts the package's files directly in the variant directory, as
    newer kernel builders do. Such a build may keep a ``<py_pkg>/`` folder beside them for
    older loaders; everything in the variant directory is then published as it is."""
    return (variant_dir / "__init__.py").is_file()


def _package_dir(variant_dir: Path, py_pkg: str) -> Path:
    """The variant's one package directory ``<py_pkg>/``, checked."""
    name = variant_dir.name
    entries = _entries(variant_dir)
    for entry in entries:
        if entry.name not in UNHASHED_FILES and (entry.name != py_pkg or not entry.is_dir()):
            found = ", ".join(repr(e.name) for e in entries if e.name not in UNHASHED_FILES)
            raise PublishError(
                f"variant {name!r} must hold exactly one package directory {py_pkg!r} "
                f"(the package name with '-' replaced by '_'), or the package's files "
                f"directly with an __init__.py; found {found}",
                hint=f"rename the package directory to {py_pkg!r} or check --repo-id",
            )
    package = variant_dir / py_pkg
    if not package.is_dir():
        raise PublishError(
            f"variant {name!r} has no package directory {py_pkg!r}",
            hint=f"expected {variant_dir}/{py_pkg}/__init__.py, or {variant_dir}/__init__.py",
        )
    if not (package / "__init__.py").is_file():
        raise PublishError(
            f"variant {name!r}: {py_pkg}/__init__.py is missing; the kernel must be a package",
            hint=f"add {package / '__init__.py'} (it is what the import hook executes)",
        )
    return package


def _walk(directory: Path, rel: str) -> Iterator[tuple[str, Path]]:
    """``(relative path, path)`` of every file under ``directory``, ``rel`` its own path."""
    for entry in _entries(directory):
        child = f"{rel}/{entry.name}" if rel else entry.name
        try:
            check_relative_path(child)
        except ValueError as exc:
            raise PublishError(f"cannot publish {entry.path}: {exc}") from None
        if entry.is_dir():
            yield from _walk(Path(entry.path), child)
        else:
            yield child, Path(entry.path)


def _sourceless_bytecode(directory: Path, rel: str) -> Iterator[str]:
    """The ``.pyc`` files under ``directory`` (``rel`` its own path) with no ``.py`` beside
    them: Python imports such a file from a directory (its sourceless loader), but publish
    leaves every ``.pyc`` out. Those in ``__pycache__`` are Python's cache of sources."""
    for folder, dirs, names in os.walk(directory):  # the tree _walk has checked
        dirs[:] = sorted(d for d in dirs if not _is_junk(d))
        here = PurePosixPath(rel, Path(folder).relative_to(directory).as_posix())
        present = set(names)
        for name in sorted(names):
            if name.endswith(".pyc") and not name.startswith(".") and name[:-1] not in present:
                yield (here / name).as_posix()


def _read_build_metadata(path: Path) -> dict[str, object]:
    """A build's own metadata.json, as a builder wrote it; read no further than the
    limit, so that a huge (or sparse) file is refused, not loaded into memory."""
    with path.open("rb") as file:
        data = file.read(MAX_DOCUMENT_BYTES + 1)
    try:
        document = parse_capped(data, json.loads, "JSON", json.JSONDecodeError, MAX_DOCUMENT_BYTES)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise PublishError(
            f"{path} is not a JSON object of at most 1 MiB",
            hint="fix it or delete it; publish writes the file digests itself",
        )
    return document


def _python_depends(metadata: Mapping[str, object], path: Path) -> tuple[str, ...]:
    """The ``python-depends`` of a build's own ``metadata.json``: the Python packages the
    kernel needs besides torch, as kernel builders write them."""
    try:
        return parse_python_depends(metadata.get("python-depends", []))
    except ValueError as exc:
        raise PublishError(
            f"{path}: {exc}", hint='write it as "python-depends": ["einops"], or leave it out'
        ) from None


def _metadata_bytes(variant: str, document: dict[str, object], files: int, zipped: bool) -> bytes:
    """``document``, of a variant of ``files`` files, as the bytes of its ``metadata.json``.

    Raises:
        PublishError: a client would refuse it.
    """
    data = dump_json(document)
    try:
        parse_metadata(data, source=f"{variant}/{MANIFEST_NAME}")  # what a client will accept
    except ManifestError as exc:
        if len(data) <= MAX_DOCUMENT_BYTES and files <= MAX_FILES:
            hint = "rename the file it names in the build (one of them, where it names two)"
        elif zipped:
            hint = "ship fewer files beside the archive"
        else:  # it lists each file of the package
            hint = (
                "publish it with --layout zip, whose metadata.json lists the package's one "
                "archive instead of each of its files, or ship fewer files"
            )
        raise PublishError(
            f"cannot publish variant {variant!r}: {exc.message}", hint=hint
        ) from None
    return data


def version_tree(builds: list[VariantBuild]) -> dict[str, bytes | SourceFile]:
    """What goes into the version directory: ``variants.json`` and each variant."""
    tree: dict[str, bytes | SourceFile] = {VARIANTS: dump_json(sorted(b.name for b in builds))}
    for build in builds:
        tree[f"build/{build.name}/{MANIFEST_NAME}"] = build.metadata
        tree.update({f"build/{build.name}/{rel}": src for rel, src in build.files.items()})
    return tree


def variant_report(build: VariantBuild) -> VariantReport:
    """The report of one published variant."""
    digests = {rel: src.digest for rel, src in build.files.items()}
    return VariantReport(
        name=build.name,
        files=len(build.files),
        bytes=sum(src.size for src in build.files.values()),
        content_hash=content_hash(digests),
    )
