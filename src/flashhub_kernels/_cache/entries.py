"""What the cache holds, as its maintenance commands see it: the committed entries of
each kernel version, the directories beside them that are not the cache's, and the
directories a load would refuse to read or trust."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path

from .._constants import MANIFEST_NAME
from .._models.names import RepoInfo
from .._models.record import Record
from .._variants.grammar import is_variant_name
from ..errors import CacheError
from .layout import Cache
from .receipt import read_receipt
from .trust import distrust, unreadable

_VERSION_DIR = re.compile(r"v([1-9][0-9]{0,8})")


class CacheEntry(Record):
    """One cached variant. ``content_hash`` is ``None`` when it has no readable receipt;
    ``signer`` is the trusted key that vouched for it, if any."""

    info: RepoInfo
    variant: str
    path: Path
    content_hash: str | None
    files: int
    size: int
    signer: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "repo_id": self.info.repo_id,
            "version": self.info.version,
            "variant": self.variant,
            "path": str(self.path),
            "content_hash": self.content_hash,
            "files": self.files,
            "bytes": self.size,
            "signer": self.signer,
        }


def version_dirs(cache: Cache) -> Iterator[tuple[RepoInfo, Path]]:
    """``kernels/<org>/<pkg>/v<N>`` directories whose names are valid; others are not ours."""
    for version_dir in sorted(cache.kernels_dir.glob("*/*/v*")):
        match = _VERSION_DIR.fullmatch(version_dir.name)
        if not match or not version_dir.is_dir() or version_dir.is_symlink():
            continue
        try:
            info = RepoInfo(
                f"{version_dir.parent.parent.name}/{version_dir.parent.name}", int(match[1])
            )
        except ValueError:
            continue
        yield info, version_dir


def _subdirs(version_dir: Path) -> list[Path]:
    """The directories in ``version_dir`` but staging, trash and lock directories."""
    return [
        child
        for child in sorted(version_dir.iterdir())
        if not child.name.startswith(".") and not child.is_symlink() and child.is_dir()
    ]


def _is_entry(path: Path) -> bool:
    """Whether ``path``, a directory in a version directory, is an entry: it is named as
    a variant, or holds the ``metadata.json`` every committed entry has. Anything else
    is not the cache's: a kernel that compiles code at run time may write beside its
    own entry (``v1/build/...``), and keep it private to the user who ran it. Unlike
    ``Path.is_file``, ``os.path.isfile`` says no where it may not look."""
    return is_variant_name(path.name) or os.path.isfile(path / MANIFEST_NAME)


def list_entries(cache: Cache) -> list[CacheEntry]:
    """Every committed entry, sorted by repo, version and variant."""
    return [
        entry
        for info, version_dir in version_dirs(cache)
        for entry in entries_in(info, version_dir)
    ]


def entries_in(info: RepoInfo, version_dir: Path) -> list[CacheEntry]:
    """The committed entries of ``info``'s version directory, sorted by variant."""
    entries = []
    for child in filter(_is_entry, _subdirs(version_dir)):
        receipt = read_receipt(child)
        sizes = [size for size, _mtime in receipt.files.values()] if receipt else []
        content_hash = receipt.content_hash if receipt else None
        signer = receipt.signer if receipt else None
        entries.append(
            CacheEntry(info, child.name, child, content_hash, len(sizes), sum(sizes), signer)
        )
    return entries


def foreign_dirs(cache: Cache) -> list[Path]:
    """The directories in version directories that are not entries (see
    :func:`_is_entry`): the cache commands leave them alone."""
    return [
        child
        for _info, version_dir in version_dirs(cache)
        for child in _subdirs(version_dir)
        if not _is_entry(child)
    ]


def check_readable(cache: Cache) -> None:
    """Raise :func:`~.trust.unreadable`'s :class:`CacheError` for the first directory of
    ``kernels/<org>/<pkg>/v<N>`` that this user may not list (a cache another user made
    private), or that a file stands in place of (a cache directory naming a file), which
    the maintenance commands would otherwise fail on with a bare errno, or pass over as
    empty."""
    kernels = cache.kernels_dir

    def refuse(exc: OSError) -> None:
        if isinstance(exc, PermissionError):
            raise unreadable(Path(str(exc.filename)), exc) from exc
        if isinstance(exc, NotADirectoryError):
            raise _not_a_directory(Path(str(exc.filename))) from exc

    for directory, dirs, _files in os.walk(kernels, onerror=refuse):
        if len(Path(directory).relative_to(kernels).parts) == 3:
            dirs.clear()  # a version directory: its entries are read file by file


def _not_a_directory(path: Path) -> CacheError:
    """The refusal of a cache whose directory ``path`` a file stands in place of, or above:
    the commands that read the cache say so, not that they cannot write it."""
    in_the_way = next((p for p in path.parents if p.exists()), path)
    return CacheError(
        f"cannot read {path}: {in_the_way} is not a directory",
        hint="point FLASHHUB_CACHE_DIR at the cache's directory",
    )


def is_absent(cache: Cache) -> bool:
    """Whether nothing is at the cache's directory (a link to nothing included)."""
    try:
        os.stat(cache.root)
    except FileNotFoundError:
        return True
    except OSError:  # there, but not to be looked at: check_readable says why
        return False
    return False


def check_present(cache: Cache) -> None:
    """Raise a :class:`CacheError` naming the cache's directory when it does not exist:
    a mistyped path would otherwise list and verify as an empty cache, and pass."""
    if is_absent(cache):
        raise CacheError(
            f"the cache directory {cache.root} does not exist",
            hint="check the path in FLASHHUB_CACHE_DIR, or load a kernel "
            "(`flashhub get ORG/PKG`) to create the cache",
        )


def untrusted_dirs(cache: Cache) -> list[tuple[Path, str]]:
    """Directories of the cache layout that a load would refuse to trust, and why:
    symlinks, and directories another user owns or may write."""
    kernels = cache.kernels_dir
    levels = [[cache.root], [kernels], *(sorted(kernels.glob("*/" * n + "*")) for n in range(4))]
    found = []
    for path in (p for level in levels for p in level):
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            continue  # variant indexes; files inside entries are checked by verify_entry
        why = distrust(st, shared=cache.shared, inside=path != cache.root)
        if why is not None:
            found.append((path, why))
    return found
