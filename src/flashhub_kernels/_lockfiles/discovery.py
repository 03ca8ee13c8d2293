"""Finding the lock file to use: the one given, the one a package ships, or ``./flashhub.lock``."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import os
import sys
from pathlib import Path, PurePath

from ..errors import LockfileError, LockfileNotFoundError
from .format import (
    LOCKFILE_NAME,
    Lockfile,
    NewerFormatError,
    missing_lock_hint,
    parse_lockfile,
    read_lockfile,
)

StrPath = str | os.PathLike[str]

# Where no caller outside the library and the standard library is on the stack.
_UNKNOWN_CALLER = (
    "; the calling package is unknown: only the standard library called flashhub-kernels "
    "(a function of it handed to a thread or a pool to run)"
)


def find_lockfile(lockfile: StrPath | None = None, *, caller: str | None = "__main__") -> Lockfile:
    """The lock to use: ``lockfile``; else the one shipped with the package of the module
    ``caller``; else ``./flashhub.lock``.

    ``caller`` is the calling module's name, ``"__main__"`` for a script, ``None`` where
    it is not known (see :func:`~flashhub_kernels._utils.callers.caller_module`).
    """
    if lockfile is not None:
        return read_lockfile(Path(lockfile))
    package = None if caller in (None, "__main__") else caller
    if package is not None:
        shipped = packaged_lockfile(package)
        if shipped is not None:
            return shipped
    local = Path.cwd() / LOCKFILE_NAME
    if local.is_file():
        return read_lockfile(local)
    searched = f"package {package!r} and " if package else ""
    unknown = _UNKNOWN_CALLER if caller is None else ""
    hint = (
        "run `flashhub lock` in the project directory and ship flashhub.lock in your "
        "package, run from the project directory, or pass lockfile="
        + (", or hand the thread or pool a function of your package" if unknown else "")
    )
    raise LockfileNotFoundError(
        f"no {LOCKFILE_NAME} found (searched {searched}{Path.cwd()}){unknown}",
        hint=missing_lock_hint(Path.cwd(), hint),
    )


def packaged_lockfile(module: str) -> Lockfile | None:
    """``flashhub.lock`` shipped with the package that holds ``module``, if any.

    Each package ``module`` lies in is looked at, innermost first (``corp.audio.models``,
    ``corp.audio``, ``corp``), so that the distributions sharing a namespace package each
    find their own: for a lock shipped as package data beside its ``__init__.py``, then
    in the metadata of the distributions that provide it.

    Raises:
        LockfileError: a shipped lock cannot be read, or several distributions that
            provide the same package ship one.
    """
    parts = module.split(".")
    top = importlib.metadata.packages_distributions().get(parts[0], [])
    for length in range(len(parts), 0, -1):
        package = ".".join(parts[:length])
        shipped = _package_data_lockfile(package)
        if shipped is not None:
            return shipped
        providers = top if length == 1 else [d for d in top if _provides(d, parts[:length])]
        shipped = _distribution_lockfile(package, providers)
        if shipped is not None:
            return shipped
    return None


def _package_data_lockfile(package: str) -> Lockfile | None:
    """The lock beside the ``__init__.py`` of ``package``, if it is a package and has one."""
    if not hasattr(sys.modules.get(package), "__path__"):
        return None  # a plain module: the directory it lies in is not its own
    try:
        resource = importlib.resources.files(package) / LOCKFILE_NAME
        if resource.is_file():
            return parse_lockfile(resource.read_bytes(), source=f"{package}/{LOCKFILE_NAME}")
    except (ImportError, TypeError, ValueError):  # not importable, or a namespace package
        pass
    return None


def _provides(dist_name: str, parts: list[str]) -> bool:
    """Whether the distribution ``dist_name`` installs module or package ``parts``.

    A distribution that lists no files (no ``RECORD``) is taken to provide it.
    """
    files = importlib.metadata.distribution(dist_name).files
    if files is None:
        return True
    return any(_module_parts(file)[: len(parts)] == parts for file in files)


def _module_parts(file: PurePath) -> list[str]:
    """The dotted-name parts of an installed file: ``corp/audio/models.py`` -> corp, audio,
    models."""
    return [*file.parts[:-1], file.name.partition(".")[0]]


def _distribution_lockfile(package: str, dist_names: list[str]) -> Lockfile | None:
    """The lock in the metadata of the one distribution of ``dist_names`` that ships one."""
    shipped = {name: text for name in dist_names if (text := _metadata_lock(name)) is not None}
    if len(shipped) > 1:
        names = ", ".join(sorted(shipped))
        raise LockfileError(
            f"the distributions {names} all provide {package!r} and each ships a "
            f"{LOCKFILE_NAME}: which one pins the kernels of {package!r} is not known",
            hint="pass lockfile=, or ship the lock as package data in the distribution's "
            "own package (beside its __init__.py)",
        )
    for dist_name, text in shipped.items():
        source = f"{LOCKFILE_NAME} in the metadata of {dist_name}"
        try:
            return parse_lockfile(text.encode("utf-8"), source=source)
        except NewerFormatError:
            raise  # upgrading flashhub-kernels reads it
        except LockfileError as exc:  # its user has no project to lock again
            raise LockfileError(exc.message, hint=_reinstall_hint(dist_name)) from None
    return None


def _reinstall_hint(dist_name: str) -> str:
    return (
        f"reinstall {dist_name} (`pip install --force-reinstall {dist_name}`); "
        "if that does not help, report it to the package's maintainers"
    )


def _metadata_lock(dist_name: str) -> str | None:
    """The text of the lock in the metadata of ``dist_name``, if it ships one."""
    try:
        return importlib.metadata.distribution(dist_name).read_text(LOCKFILE_NAME)
    except UnicodeDecodeError as exc:  # read_text decodes as UTF-8
        raise LockfileError(
            f"{LOCKFILE_NAME} in the metadata of {dist_name} is not valid JSON: {exc}",
            hint=_reinstall_hint(dist_name),
        ) from None
