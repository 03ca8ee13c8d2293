"""Lock files in use: pin a project's kernels, pre-download them, load what a lock pins.

- :func:`lock_project` resolves ``[tool.flashhub.dependencies]`` against each kernel's
  ``versions.json`` and records the content hash of every published variant (or, for a
  version without ``variants.json``, of every variant a probe finds);
- :func:`download_locked` fills the cache with locked variants (``flashhub download``);
- :func:`load_kernel` (cache only) and :func:`get_locked_kernel` (downloads when needed)
  check the cache entry against the lock, then import the kernel through the import
  hook, so the module is the one ``import flashhub.<org>.<pkg>.v<N>`` gives.

A cache entry's receipt records the content hash of the manifest its files were
verified against, so comparing it with the lock pins every byte without re-hashing.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.resources
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from .._cache.layout import Cache, VariantIndex
from .._cache.versions_seen import check_newest
from .._config import PYPROJECT_NAME, Config, get_config
from .._loading.api import get_kernel
from .._loading.offline import cached_versions
from .._models.kernel_metadata import dependency_label, format_cycle, read_kernel_metadata
from .._models.manifest import MANIFEST_NAME
from .._models.names import RepoInfo
from .._network.documents import (
    ManifestDocument,
    NotPublished,
    get_listed_manifest,
    get_manifest,
    get_variant_names,
)
from .._network.download import make_entry
from .._network.transport import remote
from .._network.variant_choice import ManifestReader, newest_fitting_version
from .._network.versions import published_versions
from .._utils.callers import caller_package
from .._utils.filesystem import write_atomic
from .._utils.text import escape_controls
from .._variants.choice import (
    best_variant,
    cached_targets,
    choose_variant,
    judge_builds,
    pick_cached_variant,
    target_system,
)
from .._variants.system import (
    VariantAccepted,
    as_variant,
    candidate_names,
    format_trace,
    judge_variants,
)
from ..errors import (
    FlashhubError,
    LockfileError,
    NoCompatibleVariantError,
    OfflineError,
    RollbackError,
)
from .format import (
    LOCKFILE_NAME,
    LockedKernel,
    Lockfile,
    VariantsSource,
    check_lockable_variant,
    check_variant_name,
    parse_lockfile,
    parse_specifier,
    read_lockfile,
    read_project,
)

if TYPE_CHECKING:
    from .._network.transport import Fetcher
    from .._variants.choice import TargetOf
    from .._variants.system import SystemInfo

StrPath = str | os.PathLike[str]
_DOWNLOAD_HINT = "run `flashhub download` in the project directory, with network access"
_LOCK_ONLINE_HINT = "run `flashhub lock` with network access (unset FLASHHUB_OFFLINE)"
# A small server such as `python -m http.server` queues 5 connections; one more than
# that waits a second for its SYN to be sent again.
_PARALLEL_PROBES = 4
_VARIANT_OPTIONS = "`flashhub lock --variant NAME` or [tool.flashhub] variants in pyproject.toml"


# -- locking ----------------------------------------------------------------------------


def lock_project(
    project_dir: StrPath,
    *,
    variants: Iterable[str] = (),
    config: Config | None = None,
    allow_downgrade: bool = False,
) -> Lockfile:
    """Resolve the project's kernel ranges on the CDN and write ``<project_dir>/flashhub.lock``.

    Each range resolves to the newest matching version in the kernel's ``versions.json``;
    every variant its ``variants.json`` lists is pinned by content hash. A version
    without ``variants.json`` is locked with the variants this system can load that
    exist (found by probing), plus ``variants`` and the project's
    ``[tool.flashhub] variants``, each of which must exist.

    With ``FLASHHUB_OFFLINE=1`` nothing is fetched and nothing is written: the existing
    lock is checked against the project and the cache (:func:`check_lock_offline`) and
    returned.

    A re-lock never moves a kernel to a lower version on its own: unless
    ``allow_downgrade``, it is refused when the existing lock pins a higher version that
    the declared range still admits, or when a ``versions.json`` ends below the newest
    version this machine has seen listed (both are what a replayed, older
    ``versions.json`` looks like).

    Raises:
        ValueError: a name in ``variants`` is not a variant name.
        LockfileError: the project or a range is malformed, nothing matches, or a
            requested variant is not published.
        RollbackError: the lock would move a kernel down, and not ``allow_downgrade``;
            nothing is written.
    """
    project = Path(project_dir)
    settings = read_project(project)
    wanted = tuple(dict.fromkeys([*settings.variants, *map(check_lockable_variant, variants)]))
    config = config or get_config(project_dir=project)  # its [tool.flashhub] trusted-keys
    if config.offline:
        return check_lock_offline(
            project, settings.dependencies, Cache.from_config(config), variants=wanted
        )
    locked: dict[RepoInfo, LockedKernel] = {}  # every kernel locked, dependencies too
    with remote(config) as fetcher:
        kernels = {
            repo_id: lock_kernel(
                fetcher,
                repo_id,
                specifier,
                variants=wanted,
                allow_downgrade=allow_downgrade,
                locked=locked,
            )
            for repo_id, specifier in sorted(settings.dependencies.items())
        }
    path = project / LOCKFILE_NAME
    if not allow_downgrade:
        _refuse_downgrades(path, kernels)
    declared = {kernel.info for kernel in kernels.values()}
    dependencies = {info: dep for info, dep in locked.items() if info not in declared}
    lock = Lockfile(kernels, str(path), dependencies)
    write_atomic(path, lock.to_bytes())
    return lock


def _refuse_downgrades(path: Path, kernels: dict[str, LockedKernel]) -> None:
    """Refuse to replace the lock at ``path`` when it pins a kernel at a higher version
    than ``kernels`` do, that the declared range still admits: the CDN's versions.json
    no longer lists it. A lower version the range now asks for (``==1`` after ``>=1``)
    is the user's choice, and a lock that cannot be read is replaced as it is."""
    try:
        previous = read_lockfile(path) if path.is_file() else None
    except LockfileError:
        return
    if previous is None:
        return
    moves = [
        f"{repo_id} from v{old.version} down to v{new.version}"
        for repo_id, new in sorted(kernels.items())
        if (old := previous.kernels.get(repo_id)) is not None
        and new.version < old.version
        and parse_specifier(new.specifier).contains(str(old.version))
    ]
    if moves:
        raise RollbackError(
            f"re-locking {path} would move {'; '.join(moves)}, though the declared range "
            "still admits the locked version: the CDN's versions.json no longer lists it "
            "(a mirror that is behind, or an old copy replayed); nothing was written",
            hint="check the CDN; if the newer version was withdrawn on purpose, lock again "
            "with allow_downgrade=True",
            cli_hint="check the CDN; if the newer version was withdrawn on purpose, run "
            "`flashhub lock --allow-downgrade`",
        )


