"""Signing the documents of a published tree: while publishing, and afterwards
(:func:`sign_tree`)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

from .._constants import MANIFEST_NAME, SIG_SUFFIX
from .._models.manifest import parse_metadata, parse_variants, parse_versions
from .._models.names import RepoInfo, parse_repo_id
from .._models.record import Record
from .._network.object_store import is_url
from .._signing.signature_files import sign_document
from .._signing.signing_keys import SigningKey, load_signing_key
from .._signing.statements import DocumentKind
from .._utils.urls import file_url_path, redact_url
from ..errors import ManifestError, PublishError
from .destination import Destination, Directory
from .layout import VARIANTS, VERSION_DIR, VERSIONS, Tree

_VARIANT_MANIFEST = re.compile(r"build/([^/]+)/metadata\.json")
KeySource = str | os.PathLike[str] | SigningKey  # a key, or the path of its key file


def signing_keys(sign: KeySource | Sequence[KeySource] | None) -> tuple[SigningKey, ...]:
    """The keys ``sign`` gives, each once, in order (key files read and checked)."""
    if sign is None:
        return ()
    sources = [sign] if isinstance(sign, (str, os.PathLike, SigningKey)) else list(sign)
    keys: dict[str, SigningKey] = {}
    for source in sources:
        key = source if isinstance(source, SigningKey) else load_signing_key(source)
        keys.setdefault(key.key_id, key)
    return tuple(keys.values())


class Document(Record):
    """What a signed document is, as its statement names it."""

    kind: DocumentKind
    repo_id: str
    version: int | None
    variant: str | None


class SignReport(Record):
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

    Each ``.sig`` is replaced in one rename, keeping the signatures of other keys. Each
    kernel's documents are signed under the mutex a publish into its directory holds
    (:meth:`.Directory.exclusive`): a publish in progress there is waited for.

    Raises:
        PublishError: ``path`` holds no published document (or is an object store URL:
            only a tree in a directory is signed here), a document is malformed, or the
            key file cannot be used.
        SignatureError: A ``.sig`` already there is malformed, or ``cryptography`` is missing.
        CacheError: The publish mutex cannot be taken in the cache (read-only, no file
            locks), or ``FLASHHUB_LOCK_TIMEOUT`` ran out waiting for it.
    """
    root = _local_tree(path)
    keys = signing_keys(key)
    absolute = root.absolute()
    found, base = _documents_under(absolute)
    if not found:
        raise PublishError(
            f"no published kernel documents under {root}",
            hint="pass the directory given to `flashhub publish --out`, or one below it "
            "(<org>/<pkg>/versions.json, v<N>/variants.json, build/<variant>/metadata.json)",
        )
    tree = Directory(base)
    documents: list[tuple[Document, Path]] = []
    written: list[str] = []
    for kernel_dir in dict.fromkeys(_kernel_dir(*item) for item in found):
        # Under the kernel's publish mutex, as a publish into it: a .sig is never written
        # for the old bytes of a document that a publish rewrites meanwhile.
        with Directory(kernel_dir).exclusive(""):
            for doc, doc_path in _documents_of(kernel_dir, found, absolute, root.is_file()):
                documents.append((doc, doc_path))
                rel = doc_path.relative_to(base).as_posix()
                if sig := sign_in_place(doc, tree, rel, keys):
                    written.append(sig)
    documents.sort(key=lambda item: item[1])
    return SignReport(
        key_id=keys[0].key_id,
        documents=tuple(p.relative_to(base).as_posix() for _doc, p in documents),
        written=tuple(sorted(written)),
    )


def _documents_under(absolute: Path) -> tuple[list[tuple[Document, Path]], Path]:
    """The published documents that the file or directory ``absolute`` is or holds, by
    path, and the directory their paths are reported from."""
    if absolute.is_file():
        document = _document_at(absolute)
        return ([(document, absolute)] if document is not None else []), absolute.parent
    return sorted(_published_documents(absolute), key=lambda item: item[1]), absolute


def _documents_of(
    kernel_dir: Path, found: list[tuple[Document, Path]], absolute: Path, one_file: bool
) -> list[tuple[Document, Path]]:
    """The documents of the kernel in ``kernel_dir``: of ``found`` when the path given
    named ``one_file``, else listed again under it (``absolute``), since a publish waited
    for may have added a version meanwhile."""
    if not one_file:
        below = kernel_dir if kernel_dir.is_relative_to(absolute) else absolute
        found = sorted(_published_documents(below), key=lambda item: item[1])
    return [(doc, path) for doc, path in found if _kernel_dir(doc, path) == kernel_dir]


def _local_tree(path: str | os.PathLike[str]) -> Path:
    """The directory (or document) ``path`` names: a path or a ``file://`` URL; another
    URL, a tree in an object store, is refused with what to do instead."""
    if isinstance(path, os.PathLike) or not is_url(path):
        return Path(path)
    if path.lower().startswith("file://"):
        return file_url_path(path)
    raise PublishError(
        f"{redact_url(path)} is a URL: a published tree is signed in a directory, not in "
        "an object store",
        hint="sign while publishing (sign=KEYFILE); or copy the tree into a directory, sign "
        "it there, and upload the .sig files it writes beside the documents",
        cli_hint="sign while publishing (flashhub publish --sign KEYFILE); or copy the tree "
        "into a directory (aws s3 sync s3://BUCKET/PREFIX tree/), run flashhub sign on it, "
        "and upload the .sig files it writes beside the documents",
    )


