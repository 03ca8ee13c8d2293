"""What a version publishes: its ``variants.json``, or a probe of the candidates.

A load asks for two ``metadata.json`` beside ``variants.json`` (:func:`start_guess`):
that of the build this system would make (a native kernel's usual pick) and that of
``torch-universal`` (a pure-Python kernel's only build). When the version publishes
the one it takes, the load waits one round trip for its documents instead of two. An
answer counts only where ``variants.json`` lists that build, or a probe asks for it;
elsewhere it was one request more. A guess that failed counts for nothing (see
:func:`answer`): the build is asked for again where it is needed.

Without ``variants.json``, :func:`fetch_index` probes the ``metadata.json`` of the
variants this system could load, best first and several at once: it finds the
candidates that exist, and where the device matters, reads the devices each declares.
When it finds none, the error says why: no such version (with the versions that are
published), or a version with no build for this system; where the repo has no
``versions.json`` either, the CDN cannot tell these apart, and the error says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from functools import partial
from typing import NoReturn

from .._cache.layout import VariantIndex
from .._models.names import RepoInfo
from .._utils.urls import redact_url
from .._variants.choice import no_variant_error
from .._variants.compat import BuildTarget, build_mismatch, needs_target, read_target
from .._variants.grammar import as_variant
from .._variants.probing import UNIVERSAL, build_variant_name, candidate_names
from .._variants.system import SystemInfo
from ..errors import (
    FlashhubError,
    KernelNotFoundError,
    NoCompatibleVariantError,
    VersionNotFoundError,
)
from .answers import stale_404_hint
from .documents import ManifestDocument, get_manifest, get_variant_list
from .mirrors import NotPublished
from .transport import MAX_PARALLEL_FILES, Fetcher
from .versions import doubled_prefix_hint, published_versions

# Probes in flight at once. Most answer 404, and a wave costs one round trip (torch 2.13
# with CUDA 12.8 has 65 names to try, with CUDA 13.0 or on a CPU 9). Half the download
# threads: with a key trusted, each probe asks for its .sig beside it, and both fit in
# the connection pool.
PROBES_AT_ONCE = MAX_PARALLEL_FILES // 2

Started = dict[str, Future[ManifestDocument]]  # manifests asked for already, by variant name


def fetch_index(
    fetcher: Fetcher,
    info: RepoInfo,
    system: SystemInfo,
    *,
    probe_all: bool = False,
    documents: dict[str, ManifestDocument] | None = None,
    started: Started | None = None,
) -> VariantIndex:
    """What ``info`` publishes: ``variants.json``, or a probe of ``system``'s candidates.

    Probing stops at the first hit that fits ``system`` unless ``probe_all`` (used to
    list variants); the devices each hit declares are recorded where they matter, and
    its manifest is kept in ``documents``, when given, for the download that follows.
    A probe takes the manifests ``started`` got instead of asking for them again.
    """
    try:
        names, proof = get_variant_list(fetcher, info)
        return VariantIndex(True, frozenset(names), proof=proof)
    except NotPublished as exc:
        tried = redact_url(str(exc))  # the mirror's URL of variants.json
    present: set[str] = set()
    absent: set[str] = set()
    targets: dict[str, BuildTarget] = {}
    for name, probe in _probes(fetcher, info, candidate_names(system), started or {}):
        try:
            document = probe.result()
        except NotPublished:
            absent.add(name)
            continue
        present.add(name)
        if documents is not None:
            documents[name] = document
        variant = as_variant(name)
        if needs_target(variant, system):
            targets[name] = read_target(document.manifest.document)
            if build_mismatch(variant, targets[name], system) is not None:
                continue  # for other devices: probe on
        if not probe_all:
            break
    if not present:
        _raise_not_published(fetcher, info, system, absent, tried)
    return VariantIndex(False, frozenset(present), frozenset(absent), targets)


def start_guess(fetcher: Fetcher, info: RepoInfo, system: SystemInfo) -> Started:
    """Start fetching the ``metadata.json`` of the builds a load most often takes (the
    one ``system`` would make, and ``torch-universal``), to ask for them beside the
    version's index."""
    names = [build_variant_name(system), UNIVERSAL]
    return {name: fetcher.soon(partial(get_manifest, fetcher, info, name)) for name in names}


