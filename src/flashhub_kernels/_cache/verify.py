"""``flashhub cache verify``: re-hash a cached entry against its ``metadata.json``, and
repair, offline, one whose files hold the verified bytes.

The warm path trusts an entry's receipt (``stat`` only); :func:`verify_entry` is the
full re-hash that the receipt stands in for.
"""

from __future__ import annotations

import importlib.util
import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from .._config import Config, get_config
from .._constants import MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, RECEIPT_NAME
from .._models.manifest import Manifest, parse_metadata
from .._models.record import Record
from .._signing.verification import holds_trusted_signature, verify_document
from .._utils.file_names import check_cached_names
from .._utils.filesystem import read_regular, replaced_name
from .._utils.hashing import sha256_file
from ..errors import ManifestError, SignatureError
from .bytecode import (
    bytecode_path,
    compile_bytecode,
    foreign_bytecode,
    hook_bytecode,
    receipt_stamp,
)
from .directories import cache_errors, remove_tree, settle_modes
from .entries import CacheEntry
from .layout import Cache
from .mutex import download_mutex
from .receipt import Receipt, read_receipt
from .staging import write_receipt

# What an entry holds besides the files its manifest lists.
ENTRY_RECORDS = {MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, RECEIPT_NAME}


class Verdict(Record):
    """What :func:`verify_entry` found.

    ``problem`` is why the entry fails, or ``None``. ``repairable``: every file holds the
    verified bytes, and only what the receipt records about them (size, mtime), the
    bytecode compiled from them, or who may write them differs. ``repaired``: it was
    repaired, so it passes. ``not_trusted``: why no key this user trusts vouches for an
    entry that is not broken (cached by a process trusting no key, or another): this
    user's loads check it on the CDN before they use it, and ``prune`` leaves it to the
    users of a shared cache who trust it.
    """

    problem: str | None = None
    repairable: bool = False
    repaired: bool = False
    not_trusted: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None or self.repaired


def verify_entry(cache: Cache, entry: CacheEntry, *, repair: bool = False) -> Verdict:
    """Re-hash every file of ``entry`` against its ``metadata.json``, and its bytecode
    against the receipt.

    With ``repair``, an entry whose files re-hash right is repaired offline: damaged
    bytecode is compiled again from the verified sources, the receipt re-stamped with
    each file's size and mtime now (a copy of the cache that lost its modification
    times), and every file and directory given the mode a commit gives it (an entry an
    older client cached under ``umask 000``). Anything else is left for ``prune`` to
    remove and a load to fetch again.

    Raises:
        CacheError: ``entry`` lists a file this process cannot name as every other does
            (a locale that is not UTF-8): it cannot tell whether the file is there.
    """
    verdict = _verify(cache, entry)
    if not (repair and verdict.repairable):
        return verdict
    # Under the entry's download mutex: a load that found it changed would replace it.
    with download_mutex(cache, entry.info, entry.variant), cache_errors(entry.path):
        verdict = _verify(cache, entry)  # again: it may have changed meanwhile
        receipt = read_receipt(entry.path)
        if not verdict.repairable or receipt is None:
            return verdict
        _restamp(entry.path, receipt, _manifest(entry.path).files)
        settle_modes(entry.path, shared=cache.shared)  # the bytecode compiled again too
    return verdict._replace(repaired=True)


def _verify(cache: Cache, entry: CacheEntry) -> Verdict:
    receipt = read_receipt(entry.path)
    if receipt is None:
        return Verdict("no receipt: the entry was never completely verified")
    try:
        manifest = _manifest(entry.path)
    except FileNotFoundError:
        return Verdict(f"{MANIFEST_NAME} is missing")
    except OSError as exc:  # a pipe too: read_regular refuses it rather than wait
        return Verdict(f"{MANIFEST_NAME} cannot be read ({exc.strerror})")
    except ManifestError as exc:
        return Verdict(exc.message)
    if manifest.content_hash != receipt.content_hash:
        return Verdict(f"{MANIFEST_NAME} is not the manifest the entry was verified against")
    check_cached_names(manifest.files, f"{entry.info} variant {entry.variant}")
    problem = _files_problem(entry.path, manifest.files)
    if problem is not None:
        return Verdict(problem)
    broken, not_trusted = _signature_problem(entry, receipt, get_config())
    if broken is not None:
        return Verdict(broken)
    verdict = _stamps_verdict(entry, receipt, manifest.files)
    if verdict.ok:
        verdict = _modes_verdict(entry.path, shared=cache.shared)
    return verdict._replace(not_trusted=not_trusted)


def _manifest(entry: Path) -> Manifest:
    """The ``metadata.json`` of ``entry``, parsed.

    Raises:
        OSError: it cannot be read.
        ManifestError: it is malformed.
    """
    return parse_metadata(read_regular(entry / MANIFEST_NAME), source=str(entry / MANIFEST_NAME))


