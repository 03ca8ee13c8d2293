"""Writing the cache, on the cold path: a download's staging directory, sealed with its
bytecode, manifest and receipt, committed by one rename; damaged entries evicted, the
files of an interrupted download kept to resume, and the variant index recorded.

An entry appears only by renaming a verified staging directory into place, so readers
never see a partial one. A published version never changes, so a committed entry is
never updated in place: a damaged one is moved aside and fetched again.

A download stopped by Ctrl-C or a network failure keeps what it received: the
incomplete files move to ``.partial-<variant>/``, named by the sha256 they must hash
to, and the next downloader of the entry continues them with ``Range``. They are
checked against that digest like any other download. The files of a process killed
outright are moved there by the next downloader, which finds its staging directory.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._constants import INDEX_NAME, MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, RECEIPT_NAME
from .._models.manifest import dump_json
from .._utils.processes import another_process_alive, idle_for, owner_suffix, this_host
from .._variants.compat import pick_by_name
from ..errors import CacheError
from .bytecode import compile_bytecode, receipt_stamp, sources_to_compile
from .directories import cache_errors, ensure_dir, private_dir, remove_tree, settle_modes
from .layout import (
    PARTIAL_PREFIX,
    STAGING_PREFIX,
    TRASH_PREFIX,
    VOUCHED,
    Cache,
    VariantIndex,
    parse_index,
    vouched_sections,
)
from .receipt import Receipt

try:
    import fcntl
except ImportError:  # Windows: no flock, so no entry is known to be in use
    fcntl = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from .._models.names import RepoInfo
    from .._network.documents import ManifestDocument
    from .._variants.system import SystemInfo

# A staging directory whose process this host cannot ask (another host's, on a shared
# file system; one named by an older client) is removed by `flashhub cache prune` once
# nothing in it has changed for this long: a download writes as it goes, and the stall
# guard ends one whose bytes stop long before.
UNJUDGED_STAGING_IDLE_SECONDS = 24 * 3600


def record_index(
    cache: Cache, info: RepoInfo, index: VariantIndex, system: SystemInfo | None = None
) -> VariantIndex:
    """Merge ``index`` into the records this process chooses by (concurrent writers only
    add knowledge); return the merged index. With ``system``, the variant it loads is
    recorded too, where the names alone decide it (see :attr:`VariantIndex.picks`).

    A process that checks signatures records under its :meth:`~.layout.Cache.vouchers`,
    leaving the others' records as they are. Callers hold the version's index mutex."""
    whole = cache.index_file(info)
    old = parse_index(cache.records(info, whole))
    merged = index if old is None else merge_indexes(old, index)
    if system is not None and (pick := pick_by_name(merged, system)) is not None:
        merged = merged._replace(picks={**merged.picks, system.key: pick})
    if merged != old:
        path = private_dir(cache, cache.version_dir(info)) / INDEX_NAME
        with cache_errors(path):
            _write_atomic(path, dump_json(_with_records(whole, cache.vouchers(info.org), merged)))
    return merged


def _with_records(
    whole: dict[str, Any], vouchers: str | None, index: VariantIndex
) -> dict[str, Any]:
    """The index file ``whole`` with ``index`` as the records of ``vouchers``."""
    sections = vouched_sections(whole)
    if vouchers is not None:
        sections = {**sections, vouchers: index_document(index)}
        return {**whole, VOUCHED: sections}
    return {**index_document(index), **({VOUCHED: sections} if sections else {})}


def new_staging(cache: Cache, info: RepoInfo, variant: str) -> Path:
    """A fresh, uniquely named directory beside the entry (same file system)."""
    name = f"{STAGING_PREFIX}{variant}.{uuid.uuid4().hex[:8]}{owner_suffix()}"
    staging = private_dir(cache, cache.version_dir(info)) / name
    staging.mkdir(mode=0o700)
    return staging


def seal(
    staging: Path,
    document: ManifestDocument,
    files: Iterable[str],
    compiled: Mapping[str, Mapping[str, tuple[int, int, str]]] | None = None,
    *,
    shared: bool = False,
) -> None:
    """Write the bytecode, the manifest (with its signatures) and the receipt into a
    verified staging directory. ``compiled``: by ``.py`` file, what
    :func:`compile_bytecode` returned for the sources compiled there already.

    The entry is made readable by all and writable by this user alone (``shared``: the
    group may also remove it, as ``flashhub cache clear`` does), whatever the umask its
    files were written under (see :func:`~.directories.settle_modes`)."""
    listed = set(files)
    compiled = compiled or {}
    sources = sources_to_compile(listed)
    bytecode = compile_bytecode(staging, [s for s in sources if s not in compiled])
    for source in sources:
        bytecode.update(compiled.get(source, {}))
    (staging / MANIFEST_NAME).write_bytes(document.data)
    if document.signature is not None:
        (staging / MANIFEST_SIGNATURE_NAME).write_bytes(document.signature)
    # A string per file, not a Path: building one costs more than the stat.
    stamps = {relpath: receipt_stamp(os.path.join(staging, relpath)) for relpath in sorted(listed)}
    from .._models.kernel_metadata import load_requirements, read_kernel_metadata  # cold path

    requires = load_requirements(document.manifest.document)
    package = read_kernel_metadata(document.manifest.document).archive
    receipt = Receipt(
        document.manifest.content_hash, stamps, bytecode, document.signer, requires, package
    )
    write_receipt(staging, receipt)
    settle_modes(staging, shared=shared)


def write_receipt(entry: Path, receipt: Receipt) -> None:
    """Replace the receipt of ``entry`` (readers see the old one or the new one).

    Written on one line: it lists every file, and json encodes an indented document in
    Python rather than in C, at four times the instructions per file."""
    document = json.dumps(receipt_document(receipt), sort_keys=True, separators=(",", ":"))
    _write_atomic(entry / RECEIPT_NAME, document.encode())


def record_signer(entry: Path, receipt: Receipt, document: ManifestDocument) -> None:
    """Record that a trusted key vouches for a committed entry, verified after it was
    cached: ``document`` is the signed manifest, of the same content as the entry.

    Its bytes replace the cached ``metadata.json`` (they may be serialised otherwise),
    so that ``flashhub cache verify`` checks the signature against the signed bytes.
    """
    assert document.signer is not None and document.signature is not None
    with cache_errors(entry):
        _write_atomic(entry / MANIFEST_NAME, document.data)
        _write_atomic(entry / MANIFEST_SIGNATURE_NAME, document.signature)
        write_receipt(entry, receipt._replace(signer=document.signer))


def commit(staging: Path, entry: Path) -> bool:
    """Rename ``staging`` to ``entry``. ``False`` if another process committed first."""
    try:
        os.rename(staging, entry)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise
        remove_tree(staging)
        return False
    return True


def evict(entry: Path) -> None:
    """Move a damaged entry out of the way atomically, then delete it."""
    trash = entry.with_name(f"{TRASH_PREFIX}{entry.name}.{uuid.uuid4().hex[:8]}")
    try:
        os.rename(entry, trash)
    except FileNotFoundError:
        return
    except OSError as exc:  # a read-only cache: say so, whoever asked
        raise CacheError.cannot_write(exc, entry.parent) from exc
    remove_tree(trash)


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


def partial_dir(cache: Cache, info: RepoInfo, variant: str) -> Path:
    return cache.version_dir(info) / f"{PARTIAL_PREFIX}{variant}"


def keep_partials(
    cache: Cache, staging: Path, info: RepoInfo, variant: str, digests: Mapping[str, bytes]
) -> None:
    """Move the files an interrupted download left in ``staging`` (this process's, or a
    dead one's) where the next downloader of the entry finds them. Best effort: failing
    only costs a resume.

    Only this user's files are moved, from this user's directories reached through no
    symlink, into a directory reached through none: in a cache a group shares, another
    member may have changed a dead process's staging, or ``.partial-<variant>``, to lead
    elsewhere, and no file may be moved into the cache from outside, nor out of it."""
    kept = partial_dir(cache, info, variant)
    for relpath, digest in digests.items():
        with contextlib.suppress(OSError):
            _keep_partial(staging, relpath, kept, digest.hex(), shared=cache.shared)


def _keep_partial(staging: Path, relpath: str, kept: Path, kept_as: str, *, shared: bool) -> None:
    """Move the file ``relpath`` of ``staging`` into ``kept`` as ``kept_as``, if it is not
    empty, and it and its directory are this user's (see :func:`keep_partials`)."""
    with _directory_of(staging, relpath) as (directory, name):
        found = os.stat(name, dir_fd=directory, follow_symlinks=False)
        mine = _own(os.fstat(directory)) and _own(found)
        if mine and stat.S_ISREG(found.st_mode) and found.st_size:
            ensure_dir(kept, shared=shared)
            with _directory_of(kept, kept_as) as (into, kept_name):
                os.replace(name, kept_name, src_dir_fd=directory, dst_dir_fd=into)


@contextmanager
def _directory_of(root: Path, relpath: str) -> Iterator[tuple[int, str]]:
    """The directory of ``root`` that holds the file ``relpath``, opened through no
    symlink, and the file's name in it."""
    *directories, name = relpath.split("/")
    fd = _open_directory(root)
    try:
        for directory in directories:
            parent, fd = fd, _open_directory(directory, fd)
            os.close(parent)
        yield fd, name
    finally:
        os.close(fd)


def _open_directory(path: str | Path, parent: int | None = None) -> int:
    """Open the directory ``path`` (in the open directory ``parent``), not through a symlink."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(path, flags, dir_fd=parent)


def _own(found: os.stat_result) -> bool:
    return found.st_uid == os.geteuid()


def _own_file(name: str, directory: int) -> bool:
    """Whether ``name`` in the open ``directory`` is a file of this user (not a symlink)."""
    try:
        found = os.stat(name, dir_fd=directory, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(found.st_mode) and _own(found)


def adopt_partials(
    cache: Cache, staging: Path, info: RepoInfo, variant: str, digests: Mapping[str, bytes]
) -> None:
    """Move kept partial files into a new ``staging``, where downloads continue them.

    Only this user's, from a directory reached through no symlink: in a cache a group
    shares, another member's could not be written to, and could be rewritten by that
    member once verified, and the directory could lead out of the cache. The others are
    removed."""
    kept = partial_dir(cache, info, variant)
    try:
        directory = _open_directory(kept)
    except OSError:  # none kept, or a symlink: it makes way for a directory of the cache
        remove_tree(kept)
        return
    try:
        for relpath, digest in digests.items():
            if _own_file(digest.hex(), directory):
                ensure_dir((staging / relpath).parent)
                with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
                    os.replace(digest.hex(), staging / relpath, src_dir_fd=directory)
    finally:
        os.close(directory)
    remove_tree(kept)


def remove_stale_staging(
    cache: Cache,
    info: RepoInfo,
    variant: str,
    *,
    idle: bool = False,
    keep: Mapping[str, bytes] | None = None,
) -> None:
    """Delete staging and trash directories left by dead processes on this host; the
    caller holds the entry's download mutex. With ``keep`` (the digests of the files the
    entry lists), a dead process's files are kept first, as an interrupted download's are
    (:func:`keep_partials`), for this download to continue.

    A process of this host that is gone, or that is this one (which downloads nothing
    while it holds the mutex: a process killed as PID 1 of a container, restarted as PID
    1), is dead. With ``idle``, the caller holds every download mutex of the version, so
    no process of this host downloads there: whatever its PID now names, it is dead; and
    a staging directory whose process cannot be asked is removed once idle for
    :data:`UNJUDGED_STAGING_IDLE_SECONDS`.
    """
    version_dir = cache.version_dir(info)
    if not version_dir.is_dir():
        return
    host = this_host()
    for child in version_dir.iterdir():
        if child.name.startswith(f"{TRASH_PREFIX}{variant}."):
            remove_tree(child)
            continue
        if not child.name.startswith(f"{STAGING_PREFIX}{variant}."):
            continue
        pid = _owner_pid(child, host)
        if pid is None:
            if idle and idle_for(child, UNJUDGED_STAGING_IDLE_SECONDS):
                remove_tree(child)
        elif idle or not another_process_alive(pid):
            if keep is not None:
                keep_partials(cache, child, info, variant, keep)
            remove_tree(child)


def _owner_pid(staging: Path, host: str) -> int | None:
    """The PID of the process of ``host`` that made ``staging``; ``None`` when another
    host's process made it, or its name does not say."""
    _random, pid, owner_host = [*staging.name.split(".", 4)[2:], "", "", ""][:3]
    return int(pid) if owner_host == host and pid.isdigit() else None


