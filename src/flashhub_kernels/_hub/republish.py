"""Republishing a kernel build from the Hugging Face Hub into a CDN tree (``flashhub
mirror``): :func:`republish`.

The variants to republish are downloaded into a staging directory laid out as a build
(``build/<variant>/...``), each file is checked against the digest that its variant's own
``metadata.json`` lists (as kernel builders write it: ``{"digest": {"algorithm":
"sha256"|"sha512", "files": {path: base64}}}``), and the staging directory is then
published by :func:`~.._publish.publisher.publish`, under its rules: the same layout, immutability,
``variants.json`` and ``versions.json``, signatures. A file that does not match, one
listed but missing, or one present but not listed fails the republishing before anything is
published. The published ``metadata.json`` keeps the Hub build's own keys, and records
where the build came from under ``"mirrored-from"`` (see :class:`~.client.HubOrigin`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from .._config import DEFAULT_PREFIX, get_config
from .._constants import MANIFEST_NAME
from .._models.manifest import check_relative_path, dump_json, load_json
from .._models.names import RepoInfo
from .._models.record import Record
from .._publish import KeySource, PublishReport, publish
from .._publish.destination import open_destination
from .._publish.layout import UNHASHED_FILES
from .._publish.publisher import VersionTakenError
from .._publish.signatures import signing_keys
from .._utils.hashing import CHUNK_SIZE
from .._variants.grammar import is_variant_name
from .._variants.named_system import target_system
from .._variants.system import SystemInfo
from .._variants.verdicts import best_variant, describe_system, format_trace, judge_variants
from ..errors import ManifestError, MirrorError
from .client import BUILD_DIR, MIRRORED_FROM, Hub, HubOrigin, HubTree

_DIGEST_SIZES = {"sha256": 32, "sha512": 64}
_SHOWN_AT_MOST = 3
_TAMPERED_HINT = (
    "the Hub, or something between it and this machine, serves other files than the build "
    "lists; retry, and if it persists report it to the kernel's publisher"
)

VariantSelection = Literal["auto", "all"] | Sequence[str]


class RepublishReport(Record):
    """What :func:`republish` did: where the build came from, the variants the Hub build
    has, and the publisher's report."""

    source: HubOrigin
    hub_variants: tuple[str, ...]
    published: PublishReport

    @property
    def not_mirrored(self) -> tuple[str, ...]:
        mirrored = {variant.name for variant in self.published.variants}
        return tuple(name for name in self.hub_variants if name not in mirrored)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (what ``flashhub mirror --json`` prints): the publish report,
        with ``mirrored_from`` and ``not_mirrored``."""
        return {
            **self.published.to_dict(),
            "mirrored_from": self.source.to_document(),
            "not_mirrored": list(self.not_mirrored),
        }


class _HubDigest(Record):
    """A variant's ``metadata.json`` on the Hub: its digest algorithm, its digests
    (relative path -> raw digest), and the whole document."""

    algorithm: str
    files: Mapping[str, bytes]
    document: Mapping[str, Any]


def republish(
    repo_id: str,
    *,
    version: int,
    out: str | os.PathLike[str],
    revision: str | None = None,
    variants: VariantSelection = "auto",
    backend: str | None = None,
    system: SystemInfo | None = None,
    prefix: str = DEFAULT_PREFIX,
    force: bool = False,
    sign: KeySource | Sequence[KeySource] | None = None,
) -> RepublishReport:
    """Publish the Hugging Face Hub's build of ``repo_id`` as version ``version`` into the
    CDN tree ``out``, every file verified first.

    Args:
        repo_id: ``<org>/<pkg>``, the same on the Hub and on the CDN.
        version: The version to publish, and to read: the Hub's branch ``v<version>``.
        out: The root of the CDN tree, as for :func:`~flashhub_kernels._publish.publisher.publish`.
        revision: A branch, tag or commit on the Hub to read instead of ``v<version>``.
        variants: ``"auto"``: the variant this machine loads (or with ``backend="cpu"``,
            its CPU build), or ``system`` loads (a machine such as
            :func:`~.._variants.named_system.target_system` gives); ``"all"``: every variant whose
            name this client can load; or a list of names.
        prefix, force, sign: As for :func:`~flashhub_kernels._publish.publisher.publish`.

    Returns:
        A :class:`RepublishReport`.

    Raises:
        MirrorError: ``huggingface_hub`` is missing; the Hub cannot be reached or has no
            such build; no variant is chosen; a file is missing or does not match its
            digest (nothing is published then); or ``FLASHHUB_OFFLINE`` is set.
        PublishError: As :func:`~flashhub_kernels._publish.publisher.publish` raises it;
            for a version published with other content, its hint names ``revision``
            too, since another version reads another branch.
    """
    info = RepoInfo(repo_id, version)
    if get_config().offline:
        raise MirrorError(
            f"FLASHHUB_OFFLINE is set, and mirroring {info} reads the Hugging Face Hub",
            hint="unset FLASHHUB_OFFLINE to mirror",
        )
    keys = signing_keys(sign)  # a key file that cannot be used fails before any download
    open_destination(out)  # so does an object store URL whose extra is not installed
    hub = Hub()
    revision = revision or f"v{info.version}"
    tree = hub.build_tree(info.repo_id, revision)
    by_variant = _variant_files(tree.files)
    chosen = choose_variants(sorted(by_variant), variants, system or target_system(backend))
    with tempfile.TemporaryDirectory(prefix="flashhub-mirror-") as staging:
        _stage(hub, tree, {name: by_variant[name] for name in chosen}, Path(staging))
        try:
            published = publish(
                staging,
                repo_id=info.repo_id,
                version=info.version,
                out=out,
                prefix=prefix,
                force=force,
                sign=keys,
            )
        except VersionTakenError as exc:
            raise _moved_revision(exc, revision) from None
    return RepublishReport(tree.source, tuple(sorted(by_variant)), published)


def _moved_revision(taken: VersionTakenError, revision: str) -> VersionTakenError:
    """``taken``, with a hint that names ``revision`` beside the next version: without
    it, that version would read the Hub's branch of its own number."""
    new = taken.next_version
    what = f"published versions are immutable: to publish what {revision} now holds, mirror it as"
    replacing = "to replace the published version (clients that cached it keep the old files)"
    return VersionTakenError(
        taken.message,
        next_version=new,
        hint=f"{what} version={new}, revision={revision!r}, or pass force=True {replacing}",
        cli_hint=f"{what} --version {new} --revision {revision}, or pass --force {replacing}",
    )


