"""Writing the tree: a new version in one rename, then ``versions.json`` and the
signatures."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .._filesystem import write_atomic
from .._hashing import CHUNK_SIZE, HashingWriter
from .._manifest import dump_json, parse_versions
from .._names import RepoInfo
from .._signing import SigningKey, dump_signatures, parse_signatures
from ..errors import IntegrityError, ManifestError, PublishError, SignatureError
from .layout import DIR_MODE, FILE_MODE, SourceFile, Tree
from .signatures import Document, add_signatures, signature_path


def _make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents with mode 0755 regardless of the umask."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        directory.chmod(DIR_MODE)


def write_version(tree: Tree, version_dir: Path, *, replace: bool) -> None:
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


def _copy_verified(source: SourceFile, target: Path, *, shown: str) -> None:
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


def merged_versions(path: Path, version: int) -> tuple[bytes | None, list[int]]:
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


def write_versions(
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
    sig_path = signature_path(path)
    signed = old_sig = None
    if keys:
        old_sig = sig_path.read_bytes() if sig_path.is_file() else None
        document = Document("versions", repo.repo_id, None, None)
        signed = add_signatures(document, data, keys, old_sig if data == old else None)
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
