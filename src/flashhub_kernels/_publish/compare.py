"""Comparing a version about to be published with what the destination already holds."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping

from .._constants import MANIFEST_NAME
from .._models.manifest import parse_metadata, parse_versions
from ..errors import ManifestError
from .destination import Destination
from .layout import VERSION_DIR, VERSIONS, Tree
from .signatures import document_kind, is_version_signature


def expected_digests(tree: Tree) -> dict[str, bytes]:
    """The sha256 of each file of ``tree``."""
    return {
        rel: hashlib.sha256(item).digest() if isinstance(item, bytes) else item.digest
        for rel, item in tree.items()
    }


# The digest of a file whose content cannot be told: it differs from every sha256.
UNKNOWN = b""


def existing_digests(destination: Destination, version_rel: str) -> dict[str, bytes] | None:
    """Digests of the files of the version at ``version_rel`` but its ``.sig`` files:
    ``{}`` if there are none, ``None`` if it is not a plain directory tree.

    Each file is hashed where that is cheap (a directory). Where it is not (an object
    store: it would mean downloading the whole version), see :func:`_listed_digests`.
    """
    found = destination.files(version_rel)
    if found is None:
        return None
    files = {rel: size for rel, size in found.items() if not is_version_signature(rel)}
    digests = {rel: destination.digest(f"{version_rel}/{rel}") for rel in files}
    hashed = {rel: digest for rel, digest in digests.items() if digest is not None}
    return hashed if len(hashed) == len(files) else _listed_digests(destination, version_rel, files)


def _listed_digests(
    destination: Destination, version_rel: str, files: Mapping[str, int]
) -> dict[str, bytes]:
    """The documents of a version hashed from their bytes, and each other file with the
    digest that its variant's ``metadata.json`` lists, if it is there at the size that
    lists (else :data:`UNKNOWN`): the manifests are what readers check the files against."""
    digests: dict[str, bytes] = {}
    listed: dict[str, tuple[bytes, int | None]] = {}
    for rel in files:
        kind = document_kind(rel)
        if kind is None:
            continue
        data = destination.read(f"{version_rel}/{rel}") or b""
        digests[rel] = hashlib.sha256(data).digest()
        if kind == "metadata":
            variant_dir = rel.removesuffix(MANIFEST_NAME)
            with contextlib.suppress(ManifestError):
                manifest = parse_metadata(data, source=rel)
                for path, digest in manifest.files.items():
                    listed[variant_dir + path] = (digest, manifest.size_of(path))
    for rel, size in files.items():
        if rel not in digests:
            digest, listed_size = listed.get(rel, (UNKNOWN, None))
            digests[rel] = digest if listed_size in (None, size) else UNKNOWN
    return digests


def describe_difference(existing: Mapping[str, bytes] | None, expected: Mapping[str, bytes]) -> str:
    """How the files in place (``existing``) differ from those to publish, in words."""
    if existing is None:
        return "it holds a symlink or a special file"
    changed = sorted(
        (p for p in expected.keys() & existing.keys() if expected[p] != existing[p]),
        key=lambda p: (p.endswith(MANIFEST_NAME), p),  # name a build file, not its manifest
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


def next_free_version(destination: Destination, pkg_rel: str) -> int:
    """One past the highest version ``versions.json`` lists or a ``v<N>`` entry of the tree
    takes (a directory, or in a local tree also a symlink, ``v1 -> v1-real``, which the
    CDN serves as the version)."""
    taken = [
        int(match[1])
        for name in destination.names_taken(pkg_rel)
        if (match := VERSION_DIR.fullmatch(name))
    ]
    # No versions.json, or a malformed one: the names still count.
    with contextlib.suppress(ManifestError):
        taken += parse_versions(destination.read(f"{pkg_rel}/{VERSIONS}") or b"", source=VERSIONS)
    return max(taken, default=0) + 1


def same_files_listed(
    existing: Mapping[str, bytes] | None,
    expected: Mapping[str, bytes],
    destination: Destination,
    version_rel: str,
    tree: Tree,
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
            old = parse_metadata(destination.read(f"{version_rel}/{rel}") or b"", source=rel)
        except ManifestError:
            return False
        if old.content_hash != parse_metadata(new, source=rel).content_hash:
            return False
    return True
