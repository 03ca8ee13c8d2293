"""Turn a kernel build directory into the CDN tree of one published version.

The input is either form (a ``build/`` subdirectory, when present, is used)::

    <build_dir>/<variant>/<py_pkg>/...            a bare build directory
    <kernel_dir>/build/<variant>/<py_pkg>/...     a kernel directory holding build/

The output, under ``<out>/<prefix>/<org>/<pkg>/``, is ready to upload to a static host::

    versions.json                          every published version, merged with what is there
    v<N>/variants.json                     the variant names of this version
    v<N>/build/<variant>/metadata.json     {"digest": {"files": {relpath: base64 sha256}},
                                            "sizes": {relpath: bytes}}
    v<N>/build/<variant>/<py_pkg>/...      a copy of every file of the variant

A published version is immutable: publishing different content under an existing
version is refused unless ``force=True``; publishing the same content again changes
nothing on disk.

With signing keys, each of the three documents gets a ``.sig`` beside it
(``versions.json.sig``, ``v<N>/variants.json.sig``, ``.../metadata.json.sig``; see
:mod:`._signing`). The ``.sig`` files of a new version are written in the same staging
directory as its files; those of a version already in place, and ``versions.json.sig``,
are replaced one by one. Several keys sign in one publish, so that a new version and
the ``versions.json`` that lists it carry the old and the new key's signatures while
keys are rotated. :func:`sign_tree` signs a tree published without a key.
A signature is not content: adding one never makes a version "different".
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from ._config import DEFAULT_PREFIX, normalize_prefix
from ._filesystem import write_atomic
from ._hashing import CHUNK_SIZE, HashingWriter, sha256_file
from ._kernel_dir import NATIVE_SUFFIXES
from ._manifest import (
    MANIFEST_NAME,
    MAX_DOCUMENT_BYTES,
    Manifest,
    check_relative_path,
    content_hash,
    dump_json,
    encode_digest,
    parse_metadata,
    parse_variants,
    parse_versions,
)
from ._names import RepoInfo, parse_repo_id
from ._signing import (
    SIG_SUFFIX,
    DocumentKind,
    SigningKey,
    dump_signatures,
    load_signing_key,
    parse_signatures,
    sign_document,
)
from ._variants import VariantNameError, parse_variant
from .errors import (
    IntegrityError,
    ManifestError,
    PublishError,
    SharedNativeLibraryWarning,
    SignatureError,
)

FILE_MODE = 0o644
DIR_MODE = 0o755
METADATA = "metadata.json"
VARIANTS = "variants.json"
VERSIONS = "versions.json"

_JUNK_NAMES = frozenset({"__pycache__", "Thumbs.db", "desktop.ini"})
_JUNK_SUFFIXES = (".pyc", ".pyo")
# The keys of metadata.json that publish writes from the files; a build's own are replaced.
_WRITTEN_KEYS = frozenset({"digest", "sizes"})
# Top-level modules a kernel must never import absolutely: itself (under its build name)
# and the import hook's namespace, under which the kernel really lives once loaded.
_HOOK_ROOT = "flashhub"
_VERSION_DIR = re.compile(r"v([1-9][0-9]*)")
_VARIANT_MANIFEST = re.compile(r"build/([^/]+)/metadata\.json")
# How to publish into a kernel whose versions.json is signed, without a key.
_UNSIGNED_HINT = (
    "pass --sign KEYFILE (sign= in Python); to stop signing the kernel, delete its .sig files"
)


@dataclass(frozen=True)
class _SourceFile:
    """One file of a variant in the build directory, hashed when scanned."""

    path: Path
    digest: bytes
    size: int


# What goes into the version directory: relative path -> literal bytes or a build file.
_Tree = Mapping[str, bytes | _SourceFile]
_Outcome = Literal["unchanged", "created", "replaced"]


@dataclass(frozen=True)
class _VariantBuild:
    name: str
    files: Mapping[str, _SourceFile]  # relative to the variant dir, '/' separated
    metadata: bytes


@dataclass(frozen=True)
class VariantReport:
    """One published variant: its name, file count, total size and content hash."""

    name: str
    files: int
    bytes: int
    content_hash: str  # ``sha256-<hex>`` over its manifest, the value lock files pin


@dataclass(frozen=True)
class SharedNativeLibrary:
    """A native library of the published version that another version also ships.

    Attributes:
        file: The library, relative to the published version's directory
            (``build/<variant>/<py_pkg>/<name>.so``).
        version: The other version.
        other_file: Its library, relative to that version's directory.
        same_bytes: The two files are identical; else they are different builds of the
            same file name, and so (by the naming rule) of the same op namespace.
    """

    file: str
    version: int
    other_file: str
    same_bytes: bool

    def describe(self, repo_id: str, version: int) -> str:
        """The warning, for version ``version`` of ``repo_id``."""
        if self.same_bytes:
            what = f"is byte-identical to v{self.version}'s {self.other_file}"
        else:
            namespace = self.file.rpartition("/")[2].partition(".")[0]
            what = (
                f"is another build of v{self.version}'s {self.other_file}: by its file name "
                f"both register the op namespace {namespace}"
            )
        return (
            f"{repo_id} v{version}: {self.file} {what}. Two versions that share one native "
            f"op namespace cannot be loaded side by side in one process (loading v{version} "
            f"beside v{self.version} raises NativeLibraryConflictError); rebuild with a "
            "namespace unique to the build, _<py_pkg>_<backend>_<hash of its sources>"
        )


@dataclass(frozen=True)
class PublishReport:
    """What :func:`publish` did.

    Attributes:
        repo_id: The kernel, ``<org>/<pkg>``.
        version: The published version number.
        version_dir: The ``v<N>`` directory on disk.
        variants: The published variants, sorted by name.
        versions: The content of ``versions.json`` after publishing.
        written: Files created or replaced, relative to ``out``, sorted, ``/`` separated.
        bytes_written: Total size of the files in ``written``.
        noop: The version was already published with identical content and
            ``versions.json`` already listed it, with the same signatures: nothing was
            touched.
        replaced: ``force=True`` replaced a version that held different content.
        signed_by: The key ids of the keys that signed the documents, in the order
            given; empty when nothing was signed.
        shared_natives: The native libraries this version shares with other versions
            in ``out`` (each also issued as a :class:`SharedNativeLibraryWarning`).
    """

    repo_id: str
    version: int
    version_dir: Path
    variants: tuple[VariantReport, ...]
    versions: tuple[int, ...]
    written: tuple[str, ...]
    bytes_written: int
    noop: bool
    replaced: bool
    signed_by: tuple[str, ...] = ()
    shared_natives: tuple[SharedNativeLibrary, ...] = ()

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (what ``flashhub publish --json`` prints)."""
        return {
            "repo_id": self.repo_id,
            "version": self.version,
            "version_dir": str(self.version_dir),
            "variants": [asdict(v) for v in self.variants],
            "versions": list(self.versions),
            "written": list(self.written),
            "bytes_written": self.bytes_written,
            "noop": self.noop,
            "replaced": self.replaced,
            "signed_by": list(self.signed_by),
            "shared_natives": [asdict(shared) for shared in self.shared_natives],
        }


