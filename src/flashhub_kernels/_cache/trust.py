"""Whether the cache's directories can be trusted: nobody else can have planted code there.

A cached kernel is native code that runs with the importing user's rights, trusted on
the strength of a receipt, so before the client reads anything in the cache it checks
each directory on the way (and the root's ancestors) as ssh checks ``~/.ssh``
(:func:`distrust`), and each symlink followed to the root as the kernel's
``fs.protected_symlinks`` does (:func:`root_chain`); docs/hosting.md gives the rules, and
what ``FLASHHUB_CACHE_SHARED=1`` relaxes for a cache a group shares.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from ..errors import CacheError

_checked_roots: set[tuple[Path, bool]] = set()
_MOST_LINKS = 40  # symlinks followed on the way to a root, as Linux follows at most


def distrust(st: os.stat_result, *, shared: bool, inside: bool) -> str | None:
    """Why a directory with this ``lstat`` result cannot be trusted, or ``None``.

    ``inside``: the directory is inside the cache, where a symlink is not accepted.
    """
    if stat.S_ISLNK(st.st_mode):
        return "is a symlink" if inside else None
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    return _distrust_writers(st, shared=shared)


def distrust_record(st: os.stat_result, *, shared: bool) -> str | None:
    """Why a record file of the cache's root (``versions-seen.json``, the GPUs' record)
    with this ``lstat`` result cannot be trusted, or ``None``: in a root others may write
    (sticky, as ``/tmp``), a file another user made there is theirs to choose. (What is
    no regular file is no record: the readers refuse it, and a writer replaces it.)"""
    return _distrust_writers(st, shared=shared) if stat.S_ISREG(st.st_mode) else None


def _distrust_writers(st: os.stat_result, *, shared: bool) -> str | None:
    """Why ``st``'s owner and mode let someone this user does not trust write it, or ``None``."""
    if st.st_uid not in (os.getuid(), 0) and not (shared and st.st_gid in _my_groups()):
        return "is owned by another user"
    sticky = bool(st.st_mode & stat.S_ISVTX)
    if st.st_mode & stat.S_IWOTH and not sticky:
        return "is writable by every user"
    if st.st_mode & stat.S_IWGRP and not sticky and not shared:
        return "is writable by its group"
    return None


