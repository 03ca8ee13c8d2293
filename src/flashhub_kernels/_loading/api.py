"""The documented functions. Every kernel import goes through the one finder.

:func:`get_kernel` imports what an import statement does, and no more: what the other
functions need (judging variants, naming another machine, the errors they raise) is
imported by them.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from .._config import get_config
from .._finder import install, twin_names
from .._models.kernel_dir import KernelDir
from .._models.names import (
    BACKENDS,
    LOCAL_ORG,
    ROOT_PACKAGE,
    RepoInfo,
    check_backend,
)
from .hub_arguments import check_trust_remote_code, sending
from .version_arguments import cache_only_reason, newest_version, requested_version

TYPE_CHECKING = False  # not typing's: get_kernel imports this module
if TYPE_CHECKING:
    from .._variants.system import SystemInfo
    from .._variants.verdicts import VariantVerdict

# What an offline call that names no version can do instead.
_OFFLINE_VERSION_HINT = "pass version=, or unset FLASHHUB_OFFLINE"


def get_kernel(
    repo_id: str,
    revision: str | None = None,
    version: int | None = None,
    backend: str | None = None,
    user_agent: str | Mapping[str, object] | None = None,
    trust_remote_code: bool | list[str] = False,
    *,
    check_arch: bool = True,
) -> ModuleType:
    """Import a kernel from the CDN (downloading the matching variant when not cached).

    Returns the same module object as ``import flashhub.<org>.<pkg>.v<N>``.

    Args:
        repo_id: ``"<org>/<pkg>"``, e.g. ``"sdq/audio-codebook-primitives"``.
        revision: ``"v1"`` or ``"1"``. Give exactly one of ``revision`` and ``version``.
        version: The version number, ``>= 1``.
        backend: Force a backend's variants, e.g. ``"cpu"`` on a CUDA machine. The kernel
            is then imported as ``flashhub.<org>.<pkg>.v<N>_<backend>``; on a machine
            that runs ``backend`` already, that is the module ``get_kernel`` without it
            returns (whichever call comes first names it).
        user_agent: Text appended to the ``User-Agent`` of the CDN requests this load
            makes: a ``str``, or a ``dict`` sent as ``key/value; key/value``.
        trust_remote_code: Taken for Hugging Face kernels' code, and checked as it
            checks it (a bool, or a list of repo ids), but it changes nothing: the CDN
            and the signatures required decide what loads.
        check_arch: ``False`` chooses the variant without the device archs that builds
            list in their ``metadata.json`` (CUDA capabilities, ROCm targets), for this
            kernel and the kernels it depends on: for a kernel that runs on more devices
            than it declares (a Triton fallback, say). It may then fail or crash on a
            device it does not support. A kernel this process imported already is
            returned as it is.

    Raises:
        ValueError: ``repo_id``, ``version``/``revision``, ``backend`` or ``user_agent``
            is malformed.
        TypeError: ``user_agent`` or ``trust_remote_code`` is of the wrong type.
        KernelImportError: the kernel cannot be found, matched, fetched or verified (the
            subclasses in :mod:`flashhub_kernels.errors` say which).
        LocalKernelNotFoundError: ``LOCAL_KERNELS`` maps ``repo_id`` to a directory
            that does not exist (a ``FileNotFoundError``).
    """
    info = RepoInfo(repo_id, requested_version(version, revision))
    check_backend(backend)
    check_trust_remote_code(trust_remote_code)
    with sending(user_agent):
        if not check_arch:
            return _import_unchecked(info, backend)
        with _pinned(info, backend) as module_name:
            return importlib.import_module(module_name)


@contextmanager
def _pinned(info: RepoInfo, backend: str | None) -> Iterator[str]:
    """The module name ``info`` is imported as, bound to ``info`` for the block (see
    :meth:`~.._finder.KernelFinder.pin`), and no longer when it fails before a kernel
    was found (a misspelt name must not stand in the way of the published one)."""
    finder = install()
    module_name = finder.pin(info, backend)
    try:
        yield module_name
    except BaseException:
        finder.unpin(module_name, info)
        raise


def _import_unchecked(info: RepoInfo, backend: str | None) -> ModuleType:
    """:func:`get_kernel` with ``check_arch=False``: the finder is handed the variant
    chosen without the device archs, then imports it as it imports any kernel."""
    from .._cache.obtain import use_kernel
    from .._twin_names import twin_module
    from .._variants.named_system import target_system
    from .local import local_override

    with _pinned(info, backend) as module_name:
        finder, others = install(), twin_names(module_name, backend)
        # A module of this name, or of another that loads the same variant (imported, or
        # being imported by another thread: waited for), is the answer.
        if module_name not in sys.modules and twin_module(finder, module_name, others) is None:
            target = target_system(backend, check_arch=False)
            kernel_dir = local_override([info], backend, check_arch=False)
            finder.add_kernel_dir(module_name, kernel_dir or use_kernel([info], system=target))
        return _import(module_name, check_arch=False)


def _import(module_name: str, *, check_arch: bool) -> ModuleType:
    """Import a kernel the finder can locate; with ``check_arch=False`` its dependencies
    (``kernel-depends``) are chosen without the device archs too."""
    if check_arch:
        return importlib.import_module(module_name)
    from .kernel_deps import dependency_importer

    token = dependency_importer.set(_import_unchecked)
    try:
        return importlib.import_module(module_name)
    finally:
        dependency_importer.reset(token)


def install_kernel(
    repo_id: str,
    *,
    version: int | None = None,
    revision: str | None = None,
    backend: str | None = None,
    local_files_only: bool = False,
    system: str | None = None,
    cuda_capability: str | None = None,
    rocm_arch: str | None = None,
    user_agent: str | Mapping[str, object] | None = None,
    trust_remote_code: bool | list[str] = False,
) -> Path:
    """Download and verify the variant of a kernel this system loads, without importing it.

    Gives the variant's cache entry, which holds its files as published (``<py_pkg>/``,
    or a flattened build's files, or a ``"zip"`` build's archive) and ``metadata.json``.
    With neither ``version`` nor ``revision``, the newest version in ``versions.json``.
    ``backend`` picks the variant ``get_kernel(..., backend=)`` would load.

    ``local_files_only=True`` answers from the cache alone, as ``FLASHHUB_OFFLINE=1``
    does, for this call: no request is made, and a kernel not in the cache is an
    :class:`~flashhub_kernels.errors.OfflineError`.

    ``system`` (the exact build another machine loads, e.g.
    ``"torch213-cxx11-cu126-x86_64-linux"``) and its device, ``cuda_capability``
    (``"9.0"``) or ``rocm_arch`` (``"gfx942"``), download the variant that machine
    loads instead: into the cache entry its own loads then find, offline too.

    ``user_agent`` and ``trust_remote_code`` as for :func:`get_kernel`.

    Raises:
        ValueError: an argument is malformed, or the device is not of ``system``'s backend.
        TypeError: ``user_agent`` or ``trust_remote_code`` is of the wrong type.
        OfflineError: offline (``FLASHHUB_OFFLINE=1``, or ``local_files_only=True``), and
            the variant is not in the cache, or no version is given: only the CDN knows the
            newest.
        KernelNotFoundError: the repo or the version is not published (a
            ``VersionNotFoundError`` for a version its ``versions.json`` does not list), or,
            with neither ``version`` nor ``revision``, the repo has no ``versions.json``.
        NoCompatibleVariantError: no published variant fits the machine.
        KernelImportError: the CDN cannot be reached (``TransportError``), a document it
            serves is refused (``ManifestError``; ``RollbackError``: a ``versions.json``
            older than one this machine has seen; ``SignatureError``), a file fails
            its check (``IntegrityError``), the cache cannot be written (``CacheError``), or
            a setting is malformed (``ConfigError``).
    """
    from .._variants.named_system import target_system

    check_backend(backend)
    check_trust_remote_code(trust_remote_code)
    target = target_system(
        backend, system=system, cuda_capability=cuda_capability, rocm_arch=rocm_arch
    )
    with sending(user_agent):
        return _install(repo_id, version, revision, target, local_files_only)


def _install(
    repo_id: str,
    version: int | None,
    revision: str | None,
    target: SystemInfo,
    local_files_only: bool,
) -> Path:
    """:func:`install_kernel` for the machine ``target``."""
    from .._cache.obtain import obtain_kernel
    from ..errors import OfflineError

    config = get_config()
    cache_only = cache_only_reason(config, local_files_only)
    if version is None and revision is None:
        version = newest_version(
            config, repo_id, hint="pass version=", local_files_only=local_files_only
        )
    info = RepoInfo(repo_id, requested_version(version, revision))
    try:
        entry = obtain_kernel(
            [info], system=target, config=config._replace(offline=cache_only is not None)
        ).entry
    except OfflineError:
        if config.offline or not local_files_only:
            raise
        raise OfflineError(
            f"{info} is not in the cache, and {cache_only}",
            hint="call install_kernel without local_files_only=True to download it",
        ) from None
    assert entry is not None, "obtain_kernel gives cache entries"
    return entry


def get_local_kernel(
    repo_path: str | os.PathLike[str],
    package_name: str | None = None,
    *,
    backend: str | None = None,
    trust_remote_code: bool | list[str] = False,
    user_agent: str | Mapping[str, object] | None = None,
    check_arch: bool = True,
) -> ModuleType:
    """Import a kernel from a local directory, without the CDN or the cache.

    ``repo_path`` is a kernel repo holding ``build/<variant>/<py_pkg>/``, such a
    ``build`` directory itself, one ``<variant>`` directory, or a bare package directory
    with an ``__init__.py``. The best variant for this system is used, or the one
    ``backend`` selects, as for :func:`get_kernel`. ``package_name`` names the package
    folder in the variant (``<py_pkg>``) to take of several, as older Hugging Face
    ``kernels`` releases took it (the variant's one package is taken whatever the name);
    without it the variant's one package is used, or of several the one the
    variant's ``metadata.json`` ``name`` names (``my-kernel`` is ``my_kernel``), as
    Hugging Face ``kernels`` picks it (or the variant itself, in a flattened build). The
    module gets a unique name derived from the path, so different directories never
    collide.

    That name means nothing to another process until it calls ``get_local_kernel`` with
    the same path: unpickling an object of the kernel there raises a
    ``ModuleNotFoundError`` that says so. ``LOCAL_KERNELS`` gives a local build a name
    every process can import. ``check_arch=False`` chooses the variant without the
    device archs builds list, as for :func:`get_kernel`; ``user_agent`` and
    ``trust_remote_code`` too (the first for the kernels it depends on, from the CDN).

    Raises:
        ValueError: ``backend`` or ``user_agent`` is malformed, or ``backend`` is one this
            machine cannot select.
        TypeError: ``user_agent`` or ``trust_remote_code`` is of the wrong type.
        LocalKernelNotFoundError: ``repo_path`` does not exist (a ``FileNotFoundError``).
        KernelNotFoundError: ``repo_path`` holds no such package, or several packages
            without one named.
        NoCompatibleVariantError: no variant in ``repo_path`` fits this system.
    """
    from .local import find_local_package  # not imported by kernel loads from the CDN

    if package_name in BACKENDS and backend is None:
        backend = _backend_given_as_package_name(str(package_name))
        package_name = None
    check_backend(backend)
    check_trust_remote_code(trust_remote_code)
    path = Path(repo_path).resolve()
    with sending(user_agent):
        found = find_local_package(path, backend, package_name, check_arch=check_arch)
        digest = hashlib.sha256(os.fsencode(found.package_dir)).hexdigest()[:12]
        name = found.package_dir.name.removesuffix(".zip")  # a "zip" build's archive is its package
        module_name = f"{ROOT_PACKAGE}.{LOCAL_ORG}.{name}_{digest}"
        install().add_kernel_dir(module_name, KernelDir(found.package_dir))
        return _import(module_name, check_arch=check_arch)


def get_kernel_variants(
    repo_id: str,
    version: int | None = None,
    *,
    revision: str | None = None,
    backend: str | None = None,
    system: str | None = None,
    cuda_capability: str | None = None,
    rocm_arch: str | None = None,
) -> list[VariantVerdict]:
    """Judge every published variant of a kernel against this system.

    Returns :class:`VariantAccepted` entries (best first) then :class:`VariantRejected`
    entries with a ``reason``. ``revision="v1"`` is ``version=1``, as for
    :func:`get_kernel`; with neither, the newest version in the repo's
    ``versions.json``. When a version has no ``variants.json``, only the variants this
    system could load are probed, so only those appear. A build for this system's GPU
    backend whose ``metadata.json`` lists device archs is judged by them too (one
    request each): one whose archs lack the device is rejected, saying so.

    ``system``, ``cuda_capability`` and ``rocm_arch`` judge for another machine, as
    for :func:`install_kernel`.

    With ``FLASHHUB_OFFLINE=1`` no request is made: the answer comes from the variant
    list the cache recorded when the version was loaded or downloaded.

    Raises:
        ValueError: an argument is malformed, or the device is not of ``system``'s backend.
        OfflineError: offline, and the cache does not record the answer (or
            ``version=None``: only the CDN knows the newest version).
        KernelNotFoundError: the repo or the version is not published (a
            ``VersionNotFoundError`` for a version its ``versions.json`` does not list), or,
            with neither ``version`` nor ``revision``, the repo has no ``versions.json``.
        KernelImportError: the CDN cannot be reached (``TransportError``), a document it
            serves is refused (``ManifestError``; ``RollbackError``: a ``versions.json``
            older than one this machine has seen; ``SignatureError``), or a setting is
            malformed (``ConfigError``).
    """
    from .._variants.named_system import target_system

    if version is not None or revision is not None:
        version = requested_version(version, revision)
    check_backend(backend)
    target = target_system(
        backend, system=system, cuda_capability=cuda_capability, rocm_arch=rocm_arch
    )
    return _judged(repo_id, version, target)


def _judged(repo_id: str, version: int | None, target: SystemInfo) -> list[VariantVerdict]:
    """:func:`get_kernel_variants` for the machine ``target``."""
    from .._cache.layout import Cache
    from .._variants.choice import cached_targets
    from .._variants.verdicts import judge_builds, judge_variants

    config = get_config()
    cache = Cache.from_config(config)
    if config.offline:
        from .offline import published_variants

        if version is None:
            version = newest_version(config, repo_id, hint=_OFFLINE_VERSION_HINT)
        info = RepoInfo(repo_id, version)
        verdicts = judge_variants(published_variants(cache, info, target), target)
        return judge_builds(verdicts, target, cached_targets(cache, info), first_fit=False)
    from .._network.choosing import ManifestReader
    from .._network.transport import remote  # the cold path's modules
    from .._network.variant_index import fetch_index
    from .._network.versions import with_version

    with remote(config) as fetcher:
        info = with_version(fetcher, repo_id, version)
        index = fetch_index(fetcher, info, target, probe_all=True)
        reader = ManifestReader(cache, fetcher, info, index)
        verdicts = judge_variants(sorted(index.present), target)
        return judge_builds(verdicts, target, reader.target, first_fit=False)


def _backend_given_as_package_name(backend: str) -> str:
    """``backend``, which a call passed second, where the 0.1.2 release took a backend."""
    from .._utils.callers import warn_at_caller

    warn_at_caller(
        f"get_local_kernel's second argument is package_name: {backend!r} is read as "
        f"backend={backend!r}, as the 0.1.2 release took it; pass backend={backend!r}",
        DeprecationWarning,
    )
    return backend


def has_kernel(
    repo_id: str,
    version: int | None = None,
    *,
    revision: str | None = None,
    backend: str | None = None,
    trust_remote_code: bool | list[str] = False,
    check_arch: bool = True,
) -> bool:
    """Whether the CDN publishes a variant of the kernel that this system can load.

    ``revision="v1"`` is ``version=1``, as for :func:`get_kernel`; with neither, the
    newest version in ``versions.json`` is asked about, and a repo without one raises
    :class:`~flashhub_kernels.errors.KernelNotFoundError` (whether the kernel is missing
    or published without it, its newest version is unknown). ``backend`` asks about the
    builds of that backend, as :func:`get_kernel` loads them. ``check_arch=False`` counts
    the builds whose device archs lack this device, as :func:`get_kernel` then loads them.

    With ``FLASHHUB_OFFLINE=1`` the cache answers, as for :func:`get_kernel_variants`,
    or :class:`~flashhub_kernels.errors.OfflineError` is raised when it cannot; a variant
    that fits but that an offline load refuses raises what that load raises. For a
    repo that ``LOCAL_KERNELS`` maps, the local directory answers, for any version.
    ``trust_remote_code`` as for :func:`get_kernel`.

    Raises:
        ValueError: ``repo_id``, ``version``/``revision`` or ``backend`` is malformed.
        TypeError: ``trust_remote_code`` is of the wrong type.
        KernelNotFoundError: with neither ``version`` nor ``revision``, the repo has no
            ``versions.json``.
        OfflineError: offline, and the cache cannot answer: it does not record the
            version's variants, or no version is given.
        KernelImportError: the CDN cannot be reached (``TransportError``), a document it
            serves is refused (``ManifestError``; ``RollbackError``: a ``versions.json``
            older than one this machine has seen; ``SignatureError``), an offline load of
            the variant that fits would be refused (what that load raises), or a setting is
            malformed (``ConfigError``).
    """
    from .._variants.named_system import target_system
    from .._variants.verdicts import VariantAccepted
    from ..errors import KernelNotFoundError, NoCompatibleVariantError
    from .local import local_kernels  # LOCAL_KERNELS, read on every call

    check_backend(backend)
    check_trust_remote_code(trust_remote_code)
    if version is not None or revision is not None:
        version = requested_version(version, revision)
    if repo_id in local_kernels():
        return _has_local(RepoInfo(repo_id, version or 1), backend, check_arch=check_arch)
    target = target_system(backend, check_arch=check_arch)
    config = get_config()
    if version is None:  # no versions.json raises: a False would claim what is unknown
        version = newest_version(config, repo_id, hint=_OFFLINE_VERSION_HINT)
    if config.offline:
        return _has_cached(RepoInfo(repo_id, version), target)
    try:
        verdicts = _judged(repo_id, version, target)
    except (KernelNotFoundError, NoCompatibleVariantError):
        return False
    return any(isinstance(r, VariantAccepted) for r in verdicts)


def _has_local(info: RepoInfo, backend: str | None, *, check_arch: bool) -> bool:
    """:func:`has_kernel` for a repo that ``LOCAL_KERNELS`` maps: its directory answers."""
    from ..errors import KernelNotFoundError, LocalKernelNotFoundError, NoCompatibleVariantError
    from .local import local_override

    try:
        local_override([info], backend, check_arch=check_arch)
    except (KernelNotFoundError, LocalKernelNotFoundError, NoCompatibleVariantError):
        return False
    return True


def _has_cached(info: RepoInfo, target: SystemInfo) -> bool:
    """:func:`has_kernel` offline: what an offline load of ``info`` finds in the cache."""
    from .._cache.layout import Cache
    from .._cache.obtain import obtain_kernel
    from ..errors import NoCompatibleVariantError, OfflineError
    from .offline import has_variant

    config = get_config()
    try:
        obtain_kernel([info], config=config, system=target)
    except NoCompatibleVariantError:
        return False
    except OfflineError:
        if not has_variant(Cache.from_config(config), info, target):
            return False
        raise
    return True
