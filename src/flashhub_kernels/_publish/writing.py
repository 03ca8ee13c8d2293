"""Writing the tree: a new version, files before the documents that name them, then
``versions.json`` and the signatures."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from .._constants import SIG_SUFFIX
from .._models.manifest import dump_json, parse_versions
from .._models.names import RepoInfo
from .._signing.signature_files import dump_signatures, parse_signatures
from .._signing.signing_keys import SigningKey
from ..errors import ManifestError, PublishError, SignatureError
from .destination import Destination, Item
from .layout import Tree
from .signatures import Document, add_signatures, document_kind

# Where each kind of file of a version goes in the order of writing.
_RANKS = {"metadata": 1, "variants": 2}  # the builds' files: 0


def write_order(tree: Tree) -> list[Item]:
    """The files of a version in the order they are written: the builds' files, then
    each variant's ``metadata.json``, then ``variants.json``; a document's ``.sig``
    just before it.

    A reader finds a variant through ``variants.json`` or its ``metadata.json``, and a
    file through the ``metadata.json`` that lists it: on a store that is read while
    the version is written one file at a time, whatever a reader can find names only
    files already there. A ``.sig`` before its document: a verifying reader that finds
    the document finds its signatures too.
    """

    def rank(rel: str) -> tuple[int, str, bool]:
        signed = rel.removesuffix(SIG_SUFFIX)
        rank = _RANKS.get(document_kind(signed) or "", 0)
        return (rank, signed, signed == rel) if rank else (0, rel, False)

    return [(rel, tree[rel]) for rel in sorted(tree, key=rank)]


def write_version(tree: Tree, destination: Destination, rel: str, *, replace: bool) -> None:
    """Write the version ``tree`` as the directory ``rel`` of ``destination``."""
    destination.write_version(rel, write_order(tree), replace=replace)


def merged_versions(
    destination: Destination, rel: str, version: int
) -> tuple[bytes | None, list[int]]:
    """The bytes of ``versions.json`` at ``rel`` (``None`` if absent) and its list with
    ``version``."""
    old = destination.read(rel)
    try:
        versions = parse_versions(old, source=destination.shown(rel)) if old is not None else []
    except ManifestError as exc:
        raise PublishError(
            exc.message,
            hint="fix or delete it; it lists the published v<N> directories, e.g. [1, 2]",
        ) from None
    return old, sorted({*versions, version})


def write_versions(
    destination: Destination,
    rel: str,
    old: bytes | None,
    versions: list[int],
    repo: RepoInfo,
    keys: Sequence[SigningKey],
) -> None:
    """Write ``versions.json`` (and its ``.sig``) at ``rel`` if their bytes change.

    When it changes, its old signatures sign the old bytes: they go. The ``.sig`` goes
    first, holding the old entries and the new ones until the new bytes are in place,
    so that a reader never meets a ``versions.json`` that no signature vouches for,
    even if this stops between two writes.
    """
    data = dump_json(versions)
    sig_rel = rel + SIG_SUFFIX
    if not keys:
        if data != old:
            destination.write(rel, data)
        return
    old_sig = destination.read(sig_rel)
    document = Document("versions", repo.repo_id, None, None)
    signed = add_signatures(document, data, keys, old_sig if data == old else None)
    if data != old:
        interim = signed
        if old_sig is not None:
            with contextlib.suppress(SignatureError):  # a malformed old .sig vouches for nothing
                shown = destination.shown(sig_rel)
                entries = [*parse_signatures(old_sig, source=shown)]
                entries += parse_signatures(signed, source=shown)
                interim = dump_signatures(entries)
        destination.write(sig_rel, interim)
        destination.write(rel, data)
        old_sig = interim
    if signed != old_sig:
        destination.write(sig_rel, signed)