def check_lock_offline(
    project: Path, dependencies: dict[str, str], cache: Cache, *, variants: Sequence[str] = ()
) -> Lockfile:
    """The project's lock, if neither the project nor the cache shows it out of date.

    Offline, versions published since the lock was written cannot be seen, so "up to
    date" means: the lock pins every declared kernel with its declared range; the cache
    records each locked version's whole variant list, and it is the locked one (for a
    probed version: the cache records the locked variants, none other, and the lock
    pins every one of ``variants``); no cached variant holds other content than the
    lock pins; and the cache knows no newer version in the range. The lock file is
    never written.

    Raises:
        OfflineError: there is no lock, or it cannot be confirmed (the message lists why).
    """
    path = project / LOCKFILE_NAME
    if not path.is_file():
        raise OfflineError(
            f"{path} does not exist, and locking needs the CDN (FLASHHUB_OFFLINE is set)",
            hint=_LOCK_ONLINE_HINT,
        )
    lock = read_lockfile(path)
    problems = [
        f"{repo_id} is locked, but {PYPROJECT_NAME} no longer declares it"
        for repo_id in sorted(lock.kernels)
        if repo_id not in dependencies
    ]
    for repo_id, specifier in sorted(dependencies.items()):
        problems += _offline_lock_problems(cache, lock, repo_id, specifier, variants)
    if problems:
        raise OfflineError(
            f"{path} cannot be confirmed from the cache, and FLASHHUB_OFFLINE is set:\n  "
            + "\n  ".join(problems),
            hint=_LOCK_ONLINE_HINT,
        )
    return lock


