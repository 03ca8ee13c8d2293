"""The publisher's entry point, :func:`publish`: a kernel build directory turned into the
CDN tree of one published version.

The input is either form (a ``build/`` subdirectory, when present, is used)::

    <build_dir>/<variant>/<py_pkg>/...            a bare build directory
    <kernel_dir>/build/<variant>/<py_pkg>/...     a kernel directory holding build/

The output, under ``<out>/<prefix>/<org>/<pkg>/``, is ready to upload to a static host
(``out`` is a directory, or an object store URL such as ``s3://bucket/prefix``, written
directly: see :mod:`.destination`); ``docs/cdn-layout.md`` describes each file::

    versions.json                          every published version, merged with what is there
    v<N>/variants.json                     the variant names of this version
    v<N>/build/<variant>/metadata.json     the kernel builder's schema (see :mod:`.metadata`)
    v<N>/build/<variant>/<py_pkg>/...      a copy of every file of the variant (with
                                           layout="zip": <id>.zip and the native
                                           libraries, see :mod:`.zipping`)

A published version is immutable: publishing different content under an existing
version is refused unless ``force=True``; publishing the same content again changes
nothing on disk.

With signing keys, each of the three documents gets a ``.sig`` beside it (see
:mod:`.._signing`). The ``.sig`` files of a new version are written with its files, each
just before its document; those of a version already in place, and ``versions.json.sig``,
are replaced one by one. Several keys sign in one publish, so that a new version and
the ``versions.json`` that lists it carry the old and the new key's signatures while
keys are rotated. :func:`~.signatures.sign_tree` signs a tree published without a key.
A signature is not content: adding one never makes a version "different".

The package's modules follow the steps, which :func:`publish` runs in order:
:mod:`.build` reads the build directory and hashes its files (:mod:`.zipping` lays a
variant out as a zip build) and :mod:`.metadata` makes each variant's ``metadata.json``;
:mod:`.checks` checks its sources and what it shares with published versions;
:mod:`.compare` compares it with the version already in place; :mod:`.signatures` signs;
:mod:`.writing` writes, in an order that is safe for readers of an object store, through
a :mod:`.destination`; :mod:`.report` holds what :func:`publish` returns and warns of.
:mod:`.layout` holds the tree's names, modes and types, which the others share.
"""

from __future__ import annotations

import functools
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal, NamedTuple

from .._config import DEFAULT_PREFIX, normalize_prefix
from .._constants import SIG_SUFFIX
from .._models.manifest import dump_json
from .._models.names import RepoInfo
from .._signing.signing_keys import SigningKey
from ..errors import (
    FileRelativePathWarning,
    PublishError,
    SharedNativeLibraryWarning,
    SourcelessModuleWarning,
    UndeclaredDependencyWarning,
)
from .build import VariantBuild, scan_variant, variant_dirs, variant_report, version_tree
from .checks import check_sources, file_relative_paths, shared_natives, sourceless_modules
from .compare import (
    describe_difference,
    existing_digests,
    expected_digests,
    next_free_version,
    same_files_listed,
)
from .destination import Destination, Directory, item_size, open_destination
from .layout import VERSIONS, Tree
from .metadata import kernel_defaults
from .report import (
    FileRelativePath,
    Finding,
    PublishReport,
    SharedNativeLibrary,
    SourcelessModule,
    UndeclaredImport,
)
from .signatures import (
    KeySource,
    document_kind,
    sign_in_place,
    signing_keys,
    version_documents,
    version_signatures,
)
from .writing import merged_versions, write_version, write_versions

# How to publish into a kernel whose versions.json is signed, without a key.
_UNSIGNED_HINT = (
    "pass --sign KEYFILE (sign= in Python); to stop signing the kernel, delete its .sig files"
)
_Outcome = Literal["unchanged", "created", "replaced"]
Layout = Literal["files", "zip"]
LAYOUTS: tuple[Layout, ...] = ("files", "zip")