def answer(fetch: Future[ManifestDocument] | None) -> ManifestDocument | None:
    """The manifest a fetch :func:`start_guess` started got, or ``None`` when there is
    none or it failed. A failed guess is no answer, not even a ``404``: it may have asked
    a mirror that the index's fetch then found failing and moved to the back."""
    if fetch is None:
        return None
    try:
        return fetch.result()
    except (FlashhubError, NotPublished):
        return None


def _probes(
    fetcher: Fetcher, info: RepoInfo, names: list[str], started: Started
) -> Iterator[tuple[str, Future[ManifestDocument]]]:
    """Each of ``names`` with the fetch of its ``metadata.json``, in order; the fetches
    start :data:`PROBES_AT_ONCE` at a time, a wave when the caller reaches it, so that
    a probe waits one round trip per wave, not per name. A caller that stops early
    leaves the rest of its wave unread (the run waits for it at its end) and starts no
    other wave."""
    for start in range(0, len(names), PROBES_AT_ONCE):
        wave = names[start : start + PROBES_AT_ONCE]
        yield from [
            (name, fetcher.soon(partial(_probe, fetcher, info, name, started.get(name))))
            for name in wave
        ]


def _probe(
    fetcher: Fetcher, info: RepoInfo, name: str, started: Future[ManifestDocument] | None
) -> ManifestDocument:
    """The manifest of ``name``: what the fetch ``started`` got, else fetched now."""
    return answer(started) or get_manifest(fetcher, info, name)


def _raise_not_published(
    fetcher: Fetcher, info: RepoInfo, system: SystemInfo, probed: set[str], tried: str
) -> NoReturn:
    """Raise why nothing was found for ``info``; ``tried`` is the URL of its variants.json."""
    versions = published_versions(fetcher, info.repo_id)
    if versions is not None and info.version in versions:
        error = no_variant_error(
            f"{info} has no variants.json and none of the variants this system can load "
            f"is published (probed: {', '.join(sorted(probed))})",
            system,
            published=None,
        )
        stale = stale_404_hint(str(info))  # listed, so its 404s may predate the publish
        raise NoCompatibleVariantError(
            error.message,
            hint=f"{stale}; otherwise {error.hint}",
            cli_hint=error.cli_hint and f"{stale}; otherwise {error.cli_hint}",
        )
    listed = f"; published versions: {', '.join(map(str, versions))}" if versions else ""
    message = f"{info} was not found on the CDN: {tried} does not exist{listed}"
    doubled = doubled_prefix_hint(fetcher.config)
    if doubled is None and versions is None:
        _raise_unlisted(system, probed, message)
    if doubled is None and versions:
        raise VersionNotFoundError(
            message,
            hint=f"use a published version; the newest is v{versions[-1]}",
            cli_hint=f"pass a published version, e.g. --version {versions[-1]} (the newest)",
        )
    raise KernelNotFoundError(
        message, hint=doubled or "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX"
    )


def _raise_unlisted(system: SystemInfo, probed: set[str], message: str) -> NoReturn:
    """Raise for a version neither ``variants.json`` nor ``versions.json`` speaks for: the
    CDN cannot tell a kernel or version that does not exist from one with no build for
    this system, so the error names the variants probed and advises for both."""
    check = (
        "check the repo id, and FLASHHUB_CDN_URL / FLASHHUB_CDN_PREFIX; if they are right and "
        "the version is published"
    )
    builds = no_variant_error(message, system, published=None)
    raise KernelNotFoundError(
        f"{message}, and none of the variants this system can load is published (probed: "
        f"{', '.join(sorted(probed))}); the repo has no versions.json either, so the CDN "
        "cannot say whether the kernel or this version exists at all",
        hint=f"{check}, {builds.hint}",
        cli_hint=builds.cli_hint and f"{check}, {builds.cli_hint}",
    )