def _write_atomic(path: Path, data: bytes) -> None:
    """:func:`~.._utils.filesystem.write_atomic`, imported when the cache first writes: a warm
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


def merge_indexes(index: VariantIndex, other: VariantIndex) -> VariantIndex:
    """What ``index`` and ``other`` know together: concurrent writers only add knowledge.

    The picks ``index`` records for systems stand while the variants known stay the same;
    once they change, none does (:func:`record_index` records the writer's anew)."""
    targets = {**other.targets, **index.targets}
    if index.complete or other.complete:
        merged = (index if index.complete else other)._replace(targets=targets)
    else:
        present, absent = index.present | other.present, index.absent | other.absent
        merged = VariantIndex(False, present, absent, targets)
    return merged._replace(picks=index.picks if _names(index) == _names(merged) else {})


def _names(index: VariantIndex) -> tuple[bool, frozenset[str], frozenset[str]]:
    """What a pick by name depends on (see :func:`~.._variants.compat.pick_by_name`)."""
    return index.complete, index.present, index.absent


def index_document(index: VariantIndex) -> dict[str, Any]:
    """The JSON object of ``index``'s records, as :func:`~.layout.parse_index` reads it."""
    document: dict[str, Any] = {
        "complete": index.complete,
        "present": sorted(index.present),
        "absent": sorted(index.absent),
    }
    if index.targets:
        document["targets"] = {n: t.to_json() for n, t in sorted(index.targets.items())}
    if index.picks:
        document["picks"] = dict(sorted(index.picks.items()))
    if index.proof is not None:
        document["proof"] = list(index.proof)
    return document


def receipt_document(receipt: Receipt) -> dict[str, Any]:
    """The JSON document of an entry's receipt."""
    document: dict[str, Any] = {
        "content_hash": receipt.content_hash,
        "files": {path: list(stamp) for path, stamp in receipt.files.items()},
        "bytecode": {path: list(record) for path, record in receipt.bytecode.items()},
    }
    if receipt.signer is not None:
        document["signer"] = receipt.signer
    if receipt.requires is not None:
        document["requires"] = dict(receipt.requires)
    if receipt.package is not None:
        document["package"] = receipt.package
    return document