KeySource = str | os.PathLike[str] | SigningKey  # a key, or the path of its key file


def publish(
    build_dir: str | os.PathLike[str],
    *,
    repo_id: str,
    version: int,
    out: str | os.PathLike[str],
    prefix: str = DEFAULT_PREFIX,
    force: bool = False,
    sign: KeySource | Sequence[KeySource] | None = None,
) -> PublishReport:
    """Publish a kernel build as version ``version`` of ``repo_id`` into the CDN tree ``out``.

    Args:
        build_dir: A build directory holding ``<variant>/<py_pkg>/``, or a kernel
            directory holding ``build/<variant>/<py_pkg>/``.
        repo_id: ``<org>/<pkg>``; ``<py_pkg>`` is ``<pkg>`` with ``-`` replaced by ``_``.
        version: The version number, ``>= 1``.
        out: The root of the CDN tree (created if missing).
        prefix: Path under ``out`` where the kernel tree starts; ``"kernels"`` by default,
            the client's default ``FLASHHUB_CDN_PREFIX`` (``""``: ``out`` itself).
        force: Replace the version if it exists with different content.
        sign: A signing key, or the path of a key file (``flashhub keygen``), or several:
            sign the version's ``metadata.json`` and ``variants.json`` files and
            ``versions.json`` with each (``.sig`` files beside them, keeping the
            signatures of other keys on documents whose bytes stay the same). ``None``:
            sign nothing.

    Returns:
        A :class:`PublishReport`.

    Raises:
        ValueError: ``repo_id``, ``version`` or ``prefix`` is malformed.
        PublishError: The build is invalid, the version exists with different content,
            the key file cannot be used, or the kernel's ``versions.json`` is signed and
            no key is given while something would change.
        SignatureError: Signing needs the ``cryptography`` package, which is missing.
    """
    repo = RepoInfo(repo_id, version)
    keys = _signing_keys(sign)
    prefix_parts = [p for p in normalize_prefix(prefix).split("/") if p]
    builds = [_scan_variant(d, repo.py_pkg) for d in _variant_dirs(Path(build_dir))]
    tree = _version_tree(builds)

    out_path = Path(out)
    pkg_dir = out_path.joinpath(*prefix_parts, repo.org, repo.name)
    version_dir = pkg_dir / f"v{repo.version}"
    old_versions, versions = _merged_versions(pkg_dir / VERSIONS, repo.version)
    unsigned = None if keys else _unsigned_refusal(pkg_dir, repo)
    if unsigned is not None and dump_json(versions) != old_versions:
        raise unsigned
    outcome, written = _place_version(
        tree, version_dir, repo, force=force, keys=keys, unsigned=unsigned
    )
    # versions.json goes last, so it never lists a version whose files are not in place.
    written += _write_versions(pkg_dir / VERSIONS, old_versions, versions, repo, keys)
    shared = tuple(_shared_natives(pkg_dir, repo.version, builds))
    for library in shared:
        warnings.warn(
            library.describe(repo.repo_id, repo.version), SharedNativeLibraryWarning, stacklevel=2
        )
    return PublishReport(
        repo_id=repo.repo_id,
        version=repo.version,
        version_dir=version_dir,
        variants=tuple(_variant_report(b) for b in builds),
        versions=tuple(versions),
        written=tuple(sorted(p.relative_to(out_path).as_posix() for p in written)),
        bytes_written=sum(p.stat().st_size for p in written),
        noop=outcome == "unchanged" and not written,
        replaced=outcome == "replaced",
        signed_by=tuple(k.key_id for k in keys),
        shared_natives=shared,
    )


