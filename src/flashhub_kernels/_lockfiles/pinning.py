"""Locking a project: each declared range pinned on the CDN, with every variant's hash.

:func:`lock_project` resolves ``[tool.flashhub.dependencies]`` against each kernel's
``versions.json`` (an exact version, ``==2``, locks without one) and records the content
hash of every published variant (or, for a version without ``variants.json``, of every
variant a probe finds), and of every kernel they depend on, in ``flashhub.lock``.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._cache.layout import Cache, VariantIndex
from .._cache.mutex import index_mutex
from .._cache.staging import record_index
from .._cache.versions_seen import check_newest
from .._config import Config, get_config
from .._constants import MANIFEST_NAME, PYPROJECT_NAME
from .._models.kernel_metadata import check_dependency, dependency_label, read_kernel_metadata
from .._models.manifest import check_variant_segment, manifest_source
from .._models.names import RepoInfo
from .._network.choosing import newest_fitting_version
from .._network.documents import (
    ManifestDocument,
    get_listed_manifest,
    get_manifest,
    get_variant_list,
)
from .._network.mirrors import NotPublished
from .._network.transport import remote
from .._network.versions import doubled_prefix_hint, versions_or_why
from .._utils.callers import warn_at_caller
from .._utils.filesystem import write_atomic
from .._utils.threads import DeafThreadPool
from .._variants.named_system import target_system
from .._variants.probing import candidate_names
from ..errors import (
    CacheError,
    KernelDependencyError,
    LockedContentChangedWarning,
    LockfileError,
    RollbackError,
)
from .format import (
    LOCKFILE_NAME,
    LockedKernel,
    Lockfile,
    NewerFormatError,
    VariantsSource,
    read_lockfile,
)
from .offline_check import check_lock_offline
from .project import (
    VARIANT_OPTIONS,
    check_lockable_variant,
    exact_version,
    parse_specifier,
    read_project,
    variants_noun,
)

if TYPE_CHECKING:
    from .._network.transport import Fetcher
    from .discovery import StrPath

# A small server such as `python -m http.server` queues 5 connections; one more than
# that waits a second for its SYN to be sent again.
_PARALLEL_PROBES = 4


def lock_project(
    project_dir: StrPath,
    *,
    variants: Iterable[str] = (),
    config: Config | None = None,
    allow_downgrade: bool = False,
) -> Lockfile:
    """Resolve the project's kernel ranges on the CDN and write ``<project_dir>/flashhub.lock``.

    Each range resolves to the newest matching version in the kernel's ``versions.json``;
    an exact version (``==2``, or ``2``) is taken as it is where the kernel has no
    ``versions.json``. Every variant its ``variants.json`` lists is pinned by content
    hash. A version without ``variants.json`` is locked with the variants this system
    can load that exist (found by probing), plus ``variants`` and the project's
    ``[tool.flashhub] variants``, each of which must exist.

    With ``FLASHHUB_OFFLINE=1`` nothing is fetched and nothing is written: the existing
    lock is checked against the project and the cache
    (:func:`~flashhub_kernels._lockfiles.offline_check.check_lock_offline`) and returned.

    A re-lock never moves a kernel to a lower version on its own: unless
    ``allow_downgrade``, it is refused when the existing lock pins a higher version that
    the declared range still admits, or when a ``versions.json`` ends below the newest
    version this machine has seen listed (both are what a replayed, older
    ``versions.json`` looks like).

    Raises:
        ValueError: a name in ``variants`` is not a variant name.
        LockfileError: the project or a range is malformed, nothing matches, or a
            requested variant is not published; one error names every declared kernel
            that cannot be locked, each with its reason. Or the existing lock is in a
            newer format, and nothing is written (a malformed one is replaced, with a
            ``UserWarning``).
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
        kernels = _lock_declared(
            fetcher,
            settings.dependencies,
            project / PYPROJECT_NAME,
            variants=wanted,
            allow_downgrade=allow_downgrade,
            locked=locked,
        )
    path = project / LOCKFILE_NAME
    declared = {kernel.info for kernel in kernels.values()}
    dependencies = {info: dep for info, dep in locked.items() if info not in declared}
    lock = Lockfile(kernels, str(path), dependencies)
    previous = _previous_lock(path)
    if previous is not None and not allow_downgrade:
        _refuse_downgrades(previous, kernels)
    if previous is not None:
        _warn_changed_content(previous, lock)
    _write_lock(path, lock.to_bytes())
    return lock