def _offline_lock_problems(
    cache: Cache, lock: Lockfile, repo_id: str, specifier: str, variants: Sequence[str]
) -> list[str]:
    """Why the cache cannot confirm the lock's entry for ``repo_id``; empty when it can."""
    locked = lock.kernels.get(repo_id)
    if locked is None:
        return [f"{repo_id} is declared but not locked"]
    if locked.specifier != specifier:
        return [f"{repo_id} is locked for {locked.specifier!r}, but declared as {specifier!r}"]
    problems = _offline_index_problems(cache.read_index(locked.info), locked, variants)
    if problems:
        return problems
    for variant, pinned_hash in sorted(locked.variants.items()):
        receipt = cache.read_receipt(cache.entry_dir(locked.info, variant))
        if receipt is not None and receipt.content_hash != pinned_hash:
            problems.append(
                f"{locked.info} {variant}: the cached copy is {receipt.content_hash}, "
                f"the lock pins {pinned_hash}"
            )
    spec = parse_specifier(specifier)
    newer = [
        v for v in cached_versions(cache, repo_id) if v > locked.version and spec.contains(str(v))
    ]
    if newer:
        problems.append(
            f"{repo_id} v{newer[-1]} is in the cache and in the range {specifier!r}, "
            f"newer than the locked v{locked.version}"
        )
    return problems


def _offline_index_problems(
    index: VariantIndex | None, locked: LockedKernel, variants: Sequence[str]
) -> list[str]:
    """Where the variant index the cache records for the locked version contradicts the lock."""
    info, pinned = locked.info, frozenset(locked.variants)
    recorded = ", ".join(map(escape_controls, sorted(index.present))) if index else ""
    if index is not None and index.complete:
        if locked.probed:
            return [f"{info} now publishes variants.json ({recorded}), but the lock was probed"]
        if index.present != pinned:
            return [f"{info} publishes {recorded}; the lock pins {', '.join(sorted(pinned))}"]
        return []
    if not locked.probed:
        return [f"the cache does not record the variants.json of {info}"]
    if index is None or not pinned <= index.present:
        return [f"the cache does not record the locked variants of {info}"]
    problems = []
    if index.present != pinned:
        unpinned = ", ".join(map(escape_controls, sorted(index.present - pinned)))
        problems.append(f"the cache records that {info} publishes {unpinned}, unpinned by the lock")
    unlocked = [name for name in variants if name not in pinned]
    if unlocked:
        problems.append(f"{info} is locked, but the requested {_variants_noun(unlocked)} not")
    return problems


def lock_kernel(
    fetcher: Fetcher,
    repo_id: str,
    specifier: str,
    *,
    variants: Sequence[str] = (),
    allow_downgrade: bool = False,
    locked: dict[RepoInfo, LockedKernel] | None = None,
) -> LockedKernel:
    """Pin the newest version of ``repo_id`` in ``specifier`` and all its variants, and
    each kernel they depend on (``kernel-depends``), at the version it names.

    Without ``variants.json`` a version is probed: see :func:`probe_variants`.
    ``allow_downgrade`` accepts a ``versions.json`` older than one this machine has seen.
    ``locked`` collects every kernel locked (dependencies too), so that a kernel several
    others depend on is locked once.

    Raises:
        LockfileError: as :func:`lock_project`, or the dependencies form a cycle.
    """
    newest = _newest_matching(fetcher, repo_id, specifier, allow_older=allow_downgrade)
    info = RepoInfo(repo_id, newest)
    pinned = _lock_version(fetcher, info, variants, (), {} if locked is None else locked)
    return replace(pinned, specifier=specifier)