class VersionTakenError(PublishError):
    """The version is already published with other content; ``next_version`` is the one
    the hint offers instead: one past the highest that the destination holds."""

    def __init__(
        self, message: str, *, next_version: int, hint: str, cli_hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint, cli_hint=cli_hint)
        self.next_version = next_version


def publish(
    build_dir: str | os.PathLike[str],
    *,
    repo_id: str,
    version: int,
    out: str | os.PathLike[str],
    prefix: str = DEFAULT_PREFIX,
    force: bool = False,
    sign: KeySource | Sequence[KeySource] | None = None,
    layout: Layout | None = None,
) -> PublishReport:
    """Publish a kernel build as version ``version`` of ``repo_id`` into the CDN tree ``out``.

    Args:
        build_dir: A build directory holding ``<variant>/<py_pkg>/``, or a kernel
            directory holding ``build/<variant>/<py_pkg>/``.
        repo_id: ``<org>/<pkg>``; ``<py_pkg>`` is ``<pkg>`` with ``-`` replaced by ``_``.
        version: The version number, ``>= 1``.
        out: The root of the CDN tree: a directory (created if missing), or an object
            store URL such as ``s3://bucket/prefix`` (any fsspec URL; needs the ``s3``
            extra). On a store, immutability is checked against what it holds, and the
            files go up before the documents that name them (see :mod:`.destination`).
        prefix: Path under ``out`` where the kernel tree starts; ``"kernels"`` by default,
            the client's default ``FLASHHUB_CDN_PREFIX`` (``""``: ``out`` itself).
        force: Replace the version if it exists with different content.
        sign: A signing key, or the path of a key file (``flashhub keygen``), or several:
            sign the version's ``metadata.json`` and ``variants.json`` files and
            ``versions.json`` with each (``.sig`` files beside them, keeping the
            signatures of other keys on documents whose bytes stay the same). ``None``:
            sign nothing.
        layout: ``"zip"``: publish each variant in the zip layout, the package's files
            in one archive ``<id>.zip`` with its native libraries beside it (see
            :mod:`.zipping`). ``None`` (and ``"files"``): as the build lays it out.

    Returns:
        A :class:`PublishReport`.

    Raises:
        ValueError: ``repo_id``, ``version`` or ``prefix`` is malformed.
        ValueError: ``layout`` is neither ``"files"`` nor ``"zip"``.
        PublishError: The build is invalid, the version exists with different content,
            the object store cannot be used (its extra is missing, the bucket does not
            exist, it refuses the credentials),
            the key file cannot be used, or the kernel's ``versions.json`` is signed and
            no key is given while something would change.
        SignatureError: Signing needs the ``cryptography`` package, which is missing.

    Warns:
        SharedNativeLibraryWarning: A native library of the build is also shipped by
            another version in ``out``.
        UndeclaredDependencyWarning: A variant imports a package that its
            ``python-depends`` does not list.
        FileRelativePathWarning: A Python file of a variant published in the zip layout
            makes a path from ``__file__``, which lies inside the archive.
        SourcelessModuleWarning: A variant holds a ``.pyc`` file (outside
            ``__pycache__``) without its ``.py``: a local load imports it, but it is not
            published.
    """
    repo = RepoInfo(repo_id, version)
    if layout not in (None, *LAYOUTS):
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    keys = signing_keys(sign)
    prefix_parts = [p for p in normalize_prefix(prefix).split("/") if p]
    defaults = kernel_defaults(Path(build_dir), repo)
    dirs = variant_dirs(Path(build_dir))
    _check_outside(dirs[0].parent, out)
    with tempfile.TemporaryDirectory(prefix="flashhub-publish-") as scratch:  # zip archives
        builds = [
            scan_variant(d, repo.py_pkg, defaults, layout=layout, scratch=Path(scratch))
            for d in dirs
        ]
        return _publish_builds(builds, repo, out, prefix_parts, force=force, keys=keys)


