"""Offline, a project's lock confirmed from the project and the cache; never written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._cache.layout import Cache, VariantIndex
from .._cache.receipt import read_receipt
from .._constants import PYPROJECT_NAME
from .._loading.offline import indexed_versions
from .._utils.escaping import escape_controls
from ..errors import OfflineError
from .cache_check import unpinned_message
from .format import LOCKFILE_NAME, LockedKernel, Lockfile, read_lockfile
from .project import parse_specifier, variants_noun

_LOCK_ONLINE_HINT = "run `flashhub lock` with network access (unset FLASHHUB_OFFLINE)"


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
    spec = parse_specifier(specifier)
    if not spec.contains(str(locked.version)):
        return [f"{repo_id} is locked at v{locked.version}, outside its range {specifier!r}"]
    problems = _offline_index_problems(cache.read_index(locked.info), locked, variants)
    if problems:
        return problems
    for variant, pinned_hash in sorted(locked.variants.items()):
        receipt = read_receipt(cache.entry_dir(locked.info, variant))
        if receipt is not None and receipt.content_hash != pinned_hash:
            problems.append(
                f"{locked.info} {variant}: the cached copy is {receipt.content_hash}, "
                f"the lock pins {pinned_hash}"
            )
    newer = [
        v for v in indexed_versions(cache, repo_id) if v > locked.version and spec.contains(str(v))
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
    if index is None:
        return [f"the cache does not record the locked variants of {info}"]
    problems = [unpinned_message(info, index.present - pinned)] if index.present - pinned else []
    if not pinned <= index.present:
        return [*problems, f"the cache does not record the locked variants of {info}"]
    unlocked = [name for name in variants if name not in pinned]
    if unlocked:
        problems.append(f"{info} is locked, but the requested {variants_noun(unlocked)} not")
    return problems