def _lock_version(
    fetcher: Fetcher,
    info: RepoInfo,
    variants: Sequence[str],
    chain: tuple[str, ...],
    locked: dict[RepoInfo, LockedKernel],
) -> LockedKernel:
    """Lock every variant of ``info``, and (first) the kernels they depend on.

    ``chain`` names the kernels whose dependencies led here, outermost first.
    """
    if info in locked:
        return locked[info]
    names = _published_variant_names(fetcher, info)
    if names is None:
        found = probe_variants(fetcher, info, variants)
    else:
        found = {name: get_listed_manifest(fetcher, info, name) for name in names}
    chain = (*chain, dependency_label(info))
    dependencies = []
    for dep in _kernel_depends(info, found):
        if dependency_label(dep) in chain:
            cycle = format_cycle([*chain, dependency_label(dep)])
            raise LockfileError(
                f"kernel dependencies form a cycle: {cycle}",
                hint="a kernel cannot depend on itself, directly or through others: report "
                "it to the kernels' publisher",
            )
        dependencies.append(_lock_version(fetcher, dep, variants, chain, locked))
    hashes = {name: document.manifest.content_hash for name, document in found.items()}
    signers = {name: doc.signer for name, doc in found.items() if doc.signer is not None}
    source: VariantsSource = "published" if names is not None else "probed"
    pinned = LockedKernel(
        info.repo_id,
        info.version,
        hashes,
        f"=={info.version}",
        source,
        signers,
        tuple(dependencies),
    )
    locked[info] = pinned
    return pinned


def _kernel_depends(info: RepoInfo, found: dict[str, ManifestDocument]) -> list[RepoInfo]:
    """The kernels any of the variants ``found`` depends on, in repo order."""
    depends = {
        dep.info
        for name, document in found.items()
        for dep in read_kernel_metadata(
            document.manifest.document, source=f"{info}/build/{name}/{MANIFEST_NAME}"
        ).kernel_depends
    }
    return sorted(depends)


def _newest_matching(fetcher: Fetcher, repo_id: str, specifier: str, *, allow_older: bool) -> int:
    versions = published_versions(fetcher, repo_id)
    if not versions:
        raise LockfileError(
            f"{repo_id} has no versions.json on the CDN, so {specifier!r} cannot be resolved",
            hint="check the repo id and FLASHHUB_CDN_URL; `flashhub publish` writes versions.json",
        )
    remedy = ("lock anyway with allow_downgrade=True", "run `flashhub lock --allow-downgrade`")
    cache = Cache.from_config(fetcher.config)
    check_newest(cache, repo_id, versions, allow_older=allow_older, remedy=remedy)
    spec = parse_specifier(specifier)
    matching = [v for v in versions if spec.contains(str(v))]
    if not matching:
        raise LockfileError(
            f"no published version of {repo_id} matches {specifier!r} "
            f"(published: {', '.join(map(str, versions))})",
            hint="change the range in [tool.flashhub.dependencies]",
        )
    # The newest version with a build this machine loads; if none has one, the newest.
    system = target_system(None)
    fitting = newest_fitting_version(fetcher, repo_id, matching, system, unlisted_fits=True)
    return fitting or matching[-1]


def _published_variant_names(fetcher: Fetcher, info: RepoInfo) -> list[str] | None:
    """The version's ``variants.json``, or ``None`` when it has none."""
    source = f"{info}/variants.json"
    try:
        names = get_variant_names(fetcher, info)
    except NotPublished:
        return None
    try:
        for name in names:
            check_variant_name(name)
    except ValueError as exc:
        raise LockfileError(f"{source}: {exc}", hint="report it to the publisher") from None
    if not names:
        raise LockfileError(f"{source} lists no variants", hint="report it to the publisher")
    return names


