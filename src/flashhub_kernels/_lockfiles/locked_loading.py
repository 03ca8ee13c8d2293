"""Loading what a lock pins: :func:`load_kernel` from the cache, :func:`get_locked_kernel`.

Both check the cache entry against the lock, then import the kernel through the import
hook, so the module is the one ``import flashhub.<org>.<pkg>.v<N>`` gives.
:func:`load_kernel` never downloads, and imports nothing of the download path: only
:func:`get_locked_kernel`, when the cache lacks a locked variant, imports
:mod:`~flashhub_kernels._lockfiles.predownload` and the network modules.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from .._cache.layout import Cache
from .._cache.mutex import index_mutex
from .._cache.staging import record_index
from .._cache_imports import mark_in_use
from .._config import get_config
from .._finder import install, twin_names
from .._loading.hub_arguments import check_trust_remote_code, sending
from .._models.names import check_backend
from .._utils.callers import caller_module
from .._variants.choice import cached_targets
from .._variants.named_system import target_system
from ..errors import CacheError, LockedVariantNotCachedError, LockfileError
from .cache_check import cached_kernel_dir, locked_variant, picked_from_lock
from .discovery import StrPath, find_lockfile

if TYPE_CHECKING:
    from .._models.kernel_dir import KernelDir
    from .._models.names import RepoInfo
    from .._variants.system import SystemInfo
    from .format import LockedKernel

_DOWNLOAD_HINT = "run `flashhub download` in the project directory, with network access"


def load_kernel(
    repo_id: str,
    *,
    lockfile: StrPath | None = None,
    backend: str | None = None,
    check_arch: bool = True,
) -> ModuleType:
    """Import a locked kernel from the cache only; never touches the network.

    The cache entry of the variant this system loads must hold exactly the bytes the
    lock pins (``flashhub download`` puts it there). Returns the same module object as
    ``import flashhub.<org>.<pkg>.v<N>``.

    Args:
        repo_id: ``"<org>/<pkg>"``, as in ``[tool.flashhub.dependencies]``.
        lockfile: The lock to use. By default, ``flashhub.lock`` shipped in the calling
            package (package data next to the ``__init__.py`` of a package the calling
            module lies in, innermost first, or in the metadata of the distribution that
            installed it), else ``./flashhub.lock``.
        backend: Choose among the locked variants of ``backend`` (e.g. ``"cpu"`` on a
            CUDA machine), as :func:`~flashhub_kernels.get_kernel` does: the module is
            then ``flashhub.<org>.<pkg>.v<N>_<backend>``.
        check_arch: ``False`` chooses the locked variant without the device archs
            builds list, as :func:`~flashhub_kernels.get_kernel` does.

    Raises:
        ValueError: ``backend`` is not a backend.
        LockfileError: no lock is found, it does not lock ``repo_id``, or the cache does
            not hold the locked bytes (the message says which).
    """
    locked = find_lockfile(lockfile, caller=caller_module()).kernel(repo_id)
    return load_locked(locked, download=False, backend=backend, check_arch=check_arch)


def get_locked_kernel(
    repo_id: str,
    *,
    lockfile: StrPath | None = None,
    backend: str | None = None,
    trust_remote_code: bool | list[str] = False,
    user_agent: str | Mapping[str, object] | None = None,
    check_arch: bool = True,
) -> ModuleType:
    """Import a locked kernel, downloading its variant first when the cache lacks it.

    Like :func:`load_kernel` (``backend`` and ``check_arch`` too), but fetches a missing
    variant from the CDN and checks its manifest against the lock before any of its files
    is imported. ``user_agent`` and ``trust_remote_code`` as for
    :func:`~flashhub_kernels.get_kernel`.

    ``lockfile`` is the lock to use. Without it, the lock is found as for
    :func:`load_kernel`: the ``flashhub.lock`` shipped in the calling package (as package
    data, or in the metadata of the distribution that installed it), else
    ``./flashhub.lock``.

    Raises:
        ValueError: ``backend`` is not a backend.
        TypeError: ``user_agent`` or ``trust_remote_code`` is of the wrong type.
        LockfileError: no lock is found, or it does not lock ``repo_id``.
        LockMismatchError: the CDN serves other bytes than the lock pins.
        KernelImportError: the variant cannot be fetched or verified.
    """
    check_trust_remote_code(trust_remote_code)
    with sending(user_agent):
        locked = find_lockfile(lockfile, caller=caller_module()).kernel(repo_id)
        return load_locked(locked, download=True, backend=backend, check_arch=check_arch)


def load_locked(
    locked: LockedKernel, *, download: bool, backend: str | None = None, check_arch: bool = True
) -> ModuleType:
    """Import a locked kernel once the cache holds the locked bytes of it and of every
    kernel it depends on (fetched first when ``download``, and not offline), choosing
    the variants of ``backend`` when given, without the device archs if not ``check_arch``."""
    check_backend(backend)
    config = get_config()
    cache = Cache.from_config(config)
    system = target_system(backend, check_arch=check_arch)
    tree = locked.tree()
    variants = {
        node.info: locked_variant(node, system, cached_targets(cache, node.info)) for node in tree
    }
    kernel_dirs, missing = {}, []
    for node in tree:
        kernel_dir, why = cached_kernel_dir(cache, node, variants[node.info])
        if kernel_dir is None:
            missing.append((node, why))
        else:
            kernel_dirs[node.info] = kernel_dir
    for node, _ in missing:  # a lock lacking the variant to load: said before "not cached"
        picked_from_lock(
            node, system, cache.read_index(node.info), cached_targets(cache, node.info)
        )
    if missing and (not download or config.offline):
        node, why = missing[0]
        raise _not_loadable(locked, node, variants[node.info], why, download=download)
    if missing:
        from .predownload import fetch_locked_variants  # the download path, and the network

        fetch_locked_variants(config, cache, [(node, variants[node.info]) for node, _ in missing])
        for node, _ in missing:
            kernel_dir, why = cached_kernel_dir(cache, node, variants[node.info])
            if kernel_dir is None:
                raise _not_loadable(locked, node, variants[node.info], why, download=download)
            kernel_dirs[node.info] = kernel_dir
    for node in tree:
        _check_cached_choice(cache, node, variants[node.info], system)
    return _import_locked(locked.info, kernel_dirs, backend)


def _not_loadable(
    locked: LockedKernel, node: LockedKernel, variant: str, why: str, *, download: bool
) -> LockedVariantNotCachedError:
    """Why ``node`` (``locked`` or a kernel it depends on) cannot be loaded as locked."""
    needed = f", which {locked.info} depends on," if node is not locked else ""
    offline = "unset FLASHHUB_OFFLINE, or " if download else ""
    return LockedVariantNotCachedError(
        f"locked kernel {node.info} (variant {variant}){needed} cannot be loaded: {why}",
        hint=offline + _DOWNLOAD_HINT,
    )


def _import_locked(
    root: RepoInfo, kernel_dirs: Mapping[RepoInfo, KernelDir], backend: str | None
) -> ModuleType:
    """Import ``root``, each kernel of its tree from its entry in ``kernel_dirs`` (checked
    against the lock): not from a ``LOCAL_KERNELS`` directory, nor from a variant the
    import hook would pick on its own."""
    finder = install()
    loaded = {id(module): kernel_dir for module, kernel_dir in finder.loaded()}

    def imported(module_name: str) -> KernelDir | None:
        return loaded.get(id(sys.modules[module_name]))

    for info, kernel_dir in kernel_dirs.items():
        module_name = info.module_name(backend)
        if module_name in sys.modules:
            _check_imported(module_name, imported(module_name), kernel_dir)
            continue
        twins = [name for name, _ in twin_names(module_name, backend) if name in sys.modules]
        if not any(getattr(imported(twin), "entry", None) == kernel_dir.entry for twin in twins):
            assert kernel_dir.entry is not None, "a locked kernel_dir is a cache entry"
            mark_in_use(kernel_dir.entry)
            finder.add_kernel_dir(module_name, kernel_dir)
    module_name = finder.pin(root, backend)
    return importlib.import_module(module_name)


def _check_imported(module_name: str, imported: KernelDir | None, locked: KernelDir) -> None:
    """Refuse a module imported already from elsewhere than the locked entry."""
    if imported is not None and imported.entry == locked.entry:
        return
    where = "elsewhere" if imported is None else str(imported.entry or imported.package_dir)
    raise LockfileError(
        f"{module_name} was imported in this process from {where} before the locked load, "
        f"not from the locked variant {locked.variant} ({locked.entry})",
        hint="load the kernel from the lock before anything else imports it, or load it in "
        "a fresh process",
    )


def _check_cached_choice(
    cache: Cache, locked: LockedKernel, variant: str, system: SystemInfo
) -> None:
    """Check that the import hook's warm path, by what the cache records and the lock
    adds to it, picks the locked ``variant``, just checked; then record what the lock
    adds, so that the import of the kernel (or of a kernel depending on it) picks it too.
    A cache that cannot be written (an image's, read-only) is checked all the same."""
    recorded = cache.read_index(locked.info)
    cached = functools.partial(cache.read_target, locked.info)
    index, picked = picked_from_lock(locked, system, recorded, cached)
    if picked != variant:
        raise LockfileError(
            f"the cache's variant list for {locked.info} disagrees with the lock",
            hint="run `flashhub cache clear`, then `flashhub download`",
        )
    if index != recorded:  # as every writer of the index: under its mutex (a cold path)
        with contextlib.suppress(CacheError), index_mutex(cache, locked.info):
            record_index(cache, locked.info, index)
