"""Whether a cache directory can be trusted: nobody else can have planted code in it.

A cached kernel is native code that runs with the importing user's rights, so the cache
is as sensitive as ``site-packages``. Files there are trusted on the strength of a
receipt written at verification time; that only holds if no one else could have written
the receipt, or anything beside it. So before the client reads anything in the cache it
checks each directory on the way, the way ssh checks ``~/.ssh``:

- the owner is this user or root;
- the directory is not writable by its group or by others, unless the sticky bit is set
  (``/tmp``: others may create, not replace);
- inside the cache, a directory is not a symlink (an entry pointing elsewhere).

The cache root's ancestors are checked too (after resolving symlinks): whoever can
write one of them can swap the whole cache for theirs.

``FLASHHUB_CACHE_SHARED=1`` relaxes two rules for a cache a group shares on purpose: a
directory may be writable by its group, and owned by another user if its group is one
of this user's. Every member of that group can then plant code the others will run.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

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
        raise CacheError.cannot_write(exc, path) from exc
    reason = distrust(st, shared=shared, inside=inside)
    if reason is not None:
        raise untrusted(path, st, reason)


def check_root(root: Path, *, shared: bool) -> None:
    """Check the cache root and every directory above it; once per process and root
    (once it exists: a root created later is checked then)."""
    if (root, shared) in _checked_roots:
        return
    real = Path(os.path.realpath(root))
    for directory in [real, *real.parents]:
        check_dir(directory, shared=shared, inside=False)
    if real.is_dir():
        _checked_roots.add((root, shared))


def untrusted(path: Path, st: os.stat_result, reason: str) -> CacheError:
    """The refusal: names the path, its owner and mode, and what to do."""
    return CacheError(
        f"refusing to trust the cache: {path} {reason} "
        f"(owner {_user_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}); "
        "whoever can write there could plant code that this process would run",
        hint="use a cache directory of your own (FLASHHUB_CACHE_DIR), or make this one "
        "yours and private (chown, chmod go-w); for a cache a group shares on purpose, "
        "set FLASHHUB_CACHE_SHARED=1",
    )


def _my_groups() -> set[int]:
    return {os.getgid(), *os.getgroups()}


def _user_name(uid: int) -> str:
    try:
        import pwd  # Unix only, and only to word a refusal

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"
