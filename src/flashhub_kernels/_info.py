"""What a published kernel version holds, for ``flashhub info``: variants, files, sizes.

Reads every variant's ``metadata.json``; file sizes come from ``HEAD`` requests (the
manifest has digests only), or ``stat`` for a ``file://`` mirror. A server that does not
answer ``HEAD`` with a ``Content-Length`` leaves the size unknown (``None``).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._cache import Cache
from ._cdn_documents import get_listed_manifest, variant_path
from ._config import get_config
from ._download import fetch_index, remote
from ._manifest import Manifest
from ._names import RepoInfo
from ._offline import cached_variants, published_variants
from ._store import target_system
from ._variants import VariantAccepted, VariantRejected, VariantVerdict, judge_variants

if TYPE_CHECKING:
    from ._variants import SystemInfo

_PARALLEL_HEADS = 8


@dataclass(frozen=True)
class PublishedVariant:
    """One published variant: whether this system can load it, and its files."""

    name: str
    compatible: bool
    reason: str | None  # why it is rejected; None when compatible
    content_hash: str
    files: dict[str, int | None]  # relative path -> size in bytes, None when unknown

    @property
    def size(self) -> int | None:
        sizes = list(self.files.values())
        return None if None in sizes else sum(s for s in sizes if s is not None)

    def to_dict(self) -> dict[str, object]:
        return {
            "variant": self.name,
            "compatible": self.compatible,
            "reason": self.reason,
            "content_hash": self.content_hash,
            "bytes": self.size,
            "files": [{"path": p, "bytes": s} for p, s in sorted(self.files.items())],
        }


@dataclass(frozen=True)
class KernelDescription:
    """A kernel version as the CDN publishes it, judged against one system."""

    info: RepoInfo
    system: str
    variants: list[PublishedVariant]  # compatible ones first, best first
    chosen: str | None

    def to_dict(self) -> dict[str, object]:
        return {
            "repo_id": self.info.repo_id,
            "version": self.info.version,
            "system": self.system,
            "chosen": self.chosen,
            "variants": [variant.to_dict() for variant in self.variants],
        }


def describe_kernel(repo_id: str, version: int, *, backend: str | None = None) -> KernelDescription:
    """Fetch the manifests of every published variant of ``repo_id`` at ``version``.

    When the version has no ``variants.json``, only the variants this system could load
    are found (by probing). With ``FLASHHUB_OFFLINE=1`` the cache answers (see
    :func:`describe_cached`).
    """
    info, system = RepoInfo(repo_id, version), target_system(backend)
    config = get_config()
    if config.offline:
        return describe_cached(Cache.from_config(config), info, system)
    with remote(config) as fetcher:
        index = fetch_index(fetcher, info, system, probe_all=True)
        verdicts = judge_variants(sorted(index.present), system)
        manifests: dict[str, Manifest] = {
            r.variant: get_listed_manifest(fetcher, info, r.variant).manifest for r in verdicts
        }
        # Sizes from metadata.json where the publisher recorded them; HEAD for the rest.
        size_of = {(v, p): m.size_of(p) for v, m in manifests.items() for p in m.files}
        unknown = [vp for vp, size in size_of.items() if size is None]
        with ThreadPoolExecutor(_PARALLEL_HEADS) as pool:
            sizes = pool.map(lambda vp: fetcher.size(variant_path(info, *vp)), unknown)
            size_of.update(zip(unknown, sizes, strict=True))
    variants = [_published(r, manifests[r.variant], size_of) for r in verdicts]
    chosen = next((v.name for v in variants if v.compatible), None)
    return KernelDescription(info, system.describe(), variants, chosen)


def describe_cached(cache: Cache, info: RepoInfo, system: SystemInfo) -> KernelDescription:
    """:func:`describe_kernel` from the cache alone: no request is made.

    The variant list is the one the cache recorded; each variant's files, content hash
    and sizes come from its cached entry (the sizes as recorded when it was verified).

    Raises:
        OfflineError: the cache does not record the variant list, or lacks a variant.
    """
    verdicts = judge_variants(published_variants(cache, info, system), system)
    cached = cached_variants(cache, info, [r.variant for r in verdicts])
    size_of: dict[tuple[str, str], int | None] = {
        (name, path): size
        for name, variant in cached.items()
        for path, size in variant.sizes.items()
    }
    variants = [_published(r, cached[r.variant].manifest, size_of) for r in verdicts]
    chosen = next((v.name for v in variants if v.compatible), None)
    return KernelDescription(info, system.describe(), variants, chosen)


def _published(
    verdict: VariantVerdict, manifest: Manifest, size_of: dict[tuple[str, str], int | None]
) -> PublishedVariant:
    name = verdict.variant
    return PublishedVariant(
        name=name,
        compatible=isinstance(verdict, VariantAccepted),
        reason=verdict.reason if isinstance(verdict, VariantRejected) else None,
        content_hash=manifest.content_hash,
        files={path: size_of[(name, path)] for path in sorted(manifest.files)},
    )