def probe_variants(
    fetcher: Fetcher, info: RepoInfo, variants: Sequence[str]
) -> dict[str, ManifestDocument]:
    """The manifest of each variant of ``info`` that a probe finds: the ones this system
    can load that exist, and every one of ``variants``.

    Every candidate is requested, not only up to the first one found as a load does, so
    that the lock holds the variants this system would fall back on too.

    Raises:
        LockfileError: one of ``variants`` is not published, or nothing is found.
    """
    candidates = candidate_names(target_system(None))
    names = list(dict.fromkeys([*candidates, *variants]))
    with ThreadPoolExecutor(_PARALLEL_PROBES) as pool:
        probed = pool.map(lambda name: _probe(fetcher, info, name), names)
        found = dict(zip(names, probed, strict=True))
    missing = [name for name in variants if found[name] is None]
    if missing:
        what = _variants_noun(missing)
        raise LockfileError(
            f"{info} has no variants.json, and the requested {what} not on the CDN "
            f"(no build/<variant>/{MANIFEST_NAME})",
            hint=f"correct the name, or remove it from {_VARIANT_OPTIONS}",
        )
    published = {name: document for name, document in found.items() if document is not None}
    if not published:
        raise LockfileError(
            f"{info} has no variants.json, and none of the variants this system can load is "
            f"published (probed: {', '.join(candidates)})",
            hint=f"name the variants to lock with {_VARIANT_OPTIONS}",
        )
    return published


def _variants_noun(names: Sequence[str]) -> str:
    """``variant a is`` or ``variants a, b are``."""
    if len(names) == 1:
        return f"variant {names[0]} is"
    return f"variants {', '.join(names)} are"


def _probe(fetcher: Fetcher, info: RepoInfo, variant: str) -> ManifestDocument | None:
    """The manifest of ``variant`` if the CDN publishes it, else ``None``."""
    try:
        return get_manifest(fetcher, info, variant)
    except NotPublished:
        return None


# -- the cache, checked against a lock ----------------------------------------------------


def locked_variant(
    locked: LockedKernel, system: SystemInfo, target_of: TargetOf | None = None
) -> str:
    """The locked variant ``system`` loads: the one the CDN's ``variants.json`` gives it,
    or for a probed version the first locked one in the order a probe asks for them.
    ``target_of`` reads the devices a variant declares (see ``judge_builds``)."""
    if not locked.probed:
        published = VariantIndex(True, frozenset(locked.variants))
        return choose_variant(published, locked.info, system, target_of)
    read = target_of or _unknown_target
    in_probe_order = [
        VariantAccepted(as_variant(name))
        for name in candidate_names(system)
        if name in locked.variants
    ]
    chosen = best_variant(judge_builds(in_probe_order, system, read))
    if chosen is not None:
        return chosen
    verdicts = judge_variants(sorted(locked.variants), system)
    trace = format_trace(judge_builds(verdicts, system, read, first_fit=False))
    raise NoCompatibleVariantError(
        f"{locked.info} has no variants.json, and none of the variants the lock pins for it "
        f"fits this system ({system.describe()}):\n{trace}",
        hint=f"lock this system's variant too, with {_VARIANT_OPTIONS}",
    )


def _unknown_target(variant: str) -> None:
    """What a lock alone knows of the devices a variant declares: nothing."""
    return None


def _lock_index(locked: LockedKernel, system: SystemInfo | None) -> VariantIndex:
    """What the lock tells the cache about the variants of the locked version.

    A published lock holds the whole ``variants.json``. A probed one holds variants that
    exist; for ``system``, the names a probe would ask for before its locked variant are
    recorded as absent, so that the warm path, and so the import hook, picks the locked
    variant. On the machine that locked, those names were probed and are absent indeed;
    elsewhere the lock stands for the CDN.
    """
    present = frozenset(locked.variants)
    if not locked.probed:
        return VariantIndex(True, present)
    if system is None:
        return VariantIndex(False, present)
    candidates = candidate_names(system)
    before = candidates[: candidates.index(locked_variant(locked, system))]
    return VariantIndex(False, present, frozenset(before))