def _kernel_dir(document: Document, path: Path) -> Path:
    """The directory of the kernel that the document at ``path`` is of (absolute)."""
    levels = {"versions": 1, "variants": 2, "metadata": 4}[document.kind]
    return path.parents[levels - 1]


def _published_documents(root: Path) -> Iterator[tuple[Document, Path]]:
    """The signable documents under ``root``, an absolute directory. Hidden directories
    (a publish's staging) and a variant's own files are not searched."""
    if not root.is_dir():
        raise PublishError(
            f"{root} {'is not a directory or a file' if root.exists() else 'does not exist'}",
            hint="pass the CDN tree a publish wrote (its output directory), a directory in "
            "it, or one of its documents",
        )
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here.parent.name == "build" and VERSION_DIR.fullmatch(here.parent.parent.name):
            dirnames[:] = []
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            document = _document_at(here / name)
            if document is not None and not (here / name).is_symlink():
                yield document, here / name


def _document_at(path: Path) -> Document | None:
    """What the file at ``path`` (absolute) is in a CDN tree, read from its path alone."""
    parts = path.parts
    kind: DocumentKind
    if path.name == VERSIONS and len(parts) >= 3:
        # A stray versions.json is not a kernel's: that has v<N> directories beside it.
        if not any(VERSION_DIR.fullmatch(c.name) and c.is_dir() for c in path.parent.iterdir()):
            return None
        kind, names, version, variant = "versions", parts[-3:-1], None, None
    elif path.name == VARIANTS and len(parts) >= 4 and (match := VERSION_DIR.fullmatch(parts[-2])):
        kind, names, version, variant = "variants", parts[-4:-2], int(match[1]), None
    elif (
        path.name == MANIFEST_NAME
        and len(parts) >= 6
        and parts[-3] == "build"
        and (match := VERSION_DIR.fullmatch(parts[-4]))
    ):
        kind, names, version, variant = "metadata", parts[-6:-4], int(match[1]), parts[-2]
    else:
        return None
    repo_id = "/".join(names)
    try:
        parse_repo_id(repo_id)
    except ValueError:
        return None
    return Document(kind, repo_id, version, variant)


def document_kind(rel: str) -> DocumentKind | None:
    """The kind of the signed document at ``rel`` in a package or version directory."""
    if rel == VERSIONS:
        return "versions"
    if rel == VARIANTS:
        return "variants"
    return "metadata" if _VARIANT_MANIFEST.fullmatch(rel) else None


def version_documents(tree: Tree, repo: RepoInfo) -> Iterator[tuple[str, Document]]:
    """The signed documents of a version's tree: ``(relative path, document)``."""
    for rel in sorted(tree):
        kind = document_kind(rel)
        if kind is not None and kind != "versions":
            match = _VARIANT_MANIFEST.fullmatch(rel)
            yield rel, Document(kind, repo.repo_id, repo.version, match[1] if match else None)


def is_version_signature(rel: str) -> bool:
    """Whether ``rel``, in a version directory, is the ``.sig`` of one of its documents."""
    signed = rel.removesuffix(SIG_SUFFIX)
    return signed != rel and document_kind(signed) in ("variants", "metadata")


def add_signatures(
    document: Document, data: bytes, keys: Sequence[SigningKey], existing: bytes | None
) -> bytes:
    """The ``.sig`` of ``data`` once each of ``keys`` has signed it, added to the entries
    of ``existing`` (``None``: a new ``.sig``)."""
    assert keys, "signing without a key"
    signed = existing
    for key in keys:
        signed = sign_document(
            document.kind, document.repo_id, document.version, document.variant, data, key, signed
        )
    assert signed is not None
    return signed


def _signature(
    document: Document,
    destination: Destination,
    rel: str,
    data: bytes,
    keys: Sequence[SigningKey],
) -> bytes:
    """The ``.sig`` of ``data``, to be the document at ``rel``: the entries of other
    keys in the ``.sig`` there are kept if the document there has the same bytes."""
    same = destination.read(rel) == data
    existing = destination.read(rel + SIG_SUFFIX) if same else None
    return add_signatures(document, data, keys, existing)


def version_signatures(
    tree: Tree,
    destination: Destination,
    version_rel: str,
    repo: RepoInfo,
    keys: Sequence[SigningKey],
) -> dict[str, bytes]:
    """The ``.sig`` files of a version about to be written into ``version_rel``:
    relative path -> bytes."""
    signatures = {}
    for rel, document in version_documents(tree, repo):
        data = tree[rel]
        assert isinstance(data, bytes)  # the publisher writes its documents itself
        signed = _signature(document, destination, f"{version_rel}/{rel}", data, keys)
        signatures[rel + SIG_SUFFIX] = signed
    return signatures


_CHECKS: dict[DocumentKind, Callable[..., object]] = {
    "metadata": parse_metadata,
    "variants": parse_variants,
    "versions": parse_versions,
}


def sign_in_place(
    document: Document, destination: Destination, rel: str, keys: Sequence[SigningKey]
) -> str | None:
    """Sign the published document at ``rel``; the path of its ``.sig`` if it was written."""
    data = destination.read(rel)
    shown = destination.shown(rel)
    try:
        if data is None:
            raise ManifestError(f"{shown} is missing")
        _CHECKS[document.kind](data, source=shown)
    except ManifestError as exc:
        raise PublishError(
            f"refusing to sign {shown}: {exc.message}",
            hint="fix the document, or publish the version again",
        ) from None
    signed = _signature(document, destination, rel, data, keys)
    sig_rel = rel + SIG_SUFFIX
    if destination.read(sig_rel) == signed:
        return None
    destination.write(sig_rel, signed)
    return sig_rel
