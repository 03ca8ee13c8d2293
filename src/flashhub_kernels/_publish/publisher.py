"""The publisher's entry point, :func:`publish`."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from .._config import DEFAULT_PREFIX, normalize_prefix
from .._manifest import dump_json
from .._names import RepoInfo
from .._signing import SIG_SUFFIX, SigningKey
from ..errors import PublishError, SharedNativeLibraryWarning, UndeclaredDependencyWarning
from .build import scan_variant, variant_dirs, variant_report, version_tree
from .checks import check_sources, shared_natives
from .compare import (
    describe_difference,
    existing_digests,
    expected_digests,
    next_free_version,
    same_files_listed,
)
from .layout import VERSIONS, Tree
from .metadata import kernel_defaults
from .report import PublishReport
from .signatures import (
    KeySource,
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

    Warns:
        SharedNativeLibraryWarning: A native library of the build is also shipped by
            another version in ``out``.
        UndeclaredDependencyWarning: A variant imports a package that its
            ``python-depends`` does not list.
    """
    repo = RepoInfo(repo_id, version)
    keys = signing_keys(sign)
    prefix_parts = [p for p in normalize_prefix(prefix).split("/") if p]
    defaults = kernel_defaults(Path(build_dir), repo)
    builds = [scan_variant(d, repo.py_pkg, defaults) for d in variant_dirs(Path(build_dir))]
    undeclared = tuple(u for build in builds for u in check_sources(build, repo.py_pkg))
    tree = version_tree(builds)

    out_path = Path(out)
    pkg_dir = out_path.joinpath(*prefix_parts, repo.org, repo.name)
    version_dir = pkg_dir / f"v{repo.version}"
    old_versions, versions = merged_versions(pkg_dir / VERSIONS, repo.version)
    unsigned = None if keys else _unsigned_refusal(pkg_dir, repo)
    if unsigned is not None and dump_json(versions) != old_versions:
        raise unsigned
    outcome, written = _place_version(
        tree, version_dir, repo, force=force, keys=keys, unsigned=unsigned
    )
    # versions.json goes last, so it never lists a version whose files are not in place.
    written += write_versions(pkg_dir / VERSIONS, old_versions, versions, repo, keys)
    shared = tuple(shared_natives(pkg_dir, repo.version, builds))
    for library in shared:
        warnings.warn(
            library.describe(repo.repo_id, repo.version), SharedNativeLibraryWarning, stacklevel=2
        )
    for found in undeclared:
        warnings.warn(
            found.describe(repo.repo_id, repo.version), UndeclaredDependencyWarning, stacklevel=2
        )
    return PublishReport(
        repo_id=repo.repo_id,
        version=repo.version,
        version_dir=version_dir,
        variants=tuple(variant_report(b) for b in builds),
        versions=tuple(versions),
        written=tuple(sorted(p.relative_to(out_path).as_posix() for p in written)),
        bytes_written=sum(p.stat().st_size for p in written),
        noop=outcome == "unchanged" and not written,
        replaced=outcome == "replaced",
        signed_by=tuple(k.key_id for k in keys),
        shared_natives=shared,
        undeclared_imports=undeclared,
    )


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


def _place_version(
    tree: Tree,
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
    existing = existing_digests(version_dir)
    expected = expected_digests(tree)
    if existing == expected or same_files_listed(existing, expected, version_dir, tree):
        if not keys:
            return "unchanged", []
        documents = [
            (doc, version_dir.joinpath(*rel.split("/")))
            for rel, doc in version_documents(tree, repo)
        ]
        return "unchanged", [sig for doc, p in documents if (sig := sign_in_place(doc, p, keys))]
    published = existing is None or bool(existing)  # an empty directory publishes nothing
    if published and not force:
        raise PublishError(
            f"{repo} is already published at {version_dir} with different content "
            f"({describe_difference(existing, expected)})",
            hint="published versions are immutable: publish as "
            f"--version {next_free_version(version_dir.parent)}, or pass --force to replace "
            "it (clients that cached it keep the old files)",
        )
    if unsigned is not None:
        raise unsigned
    if keys:
        tree = {**tree, **version_signatures(tree, version_dir, repo, keys)}
    write_version(tree, version_dir, replace=version_dir.exists() or version_dir.is_symlink())
    return "replaced" if published else "created", [
        version_dir.joinpath(*rel.split("/")) for rel in tree
    ]