def _variant_files(files: Iterable[str]) -> dict[str, set[str]]:
    """The files of each variant directory of ``build/``, relative to it."""
    by_variant: dict[str, set[str]] = {}
    for path in files:
        variant, slash, rel = path.partition("/")
        if slash:
            by_variant.setdefault(variant, set()).add(rel)
    return by_variant


def choose_variants(
    published: Sequence[str], wanted: VariantSelection, system: SystemInfo
) -> list[str]:
    """The variants of ``published`` (the Hub build's) that ``wanted`` selects; ``"auto"``
    is the one ``system`` loads, judged by its name."""
    if wanted == "auto":
        verdicts = judge_variants(published, system)
        best = best_variant(verdicts)
        if best is None:
            raise MirrorError(
                f"no variant of the Hub build fits {describe_system(system)}:\n"
                + format_trace(verdicts),
                hint="pass variants='all', or the names of the variants to mirror",
                cli_hint="pass --variants all, or --variants NAME,NAME for the machines that "
                "will load it",
            )
        return [best]
    if wanted == "all":
        loadable = [name for name in published if is_variant_name(name)]
        if not loadable:
            raise MirrorError(
                f"the Hub build has no variant this client loads: {', '.join(published)}"
            )
        return loadable
    unknown = [name for name in wanted if name not in published or not is_variant_name(name)]
    if unknown:
        raise MirrorError(
            f"the Hub build has no variant {unknown[0]!r}; it has {', '.join(published)}",
            hint="name variants the Hub build has, or pass variants='all'",
            cli_hint="name variants the Hub build has, or pass --variants all",
        )
    return list(dict.fromkeys(wanted))


def _stage(hub: Hub, tree: HubTree, chosen: Mapping[str, set[str]], staging: Path) -> None:
    """Download the ``chosen`` variants into ``staging/build/``, each file verified, and
    write each one's ``metadata.json`` with the record of where it came from."""
    for variant, files in chosen.items():
        if MANIFEST_NAME not in files:
            raise MirrorError(
                f"variant {variant} of {_described(tree.source)} has no {MANIFEST_NAME}: "
                "there are no digests to verify its files against; nothing was published",
                hint="mirror a build whose kernel builder writes metadata.json with digests",
            )
    hub.download(tree, [f"{variant}/{MANIFEST_NAME}" for variant in chosen], staging)
    root = staging / BUILD_DIR
    digests = {variant: _hub_digest(root / variant, tree.source) for variant in chosen}
    for variant, digest in digests.items():
        _check_listing(variant, digest, chosen[variant], tree.source)
    hub.download(
        tree, [f"{variant}/{rel}" for variant, d in digests.items() for rel in d.files], staging
    )
    wrong = [
        f"{variant}/{rel}"
        for variant, digest in digests.items()
        for rel, expected in sorted(digest.files.items())
        if _file_digest(root / variant / rel, digest.algorithm) != expected
    ]
    if wrong:
        raise MirrorError(
            f"{_count(wrong)} of {_described(tree.source)} do not match the digests in their "
            f"variant's {MANIFEST_NAME}: {_some(wrong)}; nothing was published",
            hint=_TAMPERED_HINT,
        )
    for variant, digest in digests.items():
        document = {**digest.document, MIRRORED_FROM: tree.source.to_document()}
        if digest.algorithm != "sha256":
            # The CDN's manifests state sha256: the publisher writes them anew from the
            # files, which were just checked against the Hub's own digests.
            del document["digest"]
        (root / variant / MANIFEST_NAME).write_bytes(dump_json(document))


