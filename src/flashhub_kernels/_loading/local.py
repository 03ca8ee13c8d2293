"""Kernels in local directories: :func:`get_local_kernel` and ``LOCAL_KERNELS`` overrides.

A local kernel is read where it lies: no CDN, no cache. Before any of its code runs, on
every load, its variant directory is checked against the ``digest`` of its
``metadata.json``, when that records one (:mod:`~.local_digest`), as Hugging Face
kernels checks it. The directory may be a kernel repo holding
``build/<variant>/<py_pkg>/``, such a ``build`` directory, one ``<variant>`` directory,
or the package directory itself (with no ``metadata.json`` beside it, nothing to check).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._constants import LOCAL_KERNELS_VAR, MANIFEST_NAME
from .._models.kernel_dir import KernelDir
from .._models.kernel_metadata import read_kernel_metadata
from .._models.names import RepoInfo, parse_repo_id
from .._variants.compat import BuildTarget, read_target
from .._variants.grammar import is_variant_name
from .._variants.named_system import target_system
from .._variants.probing import build_variant_name
from .._variants.verdicts import (
    best_variant,
    describe_system,
    format_trace,
    judge_builds,
    judge_variants,
)
from ..errors import (
    ConfigError,
    KernelNotFoundError,
    LocalKernelNotFoundError,
    NoCompatibleVariantError,
)

if TYPE_CHECKING:
    from .._variants.compat import TargetOf


def _exists(path: Path) -> bool:
    """Whether ``path`` exists: not where it cannot be looked up (a name too long)."""
    try:
        return path.exists()
    except OSError:
        return False


def find_local_package(
    path: Path,
    backend: str | None = None,
    package_name: str | None = None,
    *,
    check_arch: bool = True,
) -> KernelDir:
    """The package to import from ``path``, choosing the best variant for this system
    (without the device archs builds list, if not ``check_arch``).

    ``package_name`` names the package folder to take from the variant (or from
    ``path``) when it holds several; its one package is taken whatever the name. Without
    it, of several the one the variant's ``metadata.json`` ``name`` names is taken. A
    flattened variant, whose own directory is the package, is taken as it is. The result's
    ``variant`` is the name of the build variant picked from a ``build`` directory, and
    ``None`` when ``path`` already is a variant or package directory.

    Raises:
        LocalKernelNotFoundError: ``path`` does not exist.
        NoCompatibleVariantError: ``path`` holds builds, and none fits this system.
        KernelNotFoundError: ``path`` holds no package, or several without one named.
    """
    if not _exists(path):
        raise LocalKernelNotFoundError(
            f"{path} does not exist",
            hint="pass the directory of a kernel repo (holding build/<variant>/<py_pkg>/), "
            "of one variant, or of the package itself",
        )
    packages = (
        [p for p in sorted(path.iterdir()) if (p / "__init__.py").is_file()]
        if path.is_dir()
        else []
    )
    here = _package_here(path, packages, package_name)
    if here is not None:
        return KernelDir(here)
    base = path / "build" if (path / "build").is_dir() else path
    variants = [p.name for p in sorted(base.iterdir())] if base.is_dir() else []
    # Directories that are not variants (.obj, __pycache__) are rejected like any misfit.
    system = target_system(backend, check_arch=check_arch)
    verdicts = judge_builds(judge_variants(variants, system), system, build_targets_in(base))
    chosen = best_variant(verdicts)
    if chosen is not None:
        found = find_local_package(base / chosen, backend, package_name, check_arch=check_arch)
        return KernelDir(found.package_dir, variant=chosen)
    if package_name is not None and len(packages) == 1:  # the name is only needed to choose
        return KernelDir(packages[0])
    builds = [name for name in variants if is_variant_name(name)]
    if builds:
        raise NoCompatibleVariantError(
            f"no build in {base} fits this system ({describe_system(system)}):\n"
            f"{format_trace(verdicts)}",
            hint=f"build the kernel for this system ({build_variant_name(system)}, or "
            "torch-universal), or point at a directory holding such a build",
        )
    raise _no_package_error(path, packages, package_name)


def _package_here(path: Path, packages: Sequence[Path], package_name: str | None) -> Path | None:
    """The package ``path`` gives without choosing a build variant: the one of ``packages``
    (those right under ``path``) named ``package_name``, ``path`` itself, its zip archive,
    or, with no name given, its one package or the one its ``metadata.json`` names."""
    # Only a folder listed here: a name such as "../x" must not reach outside the variant.
    named = next((p for p in packages if p.name == package_name), None)
    if named is not None:
        return named
    if (path / "__init__.py").is_file():
        return path
    archive = _zip_archive(path)
    if archive is not None:  # a "zip" build's variant directory: its archive is the package
        return archive
    if package_name is None:
        return packages[0] if len(packages) == 1 else _package_named_in_metadata(path, packages)
    return None


def _no_package_error(
    path: Path, packages: Sequence[Path], package_name: str | None
) -> KernelNotFoundError:
    """Why ``path`` gives no package: several packages that nothing chooses between (and
    that are no variant directories), or none (named ``package_name``, if given)."""
    if (
        package_name is None
        and len(packages) > 1
        and ((path / MANIFEST_NAME).is_file() or not any(is_variant_name(p.name) for p in packages))
    ):
        names = ", ".join(repr(p.name) for p in packages)
        return KernelNotFoundError(
            f"{path} holds several kernel packages ({names}), and no metadata.json there "
            "names one of them",
            hint=f"point at the package to load, e.g. {packages[0]}, or name it: "
            f"package_name={packages[0].name!r}",
        )
    named_pkg = "" if package_name is None else f" {package_name!r}"
    return KernelNotFoundError(
        f"no kernel package{named_pkg} found in {path}",
        hint=f"point at a directory holding build/<variant>/{package_name or '<py_pkg>'}/"
        "__init__.py, or at the package itself",
    )


def _package_named_in_metadata(variant_dir: Path, packages: Sequence[Path]) -> Path | None:
    """The one of ``packages`` that the ``name`` in ``variant_dir``'s ``metadata.json``
    names (``my-kernel`` is the package ``my_kernel``), as Hugging Face kernels picks it;
    ``None`` without such a file, name or package."""
    document = metadata_in(variant_dir)
    name = document.get("name") if document is not None else None
    if not isinstance(name, str):
        return None
    return next((p for p in packages if p.name == name.replace("-", "_")), None)


def _zip_archive(variant_dir: Path) -> Path | None:
    """The archive of the ``"zip"`` build in ``variant_dir``, if its ``metadata.json``
    says it is one.

    Raises:
        ManifestError: that ``metadata.json`` is malformed.
        KernelNotFoundError: it says so, and the archive is not there.
    """
    document = metadata_in(variant_dir)
    if document is None or document.get("build-layout") != "zip":
        return None
    manifest = variant_dir / MANIFEST_NAME
    archive = variant_dir / str(read_kernel_metadata(document, source=str(manifest)).archive)
    if not archive.is_file():
        raise KernelNotFoundError(
            f'{manifest} declares a zip build ("build-layout": "zip"), but {variant_dir} '
            f"holds no {archive.name}, its archive (named after its id)",
            hint='build the kernel again, or fix "id" in its metadata.json',
        )
    return archive


def build_targets_in(base: Path) -> TargetOf:
    """The devices each variant directory under ``base`` declares in its metadata.json."""

    def target(variant: str) -> BuildTarget | None:
        document = metadata_in(base / variant)
        return read_target(document) if document is not None else None

    return target


def metadata_in(variant_dir: Path) -> dict[str, Any] | None:
    """The object in ``variant_dir``'s ``metadata.json``; ``None`` without one that parses
    (nested too deeply for Python's parser included)."""
    try:
        document = json.loads((variant_dir / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def local_override(
    candidates: Sequence[RepoInfo], backend: str | None, *, check_arch: bool = True
) -> KernelDir | None:
    """The local copy of the first candidate ``LOCAL_KERNELS`` maps, or ``None``.

    ``candidates`` are the spellings a module name may stand for, as the CDN lookup
    tries them. The mapping holds for every version of a repo.

    Raises:
        ConfigError: ``LOCAL_KERNELS`` is malformed.
        LocalKernelNotFoundError: the mapped directory does not exist (a
            ``FileNotFoundError``, as in Hugging Face kernels).
        KernelNotFoundError: it holds no kernel package that fits this system.
    """
    overrides = local_kernels()
    if not overrides:
        return None
    for info in candidates:
        path = overrides.get(info.repo_id)
        if path is not None:
            found = _find_override(info.repo_id, path.resolve(), backend, check_arch)
            return found._replace(info=info)
    return None


def _find_override(repo_id: str, path: Path, backend: str | None, check_arch: bool) -> KernelDir:
    remedy = (
        f"fix the path in {LOCAL_KERNELS_VAR}, or drop the entry to load {repo_id} from the CDN"
    )
    if not path.exists():
        raise LocalKernelNotFoundError(
            f"Cannot find a build variant for this system in {path}, which does not exist "
            f"({LOCAL_KERNELS_VAR} maps {repo_id} to it)",
            hint=remedy,
        )
    try:
        return find_local_package(path, backend, check_arch=check_arch)
    except (KernelNotFoundError, NoCompatibleVariantError) as exc:
        raise type(exc)(
            f"{LOCAL_KERNELS_VAR} maps {repo_id} to {path}, but {exc.message}",
            hint=f"{exc.hint}; or {remedy}",
        ) from None


def unknown_local_module(fullname: str) -> KernelNotFoundError:
    """The error for importing a :func:`get_local_kernel` module name this process never
    registered: an object of a local kernel unpickled in another process (a worker, a
    later run). The name holds a digest of the path, not the path, so it cannot be loaded.
    """
    return KernelNotFoundError(
        f"No module named {fullname!r}: it is a kernel that get_local_kernel(path) loaded "
        "in another process, and its name does not say from which directory",
        hint="call get_local_kernel(path) with the same path in this process before "
        "unpickling (in a pool's initializer, or at the top level of the main module: a "
        "DataLoader's worker_init_fn runs after its dataset is unpickled); or give the "
        "build a repo id with "
        f"{LOCAL_KERNELS_VAR}=org/pkg=/path/to/kernel and load it with get_kernel('org/pkg', "
        "version=1), a name every process with that setting can import",
        name=fullname,
    )


def local_kernels() -> dict[str, Path]:
    """The ``LOCAL_KERNELS`` overrides: repo id -> local kernel directory.

    Read on every call, like the other settings here; unset or empty means none.

    Raises:
        ConfigError: the variable is malformed (see :func:`parse_local_kernels`).
    """
    return parse_local_kernels(os.environ.get(LOCAL_KERNELS_VAR, ""))


def parse_local_kernels(value: str) -> dict[str, Path]:
    """Parse ``"org/pkg=/path/to/kernel:org2/pkg2=/other/path"``.

    Entries are separated by ``:`` and split at their first ``=``; blank entries are
    skipped, and a repo id given twice keeps its last path. Paths are not checked here:
    a missing directory is an error when that repo is loaded.

    Raises:
        ConfigError: naming ``LOCAL_KERNELS``, for an entry without ``=``, with an
            invalid repo id or with an empty path.
    """
    overrides: dict[str, Path] = {}
    for entry in value.split(":"):
        if not entry.strip():
            continue
        repo_id, sep, path = (part.strip() for part in entry.partition("="))
        if not sep or not path:
            raise ConfigError(
                f"{LOCAL_KERNELS_VAR} entry {entry!r} is not 'org/pkg=/path/to/kernel' "
                "(separate several entries with ':')",
                hint=f"fix {LOCAL_KERNELS_VAR}",
            )
        try:
            parse_repo_id(repo_id)
        except ValueError as exc:
            raise ConfigError(
                f"{LOCAL_KERNELS_VAR} entry {entry!r}: {exc}", hint=f"fix {LOCAL_KERNELS_VAR}"
            ) from None
        overrides[repo_id] = Path(path).expanduser()
    return overrides