def _check_outside(builds: Path, out: str | os.PathLike[str]) -> None:
    """Refuse a CDN tree on disk inside ``builds``, the directory of the variants: it
    would be published as part of the kernel, each publish nesting the one before."""
    if "://" in os.fspath(out):
        return  # an object store
    tree, inside = Path(out).resolve(), builds.resolve()
    if tree == inside or inside in tree.parents:
        raise PublishError(
            f"the CDN tree {out} lies inside the build directory {builds}",
            hint="pass an --out (out=) outside it",
        )


def _publish_builds(
    builds: list[VariantBuild],
    repo: RepoInfo,
    out: str | os.PathLike[str],
    prefix_parts: list[str],
    *,
    force: bool,
    keys: Sequence[SigningKey],
) -> PublishReport:
    """:func:`publish` of the variants read from the build directory; its warnings are
    the caller's of :func:`publish`."""
    findings = _findings(builds, repo)
    destination = open_destination(out)
    pkg_rel = "/".join([*prefix_parts, repo.org, repo.name])
    placed = _write_version(builds, destination, pkg_rel, repo, force=force, keys=keys)
    _warn_all(placed.shared, findings, repo)
    return _report(builds, repo, keys, findings, placed, destination.written)


class _Findings(NamedTuple):
    """What the checks of the builds found, before anything is written."""

    undeclared: tuple[UndeclaredImport, ...]
    relative: tuple[FileRelativePath, ...]
    sourceless: tuple[SourcelessModule, ...]


class _Placed(NamedTuple):
    """What writing the version did: its outcome and where, the kernel's
    ``versions.json`` list after it, and the native libraries it shares with others."""

    outcome: _Outcome
    version_dir: Path | str
    versions: tuple[int, ...]
    shared: tuple[SharedNativeLibrary, ...]


def _findings(builds: list[VariantBuild], repo: RepoInfo) -> _Findings:
    """Check the sources of ``builds``; refuse a build whose Python is invalid."""
    return _Findings(
        undeclared=tuple(u for build in builds for u in check_sources(build, repo.py_pkg)),
        relative=tuple(path for build in builds for path in file_relative_paths(build)),
        sourceless=tuple(pyc for build in builds for pyc in sourceless_modules(build)),
    )


def _write_version(
    builds: list[VariantBuild],
    destination: Destination,
    pkg_rel: str,
    repo: RepoInfo,
    *,
    force: bool,
    keys: Sequence[SigningKey],
) -> _Placed:
    """Write the version of ``builds`` under ``pkg_rel`` and list it in ``versions.json``,
    holding the kernel's lock."""
    tree = version_tree(builds)
    version_rel = f"{pkg_rel}/v{repo.version}"
    versions_rel = f"{pkg_rel}/{VERSIONS}"
    # One publish of the kernel at a time: two of two versions would each write the
    # versions.json it read with its own version added, and the last would drop the other.
    with destination.exclusive(pkg_rel):
        old_versions, versions = merged_versions(destination, versions_rel, repo.version)
        unsigned = None if keys else _unsigned_refusal(destination, pkg_rel, repo)
        if unsigned is not None and dump_json(versions) != old_versions:
            raise unsigned
        # versions.json goes last, so it never lists a version whose files are not in place.
        list_versions = functools.partial(
            write_versions, destination, versions_rel, old_versions, versions, repo, keys
        )
        try:
            outcome = _place_version(
                tree, destination, version_rel, repo, force=force, keys=keys, unsigned=unsigned
            )
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM on the command line
            if _in_place(tree, destination, version_rel):  # just after the version's rename
                list_versions()  # else it would be served, and listed by no versions.json
            raise
        list_versions()
        shared = tuple(shared_natives(destination, pkg_rel, repo.version, builds))
    return _Placed(outcome, _location(destination, version_rel), tuple(versions), shared)


def _warn_all(shared: Sequence[SharedNativeLibrary], findings: _Findings, repo: RepoInfo) -> None:
    """Warn of each finding at the caller of :func:`publish`."""
    categories: list[tuple[Sequence[Finding], type[UserWarning]]] = [
        (shared, SharedNativeLibraryWarning),
        (findings.undeclared, UndeclaredDependencyWarning),
        (findings.relative, FileRelativePathWarning),
        (findings.sourceless, SourcelessModuleWarning),
    ]
    for found, category in categories:
        for finding in found:
            message = finding.describe(repo.repo_id, repo.version)
            warnings.warn(message, category, stacklevel=4)


