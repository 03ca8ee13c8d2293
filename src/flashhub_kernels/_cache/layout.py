"""The on-disk cache as a warm load reads it: where everything is, and the records an
entry was verified with.

Layout under the cache root::

    kernels/<org>/<pkg>/v<N>/
        variants-index.json               what this version publishes (see VariantIndex),
                                          by who vouched for it (see Cache.vouchers)
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
    import-table/<module name>.json       the entry that name's last import loaded
                                          (see .._cache_imports)
    gpus                                  NVML's answer: GPU UUID -> capability (see
                                          flashhub_kernels._variants.device_arch)

Entries are written by :mod:`.staging` and read here. A process that imported an entry
holds a shared ``flock`` on its directory while it runs (:mod:`.._cache_imports`), which
``flashhub cache clear`` and ``prune`` respect. Nothing is read below a directory that
fails the trust checks of :mod:`.trust`.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

from .._constants import INDEX_NAME, MANIFEST_NAME, RECEIPT_NAME
from .._models.record import Record
from .._utils.filesystem import read_regular
from .receipt import Receipt, read_receipt
from .trust import check_chain, check_dir

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, TypeGuard

    from .._config import Config
    from .._models.names import RepoInfo
    from .._variants.compat import BuildTarget

_NO_TARGETS: Mapping[str, BuildTarget] = types.MappingProxyType({})
_NO_PICKS: Mapping[str, str] = types.MappingProxyType({})
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".trash-"
PARTIAL_PREFIX = ".partial-"
# Directories of the tree above. RepoInfo.cache_path spells KERNELS_DIR too: the import
# table's warm path finds entries by it without importing this module.
KERNELS_DIR = "kernels"
LOCKS_DIR = ".locks"  # in the root and in each version directory: see .mutex
VOUCHED = "vouched"  # an index file's records by who vouched for them (Cache.vouchers)


def vouched_sections(whole: Mapping[str, Any]) -> dict[str, Any]:
    """The ``vouched`` object of the index file ``whole``: records by who vouched for them."""
    sections = whole.get(VOUCHED)
    return sections if isinstance(sections, dict) else {}


def read_json(path: Path) -> Any:
    """A JSON record of the cache, or ``None`` when it is missing or unreadable (not a
    regular file, or nested too deeply for Python's parser, included)."""
    try:
        return json.loads(read_regular(path))
    except (OSError, ValueError, RecursionError):
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
    then judges nothing. ``proof``: the ``variants.json`` that ``present`` is, and its
    ``.sig``, base64, where a trusted key vouched for it: another process checking
    signatures verifies them with its own keys (see :meth:`Cache.records`).
    """

    complete: bool
    present: frozenset[str]
    absent: frozenset[str] = frozenset()
    targets: Mapping[str, BuildTarget] = _NO_TARGETS
    picks: Mapping[str, str] = _NO_PICKS
    proof: tuple[str, str] | None = None


def parse_index(document: Mapping[str, Any]) -> VariantIndex | None:
    """The :class:`VariantIndex` an index's JSON object records; ``None`` when it is not one."""
    present, absent = document.get("present"), document.get("absent")
    if "complete" not in document or not (_is_names(present) and _is_names(absent)):
        return None
    index = VariantIndex(bool(document["complete"]), frozenset(present), frozenset(absent))
    targets = document.get("targets")
    if isinstance(targets, dict) and targets:
        from .._variants.compat import target_from_json  # builds judged by their metadata

        read = {name: target_from_json(value) for name, value in targets.items()}
        index = index._replace(targets={n: t for n, t in read.items() if t is not None})
    proof = document.get("proof")
    if _is_names(proof) and len(proof) == 2:
        index = index._replace(proof=(proof[0], proof[1]))
    return index._replace(picks=_recorded_picks(document))


def _is_names(value: object) -> TypeGuard[list[str]]:
    """Whether ``value`` is a list of strings, as an index records variant names."""
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


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
    ``shared`` trusts directories the user's group may write (see :func:`~.trust.distrust`).
    Nothing is read from, or created under, a directory that fails those checks.
    ``trust``: the settings whose trusted keys decide which records of the variant
    indexes this process reads and writes (see :meth:`vouchers`); ``None``: it checks no
    signatures.
    """

    def __init__(
        self,
        root: Path,
        lock_timeout: float | None = None,
        *,
        shared: bool = False,
        trust: Config | None = None,
    ) -> None:
        self.root, self.lock_timeout, self.shared, self.trust = root, lock_timeout, shared, trust

    @classmethod
    def from_config(cls, config: Config) -> Cache:
        return cls(config.cache_dir, config.lock_timeout, shared=config.cache_shared, trust=config)

    def vouchers(self, org: str) -> str | None:
        """Who vouches for what this process records in the variant index of a kernel of
        ``org``: the ids of the keys it trusts for the org, as one string. ``None`` where
        it checks no signatures of the org: its records are the index's unvouched ones.

        A process that checks signatures reads and writes only the records of processes
        that trust the same keys (the index's ``vouched`` object, by this string): a
        choice must never rest on a list that a key it does not trust vouched for.
        """
        trust = self.trust
        if trust is None or not trust.checks_signatures(org):
            return None
        return " ".join(sorted({k.key_id for k in trust.trusted_keys if k.trusted_for(org)}))

    def check_trusted(self, path: Path) -> None:
        """Raise :class:`CacheError` unless the root, its ancestors and every existing
        directory from the root down to ``path`` are trusted (absent ones are fine)."""
        check_chain(self.root, path, shared=self.shared)

    def check_entry(self, entry: Path) -> None:
        """Check one entry directory, once :meth:`index_file` has checked every directory
        above it (the warm path: the chain is not walked twice)."""
        check_dir(entry, shared=self.shared)

    @property
    def kernels_dir(self) -> Path:
        """The directory of every version directory: ``<root>/kernels``."""
        return self.root / KERNELS_DIR

    @property
    def locks_dir(self) -> Path:
        """The directory of the mutexes that are not a version's downloads':
        ``<root>/.locks`` (see :mod:`.mutex`)."""
        return self.root / LOCKS_DIR

    def version_dir(self, info: RepoInfo) -> Path:
        return self.root / info.cache_path

    def entry_dir(self, info: RepoInfo, variant: str) -> Path:
        return self.version_dir(info) / variant

    def read_index(self, info: RepoInfo) -> VariantIndex | None:
        return parse_index(self.read_index_document(info))

    def read_index_document(self, info: RepoInfo) -> dict[str, Any]:
        """The JSON object of the records of ``info``'s index this process chooses by,
        unparsed (see :func:`parse_index` and :func:`recorded_pick`); empty when there
        are none to read. :meth:`records` picks them from the file."""
        return self.records(info, self.index_file(info))

    def index_file(self, info: RepoInfo) -> dict[str, Any]:
        """The JSON object of ``info``'s whole index file; empty when there is none."""
        self.check_trusted(self.version_dir(info))
        data = read_json(self.version_dir(info) / INDEX_NAME)
        return data if isinstance(data, dict) else {}

    def records(self, info: RepoInfo, whole: dict[str, Any]) -> dict[str, Any]:
        """The records of the index file ``whole`` this process chooses by: all of it
        where it checks no signatures of ``info``'s org; else those recorded under its
        :meth:`vouchers`, or failing them a ``variants.json`` another process recorded
        with its ``.sig`` (see :attr:`VariantIndex.proof`), where a key this process
        trusts signed it."""
        vouchers = self.vouchers(info.org)
        if vouchers is None:
            return whole
        sections = vouched_sections(whole)
        own = sections.get(vouchers)
        if isinstance(own, dict):
            return own
        assert self.trust is not None, "vouchers are the trusted keys"
        from .._signing.verification import proven_variants  # cryptography, on a miss only

        for section in sections.values():
            proof = section.get("proof") if isinstance(section, dict) else None
            names = proven_variants(proof, info, self.trust.trusted_keys)
            if names is not None:
                return {"complete": True, "present": names, "absent": [], "proof": proof}
        return {}

    def read_target(self, info: RepoInfo, variant: str) -> BuildTarget | None:
        """The devices a committed entry's ``metadata.json`` declares; ``None`` when the
        entry is not cached, or this process checks signatures and no key it trusts
        vouches for it (see :meth:`vouched`)."""
        from .._variants.compat import read_target

        entry = self.entry_dir(info, variant)
        if self.vouchers(info.org) is None:
            committed = (entry / RECEIPT_NAME).is_file()
        else:
            receipt = read_receipt(entry)
            committed = receipt is not None and self.vouched(info, variant, receipt) is not None
        data = read_json(entry / MANIFEST_NAME) if committed else None
        return read_target(data) if isinstance(data, dict) else None

    def vouched(self, info: RepoInfo, variant: str, receipt: Receipt) -> Receipt | None:
        """``receipt``, of the committed entry of ``variant``, with the signer that vouches
        for the entry here: its own, where this process accepts it, else the trusted key
        whose signature the ``.sig`` cached with it holds (cached by a process trusting
        another key); ``None`` when none does (cached before a key was configured)."""
        trust = self.trust
        if trust is None or trust.accepts_signer(info.org, receipt.signer):
            return receipt
        from .._signing.verification import cached_signer  # and cryptography, for this entry

        entry = self.entry_dir(info, variant)
        signer = cached_signer(entry, info, variant, receipt.content_hash, trust.trusted_keys)
        return None if signer is None else receipt._replace(signer=signer)
