"""A local build's files, checked against the digest in its ``metadata.json`` before any
of its code runs, on every load, as Hugging Face kernels checks them.

The digest covers every file under the variant directory, hidden ones included, except:
``__pycache__`` directories and ``*.pyc`` files at any depth (a previous import writes
them), and, at the top, ``metadata.json`` itself and the files that sign or stand for it
(``metadata.json.sig``, Hugging Face's ``metadata.json.sigstore``, a cache entry's
receipt), which no digest can list. A symlink to a file counts as the file it points
to; a symlink to a directory is refused, since the digest covers nothing under it; a
FIFO, socket or device is passed over, as Hugging Face passes it over.

A ``metadata.json`` without a ``digest`` object is loaded as it is, with an INFO log
record: most builds made for development have none. A digest that lists bytecode is
refused as malformed: bytecode is never part of a build, here as for publish, which
never ships it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from .._constants import MANIFEST_NAME
from .._models.manifest import RESERVED_NAMES, load_json, manifest_of
from .._utils.hashing import sha256_file
from .._utils.logs import logger
from ..errors import IntegrityError, ManifestError

# The top-level files no digest can list: metadata.json, what signs it (this client's
# signature, Hugging Face's Sigstore bundle) and a cache entry's receipt.
_UNCOVERED = RESERVED_NAMES | {MANIFEST_NAME + ".sigstore"}
_MAX_SHOWN = 20  # violations an error lists; a build copied over the wrong one has many
_HINT = (
    "rebuild the kernel, or restore its files as its build wrote them (and remove the "
    "files it did not write)"
)
# Bytecode, which an import writes: never part of a build, so the digest passes over it.
_BYTECODE_DIR = "__pycache__"
_BYTECODE_SUFFIX = ".pyc"
_MALFORMED_HINT = (
    "rebuild the kernel, or, where that metadata.json is not the build's, load the package "
    "from a directory of its own"
)


def verify_local_build(path: Path, data: bytes) -> object:
    """Check a local kernel's variant directory against the digest of its
    ``metadata.json`` (``path``, which holds ``data``), when it records one; return the
    parsed document.

    Raises:
        IntegrityError: a listed file is missing or holds other bytes, or a file is there
            that the digest does not list; each is named (relative to the variant).
        ManifestError: the document is not JSON, or its ``digest`` is malformed.
    """
    try:
        document = load_json(data, str(path))
        listed = _digest_files(document, path)
    except ManifestError as exc:  # its hint blames a CDN, which served no local file
        raise ManifestError(exc.message, hint=_MALFORMED_HINT) from None
    if listed is None:
        logger.info("%s records no digest: the local kernel's files are not verified", path)
        return document
    _refuse_listed_bytecode(listed, path)
    variant_dir = path.parent
    violations = find_violations(variant_dir, listed)
    if violations:
        raise IntegrityError(_describe(document, variant_dir, violations), hint=_HINT)
    logger.debug("%s: the files match the digest in %s", variant_dir, MANIFEST_NAME)
    return document


def _digest_files(document: object, path: Path) -> Mapping[str, bytes] | None:
    """The files the digest of ``document`` (the ``metadata.json`` at ``path``) lists;
    ``None`` where it has no ``digest`` object: a ``"digest"`` of another kind is another
    tool's (a project's, holding the package given directly).

    Raises:
        ManifestError: the digest is malformed.
    """
    if not isinstance(document, dict) or not isinstance(document.get("digest"), dict):
        return None
    return manifest_of(document, str(path)).files


def _refuse_listed_bytecode(listed: Mapping[str, bytes], path: Path) -> None:
    """Refuse a digest (of the ``metadata.json`` at ``path``) that lists bytecode: no load
    checks it, and a listed file would otherwise be reported missing when it is there.

    Raises:
        ManifestError: naming the first such file.
    """
    bytecode = sorted(rel for rel in listed if _is_bytecode(rel))
    if bytecode:
        raise ManifestError(
            f"{path}: the digest lists {bytecode[0]}, but bytecode (.pyc files, "
            f"{_BYTECODE_DIR} directories) is never part of a build: an import writes it, "
            "so a load does not check it, and `flashhub publish` does not ship it",
            hint="build the kernel with a digest that leaves out .pyc files and "
            f"{_BYTECODE_DIR} directories",
        )


def _is_bytecode(rel: str) -> bool:
    parts = rel.split("/")
    return rel.endswith(_BYTECODE_SUFFIX) or _BYTECODE_DIR in parts[:-1]


def find_violations(variant_dir: Path, listed: Mapping[str, bytes]) -> list[str]:
    """What in ``variant_dir`` differs from ``listed`` (relative path -> sha256), one
    line each, sorted by path."""
    found: dict[str, str] = {}
    present: set[str] = set()
    for rel, path, problem in _files(variant_dir, ""):
        present.add(rel)
        if problem is not None:
            found[rel] = f"{problem}: {rel}"
        elif rel not in listed:
            found[rel] = f"Unknown file: {rel}"
        else:
            found.update(_hash_violation(rel, path, listed[rel]))
    found.update((rel, f"Missing file: {rel}") for rel in listed.keys() - present)
    return [found[rel] for rel in sorted(found)]


def _hash_violation(rel: str, path: Path, expected: bytes) -> Iterator[tuple[str, str]]:
    try:
        if sha256_file(path) != expected:
            yield rel, f"File hash mismatch for {rel}"
    except OSError as exc:
        yield rel, f"Unreadable file ({exc.strerror}): {rel}"


def _files(directory: Path, rel: str) -> Iterator[tuple[str, Path, str | None]]:
    """``(relative path, path, problem)`` of each file the digest covers under
    ``directory`` (``rel`` its own relative path, ``""`` for the variant), sorted;
    ``problem`` says why one cannot count as a file (``None`` when it can)."""
    try:
        with os.scandir(directory) as scan:
            entries = sorted(scan, key=lambda entry: entry.name)
    except OSError as exc:
        yield rel or ".", directory, f"Unreadable directory ({exc.strerror})"
        return
    for entry in entries:
        child = f"{rel}/{entry.name}" if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            if entry.name != _BYTECODE_DIR:
                yield from _files(Path(entry.path), child)
        elif entry.name.endswith(_BYTECODE_SUFFIX) or (not rel and entry.name in _UNCOVERED):
            continue
        elif (mode := _mode(entry)) is None or stat.S_ISREG(mode):  # dangling: unreadable
            yield child, Path(entry.path), None
        elif stat.S_ISDIR(mode):
            yield child, Path(entry.path), "Symlink to a directory, whose files no digest covers"


def _mode(entry: os.DirEntry[str]) -> int | None:
    """The mode of what ``entry`` is or links to; ``None`` for a dangling symlink or a
    loop of them."""
    try:
        return entry.stat().st_mode
    except OSError:
        return None


def _describe(document: Mapping[str, object], variant_dir: Path, violations: list[str]) -> str:
    """The error's message: the kernel, as Hugging Face names it, and its violations."""
    name = document.get("name")
    kernel = repr(name) if isinstance(name, str) else repr(variant_dir.parent.name)
    shown = violations[:_MAX_SHOWN]
    if len(violations) > _MAX_SHOWN:
        shown.append(f"... and {len(violations) - _MAX_SHOWN} more")
    lines = "".join(f"\n  {line}" for line in shown)
    return (
        f"Kernel {kernel} variant {variant_dir.name!r} ({variant_dir}): the files do not "
        f"match the digest in {MANIFEST_NAME}, so they may have been modified:{lines}"
    )