def cached_entry(cache: Cache, locked: LockedKernel, variant: str) -> tuple[Path | None, str]:
    """The cache entry of a locked variant if it holds the locked bytes; else why not."""
    entry = cache.entry_dir(locked.info, variant)
    receipt = cache.read_receipt(entry)
    if receipt is None:
        return None, "it is not in the cache"
    expected = locked.variants[variant]
    if receipt.content_hash != expected:
        return None, f"the cached copy is {receipt.content_hash}, the lock pins {expected}"
    changed = receipt.changed_file(entry)
    if changed is not None:
        return None, f"{entry / changed} was modified after it was verified"
    signer = locked.signers.get(variant)
    if not get_config().accepts_signer(locked.info.org, receipt.signer, locked=signer):
        return None, f"the cached copy is vouched for by {receipt.signer}, the lock by {signer}"
    return entry, ""


def fetch_locked(
    cache: Cache,
    fetcher: Fetcher,
    locked: LockedKernel,
    variant: str,
    document: ManifestDocument | None = None,
) -> Path:
    """Download a locked variant into the cache; raise unless it holds the locked bytes.

    The manifest (``document`` when choosing the variant fetched it already) is checked
    against the lock before any file is fetched: a CDN object changed after locking is
    caught even when its ``metadata.json`` was changed to match.
    """
    with cache.download_mutex(locked.info, variant):
        return make_entry(
            cache,
            fetcher,
            locked.info,
            variant,
            expected_hash=locked.variants[variant],
            expected_signer=locked.signers.get(variant),
            document=document,
        ).path


# -- pre-downloading ----------------------------------------------------------------------


@dataclass(frozen=True)
class LockedDownload:
    """What :func:`download_locked` did for one locked kernel variant.

    ``status`` is ``"cached"``, ``"downloaded"`` or ``"failed"`` (then ``error`` says
    why; ``variant`` is ``None`` when no locked variant fits this system).
    """

    repo_id: str
    version: int
    variant: str | None
    status: str
    path: Path | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "repo_id": self.repo_id,
            "version": self.version,
            "variant": self.variant,
            "status": self.status,
            "path": str(self.path) if self.path else None,
            "error": self.error,
        }


def download_locked(
    lock: Lockfile,
    *,
    all_variants: bool = False,
    config: Config | None = None,
    system: SystemInfo | None = None,
) -> list[LockedDownload]:
    """Put every locked kernel into the cache, each checked against the lock.

    Downloads the variant this system (or ``system``, another machine's: see
    :func:`~flashhub_kernels._variants.system.system_from_variant`) loads, or with
    ``all_variants`` every locked variant (to bake a cache for several targets). A
    failure is reported in its result and the other kernels are still downloaded.
    Offline (``FLASHHUB_OFFLINE``), every such variant must already be cached as locked:
    each is reported ``cached``, else an :class:`OfflineError` names those that are not.
    """
    config = config or get_config()
    cache = Cache.from_config(config)
    system = None if all_variants else system or target_system(None)
    if config.offline:
        return _cached_as_locked(cache, lock, system)
    results: list[LockedDownload] = []
    with remote(config) as fetcher:
        for locked in lock.entries():
            results += _download_kernel(cache, fetcher, locked, system)
    return results


