"""Where a CDN tree is published: a local directory, or an object store.

A :class:`Destination` reads, lists and writes files by their path relative to the root
of the tree (``/`` separated), and records what it wrote, for the report. Two kinds:

- :class:`Directory` (``--out cdn``, or ``file://``): each document is replaced in one
  rename (:func:`~.._utils.filesystem.write_atomic`), and a new version is assembled in a
  hidden staging directory beside ``v<N>`` and renamed into place whole;
- :class:`ObjectStoreDestination` (``--out s3://bucket/prefix``, or another fsspec URL,
  with the ``s3`` extra): each object appears whole once written, and the files of a
  version go up one by one in the order :func:`~.writing.write_order` gives, so that
  the store never lists a version or a variant whose files are not all there.

Either way the caller writes ``versions.json`` last. Into a directory, publishes of one
kernel run one at a time (:meth:`Destination.exclusive`), so that two publishes of two
versions both end up in its ``versions.json``; the one that holds the kernel's mutex
removes what publishes killed there left behind (:func:`remove_leftovers`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .._network.object_store import ObjectMissing, Store, StoreError, is_url
from .._utils.filesystem import write_atomic
from .._utils.hashing import CHUNK_SIZE
from .._utils.logs import logger
from .._utils.processes import another_process_alive, idle_for, owner_suffix, this_host
from ..errors import PublishError
from .layout import DIR_MODE, FILE_MODE, SourceFile, hash_file

# One file of a version to write: its path relative to the version, and its content.
Item = tuple[str, bytes | SourceFile]


# A staging or old-version directory of a publish: ``.v<N>.staging-<random>.<pid>.<host>``
# (``.v<N>.old-...``); a publisher before the pid and host were added left no suffix.
_LEFTOVER = re.compile(r"\.(v[1-9][0-9]*)\.(staging|old)-[a-z0-9_]+(?:\.([0-9]+)\.(.+))?")
# A leftover of another host (or without one) is removed once nothing in it changed
# for this long: a publish writes its files in one go, and never pauses for a day.
LEFTOVER_IDLE_SECONDS = 24 * 3600


class Destination(ABC):
    """The root of a CDN tree that is being published into."""

    def __init__(self) -> None:
        self.written: dict[str, int] = {}  # path -> size, of every file written

    @abstractmethod
    def shown(self, rel: str = "") -> str:
        """Where ``rel`` is, as messages and the report show it: a path or a URL."""

    @abstractmethod
    def read(self, rel: str) -> bytes | None:
        """The file at ``rel``, or ``None`` if there is none."""

    @abstractmethod
    def subdirs(self, rel: str) -> list[str]:
        """The names of the directories directly under ``rel``, sorted (not symlinks)."""

    def names_taken(self, rel: str) -> list[str]:
        """The names directly under ``rel`` that a new directory cannot have: in a store,
        those of its "directories" (an object beside one does not take its name)."""
        return self.subdirs(rel)

    @abstractmethod
    def files(self, rel: str) -> dict[str, int] | None:
        """Every file under ``rel`` (relative to it) and its size: ``{}`` if there is
        none, ``None`` if ``rel`` is not a plain directory tree (a symlink, a special
        file)."""

    @abstractmethod
    def digest(self, rel: str) -> bytes | None:
        """The sha256 of the file at ``rel`` if it can be had without downloading it."""

    @abstractmethod
    def write(self, rel: str, data: bytes) -> None:
        """Replace the file at ``rel`` with ``data``, so readers see old or new bytes."""

    @abstractmethod
    def write_version(self, rel: str, items: Sequence[Item], *, replace: bool) -> None:
        """Write the files of a version into the directory ``rel``, in the order given.

        ``replace``: something is there already, and goes (its files the new version
        does not have too).
        """

    def exclusive(self, rel: str) -> contextlib.AbstractContextManager[None]:
        """Keep other publishes out of the directory ``rel`` (a kernel's) for the block,
        where the destination can: none by default."""
        return contextlib.nullcontext()


def open_destination(out: str | os.PathLike[str]) -> Destination:
    """The destination ``out`` names: a directory, a ``file://`` URL, or an object store
    URL (``s3://bucket/prefix``).

    Raises:
        PublishError: an object store URL, and fsspec (or its package for the URL's
            kind) is not installed.
    """
    if isinstance(out, os.PathLike) or not is_url(out):
        return Directory(Path(out))
    if out.lower().startswith("file://"):
        from .._utils.urls import file_url_path

        return Directory(file_url_path(out))
    return ObjectStoreDestination(out)


def read_verified(source: SourceFile, *, shown: str) -> Iterator[bytes]:
    """The bytes of ``source`` in chunks, hashed as they are read: after the last one,
    :class:`PublishError` if they are not the bytes its manifest lists."""
    hasher = hashlib.sha256()
    with source.path.open("rb") as file:
        while chunk := file.read(CHUNK_SIZE):
            hasher.update(chunk)
            yield chunk
    if hasher.digest() != source.digest:
        raise PublishError(
            f"{source.path} changed while it was being published (as {shown})",
            hint="wait for the build to finish, then publish again",
        )


def item_size(item: bytes | SourceFile) -> int:
    return len(item) if isinstance(item, bytes) else item.size


# -- a local directory -------------------------------------------------------------------


class Directory(Destination):
    """A CDN tree on the local file system."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def path(self, rel: str) -> Path:
        return self.root.joinpath(*rel.split("/")) if rel else self.root

    def shown(self, rel: str = "") -> str:
        return str(self.path(rel))

    def read(self, rel: str) -> bytes | None:
        path = self.path(rel)
        return path.read_bytes() if path.is_file() else None

    def subdirs(self, rel: str) -> list[str]:
        directory = self.path(rel)
        if not directory.is_dir():
            return []
        return sorted(p.name for p in directory.iterdir() if p.is_dir() and not p.is_symlink())

    def names_taken(self, rel: str) -> list[str]:
        """Every entry's: a symlink (which a web server follows) or a file also takes one."""
        directory = self.path(rel)
        return os.listdir(directory) if directory.is_dir() else []

    def files(self, rel: str) -> dict[str, int] | None:
        top = self.path(rel)
        if not top.exists() and not top.is_symlink():
            return {}
        if top.is_symlink() or not top.is_dir():
            return None
        found: dict[str, int] = {}
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                path = Path(dirpath, name)
                if path.is_symlink() or not (path.is_dir() or path.is_file()):
                    return None
            for name in filenames:
                path = Path(dirpath, name)
                found[path.relative_to(top).as_posix()] = path.stat().st_size
        return found

    def digest(self, rel: str) -> bytes:
        return hash_file(self.path(rel)).digest

    def write(self, rel: str, data: bytes) -> None:
        path = self.path(rel)
        with self._writing(path):
            _make_dirs(path.parent)
            write_atomic(path, data, mode=FILE_MODE)
        self.written[rel] = len(data)

    def write_version(self, rel: str, items: Sequence[Item], *, replace: bool) -> None:
        """Assemble the version in a hidden sibling directory, then rename it into place:
        readers see the whole version or none of it."""
        version_dir = self.path(rel)
        with self._writing(version_dir):
            self._assemble(version_dir, items, replace=replace)
        self.written.update({f"{rel}/{item_rel}": item_size(item) for item_rel, item in items})

    def _assemble(self, version_dir: Path, items: Sequence[Item], *, replace: bool) -> None:
        _make_dirs(version_dir.parent)
        staging = Path(
            tempfile.mkdtemp(
                prefix=f".{version_dir.name}.staging-",
                suffix=owner_suffix(),
                dir=version_dir.parent,
            )
        )
        try:
            staging.chmod(DIR_MODE)
            for item_rel, item in items:
                target = staging.joinpath(*item_rel.split("/"))
                _make_dirs(target.parent)
                chunks = [item] if isinstance(item, bytes) else read_verified(item, shown=item_rel)
                _write_new(target, chunks)
            _commit(staging, version_dir, replace=replace)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    @contextlib.contextmanager
    def _writing(self, path: Path) -> Iterator[None]:
        """An ``OSError`` of writing in the tree becomes a :class:`PublishError` naming
        ``path``, not a staging or temporary name; one naming a file outside the tree (a
        file of the build, read as it is copied) is left as it is."""
        try:
            yield
        except OSError as exc:
            if exc.filename is not None and not Path(exc.filename).is_relative_to(self.root):
                raise
            raise PublishError.cannot_write(exc, path) from None

    @contextlib.contextmanager
    def exclusive(self, rel: str) -> Iterator[None]:
        """The mutex of ``rel`` (created if missing), kept in this machine's cache:
        another publish into it waits, saying so after a moment. Once held, what killed
        publishes left in ``rel`` is removed (:func:`remove_leftovers`)."""
        from .._cache.layout import Cache
        from .._cache.mutex import publish_mutex
        from .._config import get_config

        directory = self.path(rel)
        with self._writing(directory):
            _make_dirs(directory)
        with publish_mutex(Cache.from_config(get_config()), directory):
            remove_leftovers(directory)
            yield


def remove_leftovers(directory: Path) -> None:
    """Remove the staging and old-version directories that publishes killed (SIGKILL,
    a power cut) left in a kernel's ``directory``; the caller holds its publish mutex.

    A leftover of this host is removed if the process its name records is gone, or is
    this one: no publish of this machine's cache writes there while the mutex is held.
    One whose process runs (a publish through another cache, which the mutex does not
    keep out, or a PID taken since), of another host (a shared file system), or named
    without either (an older publisher), is removed once nothing in it has changed for
    :data:`LEFTOVER_IDLE_SECONDS`. An old version whose ``v<N>`` is missing (the publish
    replacing it was killed between its two renames) is left, with a warning saying how
    to restore it.
    """
    for child in sorted(directory.iterdir()):
        match = _LEFTOVER.fullmatch(child.name)
        if match is None or child.is_symlink() or not child.is_dir():
            continue
        version, kind, pid, host = match.groups()
        dead = pid is not None and host == this_host() and not another_process_alive(int(pid))
        if not dead and not idle_for(child, LEFTOVER_IDLE_SECONDS):
            continue
        if kind == "old" and not (directory / version).exists():
            logger.warning(
                "%s is missing: a publish replacing it was killed, and its previous files "
                "are in %s; move that directory back to %s, or publish %s again with --force",
                directory / version,
                child / "old",
                directory / version,
                version,
            )
            continue
        logger.info("removing %s, left by a publish that was killed", child)
        shutil.rmtree(child, ignore_errors=True)


def _make_dirs(path: Path) -> None:
    """Create ``path`` and missing parents with mode 0755 regardless of the umask."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        directory.chmod(DIR_MODE)


def _write_new(target: Path, chunks: Iterable[bytes]) -> None:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as file:
        os.fchmod(file.fileno(), FILE_MODE)
        for chunk in chunks:
            file.write(chunk)


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
    trash = Path(
        tempfile.mkdtemp(
            prefix=f".{version_dir.name}.old-", suffix=owner_suffix(), dir=version_dir.parent
        )
    )
    os.rename(version_dir, trash / "old")
    os.rename(staging, version_dir)
    shutil.rmtree(trash, ignore_errors=True)


# -- an object store ---------------------------------------------------------------------


class ObjectStoreDestination(Destination):
    """A CDN tree in an object store, written through fsspec."""

    def __init__(self, url: str) -> None:
        super().__init__()
        try:
            self.store = Store(url)
        except StoreError as exc:
            raise PublishError(str(exc), hint=exc.hint) from None

    def shown(self, rel: str = "") -> str:
        return self.store.shown(rel)

    def read(self, rel: str) -> bytes | None:
        with self._errors():
            try:
                return self.store.read(rel)
            except ObjectMissing:
                return None

    def subdirs(self, rel: str) -> list[str]:
        with self._errors():
            return self.store.subdirs(rel)

    def files(self, rel: str) -> dict[str, int]:
        with self._errors():
            return self.store.files(rel)

    def digest(self, rel: str) -> None:
        return None  # a store states no sha256 of its own: compare.py reads the manifests

    def write(self, rel: str, data: bytes) -> None:
        with self._errors():
            self.store.write(rel, data)
        self.written[rel] = len(data)

    def write_version(self, rel: str, items: Sequence[Item], *, replace: bool) -> None:
        """Write each file as one object (it appears whole, when its upload completes),
        in the order given; with ``replace``, then delete the files of the version there
        that the new one does not have."""
        stale = set(self.files(rel)) if replace else set()
        for item_rel, item in items:
            path = f"{rel}/{item_rel}"
            if isinstance(item, bytes):
                self.write(path, item)
                continue
            with self._errors():
                self.store.upload(path, read_verified(item, shown=item_rel))
            self.written[path] = item.size
        with self._errors():
            for item_rel in sorted(stale - {item_rel for item_rel, _ in items}):
                self.store.delete(f"{rel}/{item_rel}")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except StoreError as exc:
            raise PublishError(str(exc), hint=exc.hint) from None