def _stamps_verdict(entry: CacheEntry, receipt: Receipt, listed: Mapping[str, bytes]) -> Verdict:
    """Whether the bytecode and the sizes and mtimes of the files of an entry whose files
    re-hash right (``listed``) are still those its receipt records."""
    damaged = _damaged_bytecode(entry.path, receipt)
    if damaged:
        return Verdict(
            f"{damaged[0]} is not the bytecode compiled when the entry was verified",
            repairable=True,
        )
    verified = _verified(receipt, listed)
    foreign = foreign_bytecode(entry.path, verified)
    if foreign:
        return Verdict(_foreign_problem(foreign[0], verified), repairable=True)
    changed = receipt.changed_file(entry.path)
    if changed is not None:
        # Intact bytes, but the warm path would not trust the entry and fetch it again.
        return Verdict(
            f"{changed} has another size or mtime than when it was verified", repairable=True
        )
    return Verdict()


def _modes_verdict(entry: Path, *, shared: bool) -> Verdict:
    """Whether a file or directory in ``entry`` may be written by more users than a
    commit lets (see :func:`~.directories.settle_modes`): by every user, or by the group
    of a cache no group shares. The entry's own directory is a directory of the cache
    layout, which :func:`~.entries.untrusted_dirs` judges."""
    for directory, subdirectories, names in os.walk(entry):
        subdirectories.sort()
        for name in sorted(subdirectories + names):
            path = os.path.join(directory, name)
            try:
                mode = os.lstat(path).st_mode
            except OSError:  # gone meanwhile: the checks of the files report a listed one
                continue
            writers = _other_writers(mode, shared=shared)
            if writers is not None:
                relpath = Path(path).relative_to(entry).as_posix()
                return Verdict(
                    f"{relpath} is writable by {writers} (mode {stat.S_IMODE(mode):04o}): "
                    "whoever may reach the cache could change what an import of the kernel "
                    "runs; `flashhub cache verify --repair` gives the entry the modes a new "
                    "download gets",
                    repairable=True,
                )
    return Verdict()


def _other_writers(mode: int, *, shared: bool) -> str | None:
    """Who else than its owner may write a file of ``mode`` that a commit would not let:
    ``None`` for none, and for a symlink (its own mode means nothing)."""
    if stat.S_ISLNK(mode):
        return None
    if mode & stat.S_IWOTH:
        return "every user"
    if mode & stat.S_IWGRP and not shared:
        return "its group"
    return None


def _files_problem(entry: Path, files: Mapping[str, bytes]) -> str | None:
    """Why the files in ``entry`` are not those ``files`` lists with their sha256 (one
    missing, changed or unreadable, or one more); ``None`` when they are."""
    for relpath, digest in sorted(files.items()):
        path = entry / relpath
        if path.is_symlink() or not path.is_file():
            return f"{relpath} is missing or not a regular file"
        try:
            if sha256_file(path) != digest:
                return f"{relpath} does not match its sha256 in {MANIFEST_NAME}"
        except OSError as exc:
            return f"{relpath} cannot be read ({exc.strerror})"
    unlisted = _unlisted(entry, set(files))
    if unlisted is not None:
        return (
            f"{unlisted} is not in its {MANIFEST_NAME}: no one verified it, and an import of "
            "the kernel may run it"
        )
    return None


def _unlisted(entry: Path, listed: set[str]) -> str | None:
    """The first file, directory or symlink in ``entry`` that is neither listed, nor a
    directory of what is listed, nor the entry's own record (or the temporary file of a
    writer of one), nor in a ``__pycache__`` (whose bytecode :func:`_stamps_verdict` checks)."""
    expected = listed | ENTRY_RECORDS
    expected |= {str(parent) for relpath in listed for parent in PurePosixPath(relpath).parents}
    for directory, subdirectories, names in os.walk(entry):
        base = PurePosixPath(Path(directory).relative_to(entry))
        for name in sorted(names + subdirectories):
            relpath = str(base / name)
            in_place = name == "__pycache__" and not os.path.islink(Path(directory, name))
            if relpath in expected or base.name == "__pycache__" or in_place:
                continue
            if relpath == name and replaced_name(name) in ENTRY_RECORDS:
                continue  # a writer's temporary file, which prune removes once stale
            return relpath
    return None


def _damaged_bytecode(entry: Path, receipt: Receipt) -> list[str]:
    """The ``.pyc`` files of the receipt that are missing or hold other bytes."""
    damaged = []
    for relpath, (_size, _mtime, digest) in sorted(receipt.bytecode.items()):
        path = entry / relpath
        if path.is_symlink() or not path.is_file() or _digest(path) != digest:
            damaged.append(relpath)
    return damaged


def _foreign_bytecode(entry: Path, receipt: Receipt, listed: Mapping[str, bytes]) -> list[str]:
    """What the ``__pycache__`` directories of ``entry`` hold that was neither compiled at
    verification nor is Python's bytecode of the ``listed`` (verified) files."""
    return foreign_bytecode(entry, _verified(receipt, listed))


