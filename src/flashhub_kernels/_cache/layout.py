"""The on-disk cache as a warm load reads it: where everything is, the records an entry
was verified with, and whether its directories can be trusted.

Layout under the cache root::

    kernels/<org>/<pkg>/v<N>/
        variants-index.json               what this version publishes (see VariantIndex)
        <variant>/                        a committed entry: complete and verified
            metadata.json                 the manifest it was verified against
            .flashhub-receipt.json        content hash, size and mtime of every file,
                                          and of the bytecode compiled from them
            <py_pkg>/...                  the kernel's files (and __pycache__/)
        .staging-<variant>.<random>.<pid>.<host>/   a download in progress
        .partial-<variant>/<sha256 hex>   files of an interrupted download, to resume
        .locks/<variant>.lock             download mutex: one downloader per entry
    .locks/<org>/<pkg>/v<N>.lock          index mutex: one process at a time chooses a variant
    versions-seen.json                    the newest version seen listed (see .versions_seen)
    gpus                                  NVML's answer: GPU UUID -> capability (see
                                          flashhub_kernels._variants.device_arch)

Entries are written by :mod:`.staging` and read here. A process that imported an entry
holds a shared ``flock`` on its directory while it runs (:func:`mark_in_use`), which
``flashhub cache clear`` and ``prune`` respect.

Trust: nobody else can have planted code in a cache directory. A cached kernel is native
code that runs with the importing user's rights, trusted on the strength of a receipt,
so before the client reads anything in the cache it checks each directory on the way
(and the root's ancestors) as ssh checks ``~/.ssh`` (:func:`distrust`; docs/hosting.md
gives the rules, and what ``FLASHHUB_CACHE_SHARED=1`` relaxes for a cache a group shares).
"""

from __future__ import annotations

import json
import os
import stat
import types
from pathlib import Path

from .._constants import MANIFEST_NAME, RECEIPT_NAME
from .._models.record import Record

try:
    import fcntl
except ImportError:  # Windows: no flock, so entries in use are not marked
    fcntl = None  # type: ignore[assignment]

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .._config import Config
    from .._models.names import RepoInfo
    from .._variants.compat import BuildTarget
    from ..errors import CacheError

INDEX_NAME = "variants-index.json"
_NO_TARGETS: Mapping[str, BuildTarget] = types.MappingProxyType({})
_NO_PICKS: Mapping[str, str] = types.MappingProxyType({})
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
PARTIAL_PREFIX = ".partial-"


def read_json(path: Path) -> Any:
    """A JSON record of the cache, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


class VariantIndex(Record):
    """What the cache knows about the variants of one published version.

    ``complete`` means ``present`` is the whole ``variants.json``; otherwise the CDN was
    probed and only the names in ``present`` and ``absent`` are known either way.
    ``targets`` holds the devices that variants whose ``metadata.json`` was read while
    choosing declare (see :class:`~flashhub_kernels._variants.compat.BuildTarget`), so
    that a warm load passes over a build for other devices without asking the CDN again.
    ``picks`` maps a system's :attr:`~flashhub_kernels._variants.system.SystemInfo.key`
    to the variant its loads take, where the names alone decide it
    (:func:`~flashhub_kernels._variants.compat.pick_by_name`): a warm load of that system
    then judges nothing.
    """

    complete: bool
    present: frozenset[str]
    absent: frozenset[str] = frozenset()
    targets: Mapping[str, BuildTarget] = _NO_TARGETS
    picks: Mapping[str, str] = _NO_PICKS


class Receipt(Record):
    """Written when an entry is verified; lets the warm path trust it with ``stat`` only.

    ``files`` maps each path to its ``(size, mtime_ns)``; ``bytecode`` each ``.pyc``
    compiled from the verified sources before the commit to ``(size, mtime_ns, sha256
    hex)``: a damaged or substituted one fails the same ``stat`` check as a changed
    source, and ``flashhub cache verify`` re-hashes them. ``signer`` is the id of the
    trusted key that signed the manifest; ``requires`` what a load of the entry must
    check (see :func:`~flashhub_kernels._models.kernel_metadata.load_requirements`):
    ``{}`` for nothing, ``None`` in a receipt written before it was recorded. ``package``
    is a ``"zip"`` build's archive, the file imported as the kernel.
    """

    content_hash: str
    files: Mapping[str, tuple[int, int]]
    bytecode: Mapping[str, tuple[int, int, str]]
    signer: str | None = None
    requires: Mapping[str, Any] | None = None
    package: str | None = None

    def changed_file(self, entry: Path) -> str | None:
        """The first file that is missing, not a regular file, or changed; else ``None``."""
        for relpath, (size, mtime_ns) in self.files.items():
            if _changed(entry / relpath, size, mtime_ns):
                return relpath
        for relpath, (size, mtime_ns, _digest) in self.bytecode.items():
            if _changed(entry / relpath, size, mtime_ns):
                return relpath
        return None


def _changed(path: Path, size: int, mtime_ns: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return True
    return not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns) != (size, mtime_ns)


def parse_index(document: Mapping[str, Any]) -> VariantIndex | None:
    """The :class:`VariantIndex` an index's JSON object records; ``None`` when it is not one."""
    try:
        index = VariantIndex(
            bool(document["complete"]),
            frozenset(document["present"]),
            frozenset(document["absent"]),
        )
    except (KeyError, TypeError):
        return None
    targets = document.get("targets")
    if isinstance(targets, dict) and targets:
        from .._variants.compat import target_from_json  # builds judged by their metadata

        read = {name: target_from_json(value) for name, value in targets.items()}
        index = index._replace(targets={n: t for n, t in read.items() if t is not None})
    return index._replace(picks=_recorded_picks(document))


