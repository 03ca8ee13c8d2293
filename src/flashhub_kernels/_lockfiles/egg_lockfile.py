"""``flashhub.lock`` copied into an installed project's metadata, where
:func:`~.discovery.packaged_lockfile` finds it.

setuptools runs :func:`write_egg_lockfile` (an ``egg_info.writers`` entry point) in every
build that has flashhub-kernels installed, from the directory of the project it builds, so
it leaves a project that declares no kernels alone and imports nothing heavy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from .._constants import PROJECT_FILE_BYTES, PYPROJECT_NAME
from .._utils.filesystem import read_regular
from .._utils.logs import logger
from .._utils.pyproject import load_toml, lookup
from ..errors import LockfileError
from .format import LOCKFILE_NAME, REGENERATE, parse_lockfile
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
        text = _read_lock(lock)
    except FileNotFoundError:
        logger.warning("%s does not exist: the package ships no lock (run `flashhub lock`)", lock)
        cmd.write_or_delete_file(basename, filename, None, force=True)
        return
    parse_lockfile(text.encode("utf-8"), source=str(lock))
    cmd.write_or_delete_file(basename, filename, text)


def _read_lock(lock: Path) -> str:
    """The text of ``lock``, which an installed package's metadata holds as UTF-8.

    Raises:
        FileNotFoundError: there is no lock.
        LockfileError: it cannot be read, or is not UTF-8.
    """
    try:
        return read_regular(lock, PROJECT_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        raise LockfileError(f"cannot ship {lock}: {exc}", hint=REGENERATE) from None


def _declares_kernels(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a table of kernels for ``flashhub lock``; ``False`` for a
    file that is missing or that is not TOML, which the build itself reports."""
    try:
        document = load_toml(read_regular(pyproject, PROJECT_FILE_BYTES))
    except LockfileError as exc:  # no TOML reader: whether it declares kernels is unknown
        logger.warning("%s: the package ships no lock (%s)", exc.message, exc.hint)
        return False
    except (OSError, ValueError):
        return False
    return any(lookup(document, *keys) is not None for keys in DEPENDENCY_TABLES)
