"""From a kernel reference to a verified variant directory on disk.

:func:`obtain_kernel` has two paths:

- warm (here): the cache's variant index picks the variant, the entry's receipt vouches
  for its files (``stat`` only); no network, and no HTTP or download module is imported;
- cold (:mod:`~.._network.download`): fetch ``variants.json`` (or probe), pick the variant, then
  under the entry's download mutex fetch every file into staging, verify, and rename
  into place.

The cold path, lock files and the offline answers choose with
:func:`~flashhub_kernels._variants.choice.choose_variant`; the warm path takes the pick
the index records for this system, or judges the variants it records
(:func:`~flashhub_kernels._variants.compat.pick_cached_variant`).
"""

from __future__ import annotations

import functools

from .._cache_imports import mark_in_use
from .._config import Config, get_config
from .._models.kernel_dir import KernelDir
from .._variants.system import this_system
from .layout import Cache, parse_index, recorded_pick
from .receipt import cached_kernel, read_receipt

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from .._models.names import RepoInfo
    from .._variants.system import SystemInfo
    from ..errors import CacheError


def obtain_kernel(
    candidates: Sequence[RepoInfo],
    *,
    backend: str | None = None,
    config: Config | None = None,
    system: SystemInfo | None = None,
    importing: str | None = None,
) -> KernelDir:
    """Return a verified cache entry for the first candidate that exists, downloading it if needed.

    ``candidates`` are the CDN spellings a module name may stand for (see
    :func:`~flashhub_kernels._models.names.cdn_name_candidates`), tried in order. The entry is
    the one this machine (as if it ran ``backend``), or ``system``, loads. ``importing`` is
    the kernel module whose import the call is for: a download that fails fails the threads
    waiting for that import too (see :mod:`~.._shared_failure`).
    """
    config = config or get_config()
    cache, system = Cache.from_config(config), system or this_system(backend)
    damaged: str | None = None
    for info in candidates:
        hit, problem = _warm_lookup(cache, info, system)
        if hit is not None:
            return hit
        damaged = damaged or problem
    if config.offline:
        from .._loading.offline import cached_copy_error

        raise cached_copy_error(cache, candidates, system, damaged, unsigned=damaged in _UNSIGNED)
    # The cold path's modules: a warm load never imports them; imported with the GC paused.
    from .._network.deferred_gc import collection_paused

    with collection_paused():
        from .._network.download import fetch_kernel
        from .._shared_failure import shared_with_waiters
        from ..errors import CacheError

        with shared_with_waiters(importing):
            try:
                return fetch_kernel(cache, system, candidates, config)
            except CacheError as exc:
                if damaged is not None:
                    raise _not_fetched_again(exc, candidates[0], damaged) from exc
                if exc.read_only:
                    raise _not_downloadable(exc, candidates[0]) from exc
                raise


def use_kernel(
    candidates: Sequence[RepoInfo],
    *,
    backend: str | None = None,
    system: SystemInfo | None = None,
    importing: str | None = None,
) -> KernelDir:
    """:func:`obtain_kernel` for an import (of the module ``importing``, if given), the
    entry marked in use (``cache clear`` skips it)."""
    obtain = functools.partial(obtain_kernel, backend=backend, system=system, importing=importing)
    kernel_dir = obtain(candidates)
    assert kernel_dir.entry is not None, "obtain_kernel gives cache entries"
    if not mark_in_use(kernel_dir.entry):  # removed by `cache clear` meanwhile: fetch it again
        kernel_dir = obtain(candidates)
        assert kernel_dir.entry is not None
        mark_in_use(kernel_dir.entry)
    return kernel_dir


# Why a warm load passes over an entry that is intact but vouched for by no trusted key.
_UNSIGNED_ENTRY = "no trusted key vouched for it when it was cached"
# Why a warm load that checks signatures passes over the variant index of a version.
_UNSIGNED_INDEX = "no trusted key vouched for the list of its variants the cache records"
# The reasons that only a signature check online answers (no repair of the copy does).
_UNSIGNED = frozenset({_UNSIGNED_ENTRY, _UNSIGNED_INDEX})


def _not_fetched_again(exc: CacheError, info: RepoInfo, damaged: str) -> CacheError:
    """``exc``, met fetching ``info`` again because its cached copy is unfit (``damaged``
    says why), said with that reason: a cache that cannot be written (a read-only image)
    otherwise reports a lock it cannot take where the user expects a warm load."""
    from ..errors import CacheError

    hints = [exc.hint] if exc.hint else []
    if damaged not in _UNSIGNED:
        hints.insert(
            0,
            "run `flashhub cache verify --repair` where the cache can be written "
            "(it re-stamps a copy that lost its files' modification times)",
        )
    return CacheError(
        f"the cached copy of {info} cannot be used ({damaged}), and fetching it again "
        f"failed: {exc.message}",
        hint="; else ".join(hints) or None,
    )


def _not_downloadable(exc: CacheError, info: RepoInfo) -> CacheError:
    """``exc``, a cache this process may not write met downloading ``info``, said as what
    it is: a kernel the cache lacks (a read-only image's, run as another user), not a
    lock file that a load from the cache would need."""
    from ..errors import CacheError

    return CacheError(
        f"{info} is not in the cache, and this process cannot write there to download "
        f"it: {exc.message}",
        hint=f"add it where the cache can be written (`flashhub get {info.repo_id} "
        f"--version {info.version}` as the cache's owner, when the image is built); "
        f"else {exc.hint}",
    )


# -- warm path -------------------------------------------------------------------------


def _warm_lookup(
    cache: Cache, info: RepoInfo, system: SystemInfo
) -> tuple[KernelDir | None, str | None]:
    """A verified entry, or ``None`` and (when an entry is unfit) why.

    An entry that no trusted key vouched for when it was cached is vouched for by the
    signature cached with it, if a trusted key made it; else (cached before a key was
    configured) it is unfit while signatures are checked: the cold path verifies it once.
    So is an index that only processes trusting other keys, or none, recorded.
    """
    whole = cache.index_file(info)
    document = cache.records(info, whole)
    variant = recorded_pick(document, system.key) or _judged_pick(cache, info, document, system)
    if variant is None:
        return None, _UNSIGNED_INDEX if whole and not document else None
    entry = cache.entry_dir(info, variant)
    cache.check_entry(entry)  # index_file checked the directories above it
    receipt = read_receipt(entry)
    if receipt is None:
        return None, None
    changed = receipt.changed_file(entry)
    if changed is not None:
        return None, f"{entry / changed} differs from its receipt"
    vouched = cache.vouched(info, variant, receipt)
    if vouched is None:
        return None, _UNSIGNED_ENTRY
    return cached_kernel(entry, info, variant, vouched), None


def _judged_pick(
    cache: Cache, info: RepoInfo, document: Mapping[str, Any], system: SystemInfo
) -> str | None:
    """The variant ``system`` takes among those the index ``document`` records, judged:
    it records no pick for it (see :attr:`~.layout.VariantIndex.picks`)."""
    from .._variants.compat import pick_cached_variant

    index = parse_index(document)
    if index is None:
        return None
    return pick_cached_variant(index, system, functools.partial(cache.read_target, info))
