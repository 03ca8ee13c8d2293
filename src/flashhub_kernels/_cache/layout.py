"""The on-disk cache: layout, locks, staging, atomic commit and receipts.

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
    versions-seen.json                    the newest version seen listed (see _versions_seen)
    gpus                                  NVML's answer: GPU UUID -> capability (_device_arch)

An entry appears only by renaming a verified staging directory into place, so readers
never see a partial one. A published version never changes, so a committed entry is
never updated in place: a damaged one is moved aside and fetched again.

A download stopped by Ctrl-C or a network failure keeps what it received: the
incomplete files move to ``.partial-<variant>/``, named by the sha256 they must hash
to, and the next downloader of the entry continues them with ``Range``. They are
checked against that digest like any other download.

A process that imported an entry holds a shared ``flock`` on its directory while it
runs (:func:`mark_in_use`), which ``flashhub cache clear`` and ``prune`` respect.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import stat
import types
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from .._config import Config
from .._models.manifest import MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, RECEIPT_NAME, dump_json
from .._models.names import RepoInfo
from .._variants.archs import BuildTarget, read_target, target_from_json
from ..errors import CacheError
from .trust import check_dir, check_root

try:
    import fcntl
except ImportError:  # Windows: no flock, so entries in use are not marked
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .._network.documents import ManifestDocument

INDEX_NAME = "variants-index.json"
_NO_TARGETS: Mapping[str, BuildTarget] = types.MappingProxyType({})
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
PARTIAL_PREFIX = ".partial-"


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents private to this user (0700); return it."""
    if not path.is_dir():
        # Path.mkdir(parents=True) would give the parents default permissions.
        for directory in [*reversed(path.parents), path]:
            if not directory.is_dir():
                directory.mkdir(mode=0o700, exist_ok=True)
    return path


def read_json(path: Path) -> Any:
    """A JSON record of the cache, or ``None`` when it is missing or unreadable."""
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


# The records the first kernel import of a process creates are NamedTuples: a frozen
# dataclass costs about 0.5 ms to define (its methods are compiled with exec), a
# NamedTuple about 0.2 ms. See docs/performance.md, row 3a.
class VariantIndex(NamedTuple):
    """What the cache knows about the variants of one published version.

    ``complete`` means ``present`` is the whole ``variants.json``; otherwise the CDN was
    probed and only the names in ``present`` and ``absent`` are known either way.
    ``targets`` holds the devices that variants whose ``metadata.json`` was read while
    choosing declare (see :mod:`._archs`), so that a warm load passes over a build for
    other devices without asking the CDN again.
    """

    complete: bool
    present: frozenset[str]
    absent: frozenset[str] = frozenset()
    targets: Mapping[str, BuildTarget] = _NO_TARGETS

    def merged(self, other: VariantIndex) -> VariantIndex:
        targets = {**other.targets, **self.targets}
        if self.complete or other.complete:
            return (self if self.complete else other)._replace(targets=targets)
        return VariantIndex(
            False, self.present | other.present, self.absent | other.absent, targets
        )

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "complete": self.complete,
            "present": sorted(self.present),
            "absent": sorted(self.absent),
        }
        if self.targets:
            document["targets"] = {n: t.to_json() for n, t in sorted(self.targets.items())}
        return document