def _signing_keys(sign: KeySource | Sequence[KeySource] | None) -> tuple[SigningKey, ...]:
    """The keys ``sign`` gives, each once, in order (key files read and checked)."""
    if sign is None:
        return ()
    sources = [sign] if isinstance(sign, (str, os.PathLike, SigningKey)) else list(sign)
    keys: dict[str, SigningKey] = {}
    for source in sources:
        key = source if isinstance(source, SigningKey) else load_signing_key(source)
        keys.setdefault(key.key_id, key)
    return tuple(keys.values())


def _unsigned_refusal(pkg_dir: Path, repo: RepoInfo) -> PublishError | None:
    """The error for a publish without a key into a kernel whose ``versions.json`` is
    signed, raised if it would change anything: verifying clients would refuse it."""
    sig = pkg_dir / (VERSIONS + SIG_SUFFIX)
    if not sig.exists():
        return None
    return PublishError(
        f"{repo.repo_id} is signed ({sig} exists), and publishing {repo} without a signing "
        "key would leave documents unsigned or with signatures that no longer match",
        hint=_UNSIGNED_HINT,
    )


# --- reading and validating the build ------------------------------------------------


def _is_junk(name: str) -> bool:
    return name.startswith(".") or name in _JUNK_NAMES or name.endswith(_JUNK_SUFFIXES)


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    """The entries of ``directory`` worth publishing, sorted; symlinks are refused."""
    with os.scandir(directory) as scan:
        entries = sorted((e for e in scan if not _is_junk(e.name)), key=lambda e: e.name)
    for entry in entries:
        if entry.is_symlink():
            raise PublishError(
                f"{entry.path} is a symlink; a published build holds only regular files",
                hint="copy the file into the build instead of linking to it",
            )
        if not (entry.is_dir() or entry.is_file()):
            raise PublishError(f"{entry.path} is not a regular file or directory")
    return entries


