"""The variant a load takes, chosen by one process at a time under the index mutex.

:func:`chosen_variant` chooses by the index the cache records when it knows enough,
else by what one process fetches and records for every other: the version's index
(:func:`.variant_index.fetch_index`) and, where the device matters, the ``metadata.json``
of the candidates up to the one taken (:class:`ManifestReader`). When no variant fits,
the error names the newest other version that has one (:func:`with_fitting_version`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

from .._cache.layout import Cache, VariantIndex
from .._cache.mutex import download_mutex, index_mutex
from .._cache.staging import record_index
from .._models.names import RepoInfo
from .._models.record import Record
from .._utils.logs import logger
from .._variants.choice import choose_variant
from .._variants.compat import BuildTarget, pick_cached_variant, read_target
from .._variants.system import SystemInfo
from .._variants.verdicts import best_variant, describe_system, judge_builds, judge_variants
from ..errors import FlashhubError, NoCompatibleVariantError
from .documents import ManifestDocument, get_listed_manifest, get_variant_names
from .mirrors import NotPublished
from .transport import Fetcher
from .variant_index import Started, answer, fetch_index, start_guess
from .versions import published_versions


class Choice(Record):
    """The variant a load takes, and its manifest when choosing fetched it."""

    variant: str
    document: ManifestDocument | None


@contextmanager
def chosen_variant(
    cache: Cache, fetcher: Fetcher, info: RepoInfo, system: SystemInfo
) -> Iterator[Choice]:
    """The variant of ``info`` that ``system`` loads, chosen by one process at a time
    (under the version's index mutex); the block holds that variant's download mutex.

    A process that fetched the variant's manifest to choose it takes the download mutex
    before it lets the index mutex go: the others, which choose by what it recorded,
    wait for its download rather than fetch that manifest again. A process that fetched
    nothing of it waits for the download mutex without holding up the others.
    """
    with ExitStack() as held:
        try:
            with index_mutex(cache, info):
                choice = _choose(cache, fetcher, info, system)
                if choice.document is not None:
                    held.enter_context(download_mutex(cache, info, choice.variant))
        except NoCompatibleVariantError as exc:  # advised without holding up the others
            raise with_fitting_version(exc, fetcher, info, system) from None
        if choice.document is None:
            held.enter_context(download_mutex(cache, info, choice.variant))
        yield choice


def _choose(cache: Cache, fetcher: Fetcher, info: RepoInfo, system: SystemInfo) -> Choice:
    """The variant ``system`` loads, by the index the cache records when it knows enough
    to say (what another process fetched), else by what this process fetches: the
    index, unless the recorded one is ``variants.json`` already, and the devices the
    candidates declare, which it records for the others. Under the index mutex.
    """
    recorded = cache.read_index(info)
    cached = functools.partial(cache.read_target, info)
    picked = pick_cached_variant(recorded, system, cached) if recorded is not None else None
    if picked is not None:
        logger.info("%s: variant %s, as the cache records", info, picked)
        if recorded is not None and system.key not in recorded.picks:
            record_index(cache, info, recorded, system)  # this system's warm loads take it
        return Choice(picked, None)
    documents: dict[str, ManifestDocument] = {}
    started: Started = {}
    if recorded is not None and recorded.complete:
        index = recorded
    else:
        started = start_guess(fetcher, info, system)
        index = fetch_index(fetcher, info, system, documents=documents, started=started)
    reader = ManifestReader(cache, fetcher, info, index, documents, started)
    try:
        variant = choose_variant(index, info, system, reader.target)
    finally:
        reader.record(system)
    logger.info(
        "%s: variant %s, the best of %s for %s",
        info,
        variant,
        "variants.json" if index.complete else "the variants probed",
        describe_system(system),
    )
    return Choice(variant, reader.fetched(variant))


class ManifestReader:
    """The devices variants of ``info`` declare, for :func:`choose_variant`: what the
    index records, else the ``metadata.json`` of a cached entry, else the CDN's, each
    fetched at most once and kept (:attr:`documents`, which starts with those a probe
    fetched) for the download that follows. A manifest ``started`` asked for already
    is read from that fetch, where the index lists its variant.

    :meth:`record` adds ``index`` and what was read to the cache's index, so that a warm
    load passes over the variants that do not fit without asking again.
    """

    def __init__(
        self,
        cache: Cache,
        fetcher: Fetcher,
        info: RepoInfo,
        index: VariantIndex | None = None,
        documents: Mapping[str, ManifestDocument] | None = None,
        started: Started | None = None,
    ) -> None:
        self.cache, self.fetcher, self.info = cache, fetcher, info
        self.index = index or VariantIndex(False, frozenset())
        self.known = dict(self.index.targets)
        self.documents = dict(documents or {})
        self.started = {
            name: fetch
            for name, fetch in (started or {}).items()
            if name in self.index.present and name not in self.documents
        }
        self.read: dict[str, BuildTarget] = {}

    def target(self, variant: str) -> BuildTarget:
        target = self.known.get(variant) or self.cache.read_target(self.info, variant)
        if target is None:
            target = read_target(self.fetch(variant).manifest.document)
        self.known[variant] = self.read[variant] = target
        return target

    def fetch(self, variant: str) -> ManifestDocument:
        """The CDN's manifest of listed ``variant``, fetched once: what the fetch of it
        ``started`` before the index listed it got, else fetched now."""
        if variant not in self.documents:
            self.documents[variant] = answer(self.started.get(variant)) or get_listed_manifest(
                self.fetcher, self.info, variant
            )
        return self.documents[variant]

    def fetched(self, variant: str) -> ManifestDocument | None:
        """The manifest of ``variant`` if choosing asked for it, else ``None``."""
        return self.fetch(variant) if variant in self.started else self.documents.get(variant)

    def record(self, system: SystemInfo | None = None) -> None:
        """Add what was read to the cache's index; with ``system``, the variant it loads
        too, where the names alone decide it."""
        if self.read or self.index.present:
            targets = {**self.index.targets, **self.read}
            record_index(self.cache, self.info, self.index._replace(targets=targets), system)


# How many other versions an error looks through for one with a build for this system.
_VERSIONS_LOOKED_AT = 8


def with_fitting_version(
    error: NoCompatibleVariantError, fetcher: Fetcher, info: RepoInfo, system: SystemInfo
) -> NoCompatibleVariantError:
    """``error``, advising the newest other published version with a build for ``system``
    when there is one (among the newest few)."""
    try:
        published = published_versions(fetcher, info.repo_id) or []
        versions = [v for v in published if v != info.version]
        fitting = newest_fitting_version(fetcher, info.repo_id, versions, system)
    except FlashhubError:  # the CDN fails to say: the error stands as it is
        fitting = None
    if fitting is None:
        return error
    other = RepoInfo(info.repo_id, fitting)
    return NoCompatibleVariantError(
        f"{error.message}\n{other} is the newest published version with a build for it",
        hint=f"load version={fitting} ({other.module_name()}); or {error.hint}",
        cli_hint=f"pass --version {fitting}; or {error.cli_hint or error.hint}",
    )


def newest_fitting_version(
    fetcher: Fetcher,
    repo_id: str,
    versions: Sequence[int],
    system: SystemInfo,
    *,
    unlisted_fits: bool = False,
) -> int | None:
    """The newest of ``versions`` whose ``variants.json`` lists a build ``system`` loads,
    judged as a load judges it; ``None`` when none of the newest few does.

    A version without ``variants.json`` counts as having one if ``unlisted_fits`` (only a
    probe could tell).
    """
    for version in sorted(versions, reverse=True)[:_VERSIONS_LOOKED_AT]:
        info = RepoInfo(repo_id, version)
        try:
            names = get_variant_names(fetcher, info)
        except NotPublished:
            if unlisted_fits:
                return version
            continue
        reader = ManifestReader(Cache.from_config(fetcher.config), fetcher, info)
        if best_variant(judge_builds(judge_variants(names, system), system, reader.target)):
            return version
    return None