class Receipt(NamedTuple):
    """Written when an entry is verified; lets the warm path trust it with ``stat`` only.

    ``bytecode`` records the ``.pyc`` files compiled from the verified sources before the
    commit, with their sha256: a damaged or substituted one fails the same ``stat``
    check as a changed source, and ``flashhub cache verify`` re-hashes them.
    """

    content_hash: str
    files: Mapping[str, tuple[int, int]]  # path -> (size, mtime_ns)
    bytecode: Mapping[str, tuple[int, int, str]]  # .pyc path -> (size, mtime_ns, sha256 hex)
    signer: str | None = None  # the id of the trusted key that signed the manifest
    # What a load of the entry must check (see _kernel_metadata.load_requirements): {}
    # for nothing; None in a receipt written before it was recorded.
    requires: Mapping[str, Any] | None = None

    def changed_file(self, entry: Path) -> str | None:
        """The first file that is missing, not a regular file, or changed; else ``None``."""
        for relpath, (size, mtime_ns) in self.files.items():
            if _changed(entry / relpath, size, mtime_ns):
                return relpath
        for relpath, (size, mtime_ns, _digest) in self.bytecode.items():
            if _changed(entry / relpath, size, mtime_ns):
                return relpath
        return None

    def to_json(self) -> dict[str, Any]:
        receipt: dict[str, Any] = {
            "content_hash": self.content_hash,
            "files": {path: list(stamp) for path, stamp in self.files.items()},
            "bytecode": {path: list(record) for path, record in self.bytecode.items()},
        }
        if self.signer is not None:
            receipt["signer"] = self.signer
        if self.requires is not None:
            receipt["requires"] = dict(self.requires)
        return receipt


def _write_atomic(path: Path, data: bytes) -> None:
    """:func:`._filesystem.write_atomic`, imported when the cache first writes: a warm
    load never does.

    Not flushed to disk (``durable=False``): an entry's files are not either, since a
    ``fsync`` per file would cost more than the download (docs/performance.md), so a
    receipt on disk after a power cut would vouch for nothing. What a power cut leaves
    instead fails its check when read, and is fetched again: a receipt or an index that
    does not parse is no receipt or index, a file that lost its bytes differs from its
    receipt.
    """
    from .._utils.filesystem import write_atomic

    write_atomic(path, data, durable=False)


