"""What a published kernel version holds, for ``flashhub info``: variants, files, sizes,
and what each variant's ``metadata.json`` says of the build (name, license, backend and
architectures, dependencies, minimum client versions, provenance).

Reads every variant's ``metadata.json``; file sizes come from ``HEAD`` requests (the
manifest has digests only), or ``stat`` for a ``file://`` mirror. A server that does not
answer ``HEAD`` with a ``Content-Length`` leaves the size unknown (``None``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .._cache.layout import Cache
from .._config import get_config
from .._hub.client import HubOrigin
from .._models.kernel_metadata import KernelMetadata, Provenance, read_kernel_metadata
from .._models.manifest import Manifest, manifest_source
from .._models.names import RepoInfo
from .._models.record import Record
from .._network.documents import (
    ManifestDocument,
    get_listed_manifest,
    get_manifest,
    get_signers,
    variant_path,
)
from .._network.mirrors import NotPublished
from .._network.transport import remote
from .._network.variant_index import fetch_index
from .._signing.trusted_keys import shown_key_id
from .._utils.escaping import escape_controls
from .._utils.threads import DeafThreadPool
from .._variants.compat import read_target
from .._variants.named_system import target_system
from .._variants.verdicts import (
    VariantAccepted,
    VariantRejected,
    VariantVerdict,
    describe_system,
    judge_builds,
    judge_variants,
)
from .offline import CachedVariant, cached_variant, cached_variants, published_variants

if TYPE_CHECKING:
    from .._network.transport import Fetcher
    from .._variants.system import SystemInfo

_PARALLEL_HEADS = 8
_NO_METADATA = KernelMetadata()  # a record, so one can be every default


class Signature(Record):
    """Who signed a variant's manifest: the key that vouched for it, when a trusted key
    did (``verified``), else the key ids its ``.sig`` names, unchecked."""

    key_ids: tuple[str, ...]
    verified: bool

    def describe(self) -> str:
        if self.verified:
            return f"signed by {self.key_ids[0]} (verified)"
        shown = ", ".join(map(shown_key_id, self.key_ids))  # from the CDN's .sig, unchecked
        return f"signed by {shown} (not verified: no trusted key)"

    def to_dict(self) -> dict[str, object]:
        return {"signed_by": list(self.key_ids), "signature_verified": self.verified}


class PublishedVariant(Record):
    """One published variant: whether this system can load it, and its files.

    Attributes:
        name: The variant.
        compatible: Whether this system can load it.
        reason: Why it is rejected; ``None`` when compatible.
        content_hash: Its content hash, ``sha256-<hex>``.
        files: Relative path -> size in bytes, ``None`` when unknown.
        signature: Who signed it; ``None`` when no signer is known.
        mirrored_from: Where ``flashhub mirror`` took it from, if it did.
        metadata: The builder's fields of its ``metadata.json``.
    """

    name: str
    compatible: bool
    reason: str | None
    content_hash: str
    files: dict[str, int | None]
    signature: Signature | None = None
    mirrored_from: HubOrigin | None = None
    metadata: KernelMetadata = _NO_METADATA

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
            **(self.signature.to_dict() if self.signature else {}),
            **({"mirrored_from": self.mirrored_from.to_document()} if self.mirrored_from else {}),
            "metadata": {**self.metadata.to_json(), "dirty": bool(self.metadata.dirty_sources)},
        }


def metadata_lines(metadata: KernelMetadata) -> list[str]:
    """What a variant's ``metadata.json`` says of its build, as lines of text; only the
    fields it states. Text from the CDN is escaped."""
    shown = escape_controls
    lines = []
    if metadata.name is not None or metadata.id is not None:
        identity = [f"version {metadata.version}"] if metadata.version is not None else []
        identity += [f"id {shown(metadata.id)}"] if metadata.id is not None else []
        suffix = f" ({', '.join(identity)})" if identity else ""
        lines.append(f"name: {shown(metadata.name or '?')}{suffix}")
    for label, value in (
        ("license", metadata.license),
        ("upstream", metadata.upstream),
        ("source", metadata.source),
    ):
        if value is not None:
            lines.append(f"{label}: {shown(value)}")
    if metadata.backend is not None:
        archs = metadata.backend.archs
        on = f", archs {', '.join(map(shown, archs))}" if archs else ""
        lines.append(f"backend: {shown(metadata.backend.type)}{on}")
    if metadata.python_depends:
        lines.append(f"python-depends: {', '.join(map(shown, metadata.python_depends))}")
    if metadata.kernel_depends:
        lines.append(f"kernel-depends: {', '.join(map(str, metadata.kernel_depends))}")
    needs = []
    if metadata.flashhub_kernels_minver is not None:
        needs.append(f"flashhub-kernels>={shown(metadata.flashhub_kernels_minver)}")
    if metadata.kernels_minver is not None:
        needs.append(f"Hugging Face kernels API>={shown(metadata.kernels_minver)}")
    if needs:
        lines.append(f"requires: {', '.join(needs)}")
    if metadata.provenance is not None:
        lines.append(f"provenance: {_provenance(metadata.provenance)}")
    return lines


def _provenance(provenance: Provenance) -> str:
    built = f"kernel-builder {escape_controls(provenance.builder_version)}"
    if provenance.builder is not None:
        built += f" at {provenance.builder.commit[:12]}"
    if provenance.kernel is not None:
        built += f", kernel source at {provenance.kernel.commit[:12]}"
    dirty = provenance.dirty_sources
    if dirty:
        built += f"; DIRTY: {' and '.join(dirty)} had uncommitted changes"
    return built


class KernelDescription(Record):
    """A kernel version as the CDN publishes it, judged against one system: its
    variants, compatible ones first, best first, and the one chosen."""

    info: RepoInfo
    system: str
    variants: list[PublishedVariant]
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
        probed: dict[str, ManifestDocument] = {}  # what a probe fetched already
        index = fetch_index(fetcher, info, system, probe_all=True, documents=probed)
        verdicts = judge_variants(sorted(index.present), system)
        documents: dict[str, ManifestDocument] = {
            r.variant: probed.get(r.variant) or get_listed_manifest(fetcher, info, r.variant)
            for r in verdicts
        }
        manifests = {name: document.manifest for name, document in documents.items()}
        signatures = {name: _signature(fetcher, info, name, doc) for name, doc in documents.items()}
        # Sizes from metadata.json where the publisher recorded them; HEAD for the rest.
        size_of = {(v, p): m.size_of(p) for v, m in manifests.items() for p in m.files}
        unknown = [vp for vp, size in size_of.items() if size is None]
        with DeafThreadPool(_PARALLEL_HEADS, thread_name_prefix="flashhub-size") as pool:
            sizes = pool.map(lambda vp: fetcher.size(variant_path(info, *vp)), unknown)
            size_of.update(zip(unknown, sizes, strict=True))
    verdicts = _judged_builds(verdicts, system, manifests)
    variants = [
        _published(info, r, manifests[r.variant], size_of, signatures[r.variant]) for r in verdicts
    ]
    chosen = next((v.name for v in variants if v.compatible), None)
    return KernelDescription(info, describe_system(system), variants, chosen)


def variant_signatures(info: RepoInfo, names: Sequence[str]) -> dict[str, Signature]:
    """Who signed each of the signed variants among ``names`` (see :class:`Signature`).

    Raises:
        SignatureError: a trusted key's signature is due and does not verify.
    """
    config = get_config()
    signatures = {}
    with remote(config) as fetcher:
        for name in names:
            if config.checks_signatures(info.org):
                try:
                    signer = get_manifest(fetcher, info, name).signer
                except NotPublished:  # a variant that variants.json lists in vain
                    continue
                signature = Signature((signer,), verified=True) if signer else None
            else:
                key_ids = tuple(get_signers(fetcher, info, name))
                signature = Signature(key_ids, verified=False) if key_ids else None
            if signature is not None:
                signatures[name] = signature
    return signatures


def cached_signatures(cache: Cache, info: RepoInfo, names: Sequence[str]) -> dict[str, Signature]:
    """:func:`variant_signatures` from the cache: the keys that vouched for cached entries."""
    cached = (cached_variant(cache, info, name) for name in names)
    return {
        name: Signature((variant.signer,), verified=True)
        for name, variant in zip(names, cached, strict=True)
        if variant is not None and variant.signer is not None
    }


def _signature(
    fetcher: Fetcher, info: RepoInfo, variant: str, document: ManifestDocument
) -> Signature | None:
    """The signature of a fetched manifest; ``None`` when it names no signer."""
    if document.signer is not None:
        return Signature((document.signer,), verified=True)
    key_ids = tuple(get_signers(fetcher, info, variant))
    return Signature(key_ids, verified=False) if key_ids else None


def describe_cached(cache: Cache, info: RepoInfo, system: SystemInfo) -> KernelDescription:
    """:func:`describe_kernel` from the cache alone: no request is made.

    The variant list is the one the cache recorded; each variant's files, content hash
    and sizes come from its cached entry (the sizes as recorded when it was verified).

    Raises:
        OfflineError: the cache does not record the variant list, or lacks a variant.
    """
    verdicts = judge_variants(published_variants(cache, info, system), system)
    this_system = [r.variant for r in verdicts if isinstance(r, VariantAccepted)][:1]
    cached = cached_variants(cache, info, [r.variant for r in verdicts], gettable=this_system)
    size_of: dict[tuple[str, str], int | None] = {
        (name, path): size
        for name, variant in cached.items()
        for path, size in variant.sizes.items()
    }
    manifests = {name: variant.manifest for name, variant in cached.items()}
    verdicts = _judged_builds(verdicts, system, manifests)
    variants = [
        _published(info, r, manifests[r.variant], size_of, _cached_signature(cached[r.variant]))
        for r in verdicts
    ]
    chosen = next((v.name for v in variants if v.compatible), None)
    return KernelDescription(info, describe_system(system), variants, chosen)


def _judged_builds(
    verdicts: Sequence[VariantVerdict], system: SystemInfo, manifests: Mapping[str, Manifest]
) -> list[VariantVerdict]:
    """``verdicts`` with each build that lists device archs judged by them, as a load
    judges it: the ``metadata.json`` of every variant is at hand."""
    return judge_builds(
        verdicts, system, lambda name: read_target(manifests[name].document), first_fit=False
    )


def _cached_signature(variant: CachedVariant) -> Signature | None:
    return None if variant.signer is None else Signature((variant.signer,), verified=True)


def _published(
    info: RepoInfo,
    verdict: VariantVerdict,
    manifest: Manifest,
    size_of: dict[tuple[str, str], int | None],
    signature: Signature | None = None,
) -> PublishedVariant:
    name = verdict.variant
    source = manifest_source(info, name)
    return PublishedVariant(
        name=name,
        compatible=isinstance(verdict, VariantAccepted),
        reason=verdict.reason if isinstance(verdict, VariantRejected) else None,
        content_hash=manifest.content_hash,
        files={path: size_of[(name, path)] for path in sorted(manifest.files)},
        signature=signature,
        mirrored_from=HubOrigin.from_document(manifest.document),
        metadata=read_kernel_metadata(manifest.document, source=source),
    )
