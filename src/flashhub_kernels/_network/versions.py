"""A repo's ``versions.json``: the versions it publishes, and the newest of them.

:func:`with_version` takes the newest for a load that names none, :func:`listed_versions`
gives them all; :class:`NewerVersionNotice` tells a load that downloads when a version
newer than its own is published. Every read of it records its highest version
(:mod:`.._cache.versions_seen`), so that the newest version never goes backwards on
this machine.
"""

from __future__ import annotations

import functools
import threading
import urllib.parse
from collections.abc import Callable
from concurrent import futures

from .._cache.layout import Cache
from .._cache.versions_seen import check_newest
from .._config import Config
from .._models.names import RepoInfo
from .._utils.callers import warn_at_caller
from .._utils.logs import logger
from .._utils.threads import soon
from .._utils.urls import redact_url
from ..errors import KernelNotFoundError, NewerVersionWarning
from .documents import get_versions
from .mirrors import NotPublished
from .transport import Fetcher

# How long a load whose files are in waits for the answer to versions.json, asked for
# before the files. On loopback it had come before the files in most cold loads, and
# within 5 ms of them in the others; a CDN that stalls on it alone costs a load this much.
NOTICE_GRACE_SECONDS = 1.0
# Repos whose versions.json this process has read for the newer-version notice.
_version_checked: set[str] = set()
_version_checked_lock = threading.Lock()


def published_versions(fetcher: Fetcher, repo_id: str) -> list[int] | None:
    """The repo's ``versions.json``, or ``None`` when it has none."""
    try:
        return get_versions(fetcher, repo_id)
    except NotPublished:
        return None


def with_version(fetcher: Fetcher, repo_id: str, version: int | None) -> RepoInfo:
    """``RepoInfo`` for ``version``, or for the newest one in ``versions.json``.

    Raises:
        KernelNotFoundError, RollbackError: as :func:`listed_versions`.
    """
    if version is not None:
        return RepoInfo(repo_id, version)
    return RepoInfo(repo_id, listed_versions(fetcher, repo_id)[-1])


def newest_published(config: Config, repo_id: str) -> int:
    """The newest version the repo's ``versions.json`` lists, on the CDN of ``config``.

    Raises:
        KernelNotFoundError, RollbackError: as :func:`listed_versions`.
    """
    from .transport import remote

    with remote(config) as fetcher:
        return listed_versions(fetcher, repo_id)[-1]


def listed_versions(fetcher: Fetcher, repo_id: str) -> list[int]:
    """The versions ``versions.json`` lists, ascending; never empty.

    Raises:
        KernelNotFoundError: the repo has no ``versions.json``, or it lists no version.
        RollbackError: that ``versions.json`` ends below a version this machine has seen
            listed (see :mod:`.._cache.versions_seen`).
    """
    RepoInfo(repo_id, 1)  # validate the repo id before any request
    seen = functools.partial(check_newest, Cache.from_config(fetcher.config), repo_id)
    versions, why = versions_or_why(fetcher, repo_id, seen)
    if versions:
        return versions
    check = "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX"
    doubled = doubled_prefix_hint(fetcher.config)
    raise KernelNotFoundError(
        f"{repo_id} {why}, so its newest version is unknown",
        hint=doubled or f"{check}; or pass version= if it is published without versions.json",
        cli_hint=doubled or f"{check}; or pass --version N if it is published without one",
    )


def versions_or_why(
    fetcher: Fetcher, repo_id: str, check: Callable[..., None]
) -> tuple[list[int] | None, str]:
    """The versions ``versions.json`` lists, ascending, and ``""``; else why there are
    none (for a message: ``f"{repo_id} {why}"``), with ``None`` where the repo has no
    ``versions.json`` and ``[]`` where it lists no version.

    ``check`` is :func:`~.._cache.versions_seen.check_newest` with its cache, repo and
    options bound: a mirror whose list it refuses gives way to the next, and the list
    taken is checked again and recorded as seen.
    """
    try:
        versions = get_versions(fetcher, repo_id, check=functools.partial(check, remember=False))
    except NotPublished as exc:  # the URL shows a wrong CDN URL or prefix at a glance
        return None, f"has no versions.json on the CDN ({redact_url(str(exc))} does not exist)"
    if not versions:
        return [], "lists no versions in its versions.json"
    check(versions)
    return versions, ""


