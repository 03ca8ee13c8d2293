"""Kernels that need other kernels: ``kernel-depends`` in a kernel's ``metadata.json``.

Before a kernel's code runs, :func:`execute_kernel` checks a local build's files against
the digest in its ``metadata.json`` (:mod:`~.local_digest`), then what that document
asks of the process (:mod:`~.requirements`), then imports each kernel it depends on,
as a module of its own (``flashhub.<org>.<pkg>.v<N>``, located, downloaded and
verified as any import is; its own dependencies first). While the kernel's code runs,
:func:`get_kernel_dep` gives it those modules, as in Hugging Face kernels.

The kernels being imported in this thread form a chain (a context variable); a
dependency already in the chain is a cycle, and one more than 64 levels deep a mistake:
both are refused with the chain spelled out.
"""

from __future__ import annotations

import importlib
from contextvars import ContextVar, Token
from types import ModuleType

from .._constants import MANIFEST_NAME
from .._models.kernel_metadata import (
    KernelDependency,
    check_dependency,
    dependency_label,
    load_requirements,
    read_kernel_metadata,
)
from .._models.manifest import load_json
from .._models.names import parse_module_name
from ..errors import KernelDependencyLookupError, SignatureError
from .requirements import check_requirements

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any

    from .._models.kernel_dir import KernelDir
    from .._models.names import RepoInfo

# The dependencies of the kernel whose code runs now; None outside a kernel's import.
_DEPS: ContextVar[Mapping[str, ModuleType] | None] = ContextVar(
    "flashhub_kernel_deps", default=None
)
# The kernels this thread is importing, outermost first ("org/pkg vN").
_CHAIN: ContextVar[tuple[str, ...]] = ContextVar("flashhub_kernel_chain", default=())
# How a dependency is imported instead of by its module name (None): set by a load with
# check_arch=False, whose dependencies are chosen without the device archs too.
dependency_importer: ContextVar[Callable[[RepoInfo, str | None], ModuleType] | None] = ContextVar(
    "flashhub_dependency_importer", default=None
)


def get_kernel_dep(repo_id: str) -> ModuleType:
    """The module of a kernel that the kernel being imported depends on.

    For a kernel's own code, while it is imported: ``repo_id`` must be listed in the
    ``kernel-depends`` of the kernel's ``metadata.json`` (at a version), and that version
    is what is returned, loaded before the kernel's code started.

    Raises:
        KernelDependencyLookupError: called outside the import of a kernel that lists
            dependencies, or for a repo its ``kernel-depends`` does not list (also a
            ``RuntimeError``).
    """
    deps = _DEPS.get()
    if deps is None:
        raise KernelDependencyLookupError(
            f"get_kernel_dep({repo_id!r}) works only while a kernel that lists {repo_id} in "
            "the kernel-depends of its metadata.json is being imported",
            hint="call it from the kernel's own code at import time (its __init__.py); "
            "other code loads kernels with get_kernel(repo_id, version=N)",
        )
    module = deps.get(repo_id)
    if module is None:
        listed = ", ".join(sorted(deps)) or "nothing"
        raise KernelDependencyLookupError(
            f"{repo_id} is not a dependency of the kernel being imported (its "
            f"kernel-depends lists {listed})",
            hint=f"add {repo_id} to kernel-depends in the kernel's build.toml and rebuild",
        )
    return module


def execute_kernel(
    kernel_dir: KernelDir,
    module_name: str,
    execute: Callable[[], None],
    pin: Callable[[RepoInfo, str | None], str],
) -> None:
    """Run ``execute`` (the kernel's code) once the kernel's requirements are met and its
    dependencies are loaded, with :func:`get_kernel_dep` answering for them.

    ``pin(info, backend)`` is the finder's: the module name to import a dependency as,
    bound to it. The finder passes it so that this module does not import the finder.
    """
    if kernel_dir.entry is None:  # a local build: no download verified its files
        requires = _verified_local_requirements(kernel_dir)
    else:
        requires = requirements(kernel_dir)
    if not requires:
        execute()
        return
    metadata = read_kernel_metadata(requires, source=f"{_describe(kernel_dir)}: {MANIFEST_NAME}")
    check_requirements(metadata, _describe(kernel_dir))
    deps = load_dependencies(metadata.kernel_depends, kernel_dir, module_name, pin)
    token = _DEPS.set(deps)
    try:
        execute()
    finally:
        _DEPS.reset(token)