def _write_lock(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path``, unless it holds them already: an up-to-date lock in a
    project that cannot be written (a read-only checkout) locks without a write."""
    try:
        if path.is_file() and path.read_bytes() == data:
            return
    except OSError:
        pass  # unreadable: written over, or the write says why not
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise LockfileError(
            f"cannot write {path}: {exc.strerror or exc}; the lock has changed, and was not "
            "written",
            hint=f"make {path.parent} writable (or remove what is at {path}), and lock again",
        ) from None


def _lock_declared(
    fetcher: Fetcher,
    dependencies: dict[str, str],
    pyproject: Path,
    *,
    variants: Sequence[str],
    allow_downgrade: bool,
    locked: dict[RepoInfo, LockedKernel],
) -> dict[str, LockedKernel]:
    """:func:`lock_kernel` for each declared kernel, by repo id. When some cannot be
    locked, the error says why for each of them: one's own, or one naming them all."""
    kernels: dict[str, LockedKernel] = {}
    errors: list[LockfileError] = []
    for repo_id, specifier in sorted(dependencies.items()):
        try:
            kernels[repo_id] = lock_kernel(
                fetcher,
                repo_id,
                specifier,
                variants=variants,
                allow_downgrade=allow_downgrade,
                locked=locked,
            )
        except LockfileError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise _all_errors(errors, pyproject)
    return kernels


def _all_errors(errors: Sequence[LockfileError], pyproject: Path) -> LockfileError:
    """One error listing ``errors``, each about a kernel ``pyproject`` declares, and
    their hints."""
    listed = "\n  ".join(error.message.replace("\n", "\n    ") for error in errors)
    any_cli_hint = any(error.cli_hint for error in errors)
    return LockfileError(
        f"{len(errors)} of the kernels {pyproject} declares cannot be locked:\n  {listed}",
        hint=_joined(error.hint for error in errors),
        cli_hint=_joined(e.cli_hint or e.hint for e in errors) if any_cli_hint else None,
    )


def _joined(hints: Iterable[str | None]) -> str | None:
    """The distinct ``hints``, in order, as one; ``None`` when there is none."""
    return "; ".join(dict.fromkeys(filter(None, hints))) or None


def _previous_lock(path: Path) -> Lockfile | None:
    """The lock at ``path`` that a re-lock replaces; ``None`` where there is none, or
    where it is malformed (it is replaced, with a warning that its pins went unchecked).

    Raises:
        LockfileError: it is in a newer format, which this version cannot check nor
            should replace.
    """
    if not path.is_file():
        return None
    try:
        return read_lockfile(path)
    except NewerFormatError as exc:
        raise LockfileError(
            f"{exc.message}; re-locking would replace it with an older format, unchecked; "
            "nothing was written",
            hint="upgrade flashhub-kernels, and lock with that",
        ) from None
    except LockfileError as exc:
        warn_at_caller(
            f"{exc.message}; it is replaced, and its pins were not checked against the new "
            "lock (a version moved down, content changed): review the new lock before "
            "committing it"
        )
        return None


def _refuse_downgrades(previous: Lockfile, kernels: dict[str, LockedKernel]) -> None:
    """Refuse to replace the ``previous`` lock when it pins a kernel at a higher version
    than ``kernels`` do, that the declared range still admits: the CDN's versions.json
    no longer lists it. A lower version the range now asks for (``==1`` after ``>=1``)
    is the user's choice."""
    path = previous.source
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


def _warn_changed_content(previous: Lockfile, lock: Lockfile) -> None:
    """Warn about each kernel ``lock`` pins at a version ``previous`` pins too, with other
    content for a variant both list, or other ``kernel-depends``: a published version must
    not change."""
    pinned = {(old.repo_id, old.version): old for old in previous.all_kernels()}
    for new in lock.all_kernels():
        old = pinned.get((new.repo_id, new.version))
        if old is None:
            continue
        was = old.variants
        changed = sorted(v for v, digest in new.variants.items() if was.get(v, digest) != digest)
        if changed:
            _warn_changed(
                f"{new.repo_id}@v{new.version}: the CDN serves other content than "
                f"{previous.source} pinned for {', '.join(changed)}; the lock now pins "
                "the new content"
            )
        depends = _changed_depends(old, new)
        if depends:
            _warn_changed(
                f"{new.repo_id}@v{new.version}: its kernel-depends on the CDN differ from "
                f"those {previous.source} pinned ({depends}); the lock now pins the new "
                "dependencies"
            )


def _changed_depends(old: LockedKernel, new: LockedKernel) -> str:
    """The kernels ``new`` depends on that ``old`` did not, and the other way round, as
    ``added ...; removed ...``; empty when they are the same."""
    before = {dep.info for dep in old.dependencies}
    after = {dep.info for dep in new.dependencies}
    changes = [
        f"{what} {', '.join(map(str, sorted(infos)))}"
        for what, infos in (("added", after - before), ("removed", before - after))
        if infos
    ]
    return "; ".join(changes)


def _warn_changed(message: str) -> None:
    warn_at_caller(
        LockedContentChangedWarning(
            f"{message}. A published version must not change: check with the publisher "
            "before committing the lock"
        )
    )


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
        LockfileError: as :func:`lock_project`, or the dependencies form a cycle or go
            more than 64 levels deep.
    """
    newest = _newest_matching(fetcher, repo_id, specifier, allow_older=allow_downgrade)
    info = RepoInfo(repo_id, newest)
    pinned = _lock_version(fetcher, info, variants, (), {} if locked is None else locked)
    return pinned._replace(specifier=specifier)


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
    try:
        names, found = _variants_of(fetcher, info, variants)
    except LockfileError as exc:
        if not chain:
            raise
        via = " -> ".join((*chain, dependency_label(info)))  # the project names only the first
        raise LockfileError(f"{via} (kernel-depends): {exc.message}", hint=exc.hint) from None
    chain = (*chain, dependency_label(info))
    dependencies = []
    for dep in _kernel_depends(info, found):
        try:
            check_dependency(chain, dependency_label(dep))
        except KernelDependencyError as exc:
            raise LockfileError(exc.message, hint=exc.hint) from None
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


def _variants_of(
    fetcher: Fetcher, info: RepoInfo, variants: Sequence[str]
) -> tuple[list[str] | None, dict[str, ManifestDocument]]:
    """The names ``variants.json`` lists for ``info`` (``None``: it has none), and the
    manifest of each variant to lock: those it lists, or those a probe finds."""
    names = _published_variant_names(fetcher, info)
    if names is None:
        return None, probe_variants(fetcher, info, variants)
    return names, {name: get_listed_manifest(fetcher, info, name) for name in names}


def _kernel_depends(info: RepoInfo, found: dict[str, ManifestDocument]) -> list[RepoInfo]:
    """The kernels any of the variants ``found`` depends on, in repo order."""
    depends = {
        dep.info
        for name, document in found.items()
        for dep in read_kernel_metadata(
            document.manifest.document, source=manifest_source(info, name)
        ).kernel_depends
    }
    return sorted(depends)


def _newest_matching(fetcher: Fetcher, repo_id: str, specifier: str, *, allow_older: bool) -> int:
    remedy = ("lock anyway with allow_downgrade=True", "run `flashhub lock --allow-downgrade`")
    cache = Cache.from_config(fetcher.config)
    check = functools.partial(check_newest, cache, repo_id, allow_older=allow_older, remedy=remedy)
    versions, why = versions_or_why(fetcher, repo_id, check)
    pinned = exact_version(specifier)
    if versions is None and pinned is not None:
        return pinned  # its variants.json, or a probe, shows whether it is published
    if not versions:
        raise LockfileError(
            f"{repo_id} {why}, so {specifier!r} cannot be resolved",
            hint=doubled_prefix_hint(fetcher.config)
            or "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX; "
            "`flashhub publish` writes versions.json, and an exact version (==2) "
            "locks without it",
        )
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
        names, proof = get_variant_list(fetcher, info)
    except NotPublished:
        return None
    try:
        for name in names:
            check_variant_segment(name)
    except ValueError as exc:
        raise LockfileError(f"{source}: {exc}", hint="report it to the publisher") from None
    if not names:
        raise LockfileError(f"{source} lists no variants", hint="report it to the publisher")
    # As a load records it: an offline `flashhub lock` checks the lock against it.
    cache = Cache.from_config(fetcher.config)
    with contextlib.suppress(CacheError), index_mutex(cache, info):
        record_index(cache, info, VariantIndex(True, frozenset(names), proof=proof))
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
    with DeafThreadPool(_PARALLEL_PROBES, thread_name_prefix="flashhub-probe") as pool:
        probed = pool.map(lambda name: _probe(fetcher, info, name), names)
        found = dict(zip(names, probed, strict=True))
    missing = [name for name in variants if found[name] is None]
    if missing:
        what = variants_noun(missing)
        raise LockfileError(
            f"{info} has no variants.json, and the requested {what} not on the CDN "
            f"(no build/<variant>/{MANIFEST_NAME})",
            hint=f"correct the name, or remove it from {VARIANT_OPTIONS}",
        )
    published = {name: document for name, document in found.items() if document is not None}
    if not published:
        raise LockfileError(
            f"{info} has no variants.json, and none of the variants this system can load is "
            f"published (probed: {', '.join(candidates)}): the version may not exist, or it "
            "has no build for this system",
            hint="check the repo id and the version; if they are right, name the variants to "
            f"lock with {VARIANT_OPTIONS}",
        )
    return published


def _probe(fetcher: Fetcher, info: RepoInfo, variant: str) -> ManifestDocument | None:
    """The manifest of ``variant`` if the CDN publishes it, else ``None``."""
    try:
        return get_manifest(fetcher, info, variant)
    except NotPublished:
        return None
