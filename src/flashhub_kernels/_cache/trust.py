"""Whether the cache's directories can be trusted: nobody else can have planted code there.

A cached kernel is native code that runs with the importing user's rights, trusted on
the strength of a receipt, so before the client reads anything in the cache it checks
each directory on the way (and the root's ancestors) as ssh checks ``~/.ssh``
(:func:`distrust`; docs/hosting.md gives the rules, and what ``FLASHHUB_CACHE_SHARED=1``
relaxes for a cache a group shares).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from ..errors import CacheError

_checked_roots: set[tuple[Path, bool]] = set()


def distrust(st: os.stat_result, *, shared: bool, inside: bool) -> str | None:
    """Why a directory with this ``lstat`` result cannot be trusted, or ``None``.

    ``inside``: the directory is inside the cache, where a symlink is not accepted.
    """
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink" if inside else None
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid not in (os.getuid(), 0) and not (shared and st.st_gid in _my_groups()):
        return "is owned by another user"
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if st.st_mode & stat.S_IWOTH and not sticky:
        return "is writable by every user"
    if st.st_mode & stat.S_IWGRP and not sticky and not shared:
        return "is writable by its group"
    return None


def check_dir(path: Path, *, shared: bool, inside: bool = True) -> None:
    """Raise :class:`CacheError` unless ``path`` is absent or a trusted directory."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise unreadable(path, exc) from exc
    reason = distrust(st, shared=shared, inside=inside)
    if reason is not None:
        raise untrusted(path, st, reason)


def check_root(root: Path, *, shared: bool) -> None:
    """Check the cache root and every directory above it; once per process and root
    (once it exists: a root created later is checked then)."""
    if (root, shared) in _checked_roots:
        return
    chain = root_chain(root)
    for directory in chain:
        check_dir(directory, shared=shared, inside=False)
    if chain[0].is_dir():
        _checked_roots.add((root, shared))


def check_chain(root: Path, path: Path, *, shared: bool) -> None:
    """Check ``root`` (:func:`check_root`) and every directory from it down to ``path``."""
    check_root(root, shared=shared)
    for directory in dirs_below(root, path):
        check_dir(directory, shared=shared)


def root_chain(root: Path) -> list[Path]:
    """The directories :func:`check_root` judges: the root, resolved, and those above it."""
    real = Path(os.path.realpath(root))
    return [real, *real.parents]


def dirs_below(root: Path, path: Path) -> list[Path]:
    """The directories :func:`check_chain` judges below ``root``, down to ``path``."""
    parts = path.relative_to(root).parts
    return [root.joinpath(*parts[:n]) for n in range(1, len(parts) + 1)]


def untrusted(path: Path, st: os.stat_result, reason: str) -> CacheError:
    """The refusal: names the path, its owner and mode, and what to do."""
    from ..errors import CacheError

    return CacheError(
        f"refusing to trust the cache: {path} {reason} "
        f"(owner {_user_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}); "
        "whoever can write there could plant code that this process would run",
        hint="use a cache directory of your own (FLASHHUB_CACHE_DIR), or make this one "
        "yours and private (chown, chmod go-w); for a cache a group shares on purpose, "
        "set FLASHHUB_CACHE_SHARED=1",
    )


def unreadable(path: Path, exc: OSError) -> CacheError:
    """The refusal of a directory this user cannot even look at (most often a cache
    another user made and left private: an image built as root, run as another user),
    or of a path that cannot be a directory (a file in the way)."""
    from ..errors import CacheError  # only on a refusal: a load does not import errors

    if not isinstance(exc, PermissionError):
        return CacheError.cannot_write(exc, path)
    return CacheError(
        f"cannot read {path}: {exc.strerror or exc}",
        hint="make the cache readable by this user (`chmod -R a+rX` on it, which keeps it "
        "trusted), or point FLASHHUB_CACHE_DIR at a cache of your own",
    )


def _my_groups() -> set[int]:
    return {os.getgid(), *os.getgroups()}


def _user_name(uid: int) -> str:
    try:
        import pwd  # Unix only, and only to word a refusal

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