def _cached_as_locked(
    cache: Cache, lock: Lockfile, system: SystemInfo | None
) -> list[LockedDownload]:
    """Offline: the locked variants a download would fetch, all found in the cache with
    the locked content; else an :class:`OfflineError` naming those that are not."""
    results, missing = [], []
    for locked in lock.entries():
        cached = cached_targets(cache, locked.info)
        variants = (
            sorted(locked.variants) if system is None else [locked_variant(locked, system, cached)]
        )
        for variant in variants:
            entry, why = cached_entry(cache, locked, variant)
            if entry is None:
                missing.append(f"{locked.info} {variant}: {why}")
            else:
                results.append(
                    LockedDownload(locked.repo_id, locked.version, variant, "cached", entry)
                )
    if missing:
        raise OfflineError(
            "downloading locked kernels needs the network, and FLASHHUB_OFFLINE is set; "
            "not cached as locked:\n  " + "\n  ".join(missing),
            hint="unset FLASHHUB_OFFLINE",
        )
    return results


def _download_kernel(
    cache: Cache, fetcher: Fetcher, locked: LockedKernel, system: SystemInfo | None
) -> list[LockedDownload]:
    reader = ManifestReader(cache, fetcher, locked.info, cache.read_index(locked.info))
    try:
        if system is None:
            variants = sorted(locked.variants)
        else:
            variants = [locked_variant(locked, system, reader.target)]
    except FlashhubError as exc:
        return [LockedDownload(locked.repo_id, locked.version, None, "failed", error=str(exc))]
    finally:
        reader.record()  # the variants passed over: a load there passes over them too
    results = [
        _download_variant(cache, fetcher, locked, variant, reader.documents.get(variant))
        for variant in variants
    ]
    # Offline loads pick their variant from this index, without asking the CDN.
    cache.record_index(locked.info, _lock_index(locked, system))
    return results


def _download_variant(
    cache: Cache,
    fetcher: Fetcher,
    locked: LockedKernel,
    variant: str,
    document: ManifestDocument | None,
) -> LockedDownload:
    def result(status: str, path: Path | None = None, error: str | None = None) -> LockedDownload:
        return LockedDownload(locked.repo_id, locked.version, variant, status, path, error)

    entry, _why = cached_entry(cache, locked, variant)
    if entry is not None:
        return result("cached", entry)
    try:
        return result("downloaded", fetch_locked(cache, fetcher, locked, variant, document))
    except FlashhubError as exc:
        return result("failed", error=str(exc))


# -- loading ------------------------------------------------------------------------------


def load_kernel(repo_id: str, *, lockfile: StrPath | None = None) -> ModuleType:
    """Import a locked kernel from the cache only; never touches the network.

    The cache entry of the variant this system loads must hold exactly the bytes the
    lock pins (``flashhub download`` puts it there). Returns the same module object as
    ``import flashhub.<org>.<pkg>.v<N>``.

    Args:
        repo_id: ``"<org>/<pkg>"``, as in ``[tool.flashhub.dependencies]``.
        lockfile: The lock to use. By default, ``flashhub.lock`` shipped in the calling
            package (package data next to its top-level ``__init__.py``, or in its
            distribution's metadata), else ``./flashhub.lock``.

    Raises:
        LockfileError: no lock is found, it does not lock ``repo_id``, or the cache does
            not hold the locked bytes (the message says which).
    """
    locked = find_lockfile(lockfile, package=caller_package()).kernel(repo_id)
    return load_locked(locked, download=False)


def get_locked_kernel(repo_id: str, *, lockfile: StrPath | None = None) -> ModuleType:
    """Import a locked kernel, downloading its variant first when the cache lacks it.

    Like :func:`load_kernel`, but fetches a missing variant from the CDN and checks
    its manifest against the lock before any of its files is imported.

    Raises:
        LockfileError: no lock is found, or it does not lock ``repo_id``.
        LockMismatchError: the CDN serves other bytes than the lock pins.
        KernelImportError: the variant cannot be fetched or verified.
    """
    locked = find_lockfile(lockfile, package=caller_package()).kernel(repo_id)
    return load_locked(locked, download=True)