def recorded_pick(document: Mapping[str, Any], key: str) -> str | None:
    """The variant an index's JSON object records for the system ``key`` (see
    :attr:`VariantIndex.picks`), read without parsing the rest; ``None`` when none is."""
    return _recorded_picks(document).get(key)


def _recorded_picks(document: Mapping[str, Any]) -> dict[str, str]:
    """The picks of an index's JSON object that name a variant it lists."""
    picks, present = document.get("picks"), document.get("present")
    if not isinstance(picks, dict) or not isinstance(present, list):
        return {}
    return {key: name for key, name in picks.items() if isinstance(name, str) and name in present}


class Cache:
    """Paths and operations of one cache root. Creating it touches nothing on disk.

    ``lock_timeout`` bounds each wait for another process's lock (``None``: no bound).
    ``shared`` trusts directories the user's group may write (see :func:`distrust`).
    Nothing is read from, or created under, a directory that fails those checks.
    """

    def __init__(
        self, root: Path, lock_timeout: float | None = None, *, shared: bool = False
    ) -> None:
        self.root, self.lock_timeout, self.shared = root, lock_timeout, shared

    @classmethod
    def from_config(cls, config: Config) -> Cache:
        return cls(config.cache_dir, config.lock_timeout, shared=config.cache_shared)

    def check_trusted(self, path: Path) -> None:
        """Raise :class:`CacheError` unless the root, its ancestors and every existing
        directory from the root down to ``path`` are trusted (absent ones are fine)."""
        check_root(self.root, shared=self.shared)
        current = self.root
        for part in path.relative_to(self.root).parts:
            current = current / part
            check_dir(current, shared=self.shared)

    def check_entry(self, entry: Path) -> None:
        """Check one entry directory, once :meth:`read_index` has checked every directory
        above it (the warm path: the chain is not walked twice)."""
        check_dir(entry, shared=self.shared)

    def version_dir(self, info: RepoInfo) -> Path:
        return self.root / "kernels" / info.org / info.name / f"v{info.version}"

    def entry_dir(self, info: RepoInfo, variant: str) -> Path:
        return self.version_dir(info) / variant

    def read_index(self, info: RepoInfo) -> VariantIndex | None:
        return parse_index(self.index_document(info))

    def index_document(self, info: RepoInfo) -> dict[str, Any]:
        """The JSON object of the index of ``info``, unparsed (see :func:`parse_index`
        and :func:`recorded_pick`); empty when there is none to read."""
        self.check_trusted(self.version_dir(info))
        data = read_json(self.version_dir(info) / INDEX_NAME)
        return data if isinstance(data, dict) else {}

    def read_receipt(self, entry: Path) -> Receipt | None:
        data = read_json(entry / RECEIPT_NAME)
        try:
            files = {str(p): (int(s), int(m)) for p, (s, m) in data["files"].items()}
            bytecode = {
                str(p): (int(s), int(m), str(d))
                for p, (s, m, d) in data.get("bytecode", {}).items()
            }
            signer, requires, package = (data.get(k) for k in ("signer", "requires", "package"))
            return Receipt(
                str(data["content_hash"]),
                files,
                bytecode,
                str(signer) if signer else None,
                requires if isinstance(requires, dict) else None,
                str(package) if package else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def read_target(self, info: RepoInfo, variant: str) -> BuildTarget | None:
        """The devices a committed entry's ``metadata.json`` declares; ``None`` when the
        entry is not cached."""
        from .._variants.compat import read_target

        entry = self.entry_dir(info, variant)
        data = read_json(entry / MANIFEST_NAME) if (entry / RECEIPT_NAME).is_file() else None
        return read_target(data) if isinstance(data, dict) else None


# -- entries in use ---------------------------------------------------------------------
#
# A process that imports a kernel from the cache holds a shared ``flock`` on the entry's
# directory until it exits (the kernel drops it however the process ends; a forked child
# shares it). The directory is opened read-only, so this works on a read-only cache, and
# costs one ``open`` and one ``flock``. Before removing an entry, ``flashhub cache clear``
# and ``prune`` try an exclusive lock on it without waiting (see ``.admin``), and leave it
# alone while any process holds a shared one, unless told to force it. Advisory and best
# effort: where ``fcntl`` is missing (Windows) or the file system refuses ``flock`` on a
# directory, nothing is held and nothing is protected.

_held: dict[str, int] = {}  # entry directory -> the descriptor holding its shared lock


def mark_in_use(entry: Path) -> bool:
    """Hold a shared lock on ``entry`` for the rest of this process.

    ``False`` when the entry was moved away before the lock was taken (``flashhub cache
    clear`` was removing it): look it up again. An entry that cannot be locked is
    ``True``: it loads, unprotected.
    """
    if fcntl is None:
        return True
    key = str(entry)
    held = _held.get(key)
    if held is not None:
        if _is_at(held, entry):
            return True
        os.close(_held.pop(key))  # removed and cached again since: lock the new one
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while clear or prune removes it
    except OSError:
        os.close(fd)
        return True
    if not _is_at(fd, entry):
        os.close(fd)
        return False
    _held[key] = fd
    return True


def _is_at(fd: int, entry: Path) -> bool:
    """Whether the directory open as ``fd`` is still the one at ``entry``."""
    try:
        current = os.stat(entry)
    except OSError:
        return False
    held = os.fstat(fd)
    return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)


