"""Comparing a version about to be published with what its directory already holds."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from .._manifest import MANIFEST_NAME, parse_metadata, parse_versions
from ..errors import ManifestError
from .layout import METADATA, VERSION_DIR, VERSIONS, Tree, hash_file
from .signatures import is_version_signature


def expected_digests(tree: Tree) -> dict[str, bytes]:
    """The sha256 of each file of ``tree``."""
    return {
        rel: hashlib.sha256(item).digest() if isinstance(item, bytes) else item.digest
        for rel, item in tree.items()
    }


def existing_digests(version_dir: Path) -> dict[str, bytes] | None:
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
            if not is_version_signature(rel):
                digests[rel] = hash_file(path).digest
    return digests


def describe_difference(existing: Mapping[str, bytes] | None, expected: Mapping[str, bytes]) -> str:
    """How the files in place (``existing``) differ from those to publish, in words."""
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


def next_free_version(pkg_dir: Path) -> int:
    """One past the highest version ``versions.json`` lists or a ``v<N>`` directory holds."""
    taken = [
        int(match[1])
        for child in pkg_dir.iterdir()
        if (match := VERSION_DIR.fullmatch(child.name)) and child.is_dir()
    ]
    # No versions.json, or a malformed one: the directories still count.
    with contextlib.suppress(OSError, ManifestError):
        taken += parse_versions((pkg_dir / VERSIONS).read_bytes(), source=VERSIONS)
    return max(taken, default=0) + 1


def same_files_listed(
    existing: Mapping[str, bytes] | None,
    expected: Mapping[str, bytes],
    version_dir: Path,
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
            old = parse_metadata((version_dir / rel).read_bytes(), source=rel)
        except (OSError, ManifestError):
            return False
        if old.content_hash != parse_metadata(new, source=rel).content_hash:
            return False
    return True