def load_locked(locked: LockedKernel, *, download: bool) -> ModuleType:
    """Import a locked kernel once the cache holds the locked bytes of it and of every
    kernel it depends on (fetched first when ``download``, and not offline)."""
    config = get_config()
    cache, system = Cache.from_config(config), target_system(None)
    tree = locked.tree()
    variants = {
        node.info: locked_variant(node, system, cached_targets(cache, node.info)) for node in tree
    }
    missing = []
    for node in tree:
        entry, why = cached_entry(cache, node, variants[node.info])
        if entry is None:
            missing.append((node, why))
    if missing and (not download or config.offline):
        node, why = missing[0]
        needed = f", which {locked.info} depends on," if node is not locked else ""
        offline = "unset FLASHHUB_OFFLINE, or " if download else ""
        raise LockfileError(
            f"locked kernel {node.info} (variant {variants[node.info]}){needed} cannot be "
            f"loaded: {why}",
            hint=offline + _DOWNLOAD_HINT,
        )
    if missing:
        with remote(config) as fetcher:
            for node, _why in missing:
                fetch_locked(cache, fetcher, node, variants[node.info])
    for node in tree:
        _check_cached_choice(cache, node, variants[node.info], system)
    return get_kernel(locked.repo_id, version=locked.version)


def _check_cached_choice(
    cache: Cache, locked: LockedKernel, variant: str, system: SystemInfo
) -> None:
    """Make the import hook's warm path pick the locked ``variant``, just checked, as the
    import of the kernel (or of a kernel depending on it) will."""
    cache.record_index(locked.info, _lock_index(locked, system))
    index = cache.read_index(locked.info)
    cached = functools.partial(cache.read_target, locked.info)
    picked = pick_cached_variant(index, system, cached) if index is not None else None
    if locked.probed and picked is not None and picked not in locked.variants:
        raise LockfileError(
            f"{locked.info} publishes variant {escape_controls(picked)} for this system, "
            "which the lock does not pin (it has no variants.json, and the lock holds "
            "the variants a probe found where it was made)",
            hint=f"lock it too, with {_VARIANT_OPTIONS}",
        )
    if picked != variant:
        raise LockfileError(
            f"the cache's variant list for {locked.info} disagrees with the lock",
            hint="run `flashhub cache clear`, then `flashhub download`",
        )


# -- finding the lock ---------------------------------------------------------------------


def find_lockfile(lockfile: StrPath | None = None, *, package: str | None = None) -> Lockfile:
    """The lock to use: ``lockfile``; else the one ``package`` ships; else ``./flashhub.lock``."""
    if lockfile is not None:
        return read_lockfile(Path(lockfile))
    if package is not None:
        shipped = packaged_lockfile(package)
        if shipped is not None:
            return shipped
    local = Path.cwd() / LOCKFILE_NAME
    if local.is_file():
        return read_lockfile(local)
    searched = f"package {package!r} and " if package else ""
    raise LockfileError(
        f"no {LOCKFILE_NAME} found (searched {searched}{Path.cwd()})",
        hint="run `flashhub lock` in the project directory and ship flashhub.lock in your "
        "package, run from the project directory, or pass lockfile=",
    )


def packaged_lockfile(package: str) -> Lockfile | None:
    """``flashhub.lock`` shipped with the top-level ``package``, if any.

    Looked for as package data beside the package's ``__init__.py``, then in the
    metadata of the distributions that provide the package.
    """
    try:
        resource = importlib.resources.files(package) / LOCKFILE_NAME
        if resource.is_file():
            return parse_lockfile(resource.read_bytes(), source=f"{package}/{LOCKFILE_NAME}")
    except (ImportError, TypeError):  # not importable, or a plain module
        pass
    for dist_name in importlib.metadata.packages_distributions().get(package, []):
        text = importlib.metadata.distribution(dist_name).read_text(LOCKFILE_NAME)
        if text is not None:
            source = f"{LOCKFILE_NAME} in the metadata of {dist_name}"
            return parse_lockfile(text.encode("utf-8"), source=source)
    return None