# -- trust ---------------------------------------------------------------------------

_checked_roots: set[tuple[Path, bool]] = set()


def distrust(st: os.stat_result, *, shared: bool, inside: bool) -> str | None:
    """Why a directory with this ``lstat`` result cannot be trusted, or ``None``.

    ``inside``: the directory is inside the cache, where a symlink is not accepted.
    """
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink" if inside else None
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (os.getuid(), 0) and not (shared and st.st_gid in _my_groups()):
        return "is owned by another user"
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if st.st_mode & stat.S_IWOTH and not sticky:
        return "is writable by every user"
    if st.st_mode & stat.S_IWGRP and not sticky and not shared:
        return "is writable by its group"
    return None


def check_dir(path: Path, *, shared: bool, inside: bool = True) -> None:
    """Raise :class:`CacheError` unless ``path`` is absent or a trusted directory."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        from ..errors import CacheError  # only on a refusal: a load does not import errors

        raise CacheError.cannot_write(exc, path) from exc
    reason = distrust(st, shared=shared, inside=inside)
    if reason is not None:
        raise untrusted(path, st, reason)


def check_root(root: Path, *, shared: bool) -> None:
    """Check the cache root and every directory above it; once per process and root
    (once it exists: a root created later is checked then)."""
    if (root, shared) in _checked_roots:
        return
    real = Path(os.path.realpath(root))
    for directory in [real, *real.parents]:
        check_dir(directory, shared=shared, inside=False)
    if real.is_dir():
        _checked_roots.add((root, shared))


def untrusted(path: Path, st: os.stat_result, reason: str) -> CacheError:
    """The refusal: names the path, its owner and mode, and what to do."""
    from ..errors import CacheError

    return CacheError(
        f"refusing to trust the cache: {path} {reason} "
        f"(owner {_user_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}); "
        "whoever can write there could plant code that this process would run",
        hint="use a cache directory of your own (FLASHHUB_CACHE_DIR), or make this one "
        "yours and private (chown, chmod go-w); for a cache a group shares on purpose, "
        "set FLASHHUB_CACHE_SHARED=1",
    )


def _my_groups() -> set[int]:
    return {os.getgid(), *os.getgroups()}


def _user_name(uid: int) -> str:
    try:
        import pwd  # Unix only, and only to word a refusal

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