def check_dir(path: Path, *, shared: bool) -> None:
    """Raise :class:`CacheError` unless ``path`` is absent or a trusted directory."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise unreadable(path, exc) from exc
    reason = distrust(st, shared=shared, inside=True)
    if reason is not None:
        raise untrusted(path, st, reason, shared=shared)


def check_root(root: Path, *, shared: bool) -> None:
    """Check the cache root, every directory above it and every symlink on the way
    (:func:`root_chain`); once per process and root (once it exists: a root created
    later is checked then)."""
    if (root, shared) not in _checked_roots and root_chain(root, shared=shared)[0].is_dir():
        _checked_roots.add((root, shared))


def check_chain(root: Path, path: Path, *, shared: bool) -> None:
    """Check ``root`` (:func:`check_root`) and every directory from it down to ``path``."""
    check_root(root, shared=shared)
    for directory in dirs_below(root, path):
        check_dir(directory, shared=shared)


def root_chain(root: Path, *, shared: bool) -> list[Path]:
    """The way to ``root``, resolved as ``realpath`` resolves it, each part judged as it
    is met (one ``lstat``), raising :class:`CacheError` for the first that fails: the
    root (all of it that is missing, if any), the directories above it, and the symlinks
    followed.

    Each directory passed must be trusted (:func:`distrust`), and so must each symlink,
    as the kernel's ``fs.protected_symlinks`` judges one (off in many containers): in a
    directory where others this user does not trust may create entries (``/tmp``), only
    a link of this user's, root's or the directory owner's is followed, since whoever
    made it chooses, and may change, where the cache is. A link to nothing is refused.
    """
    # What is left to walk, the next last, each with the link whose target named it.
    todo: list[tuple[str, Path | None]] = [(n, None) for n in Path(os.path.abspath(root)).parts]
    todo.reverse()
    way: list[tuple[Path, os.stat_result]] = []  # the directories from / to where it is
    links: dict[Path, str] = {}  # each symlink followed, and its target
    followed = 0
    while todo:
        name, link = todo.pop()
        if name == "..":
            if len(way) > 1:  # / is its own parent
                way.pop()
            continue
        if name.startswith("/"):  # an absolute path's first part: from / again
            way.clear()
        path = way[-1][0] / name if way else Path(name)
        try:
            st = os.lstat(path)
            target = os.readlink(path) if stat.S_ISLNK(st.st_mode) else None
        except FileNotFoundError:
            if link is not None:
                raise _broken_link(link, links[link], "which does not exist") from None
            missing = path.joinpath(*(part for part, _ in reversed(todo)))
            return [missing, *_dirs(way), *links]
        except OSError as exc:
            raise unreadable(path, exc) from exc
        if target is not None:
            _check_link(path, st, way[-1][1], shared=shared)
            followed, links[path] = followed + 1, target
            if followed > _MOST_LINKS:
                raise _broken_link(path, target, "one of a loop of symlinks")
            todo += [(part, path) for part in reversed(Path(target).parts)]
            continue
        if not stat.S_ISDIR(st.st_mode) and not todo:
            raise _not_a_directory(path)
        reason = distrust(st, shared=shared, inside=False)
        if reason is not None and stat.S_ISDIR(st.st_mode):
            raise untrusted(path, st, reason, shared=shared)  # a file: ENOTDIR next
        way.append((path, st))
    return [*_dirs(way), *links]


def _dirs(way: list[tuple[Path, os.stat_result]]) -> list[Path]:
    """The paths of ``way``, the deepest first."""
    return [path for path, _ in reversed(way)]


def _check_link(path: Path, st: os.stat_result, parent: os.stat_result, *, shared: bool) -> None:
    """Refuse the symlink ``path`` (``st``, its ``lstat``) in the directory ``parent``
    if someone this user does not trust made it there (:func:`root_chain`)."""
    mode = parent.st_mode
    open_to_others = mode & stat.S_IWOTH or (
        mode & stat.S_IWGRP and not (shared and parent.st_gid in _my_groups())
    )
    if open_to_others and st.st_uid not in (os.getuid(), 0, parent.st_uid):
        raise untrusted(
            path,
            st,
            f"is another user's symlink in {path.parent}, a directory others may write, "
            "so it leads where that user chooses",
            hint="the cache directory is (or lies under) a symlink another user made in a "
            "shared directory: set FLASHHUB_CACHE_DIR to a path you own, under your home",
        )


def dirs_below(root: Path, path: Path) -> list[Path]:
    """The directories :func:`check_chain` judges below ``root``, down to ``path``."""
    parts = path.relative_to(root).parts
    return [root.joinpath(*parts[:n]) for n in range(1, len(parts) + 1)]


def untrusted(
    path: Path, st: os.stat_result, reason: str, hint: str = "", *, shared: bool = False
) -> CacheError:
    """The refusal: names the path, its owner and mode, and what to do (``shared``: the
    cache is shared by a group on purpose, ``FLASHHUB_CACHE_SHARED=1``)."""
    from ..errors import CacheError

    return CacheError(
        f"refusing to trust the cache: {path} {reason} "
        f"(owner {_user_name(st.st_uid)}, mode {stat.S_IMODE(st.st_mode):04o}); "
        "whoever can write there could plant code that this process would run",
        hint=hint or _untrusted_hint(stat.S_ISLNK(st.st_mode), shared=shared),
    )


def _untrusted_hint(link: bool, *, shared: bool) -> str:
    if link:  # inside the cache, where no directory is a symlink: someone planted it
        return (
            "remove the symlink (whoever can write the cache made it, to lead elsewhere), "
            "or use a cache directory of your own (FLASHHUB_CACHE_DIR)"
        )
    own = "use a cache directory of your own (FLASHHUB_CACHE_DIR), or make this one "
    if shared:  # FLASHHUB_CACHE_SHARED is set already: the group may write, others not
        return own + "yours or a group's you are in, and writable by no one else (chmod o-w)"
    return own + (
        "yours and private (chown, chmod go-w); for a cache a group shares on purpose, "
        "set FLASHHUB_CACHE_SHARED=1"
    )


def _not_a_directory(path: Path) -> CacheError:
    """The refusal of a cache directory that is a file (or a device, a pipe)."""
    from ..errors import CacheError

    return CacheError(
        f"cannot use the cache: {path} is not a directory",
        hint="point FLASHHUB_CACHE_DIR at a directory, or at a path where one can be made",
    )


def _broken_link(link: Path, target: str, problem: str) -> CacheError:
    """The refusal of a cache directory reached through a symlink to nothing, or through
    a loop of them (creating the cache there would fail on a bare errno)."""
    from ..errors import CacheError

    return CacheError(
        f"cannot use the cache: {link} is a symlink to {target}, {problem}",
        hint="if the link is yours, make it lead to a directory; else set "
        "FLASHHUB_CACHE_DIR to a path you own",
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