def _variant_dirs(build_dir: Path) -> list[Path]:
    if not build_dir.is_dir():
        raise PublishError(
            f"{build_dir} is not a directory",
            hint="pass a build directory (<variant>/<py_pkg>/...) or a kernel directory "
            "that contains build/",
        )
    root = build_dir / "build" if (build_dir / "build").is_dir() else build_dir
    dirs: list[Path] = []
    for entry in _entries(root):
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


def _scan_variant(variant_dir: Path, py_pkg: str) -> _VariantBuild:
    name = variant_dir.name
    try:
        parse_variant(name)
    except VariantNameError as exc:
        raise PublishError(
            f"bad variant directory name {name!r} in {variant_dir.parent}: {exc}",
            hint="rename it to the variant it was built for, e.g. torch213-cxx11-cpu-x86_64-linux",
        ) from None
    metadata = variant_dir / METADATA
    extra = _read_build_metadata(metadata) if metadata.is_file() else {}
    if _is_flattened(variant_dir):
        files = {rel: _hash_file(path) for rel, path in _walk(variant_dir, "") if rel != METADATA}
    else:
        files = {
            rel: _hash_file(path) for rel, path in _walk(_package_dir(variant_dir, py_pkg), py_pkg)
        }
    for rel, source in files.items():
        if rel.endswith(".py"):
            _check_imports(source.path, f"{name}/{rel}", py_pkg)
    return _VariantBuild(name, files, _metadata_bytes(name, files, extra))


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
        if entry.name != METADATA and (entry.name != py_pkg or not entry.is_dir()):
            found = ", ".join(repr(e.name) for e in entries if e.name != METADATA)
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


def _hash_file(path: Path) -> _SourceFile:
    return _SourceFile(path, sha256_file(path), path.stat().st_size)


def _check_imports(path: Path, shown: str, py_pkg: str) -> None:
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


def _read_build_metadata(path: Path) -> dict[str, object]:
    """Keys of a build's own metadata.json are published as they are, but for the ones
    publish writes itself (``digest``, ``sizes``)."""
    data = path.read_bytes()
    try:
        document = json.loads(data) if len(data) <= MAX_DOCUMENT_BYTES else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        document = None
    if not isinstance(document, dict):
        raise PublishError(
            f"{path} is not a JSON object of at most 1 MiB",
            hint="fix it or delete it; publish writes the file digests itself",
        )
    return {k: v for k, v in document.items() if k not in _WRITTEN_KEYS}


def _metadata_bytes(
    variant: str, files: Mapping[str, _SourceFile], extra: dict[str, object]
) -> bytes:
    digests = {rel: encode_digest(source.digest) for rel, source in sorted(files.items())}
    sizes = {rel: source.size for rel, source in sorted(files.items())}
    data = dump_json({**extra, "digest": {"files": digests}, "sizes": sizes})
    try:
        parse_metadata(data, source=f"{variant}/{METADATA}")  # what a client will accept
    except ManifestError as exc:
        raise PublishError(f"cannot publish variant {variant!r}: {exc.message}") from None
    return data


def _version_tree(builds: list[_VariantBuild]) -> dict[str, bytes | _SourceFile]:
    tree: dict[str, bytes | _SourceFile] = {VARIANTS: dump_json(sorted(b.name for b in builds))}
    for build in builds:
        tree[f"build/{build.name}/{METADATA}"] = build.metadata
        tree.update({f"build/{build.name}/{rel}": src for rel, src in build.files.items()})
    return tree


