"""The highest version of each kernel this machine has seen published, so that "the
newest version" never goes backwards here.

Published versions are never withdrawn, so a kernel's ``versions.json`` only grows. An
edge that replays an older copy (validly signed, since it once was) would otherwise
make ``install_kernel(repo_id)``, ``flashhub get`` or ``flashhub lock`` take an older
version for the newest, without a word. Each time the cold path reads a
``versions.json``, its highest version is recorded in ``<cache root>/versions-seen.json``
(``{"<org>/<pkg>": N, ...}``); a ``versions.json`` whose highest version is below the
record is refused with :class:`~flashhub_kernels.errors.RollbackError`.

The record is a cache file like the others: never read nor written when the cache's
directories fail the trust checks (:func:`~.trust.check_dir`), and written atomically, under
a file lock so that two processes recording two kernels both keep theirs. A cache that
cannot be written (read-only, baked into an image) keeps the record it has. Warm loads
never read it: a load that names its version does not need it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from .._models.manifest import dump_json
from .._utils.filesystem import write_atomic
from .._utils.logs import logger
from ..errors import CacheError, RollbackError
from .directories import private_dir
from .layout import Cache, read_json
from .trust import distrust_record

VERSIONS_SEEN_NAME = "versions-seen.json"


# What to do instead, in Python's terms and the command line's.
_LOAD_REMEDY = ("name the version to load (version=)", "pass --version N")


def check_newest(
    cache: Cache,
    repo_id: str,
    versions: Sequence[int],
    *,
    allow_older: bool = False,
    remedy: tuple[str, str] = _LOAD_REMEDY,
    remember: bool = True,
) -> None:
    """Record the newest of ``versions`` (a ``versions.json``, oldest first) for
    ``repo_id``, or refuse it when this machine has seen a newer one listed. Without
    ``remember``, only refuse: for a mirror's answer not verified yet.

    Raises:
        RollbackError: ``versions`` ends below the recorded version, and not
            ``allow_older`` (the record is kept as it is then). Its hint starts with
            ``remedy`` (``(hint, cli_hint)``).
    """
    if not versions:
        return
    record = _read(cache)
    if record is None:
        return  # the cache is not trusted: no record to go by, and none is written
    newest, seen = versions[-1], record.get(repo_id, 0)
    if newest < seen and not allow_older:
        rest = (
            f"check the mirrors in FLASHHUB_CDN_URL; if v{seen} was withdrawn on purpose, "
            f"delete {cache.root / VERSIONS_SEEN_NAME}"
        )
        raise RollbackError(
            f"{repo_id}: the CDN's versions.json lists v{newest} as the newest version, but "
            f"this machine has seen v{seen} listed before; an older versions.json is being "
            "served (a mirror that is behind, or an old copy replayed)",
            hint=f"{remedy[0]}; {rest}",
            cli_hint=f"{remedy[1]}; {rest}",
        )
    if newest > seen and remember:
        _record(cache, repo_id, newest)


def _read(cache: Cache) -> dict[str, int] | None:
    """The record (``{}`` when there is none, or it is unreadable); ``None`` when the
    cache root fails the trust checks, or the record does (another user made it)."""
    path = cache.root / VERSIONS_SEEN_NAME
    try:
        cache.check_trusted(cache.root)
    except CacheError as exc:
        logger.info("not using %s: %s", VERSIONS_SEEN_NAME, exc.message)
        return None
    try:
        distrusted = distrust_record(os.lstat(path), shared=cache.shared)
    except OSError:  # none yet
        distrusted = None
    if distrusted is not None:
        logger.info("not using %s: it %s", path, distrusted)
        return None
    data = read_json(path)
    if not isinstance(data, dict):
        return {}
    return {
        repo: version
        for repo, version in data.items()
        if isinstance(repo, str) and type(version) is int and version > 0
    }


def _record(cache: Cache, repo_id: str, version: int) -> None:
    """Raise the recorded version of ``repo_id`` to ``version``; a cache that cannot be
    written keeps its record (the load itself does not need it)."""
    from .mutex import hold, mutex_mode

    try:
        locks = private_dir(cache, cache.locks_dir)
        mutex = locks / f"{VERSIONS_SEEN_NAME}.lock"
        with hold(
            mutex, what=VERSIONS_SEEN_NAME, timeout=cache.lock_timeout, mode=mutex_mode(cache)
        ):
            record = _read(cache) or {}  # again, under the lock: another process may have added
            if record.get(repo_id, 0) >= version:
                return
            record[repo_id] = version
            write_atomic(cache.root / VERSIONS_SEEN_NAME, dump_json(dict(sorted(record.items()))))
    except (CacheError, OSError) as exc:
        logger.info("cannot record v%d of %s in %s: %s", version, repo_id, VERSIONS_SEEN_NAME, exc)