def _hub_digest(variant_dir: Path, source: HubOrigin) -> _HubDigest:
    """The digests that the Hub build's ``metadata.json`` in ``variant_dir`` lists."""
    where = f"{variant_dir.name}/{MANIFEST_NAME} of {_described(source)}"
    try:
        document = load_json((variant_dir / MANIFEST_NAME).read_bytes(), where)
    except ManifestError as exc:
        raise MirrorError(exc.message, hint=_TAMPERED_HINT) from None
    digest = document.get("digest") if isinstance(document, dict) else None
    files = digest.get("files") if isinstance(digest, dict) else None
    if not isinstance(digest, dict) or not isinstance(files, dict) or not files:
        raise MirrorError(
            f'{where} lists no file digests ("digest": {{"algorithm", "files"}}): there is '
            "nothing to verify its files against; nothing was published",
            hint="mirror a build whose kernel builder writes metadata.json with digests",
        )
    algorithm = digest.get("algorithm")
    if algorithm not in _DIGEST_SIZES:
        raise MirrorError(
            f"{where} uses the digest algorithm {algorithm!r}; this client checks "
            f"{' and '.join(_DIGEST_SIZES)}"
        )
    try:
        parsed = {
            check_relative_path(path): _decode(value, _DIGEST_SIZES[algorithm])
            for path, value in files.items()
        }
    except ValueError as exc:
        raise MirrorError(f"{where}: {exc}", hint=_TAMPERED_HINT) from None
    return _HubDigest(algorithm, parsed, document)


def _decode(value: object, size: int) -> bytes:
    """A digest as kernel builders write it: standard base64 of ``size`` raw bytes."""
    try:
        raw = base64.b64decode(value, validate=True) if isinstance(value, str) else b""
    except binascii.Error:
        raw = b""
    if len(raw) != size:
        raise ValueError(f"digest {value!r} is not base64 of {size} bytes")
    return raw


def _check_listing(variant: str, digest: _HubDigest, present: set[str], source: HubOrigin) -> None:
    """The files the Hub has of ``variant`` must be those its digest lists."""
    hashed = {rel for rel in present if not _unhashed(rel)}
    missing, unlisted = sorted(digest.files.keys() - hashed), sorted(hashed - digest.files.keys())
    if missing or unlisted:
        parts = [
            f"{_count(paths)} {what} (e.g. {_some(paths)})"
            for paths, what in ((missing, "listed but missing"), (unlisted, "not listed"))
            if paths
        ]
        raise MirrorError(
            f"variant {variant} of {_described(source)} does not hold the files its "
            f"{MANIFEST_NAME} lists: {'; '.join(parts)}; nothing was published",
            hint=_TAMPERED_HINT,
        )


def _unhashed(rel: str) -> bool:
    """Whether a file of a variant is one that kernel builders leave out of its digest."""
    return rel in UNHASHED_FILES or "__pycache__" in rel.split("/") or rel.endswith(".pyc")


def _file_digest(path: Path, algorithm: str) -> bytes:
    hasher = hashlib.new(algorithm)
    with open(path, "rb", buffering=0) as file:
        while chunk := file.read(CHUNK_SIZE):
            hasher.update(chunk)
    return hasher.digest()


def _described(source: HubOrigin) -> str:
    return f"{source.repo} at {source.revision} (commit {source.commit[:12]})"


def _count(paths: Sequence[str]) -> str:
    return f"{len(paths)} file{'' if len(paths) == 1 else 's'}"


def _some(paths: Sequence[str]) -> str:
    more = len(paths) - _SHOWN_AT_MOST
    return ", ".join(paths[:_SHOWN_AT_MOST]) + (f" and {more} more" if more > 0 else "")