def _shared_natives(
    pkg_dir: Path, version: int, builds: Sequence[_VariantBuild]
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
        match = _VERSION_DIR.fullmatch(child.name)
        if match is None or int(match[1]) == exclude or child.is_symlink():
            continue
        for path in sorted(child.glob(f"build/*/{METADATA}")):
            with contextlib.suppress(OSError, ManifestError):
                yield int(match[1]), path.parent.name, parse_metadata(path.read_bytes())


def _variant_report(build: _VariantBuild) -> VariantReport:
    digests = {rel: src.digest for rel, src in build.files.items()}
    return VariantReport(
        name=build.name,
        files=len(build.files),
        bytes=sum(src.size for src in build.files.values()),
        content_hash=content_hash(digests),
    )


# --- signing ------------------------------------------------------------------------


class _Document(NamedTuple):
    """What a signed document is, as its statement names it."""

    kind: DocumentKind
    repo_id: str
    version: int | None
    variant: str | None


@dataclass(frozen=True)
class SignReport:
    """What :func:`sign_tree` did.

    Attributes:
        key_id: The key id of the key that signed.
        documents: The documents signed, relative to the path given, sorted.
        written: The ``.sig`` files created or changed, relative to the path given, sorted
            (a document this key had signed already keeps its file as it is).
    """

    key_id: str
    documents: tuple[str, ...]
    written: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (what ``flashhub sign --json`` prints)."""
        return asdict(self)


def sign_tree(path: str | os.PathLike[str], key: KeySource) -> SignReport:
    """Sign every document of a published CDN tree with ``key``.

    Args:
        path: The root of the tree (the ``out`` of :func:`publish`), any directory below
            it, or one document. Every ``<org>/<pkg>/versions.json``,
            ``<org>/<pkg>/v<N>/variants.json`` and
            ``<org>/<pkg>/v<N>/build/<variant>/metadata.json`` found under it is signed;
            the repo id, version and variant are read from its path.
        key: A signing key or the path of a key file.

    Each ``.sig`` is replaced in one rename, keeping the signatures of other keys.

    Raises:
        PublishError: ``path`` holds no published document, a document is malformed, or
            the key file cannot be used.
        SignatureError: A ``.sig`` already there is malformed, or ``cryptography`` is missing.
    """
    keys = _signing_keys(key)
    root = Path(path)
    absolute = root.absolute()
    if root.is_file():
        document = _document_at(absolute)
        found = [(document, absolute)] if document is not None else []
        base = absolute.parent
    else:
        found = sorted(_published_documents(absolute), key=lambda item: item[1])
        base = absolute
    if not found:
        raise PublishError(
            f"no published kernel documents under {root}",
            hint="pass the directory given to `flashhub publish --out`, or one below it "
            "(<org>/<pkg>/versions.json, v<N>/variants.json, build/<variant>/metadata.json)",
        )
    written = [sig for doc, p in found if (sig := _sign_in_place(doc, p, keys))]
    return SignReport(
        key_id=keys[0].key_id,
        documents=tuple(p.relative_to(base).as_posix() for _doc, p in found),
        written=tuple(sorted(p.relative_to(base).as_posix() for p in written)),
    )


def _published_documents(root: Path) -> Iterator[tuple[_Document, Path]]:
    """The signable documents under ``root``, an absolute directory. Hidden directories
    (a publish's staging) and a variant's own files are not searched."""
    if not root.is_dir():
        raise PublishError(f"{root} is not a directory or a file")
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here.parent.name == "build" and _VERSION_DIR.fullmatch(here.parent.parent.name):
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            document = _document_at(here / name)
            if document is not None and not (here / name).is_symlink():
                yield document, here / name


def _document_at(path: Path) -> _Document | None:
    """What the file at ``path`` (absolute) is in a CDN tree, read from its path alone."""
    parts = path.parts
    kind: DocumentKind
    if path.name == VERSIONS and len(parts) >= 3:
        # A stray versions.json is not a kernel's: that has v<N> directories beside it.
        if not any(_VERSION_DIR.fullmatch(c.name) and c.is_dir() for c in path.parent.iterdir()):
            return None
        kind, names, version, variant = "versions", parts[-3:-1], None, None
    elif path.name == VARIANTS and len(parts) >= 4 and (match := _VERSION_DIR.fullmatch(parts[-2])):
        kind, names, version, variant = "variants", parts[-4:-2], int(match[1]), None
    elif (
        path.name == METADATA
        and len(parts) >= 6
        and parts[-3] == "build"
        and (match := _VERSION_DIR.fullmatch(parts[-4]))
    ):
        kind, names, version, variant = "metadata", parts[-6:-4], int(match[1]), parts[-2]
    else:
        return None
    repo_id = "/".join(names)
    try:
        parse_repo_id(repo_id)
    except ValueError:
        return None
    return _Document(kind, repo_id, version, variant)


def _document_kind(rel: str) -> DocumentKind | None:
    """The kind of the signed document at ``rel`` in a package or version directory."""
    if rel == VERSIONS:
        return "versions"
    if rel == VARIANTS:
        return "variants"
    return "metadata" if _VARIANT_MANIFEST.fullmatch(rel) else None


def _version_documents(tree: _Tree, repo: RepoInfo) -> Iterator[tuple[str, _Document]]:
    """The signed documents of a version's tree: ``(relative path, document)``."""
    for rel in sorted(tree):
        kind = _document_kind(rel)
        if kind is not None and kind != "versions":
            match = _VARIANT_MANIFEST.fullmatch(rel)
            yield rel, _Document(kind, repo.repo_id, repo.version, match[1] if match else None)


def _is_version_signature(rel: str) -> bool:
    """Whether ``rel``, in a version directory, is the ``.sig`` of one of its documents."""
    signed = rel.removesuffix(SIG_SUFFIX)
    return signed != rel and _document_kind(signed) in ("variants", "metadata")


def _sig_path(path: Path) -> Path:
    return path.with_name(path.name + SIG_SUFFIX)


def _signed(
    document: _Document, data: bytes, keys: Sequence[SigningKey], existing: bytes | None
) -> bytes:
    """The ``.sig`` of ``data`` once each of ``keys`` has signed it, added to the entries
    of ``existing`` (``None``: a new ``.sig``)."""
    assert keys, "signing without a key"
    signed = existing
    for key in keys:
        signed = sign_document(*document, data, key, signed)
    assert signed is not None
    return signed


def _signature(document: _Document, path: Path, data: bytes, keys: Sequence[SigningKey]) -> bytes:
    """The ``.sig`` of ``data``, to be the document at ``path``: the entries of other
    keys in the ``.sig`` there are kept if the document there has the same bytes."""
    sig_path = _sig_path(path)
    same = path.is_file() and sig_path.is_file() and path.read_bytes() == data
    return _signed(document, data, keys, sig_path.read_bytes() if same else None)


def _version_signatures(
    tree: _Tree, version_dir: Path, repo: RepoInfo, keys: Sequence[SigningKey]
) -> dict[str, bytes]:
    """The ``.sig`` files of a version about to be written: relative path -> bytes."""
    signatures = {}
    for rel, document in _version_documents(tree, repo):
        data = tree[rel]
        assert isinstance(data, bytes)  # the publisher writes its documents itself
        path = version_dir.joinpath(*rel.split("/"))
        signatures[rel + SIG_SUFFIX] = _signature(document, path, data, keys)
    return signatures


_CHECKS: dict[DocumentKind, Callable[..., object]] = {
    "metadata": parse_metadata,
    "variants": parse_variants,
    "versions": parse_versions,
}


def _sign_in_place(document: _Document, path: Path, keys: Sequence[SigningKey]) -> Path | None:
    """Sign the published document at ``path``; the ``.sig`` if it was written."""
    data = path.read_bytes()
    try:
        _CHECKS[document.kind](data, source=str(path))
    except ManifestError as exc:
        raise PublishError(
            f"refusing to sign {path}: {exc.message}",
            hint="fix the document, or publish the version again",
        ) from None
    signed = _signature(document, path, data, keys)
    sig_path = _sig_path(path)
    if sig_path.is_file() and sig_path.read_bytes() == signed:
        return None
    write_atomic(sig_path, signed)
    return sig_path


# --- comparing with what is published --------------------------------------------------


def _expected_digests(tree: _Tree) -> dict[str, bytes]:
    return {
        rel: hashlib.sha256(item).digest() if isinstance(item, bytes) else item.digest
        for rel, item in tree.items()
    }


def _existing_digests(version_dir: Path) -> dict[str, bytes] | None:
    """Digests of the files under ``version_dir`` but its ``.sig`` files: ``{}`` if absent,
    ``None`` if not plain."""
    if not version_dir.exists() and not version_dir.is_symlink():
        return {}
    if version_dir.is_symlink() or not version_dir.is_dir():
        return None
    digests: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(version_dir):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if path.is_symlink() or not (path.is_dir() or path.is_file()):
                return None
        for name in filenames:
            path = Path(dirpath, name)
            rel = path.relative_to(version_dir).as_posix()
            if not _is_version_signature(rel):
                digests[rel] = _hash_file(path).digest
    return digests


def _describe_difference(
    existing: Mapping[str, bytes] | None, expected: Mapping[str, bytes]
) -> str:
    if existing is None:
        return "it holds a symlink or a special file"
    changed = sorted(
        (p for p in expected.keys() & existing.keys() if expected[p] != existing[p]),
        key=lambda p: (p.endswith(METADATA), p),  # name a build file, not its manifest
    )
    added, removed = (
        sorted(expected.keys() - existing.keys()),
        sorted(existing.keys() - expected.keys()),
    )
    parts = [
        f"{len(paths)} {what}, e.g. {paths[0]}"
        for what, paths in (("changed", changed), ("new", added), ("removed", removed))
        if paths
    ]
    return "; ".join(parts)


def _place_version(
    tree: _Tree,
    version_dir: Path,
    repo: RepoInfo,
    *,
    force: bool,
    keys: Sequence[SigningKey],
    unsigned: PublishError | None,
) -> tuple[_Outcome, list[Path]]:
    """Write ``tree`` as ``version_dir`` unless it already holds exactly that content;
    sign its documents with each of ``keys``. Returns the outcome and the files written.

    ``unsigned`` is raised instead of writing the version."""
    existing = _existing_digests(version_dir)
    expected = _expected_digests(tree)
    if existing == expected or _same_files_listed(existing, expected, version_dir, tree):
        if not keys:
            return "unchanged", []
        documents = [
            (doc, version_dir.joinpath(*rel.split("/")))
            for rel, doc in _version_documents(tree, repo)
        ]
        return "unchanged", [sig for doc, p in documents if (sig := _sign_in_place(doc, p, keys))]
    published = existing is None or bool(existing)  # an empty directory publishes nothing
    if published and not force:
        raise PublishError(
            f"{repo} is already published at {version_dir} with different content "
            f"({_describe_difference(existing, expected)})",
            hint="published versions are immutable: publish as "
            f"--version {_next_free_version(version_dir.parent)}, or pass --force to replace "
            "it (clients that cached it keep the old files)",
        )
    if unsigned is not None:
        raise unsigned
    if keys:
        tree = {**tree, **_version_signatures(tree, version_dir, repo, keys)}
    _write_version(tree, version_dir, replace=version_dir.exists() or version_dir.is_symlink())
    return "replaced" if published else "created", [
        version_dir.joinpath(*rel.split("/")) for rel in tree
    ]


def _next_free_version(pkg_dir: Path) -> int:
    """One past the highest version ``versions.json`` lists or a ``v<N>`` directory holds."""
    taken = [
        int(match[1])
        for child in pkg_dir.iterdir()
        if (match := _VERSION_DIR.fullmatch(child.name)) and child.is_dir()
    ]
    # No versions.json, or a malformed one: the directories still count.
    with contextlib.suppress(OSError, ManifestError):
        taken += parse_versions((pkg_dir / VERSIONS).read_bytes(), source=VERSIONS)
    return max(taken, default=0) + 1


def _same_files_listed(
    existing: Mapping[str, bytes] | None,
    expected: Mapping[str, bytes],
    version_dir: Path,
    tree: _Tree,
) -> bool:
    """Whether only the ``metadata.json`` files differ, and each still lists the same files
    with the same digests: a tree written by an older publisher, which recorded no sizes,
    holds the same kernel and stays as it is."""
    if existing is None or existing.keys() != expected.keys():
        return False
    for rel in (r for r in expected if existing[r] != expected[r]):
        new = tree[rel]
        if not rel.endswith(f"/{MANIFEST_NAME}") or not isinstance(new, bytes):
            return False
        try:
            old = parse_metadata((version_dir / rel).read_bytes(), source=rel)
        except (OSError, ManifestError):
            return False
        if old.content_hash != parse_metadata(new, source=rel).content_hash:
            return False
    return True


# --- writing ------------------------------------------------------------------------


def _make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents with mode 0755 regardless of the umask."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        directory.chmod(DIR_MODE)


def _write_version(tree: _Tree, version_dir: Path, *, replace: bool) -> None:
    """Build the version in a hidden sibling directory, then rename it into place."""
    _make_dirs(version_dir.parent)
    staging = Path(tempfile.mkdtemp(prefix=f".{version_dir.name}.staging-", dir=version_dir.parent))
    try:
        staging.chmod(DIR_MODE)
        for rel, item in sorted(tree.items()):
            target = staging.joinpath(*rel.split("/"))
            _make_dirs(target.parent)
            if isinstance(item, bytes):
                _write_bytes(target, item)
            else:
                _copy_verified(item, target, shown=rel)
        _commit(staging, version_dir, replace=replace)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _write_bytes(target: Path, data: bytes) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), FILE_MODE)
        f.write(data)


