"""Finding the lock file to use: the one given, the one a package ships, or ``./flashhub.lock``."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import os
from pathlib import Path

from ..errors import LockfileError, LockfileNotFoundError
from .format import LOCKFILE_NAME, Lockfile, parse_lockfile, read_lockfile

StrPath = str | os.PathLike[str]


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
    raise LockfileNotFoundError(
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
        source = f"{LOCKFILE_NAME} in the metadata of {dist_name}"
        try:
            text = importlib.metadata.distribution(dist_name).read_text(LOCKFILE_NAME)
        except UnicodeDecodeError as exc:  # read_text decodes as UTF-8
            raise LockfileError(
                f"{source} is not valid JSON: {exc}",
                hint=f"reinstall {dist_name} (`pip install --force-reinstall {dist_name}`); "
                "if that does not help, report it to the package's maintainers",
            ) from None
        if text is not None:
            return parse_lockfile(text.encode("utf-8"), source=source)
    return None