def _report(
    builds: list[VariantBuild],
    repo: RepoInfo,
    keys: Sequence[SigningKey],
    findings: _Findings,
    placed: _Placed,
    written: dict[str, int],
) -> PublishReport:
    """The report of the publish; ``written`` maps each file written to its size."""
    return PublishReport(
        repo_id=repo.repo_id,
        version=repo.version,
        version_dir=placed.version_dir,
        variants=tuple(variant_report(b) for b in builds),
        versions=placed.versions,
        written=tuple(sorted(written)),
        bytes_written=sum(written.values()),
        noop=placed.outcome == "unchanged" and not written,
        replaced=placed.outcome == "replaced",
        signed_by=tuple(k.key_id for k in keys),
        shared_natives=placed.shared,
        undeclared_imports=findings.undeclared,
        file_relative_paths=findings.relative,
        sourceless_modules=findings.sourceless,
    )


def _location(destination: Destination, rel: str) -> Path | str:
    """Where ``rel`` is: a path in a directory, else its URL."""
    return destination.path(rel) if isinstance(destination, Directory) else destination.shown(rel)


def _unsigned_refusal(
    destination: Destination, pkg_rel: str, repo: RepoInfo
) -> PublishError | None:
    """The error for a publish without a key into a kernel whose ``versions.json`` is
    signed, raised if it would change anything: verifying clients would refuse it."""
    sig_rel = f"{pkg_rel}/{VERSIONS}{SIG_SUFFIX}"
    if destination.read(sig_rel) is None:
        return None
    return PublishError(
        f"{repo.repo_id} is signed ({destination.shown(sig_rel)} exists), and publishing "
        f"{repo} without a signing key would leave documents unsigned or with signatures "
        "that no longer match",
        hint=_UNSIGNED_HINT,
    )


def _in_place(tree: Tree, destination: Destination, version_rel: str) -> bool:
    """Whether ``version_rel`` holds each file of ``tree``, at its size."""
    files = destination.files(version_rel) or {}
    return all(files.get(rel) == item_size(item) for rel, item in tree.items())


def _place_version(
    tree: Tree,
    destination: Destination,
    version_rel: str,
    repo: RepoInfo,
    *,
    force: bool,
    keys: Sequence[SigningKey],
    unsigned: PublishError | None,
) -> _Outcome:
    """Write ``tree`` as ``version_rel`` unless it already holds exactly that content;
    sign its documents with each of ``keys``.

    ``unsigned`` is raised instead of writing the version."""
    existing = existing_digests(destination, version_rel)
    expected = expected_digests(tree)
    if existing == expected or same_files_listed(
        existing, expected, destination, version_rel, tree
    ):
        for rel, doc in version_documents(tree, repo) if keys else ():
            sign_in_place(doc, destination, f"{version_rel}/{rel}", keys)
        return "unchanged"
    # Published: readers can find it, through a document. A version with none (an empty
    # directory, or the files of a publish to a store that stopped before its first
    # document) publishes nothing.
    published = existing is None or any(document_kind(rel) for rel in existing)
    if published and not force:
        next_version = next_free_version(destination, version_rel.rpartition("/")[0])
        raise VersionTakenError(
            f"{repo} is already published at {destination.shown(version_rel)} with different "
            f"content ({describe_difference(existing, expected)})",
            next_version=next_version,
            hint=f"published versions are immutable: publish as --version {next_version}, or "
            "pass --force to replace it (clients that cached it keep the old files)",
        )
    if unsigned is not None:
        raise unsigned
    if keys:
        tree = {**tree, **version_signatures(tree, destination, version_rel, repo, keys)}
    write_version(tree, destination, version_rel, replace=existing != {})
    return "replaced" if published else "created"