def _copy_verified(source: _SourceFile, target: Path, *, shown: str) -> None:
    """Copy and re-hash in one pass, so the bytes published are the bytes in the manifest."""
    writer = HashingWriter(target)
    try:
        with source.path.open("rb") as src:
            while chunk := src.read(CHUNK_SIZE):
                writer.write(chunk)
    finally:
        writer.close()
    target.chmod(FILE_MODE)
    try:
        writer.verify(source.digest, source=shown)
    except IntegrityError:
        raise PublishError(
            f"{source.path} changed while it was being published",
            hint="wait for the build to finish, then publish again",
        ) from None


def _commit(staging: Path, version_dir: Path, *, replace: bool) -> None:
    if not replace:
        try:
            os.rename(staging, version_dir)
        except OSError:
            if version_dir.exists():
                raise PublishError(
                    f"{version_dir} appeared while publishing; another publish is running",
                    hint="run one publish per version at a time, then retry",
                ) from None
            raise
        return
    # POSIX has no portable atomic swap of two directories: move the old version aside,
    # rename the new one in, then delete the old. Readers see old or new, never a mix.
    trash = Path(tempfile.mkdtemp(prefix=f".{version_dir.name}.old-", dir=version_dir.parent))
    os.rename(version_dir, trash / "old")
    os.rename(staging, version_dir)
    shutil.rmtree(trash, ignore_errors=True)