def _verified(receipt: Receipt, listed: Mapping[str, bytes]) -> set[str]:
    """The files of an entry someone verified: those its manifest lists (``listed``),
    and the bytecode compiled from them at verification."""
    return receipt.bytecode.keys() | listed.keys()


def _foreign_problem(relpath: str, verified: set[str]) -> str:
    """Why the bytecode ``relpath``, which was not compiled from the ``verified`` files,
    fails an entry: what may run it, and, where another tool's import hook wrote it
    beside a verified source, how to keep that tool from writing there."""
    written = hook_bytecode(relpath, verified)
    if written is None:
        return (
            f"{relpath} is not bytecode compiled from the verified files: no one verified "
            "it, and an import of the kernel may run it (under -O, or by another Python)"
        )
    source, tool = written
    if tool == "pytest":
        writer, runner = "pytest's assertion rewriting", "pytest"
        advice = "do not register the flashhub.* modules for assertion rewriting"
    else:
        writer, runner = f"another tool's import hook ({tool})", "the tool"
        advice = "keep that tool's hook off the flashhub.* modules"
    return (
        f"{relpath} is bytecode that {writer} wrote for {source}: no one verified it, and "
        f"{runner} may run it when it imports the kernel; `flashhub cache verify --repair` "
        f"removes it; {advice}, so that {runner} writes none there"
    )


def _digest(path: Path) -> str | None:
    """The sha256 of ``path`` in hex; ``None`` when it cannot be read."""
    try:
        return sha256_file(path).hex()
    except OSError:
        return None


def _restamp(entry: Path, receipt: Receipt, listed: Mapping[str, bytes]) -> None:
    """Remove the bytecode of a verified entry (its files ``listed``) that was not
    compiled from them, compile its damaged bytecode again, then record each file's size
    and mtime as they are now."""
    for relpath in _foreign_bytecode(entry, receipt, listed):
        remove_tree(entry / relpath)
    damaged = _damaged_bytecode(entry, receipt)
    bytecode = {path: record for path, record in receipt.bytecode.items() if path not in damaged}
    sources = []
    for relpath in damaged:
        (entry / relpath).unlink(missing_ok=True)
        source = importlib.util.source_from_cache(relpath)
        if bytecode_path(source) == relpath:
            sources.append(source)
        # else another Python's bytecode: it compiles its own from the source
    bytecode.update(compile_bytecode(entry, sources))
    write_receipt(
        entry,
        receipt._replace(
            files={path: receipt_stamp(entry / path) for path in receipt.files},
            bytecode={
                path: (*receipt_stamp(entry / path), digest)
                for path, (_s, _m, digest) in bytecode.items()
            },
        ),
    )


# What a load does with an entry no key it trusts vouches for: the CDN may well hold a
# signature for it by one, which a load fetches and checks once (the files are kept).
_CHECKED_ON_THE_CDN = "its next load with network access checks its signature on the CDN"
# An entry a process checking no signature cached.
_CACHED_UNCHECKED = (
    f"cached by a process that checked no signature, so no {MANIFEST_SIGNATURE_NAME} is kept "
    f"with it: {_CHECKED_ON_THE_CDN}"
)


def _signature_problem(
    entry: CacheEntry, receipt: Receipt, config: Config
) -> tuple[str | None, str | None]:
    """Why the trusted keys of ``config`` do not vouch for the entry's ``metadata.json``
    (checked again against the ``metadata.json.sig`` cached with it): as a problem (the
    entry is broken: a trusted key's signature fails, the ``.sig`` is malformed, or one
    its receipt records is gone), or as why it is not trusted (no trusted key signed it).
    ``(None, None)`` when a trusted key vouches, or no signature is checked."""
    if not config.checks_signatures(entry.info.org):
        return None, None
    try:
        signature: bytes | None = read_regular(entry.path / MANIFEST_SIGNATURE_NAME)
    except FileNotFoundError:
        if receipt.signer is None:
            return None, _CACHED_UNCHECKED
        signature = None
    except OSError as exc:
        return f"{MANIFEST_SIGNATURE_NAME} cannot be read ({exc.strerror})", None
    try:
        verify_document(
            kind="metadata",
            repo_id=entry.info.repo_id,
            version=entry.info.version,
            variant=entry.variant,
            data=read_regular(entry.path / MANIFEST_NAME),
            sig_bytes=signature,
            keys=config.trusted_keys,
            org=entry.info.org,
            require=config.require_signatures,
        )
    except SignatureError as exc:
        if signature is not None and not holds_trusted_signature(
            signature, config.trusted_keys, entry.info.org
        ):
            return None, f"signed by no key you trust ({exc.message}): {_CHECKED_ON_THE_CDN}"
        return f"its signature does not check out: {exc}", None
    except OSError as exc:
        return f"its signature does not check out: {exc}", None
    return None, None
