"""The cache's directories: made private to this user (and trusted) where missing,
removed without following a planted symlink; and the errors of writing them.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CacheError

if TYPE_CHECKING:
    from .layout import Cache


def private_dir(cache: Cache, path: Path) -> Path:
    """``path`` under the root, created 0700 (0770 in a cache a group shares) where
    missing, every part trusted.

    Checked before (create nothing inside someone else's directory) and after (what
    exists now is what will be used).
    """
    cache.check_trusted(path)
    with cache_errors(path):
        ensure_dir(path, shared=cache.shared)
    cache.check_trusted(path)
    return path


def ensure_dir(path: Path, *, shared: bool = False) -> Path:
    """Create ``path`` and its missing parents private to this user (0700); return it.

    ``shared``: for a cache a group shares, whose members create entries, mutexes and
    staging in one another's directories: the group may write them too (0770, whatever
    the umask), and they keep the set-group-ID bit that hands the group down.
    """
    attempts = _MAKE_ATTEMPTS
    while not path.is_dir():
        try:
            _make_dirs(path, shared=shared)
        except FileNotFoundError:  # a parent removed meanwhile (cache clear removes empty ones)
            attempts -= 1
            if not attempts:
                raise
    return path


# Tries at making a directory whose parents another process may be removing.
_MAKE_ATTEMPTS = 3


def _make_dirs(path: Path, *, shared: bool) -> None:
    """Make ``path`` and its missing parents, as :func:`ensure_dir` says.

    Raises:
        FileNotFoundError: a parent was removed while its children were being made.
    """
    # Path.mkdir(parents=True) would give the parents default permissions.
    for directory in [*reversed(path.parents), path]:
        if directory.is_dir():
            continue
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            continue  # another process made it: its mode is that process's to set
        if shared:
            open_to_group(directory, 0o070)


def settle_modes(entry: Path, *, shared: bool) -> None:
    """Give every directory and file in ``entry`` its exact mode, whatever the umask they
    were made under (under ``umask 000`` a ``__pycache__`` Python made was 0777, so any
    user could swap the bytecode a warm load runs): readable by all, writable by this
    user alone; in a cache a group shares, its directories writable by the group too,
    so that ``flashhub cache clear`` run by another member can remove them."""
    directory_mode = 0o775 if shared else 0o755
    for directory, _directories, names in os.walk(entry):
        os.chmod(directory, directory_mode)
        for name in names:
            path = os.path.join(directory, name)
            if not os.path.islink(path):  # not followed: whoever planted one chose its target
                os.chmod(path, 0o644)


def open_to_group(path: Path, bits: int) -> None:
    """Add the permission ``bits`` to ``path``, keeping its other bits."""
    path.chmod(stat.S_IMODE(path.stat().st_mode) | bits)


def remove_tree(path: Path) -> None:
    """Remove the directory ``path`` and all in it. Anything else under its name (a
    symlink a member of a group sharing the cache planted there) is removed itself,
    never followed."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
    except OSError:  # gone already, or not ours to remove
        return
    shutil.rmtree(path, ignore_errors=True)  # which refuses a directory swapped for a symlink


@contextmanager
def cache_errors(where: Path | None = None) -> Iterator[None]:
    """Report an ``OSError`` of the block (creating, writing, renaming in the cache) as a
    :class:`CacheError`: the cache is at fault, not the network or the kernel.

    ``where`` is the directory or file the block writes, named when the error names no
    file (a write that found the disk full): the user must learn which disk it is.
    """
    try:
        yield
    except CacheError:
        raise
    except OSError as exc:
        raise CacheError.cannot_write(exc, None if exc.filename else where) from exc