def _merged_versions(path: Path, version: int) -> tuple[bytes | None, list[int]]:
    """The bytes of ``versions.json`` (``None`` if absent) and its list with ``version``."""
    old: bytes | None = path.read_bytes() if path.is_file() else None
    try:
        versions = parse_versions(old, source=str(path)) if old is not None else []
    except ManifestError as exc:
        raise PublishError(
            exc.message,
            hint="fix or delete it; it lists the published v<N> directories, e.g. [1, 2]",
        ) from None
    return old, sorted({*versions, version})


def _write_versions(
    path: Path,
    old: bytes | None,
    versions: list[int],
    repo: RepoInfo,
    keys: Sequence[SigningKey],
) -> list[Path]:
    """Write ``versions.json`` (and its ``.sig``) if their bytes change; the paths written.

    When it changes, its old signatures sign the old bytes: they go. Until the new bytes
    are in place, the ``.sig`` holds the old entries and the new ones, so that a reader
    never meets a ``versions.json`` that no signature vouches for, even if this stops
    between the two renames.
    """
    data = dump_json(versions)
    written = []
    sig_path = _sig_path(path)
    signed = old_sig = None
    if keys:
        old_sig = sig_path.read_bytes() if sig_path.is_file() else None
        document = _Document("versions", repo.repo_id, None, None)
        signed = _signed(document, data, keys, old_sig if data == old else None)
        if data != old and old_sig is not None:
            with contextlib.suppress(SignatureError):  # a malformed old .sig vouches for nothing
                entries = [*parse_signatures(old_sig, source=str(sig_path))]
                entries += parse_signatures(signed, source=str(sig_path))
                write_atomic(sig_path, dump_signatures(entries))
    if data != old:
        write_atomic(path, data)
        written.append(path)
    if signed is not None and signed != old_sig:
        write_atomic(sig_path, signed)
        written.append(sig_path)
    return written

