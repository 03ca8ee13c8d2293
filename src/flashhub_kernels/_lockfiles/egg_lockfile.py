"""``flashhub.lock`` copied into an installed project's metadata, where
:func:`~.discovery.packaged_lockfile` finds it.

setuptools runs :func:`write_egg_lockfile` (an ``egg_info.writers`` entry point) in every
build that has flashhub-kernels installed, from the directory of the project it builds, so
it leaves a project that declares no kernels alone and imports nothing heavy.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from .._constants import PYPROJECT_NAME
from .._utils.pyproject import load_toml, lookup
from .format import LOCKFILE_NAME, parse_lockfile
from .project import DEPENDENCY_TABLES


class EggInfo(Protocol):
    """What the writer uses of setuptools' ``egg_info`` command."""

    def write_or_delete_file(
        self, what: str, filename: str, data: str | None, force: bool = False
    ) -> None: ...


def write_egg_lockfile(cmd: EggInfo, basename: str, filename: str) -> None:
    """Copy ``./flashhub.lock`` to ``filename`` in the metadata being built, when
    ``./pyproject.toml`` declares kernels to lock; without the lock, delete the copy an
    earlier build left there (setuptools keeps a project's ``.egg-info`` between builds).

    Raises:
        LockfileError: the lock is one no load would read (regenerate it).
    """
    if not _declares_kernels(Path.cwd() / PYPROJECT_NAME):
        return
    lock = Path.cwd() / LOCKFILE_NAME
    try:
        data = lock.read_bytes()
    except FileNotFoundError:
        logging.getLogger("flashhub_kernels").warning(
            "%s does not exist: the package ships no lock (run `flashhub lock`)", lock
        )
        cmd.write_or_delete_file(basename, filename, None, force=True)
        return
    parse_lockfile(data, source=str(lock))
    cmd.write_or_delete_file(basename, filename, data.decode("utf-8"))


def _declares_kernels(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a table of kernels for ``flashhub lock``; ``False`` for a
    file that is missing or that is not TOML, which the build itself reports."""
    try:
        document = load_toml(pyproject.read_bytes())
    except (OSError, ValueError):
        return False
    return any(lookup(document, *keys) is not None for keys in DEPENDENCY_TABLES)