def load_dependencies(
    depends: tuple[KernelDependency, ...],
    kernel_dir: KernelDir,
    module_name: str,
    pin: Callable[[RepoInfo, str | None], str],
) -> dict[str, ModuleType]:
    """Import each of ``depends``, the dependencies of the kernel in ``kernel_dir``, which
    is imported as ``module_name`` (a forced backend applies to them too). Those of a
    kernel a trusted key vouched for must be signed too: see ``vouching_signer``."""
    if not depends:
        return {}
    parsed = parse_module_name(module_name)
    backend = parsed.backend if parsed is not None else None
    kernel = _label(kernel_dir)
    chain = (*_CHAIN.get(), kernel)
    importer = dependency_importer.get()
    token = _CHAIN.set(chain)
    vouched = _vouched_by(kernel_dir.signer) if kernel_dir.signer is not None else None
    try:
        loaded = {}
        for dep in depends:
            check_dependency(chain, str(dep))
            loaded[dep.repo_id] = (
                importer(dep.info, backend)
                if importer is not None
                else importlib.import_module(pin(dep.info, backend))
            )
        return loaded
    except SignatureError as exc:
        if vouched is None:
            raise
        raise _unvouched_error(kernel, kernel_dir.signer, exc) from None
    finally:
        _CHAIN.reset(token)
        if vouched is not None:
            vouched.var.reset(vouched)


def _vouched_by(signer: str) -> Token[str | None]:
    """Require the signatures of the dependencies imported until the token is reset:
    by a key trusted for their org, or by ``signer``."""
    from .._config import vouching_signer

    return vouching_signer.set(signer)


def _unvouched_error(kernel: str, signer: str | None, exc: SignatureError) -> SignatureError:
    """The error for a dependency of ``kernel`` (signed by ``signer``) that no key vouches for."""
    return SignatureError(
        f"{kernel} is signed, so each kernel it depends on must be signed too, by a key "
        f"trusted for its org or by the key that signed {kernel} ({signer}): {exc.message}",
        hint="ask the publisher to sign the dependency, or trust its publisher's key for "
        "its org (FLASHHUB_TRUSTED_KEYS=<org>:flashhub-ed25519:...)",
    )


def requirements(kernel_dir: KernelDir) -> Mapping[str, Any]:
    """:func:`load_requirements` of a kernel's ``metadata.json``: as its cache entry's
    receipt records them, else read beside it (a receipt that predates recording them, a
    local build's variant)."""
    if kernel_dir.requires is not None:
        return kernel_dir.requires
    return _requirements_beside(kernel_dir, lambda path, data: load_json(data, str(path)))


def _verified_local_requirements(kernel_dir: KernelDir) -> Mapping[str, Any]:
    """:func:`requirements` of a local build, once its files are checked against the
    digest of its ``metadata.json`` (read and parsed once for both)."""
    from .local_digest import verify_local_build

    return _requirements_beside(kernel_dir, verify_local_build)


def _requirements_beside(
    kernel_dir: KernelDir, parse: Callable[[Path, bytes], object]
) -> Mapping[str, Any]:
    """:func:`load_requirements` of the ``metadata.json`` beside ``kernel_dir``, as ``parse``
    reads its path and bytes; none for a package on its own, which has no such file."""
    found = metadata_beside(kernel_dir)
    if found is None:
        return {}
    path, data = found
    document = parse(path, data)
    return load_requirements(document, source=str(path)) if isinstance(document, dict) else {}


def metadata_beside(kernel_dir: KernelDir) -> tuple[Path, bytes] | None:
    """The path and bytes of the ``metadata.json`` of ``kernel_dir``'s cache entry, or of a
    local package's own directory (a flattened variant) or else the variant directory
    above it; ``None`` where there is none (a local package on its own)."""
    places = (
        [kernel_dir.entry]
        if kernel_dir.entry
        else [kernel_dir.package_dir, kernel_dir.package_dir.parent]
    )
    for directory in places:
        path = directory / MANIFEST_NAME
        try:
            return path, path.read_bytes()
        except OSError:
            continue
    return None


def _describe(kernel_dir: KernelDir) -> str:
    """The kernel, for messages: ``org/pkg v1 (variant ...)``, or a local directory."""
    if kernel_dir.info is None:
        return f"the local kernel {kernel_dir.package_dir}"
    variant = f" (variant {kernel_dir.variant})" if kernel_dir.variant else ""
    return f"{dependency_label(kernel_dir.info)}{variant}"


def _label(kernel_dir: KernelDir) -> str:
    """The kernel in a dependency chain, spelled as a :class:`KernelDependency` is."""
    return (
        str(kernel_dir.package_dir)
        if kernel_dir.info is None
        else dependency_label(kernel_dir.info)
    )