def doubled_prefix_hint(config: Config) -> str | None:
    """The fix when a CDN URL already ends with the prefix, which every path appends again.

    ``FLASHHUB_CDN_URL=https://host/kernels`` with the default prefix ``kernels`` asks for
    ``https://host/kernels/kernels/...``: nothing is found, and the URL alone shows why.
    """
    if not config.prefix:
        return None
    for url in config.cdn_urls:
        if urllib.parse.urlsplit(url).path.rstrip("/").endswith(f"/{config.prefix}"):
            return (
                f"FLASHHUB_CDN_URL already ends with /{config.prefix} and FLASHHUB_CDN_PREFIX "
                "adds it again: drop one"
            )
    return None


class NewerVersionNotice:
    """Warns (:class:`NewerVersionWarning`) when ``versions.json`` lists a version newer
    than ``info``'s, for a load that downloads: :meth:`start` reads it on a thread of its
    own while the files download, :meth:`finish` waits for it and warns, on the thread
    that loads (the warning points at the caller's line).

    At most one request per repo and process, and so at most one warning; none with
    ``FLASHHUB_NO_VERSION_CHECK``. A missing or malformed ``versions.json``, a CDN that
    fails to serve it, or one that has not answered ``NOTICE_GRACE_SECONDS`` after the
    files are in, says nothing: the load itself has succeeded. A load does not wait for
    a read it gave up on, nor does a load that fails: the read ends on its daemon thread,
    which holds up no exit, on a connection the run's end took out of its pool; an
    answer that comes is still recorded as seen.
    """

    def __init__(self, fetcher: Fetcher, info: RepoInfo) -> None:
        self._fetcher, self._info = fetcher, info
        self._newest: int | None = None
        self._reading: futures.Future[None] | None = None

    def start(self) -> None:
        if not self._fetcher.config.version_check:
            return
        with _version_checked_lock:
            if self._info.repo_id in _version_checked:
                return
            _version_checked.add(self._info.repo_id)
        self._reading = soon(self._read_versions)  # not the run's: its end does not wait

    def _read_versions(self) -> None:
        repo_id = self._info.repo_id
        try:
            versions = published_versions(self._fetcher, repo_id)
            if versions:
                check_newest(Cache.from_config(self._fetcher.config), repo_id, versions)
                self._newest = versions[-1]
        except Exception:  # best effort: a CDN that fails to serve it is no news for anyone
            return

    def finish(self) -> None:
        if self._reading is None:
            return
        info, reading, self._reading = self._info, self._reading, None
        if not futures.wait([reading], timeout=NOTICE_GRACE_SECONDS).done:
            logger.info(
                "%s: no answer to versions.json %g s after the files; not checked for a "
                "newer version",
                info.repo_id,
                NOTICE_GRACE_SECONDS,
            )
            return
        if self._newest is None or self._newest <= info.version:
            return
        newer = RepoInfo(info.repo_id, self._newest)
        news = (
            f"You are using version {info.version} of {info.repo_id!r}, but version "
            f"{newer.version} is available. To use it, "
        )
        off = ", after checking what changed. FLASHHUB_NO_VERSION_CHECK=1 turns this check off."
        warn_at_caller(
            NewerVersionWarning(
                f"{news}load get_kernel({info.repo_id!r}, version={newer.version}) or import "
                f"{newer.module_name()}{off}",
                cli_message=f"{news}pass --version {newer.version}{off}",
            )
        )