def _changed(path: Path, size: int, mtime_ns: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return True
    return not stat.S_ISREG(st.st_mode) or (st.st_size, st.st_mtime_ns) != (size, mtime_ns)


def stamp(path: Path) -> tuple[int, int]:
    """The size and ``mtime_ns`` of a file, as a receipt records them."""
    st = os.stat(path, follow_symlinks=False)
    return st.st_size, st.st_mtime_ns


def bytecode_record(path: Path) -> tuple[int, int, str]:
    """What a receipt records of a ``.pyc`` file: its size, ``mtime_ns`` and sha256."""
    from .._network.hashing import sha256_file  # the cold path and the cache commands only

    return (*stamp(path), sha256_file(path).hex())


class Cache:
    """Paths and operations of one cache root. Creating it touches nothing on disk.

    ``lock_timeout`` bounds each wait for another process's lock (``None``: no bound).
    ``shared`` trusts directories the user's group may write (see ``_cache_trust``).
    Nothing is read from, or created under, a directory that fails those checks.
    """

    def __init__(
        self, root: Path, lock_timeout: float | None = None, *, shared: bool = False
    ) -> None:
        self.root = root
        self.lock_timeout = lock_timeout
        self.shared = shared

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

    def private_dir(self, path: Path) -> Path:
        """``path`` under the root, created 0700 where missing, every part trusted.

        Checked before (create nothing inside someone else's directory) and after (what
        exists now is what will be used).
        """
        self.check_trusted(path)
        with cache_errors():
            ensure_dir(path)
        self.check_trusted(path)
        return path

    def version_dir(self, info: RepoInfo) -> Path:
        return self.root / "kernels" / info.org / info.name / f"v{info.version}"

    def entry_dir(self, info: RepoInfo, variant: str) -> Path:
        return self.version_dir(info) / variant

    def download_mutex(self, info: RepoInfo, variant: str) -> AbstractContextManager[None]:
        """The lock of one entry: one process downloads it, the others wait and reuse it."""
        from .mutex import hold  # imports filelock: warm loads take no lock

        path = self.private_dir(self.version_dir(info) / ".locks") / f"{variant}.lock"
        return hold(path, what=f"downloading {info} {variant}", timeout=self.lock_timeout)

    def index_mutex(self, info: RepoInfo) -> AbstractContextManager[None]:
        """The lock of a version's variant index: one process at a time chooses a
        variant, fetching what the index does not record (``variants.json``, the
        ``metadata.json`` of candidates), and records it for the others.

        Kept under ``<root>/.locks`` rather than in the version directory, so asking for a
        spelling of a name that does not exist leaves no directory of that name behind.
        """
        from .mutex import hold  # imports filelock: warm loads take no lock

        locks = self.private_dir(self.root / ".locks" / info.org / info.name)
        path = locks / f"v{info.version}.lock"
        return hold(path, what=f"choosing the variant of {info}", timeout=self.lock_timeout)

    # -- what a version publishes -----------------------------------------------------

    def read_index(self, info: RepoInfo) -> VariantIndex | None:
        self.check_trusted(self.version_dir(info))
        data = read_json(self.version_dir(info) / INDEX_NAME)
        if not isinstance(data, dict):
            return None
        try:
            index = VariantIndex(
                bool(data["complete"]), frozenset(data["present"]), frozenset(data["absent"])
            )
        except (KeyError, TypeError):
            return None
        targets = data.get("targets")
        if isinstance(targets, dict):
            read = {name: target_from_json(value) for name, value in targets.items()}
            index = index._replace(targets={n: t for n, t in read.items() if t is not None})
        return index

    def record_index(self, info: RepoInfo, index: VariantIndex) -> VariantIndex:
        """Merge ``index`` into what is recorded (concurrent writers only add knowledge);
        return the merged index."""
        old = self.read_index(info)
        merged = index if old is None else old.merged(index)
        if merged != old:
            path = self.private_dir(self.version_dir(info)) / INDEX_NAME
            with cache_errors():
                _write_atomic(path, dump_json(merged.to_json()))
        return merged

    # -- entries ----------------------------------------------------------------------

    def read_receipt(self, entry: Path) -> Receipt | None:
        data = read_json(entry / RECEIPT_NAME)
        try:
            files = {str(p): (int(s), int(m)) for p, (s, m) in data["files"].items()}
            bytecode = {
                str(p): (int(s), int(m), str(d))
                for p, (s, m, d) in data.get("bytecode", {}).items()
            }
            signer = data.get("signer")
            requires = data.get("requires")
            return Receipt(
                str(data["content_hash"]),
                files,
                bytecode,
                str(signer) if signer else None,
                requires if isinstance(requires, dict) else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    def read_target(self, info: RepoInfo, variant: str) -> BuildTarget | None:
        """The devices a committed entry's ``metadata.json`` declares; ``None`` when the
        entry is not cached."""
        entry = self.entry_dir(info, variant)
        data = read_json(entry / MANIFEST_NAME) if (entry / RECEIPT_NAME).is_file() else None
        return read_target(data) if isinstance(data, dict) else None

    def new_staging(self, info: RepoInfo, variant: str) -> Path:
        """A fresh, uniquely named directory beside the entry (same file system)."""
        # Host last: host names may contain dots, variant names never do.
        name = (
            f"{STAGING_PREFIX}{variant}.{uuid.uuid4().hex[:8]}.{os.getpid()}.{socket.gethostname()}"
        )
        staging = self.private_dir(self.version_dir(info)) / name
        staging.mkdir(mode=0o700)
        return staging

    def seal(
        self,
        staging: Path,
        document: ManifestDocument,
        files: Iterable[str],
        compiled: Mapping[str, Mapping[str, tuple[int, int, str]]] | None = None,
    ) -> None:
        """Write the bytecode, the manifest (with its signatures) and the receipt into a
        verified staging directory. ``compiled``: by ``.py`` file, what
        :func:`compile_bytecode` returned for the sources compiled there already."""
        listed = set(files)
        compiled = compiled or {}
        sources = sources_to_compile(listed)
        bytecode = compile_bytecode(staging, [s for s in sources if s not in compiled])
        for source in sources:
            bytecode.update(compiled.get(source, {}))
        (staging / MANIFEST_NAME).write_bytes(document.data)
        if document.signature is not None:
            (staging / MANIFEST_SIGNATURE_NAME).write_bytes(document.signature)
        stamps = {relpath: stamp(staging / relpath) for relpath in sorted(listed)}
        from .._models.kernel_metadata import load_requirements  # the cold path only

        requires = load_requirements(document.manifest.document)
        receipt = Receipt(
            document.manifest.content_hash, stamps, bytecode, document.signer, requires
        )
        self.write_receipt(staging, receipt)
        staging.chmod(0o755)

    def write_receipt(self, entry: Path, receipt: Receipt) -> None:
        """Replace the receipt of ``entry`` (readers see the old one or the new one)."""
        _write_atomic(entry / RECEIPT_NAME, dump_json(receipt.to_json()))

    def record_signer(self, entry: Path, receipt: Receipt, document: ManifestDocument) -> None:
        """Record that a trusted key vouches for a committed entry, verified after it was
        cached: ``document`` is the signed manifest, of the same content as the entry.

        Its bytes replace the cached ``metadata.json`` (they may be serialised otherwise),
        so that ``flashhub cache verify`` checks the signature against the signed bytes.
        """
        assert document.signer is not None and document.signature is not None
        with cache_errors():
            _write_atomic(entry / MANIFEST_NAME, document.data)
            _write_atomic(entry / MANIFEST_SIGNATURE_NAME, document.signature)
            self.write_receipt(entry, receipt._replace(signer=document.signer))

    def commit(self, staging: Path, entry: Path) -> bool:
        """Rename ``staging`` to ``entry``. ``False`` if another process committed first."""
        try:
            os.rename(staging, entry)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            remove_tree(staging)
            return False
        return True

    def evict(self, entry: Path) -> None:
        """Move a damaged entry out of the way atomically, then delete it."""
        trash = entry.with_name(f"{TRASH_PREFIX}{entry.name}.{uuid.uuid4().hex[:8]}")
        try:
            os.rename(entry, trash)
        except FileNotFoundError:
            return
        except OSError as exc:  # a read-only cache: say so, whoever asked
            raise CacheError.cannot_write(exc, entry.parent) from exc
        remove_tree(trash)

    def partial_dir(self, info: RepoInfo, variant: str) -> Path:
        return self.version_dir(info) / f"{PARTIAL_PREFIX}{variant}"

    def keep_partials(
        self, staging: Path, info: RepoInfo, variant: str, digests: Mapping[str, bytes]
    ) -> None:
        """Move the files an interrupted download left in ``staging`` where the next
        downloader of the entry finds them. Best effort: failing only costs a resume."""
        kept = self.partial_dir(info, variant)
        for relpath, digest in digests.items():
            source = staging / relpath
            try:
                if not source.is_symlink() and source.is_file() and source.stat().st_size:
                    ensure_dir(kept)
                    os.replace(source, kept / digest.hex())
            except OSError:
                continue

    def adopt_partials(
        self, staging: Path, info: RepoInfo, variant: str, digests: Mapping[str, bytes]
    ) -> None:
        """Move kept partial files into a new ``staging``, where downloads continue them."""
        kept = self.partial_dir(info, variant)
        if not kept.is_dir():
            return
        for relpath, digest in digests.items():
            source = kept / digest.hex()
            if source.is_file() and not source.is_symlink():
                ensure_dir((staging / relpath).parent)
                with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
                    os.replace(source, staging / relpath)
        remove_tree(kept)

    def remove_stale_staging(self, info: RepoInfo, variant: str) -> None:
        """Delete staging and trash directories left by dead processes on this host."""
        version_dir = self.version_dir(info)
        if not version_dir.is_dir():
            return
        host = socket.gethostname()
        for child in version_dir.iterdir():
            if child.name.startswith(f"{TRASH_PREFIX}{variant}."):
                remove_tree(child)
            elif child.name.startswith(f"{STAGING_PREFIX}{variant}."):
                _random, pid, owner_host = [*child.name.split(".", 4)[2:], "", "", ""][:3]
                if owner_host == host and pid.isdigit() and not _pid_alive(int(pid)):
                    remove_tree(child)


# -- entries in use ---------------------------------------------------------------------
#
# A process that imports a kernel from the cache holds a shared ``flock`` on the entry's
# directory until it exits (the kernel drops it however the process ends; a forked child
# shares it). The directory is opened read-only, so this works on a read-only cache, and
# costs one ``open`` and one ``flock``. Before removing an entry, ``flashhub cache clear``
# and ``prune`` try an exclusive lock on it without waiting, and leave it alone while any
# process holds a shared one, unless told to force it. Advisory and best effort: where
# ``fcntl`` is missing (Windows) or the file system refuses ``flock`` on a directory,
# nothing is held and nothing is protected.

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


@contextmanager
def unused(entry: Path) -> Iterator[bool]:
    """Hold ``entry`` exclusively for the block if no process uses it (this one
    included); yield whether it could. An entry that is gone, or that this file system
    cannot lock, counts as unused: no process could have marked it either."""
    if fcntl is None:
        yield True
        return
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        yield True
        return
    try:
        free = True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            free = False
        except OSError:
            pass
        yield free
    finally:
        os.close(fd)


def _is_at(fd: int, entry: Path) -> bool:
    """Whether the directory open as ``fd`` is still the one at ``entry``."""
    try:
        current = os.stat(entry)
    except OSError:
        return False
    held = os.fstat(fd)
    return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)


def sources_to_compile(listed: set[str]) -> list[str]:
    """The Python files of an entry whose bytecode the cache compiles: all but those
    shipped with their bytecode (verified like any file: not ours to replace)."""
    import importlib.util  # the cold path only: warm loads never compile

    return [
        relpath
        for relpath in sorted(listed)
        if relpath.endswith(".py")
        and Path(importlib.util.cache_from_source(relpath)).as_posix() not in listed
    ]


def compile_bytecode(entry: Path, sources: Iterable[str]) -> dict[str, tuple[int, int, str]]:
    """Compile the Python files ``sources`` (paths in ``entry``) into ``__pycache__``;
    return the receipt's record of each ``.pyc`` written.

    The entry's bytecode is compiled while it is written, so that importing it never
    writes (a warm load works from a read-only cache, and writes nothing), whatever
    ``PYTHONDONTWRITEBYTECODE`` says: the cache is not a source tree. It is hash-based
    and unchecked (PEP 552): valid whatever the modification times (a copy of the cache
    that lost them keeps it), and Python does not re-read the source on each import to
    check it. The receipt vouches for it instead, as for the sources: the warm path
    compares each ``.pyc``'s size and mtime, ``flashhub cache verify`` its sha256.
    """
    import importlib.util  # the cold path and the cache commands only
    import py_compile

    written = {}
    for relpath in sources:
        source = entry / relpath
        bytecode = Path(importlib.util.cache_from_source(str(source)))
        # A file that does not compile is reported by the import, with its traceback.
        with contextlib.suppress(py_compile.PyCompileError, OSError):
            py_compile.compile(
                str(source),
                cfile=str(bytecode),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            written[bytecode.relative_to(entry).as_posix()] = bytecode_record(bytecode)
    return written


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextmanager
def cache_errors() -> Iterator[None]:
    """Report an ``OSError`` of the block (creating, writing, renaming in the cache) as a
    :class:`CacheError`: the cache is at fault, not the network or the kernel."""
    try:
        yield
    except CacheError:
        raise
    except OSError as exc:
        raise CacheError.cannot_write(exc) from exc
