"""The ``flashhub.lock`` format: the records of a lock, parsing, validation.

No network here. ``flashhub lock`` pins each range a project declares (see
:mod:`~flashhub_kernels._lockfiles.project`) in ``flashhub.lock``, JSON in a stable
byte form::

    {
      "kernels": [
        {
          "repo_id": "sdq/audio-codebook-primitives",
          "specifier": ">=1,<3",
          "variants": {
            "torch-universal": {"hash": "sha256-<hex>"}
          },
          "version": 2
        }
      ],
      "version": 1
    }

The top-level ``version`` is the format. Each variant's ``hash`` is the content hash of
its manifest (:func:`~flashhub_kernels._models.manifest.content_hash`), which pins the exact
bytes of every file even if a CDN object changes later. When the locking process
checked signatures, a variant also records its ``signer``: the id of the trusted key
that signed its manifest. A load that checks signatures then refuses another signer.

A kernel whose version has no ``variants.json`` is locked with the variants found by
probing, and its entry says so: ``"variants_source": "probed"``. Without the key the
variants are the whole ``variants.json`` (``"published"``), as in every older lock.

A kernel whose variants depend on other kernels (``kernel-depends`` in their
``metadata.json``) lists them in ``"kernel_depends"``: ``[{"repo_id": ..., "version":
N}]``. Each is locked too, as an entry of ``"kernels"`` when the project declares that
version, else of the top-level ``"dependencies"`` (same form, ``"specifier": "==N"``).
Both keys are left out when nothing depends on anything, so older locks keep their bytes.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from .._constants import PROJECT_FILE_BYTES
from .._models.kernel_metadata import dependency_label, format_cycle
from .._models.manifest import check_variant_segment, dump_json
from .._models.names import RepoInfo, check_version, parse_repo_id
from .._models.record import Record
from .._signing.trusted_keys import is_key_id
from .._utils.filesystem import read_regular
from .._utils.parsing import parse_capped
from ..errors import LockfileError, LockfileNotFoundError

LOCKFILE_NAME = "flashhub.lock"
FORMAT_VERSION = 1
_HASH = re.compile(r"sha256-[0-9a-f]{64}")
REGENERATE = "regenerate it with `flashhub lock` in the project directory"
_HF_LOCKFILE_NAME = "kernels.lock"  # Hugging Face kernels' lock: Hub commits, not read here
VariantsSource = Literal["published", "probed"]
_VARIANTS_SOURCES: tuple[VariantsSource, ...] = ("published", "probed")


class LockedKernel(Record):
    """One kernel pinned by a lock: a version and the content hash of each variant.

    ``variants_source`` is ``"published"`` when ``variants`` is the version's whole
    ``variants.json``, ``"probed"`` when the version has none and the variants were
    found by requesting candidate names.
    """

    repo_id: str
    version: int
    variants: Mapping[str, str]  # variant name -> "sha256-<hex>"
    specifier: str
    variants_source: VariantsSource
    # variant name -> id of the trusted key that signed its manifest when it was locked
    signers: Mapping[str, str]
    # The locked kernels its variants depend on (kernel-depends), in repo order.
    dependencies: tuple[LockedKernel, ...]

    def __init__(
        self,
        repo_id: str,
        version: int,
        variants: Mapping[str, str],
        specifier: str = "",
        variants_source: VariantsSource = "published",
        signers: Mapping[str, str] | None = None,
        dependencies: tuple[LockedKernel, ...] = (),
    ) -> None:
        signers = {} if signers is None else signers
        self._init(repo_id, version, variants, specifier, variants_source, signers, dependencies)

    @property
    def info(self) -> RepoInfo:
        return RepoInfo(self.repo_id, self.version)

    @property
    def probed(self) -> bool:
        """Whether the locked variants were probed, not read from ``variants.json``."""
        return self.variants_source == "probed"

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "repo_id": self.repo_id,
            "specifier": self.specifier,
            "variants": {name: self._variant_json(name) for name in sorted(self.variants)},
            "version": self.version,
        }
        if self.probed:  # absent means published: locks of published versions keep their bytes
            document["variants_source"] = self.variants_source
        if self.dependencies:
            document["kernel_depends"] = [
                {"repo_id": dep.repo_id, "version": dep.version} for dep in self.dependencies
            ]
        return document

    def tree(self) -> list[LockedKernel]:
        """This kernel and every kernel it depends on, each once, dependencies first."""
        ordered: dict[RepoInfo, LockedKernel] = {}

        def visit(locked: LockedKernel) -> None:
            if locked.info not in ordered:
                for dep in locked.dependencies:
                    visit(dep)
                ordered[locked.info] = locked

        visit(self)
        return list(ordered.values())

    def _variant_json(self, name: str) -> dict[str, str]:
        signer = self.signers.get(name)
        pins = {"hash": self.variants[name]}
        return pins | {"signer": signer} if signer else pins


class Lockfile(Record):
    """A parsed ``flashhub.lock``. ``source`` says where it came from, for messages."""

    kernels: Mapping[str, LockedKernel]
    source: str
    # The kernels locked only because a locked kernel depends on them.
    dependencies: Mapping[RepoInfo, LockedKernel]

    def __init__(
        self,
        kernels: Mapping[str, LockedKernel],
        source: str = LOCKFILE_NAME,
        dependencies: Mapping[RepoInfo, LockedKernel] | None = None,
    ) -> None:
        self._init(kernels, source, {} if dependencies is None else dependencies)

    def all_kernels(self) -> list[LockedKernel]:
        """Every locked kernel: those declared, then the dependencies, each in repo order."""
        declared = [self.kernels[repo_id] for repo_id in sorted(self.kernels)]
        return declared + [self.dependencies[info] for info in sorted(self.dependencies)]

    def locked(self, info: RepoInfo) -> LockedKernel | None:
        """The entry that pins ``info`` (a declared kernel or a dependency), if any."""
        declared = self.kernels.get(info.repo_id)
        if declared is not None and declared.version == info.version:
            return declared
        return self.dependencies.get(info)

    def kernel(self, repo_id: str) -> LockedKernel:
        """The entry for ``repo_id``; :class:`LockfileError` if the lock does not pin it."""
        parse_repo_id(repo_id)
        try:
            return self.kernels[repo_id]
        except KeyError:
            locked = ", ".join(sorted(self.kernels)) or "nothing"
            raise LockfileError(
                f"{repo_id} is not locked in {self.source} (it locks {locked})",
                hint=f'add "{repo_id}" to the kernels pyproject.toml declares '
                "([tool.flashhub.dependencies], or [tool.kernels.dependencies] where it has "
                "only that) and run `flashhub lock`",
            ) from None

    def to_json(self) -> dict[str, Any]:
        kernels = [self.kernels[repo_id].to_json() for repo_id in sorted(self.kernels)]
        document: dict[str, Any] = {"kernels": kernels, "version": FORMAT_VERSION}
        if self.dependencies:
            document["dependencies"] = [
                self.dependencies[info].to_json() for info in sorted(self.dependencies)
            ]
        return document

    def to_bytes(self) -> bytes:
        return dump_json(self.to_json())


# -- reading a lock ---------------------------------------------------------------------


def read_lockfile(path: Path) -> Lockfile:
    """Read and validate the lock file at ``path``."""
    try:
        data = read_regular(path, PROJECT_FILE_BYTES)
    except FileNotFoundError:
        create = "run `flashhub lock` in the project directory to create it"
        raise LockfileNotFoundError(
            f"{path} does not exist", hint=missing_lock_hint(path.parent, create)
        ) from None
    except OSError as exc:  # a directory, say
        raise LockfileError(
            f"cannot read {path}: {exc.strerror}", hint=f"pass the path of a {LOCKFILE_NAME} file"
        ) from None
    return parse_lockfile(data, source=str(path))


def missing_lock_hint(directory: Path, hint: str) -> str:
    """``hint``, for the error of a missing ``flashhub.lock`` in ``directory``, after a
    word on the ``kernels.lock`` there, if there is one: it is not read here."""
    found = directory / _HF_LOCKFILE_NAME
    if not found.is_file():
        return hint
    return (
        f"{found} is Hugging Face kernels' lock, which flashhub does not read (`flashhub "
        f"lock` reads the project's [tool.kernels.dependencies] in pyproject.toml); {hint}"
    )


def parse_lockfile(data: bytes, *, source: str = LOCKFILE_NAME) -> Lockfile:
    """Validate a lock document; raise :class:`LockfileError` naming what is wrong."""
    try:
        document = parse_capped(data, json.loads, "JSON", json.JSONDecodeError)
    except ValueError as exc:
        raise LockfileError(f"{source} {exc}", hint=REGENERATE) from None
    if isinstance(document, list):  # what Hugging Face kernels writes in kernels.lock
        raise LockfileError(
            f"{source} is a Hugging Face kernels lock file (a JSON list of Hub commits), "
            f"not a {LOCKFILE_NAME}",
            hint=f"run `flashhub lock` in the project directory, which reads the same "
            f"[tool.kernels.dependencies], and use the {LOCKFILE_NAME} it writes",
        )
    if not isinstance(document, dict):
        raise LockfileError(f"{source} must hold a JSON object", hint=REGENERATE)
    _check_format(document.get("version"), source)
    items = document.get("kernels")
    if not isinstance(items, list):
        raise LockfileError(f'{source} must list its kernels in "kernels"', hint=REGENERATE)
    extra = document.get("dependencies", [])
    if not isinstance(extra, list):
        raise LockfileError(f'{source}: "dependencies" must be a list', hint=REGENERATE)
    declared = _parse_entries(items, "kernel", source)
    repos = Counter(info.repo_id for info in declared)
    twice = sorted(repo_id for repo_id, count in repos.items() if count > 1)
    if twice:
        raise LockfileError(f"{source} locks {twice[0]} twice", hint=REGENERATE)
    dependencies = _parse_entries(extra, "dependency", source)
    both = sorted(declared.keys() & dependencies.keys())
    if both:
        raise LockfileError(f"{source} locks {both[0]} twice", hint=REGENERATE)
    try:
        linked = _link({**declared, **dependencies}, source)
    except RecursionError:  # a chain of dependencies thousands of kernels long
        raise LockfileError(
            f"{source}: kernel dependencies are nested too deeply", hint=REGENERATE
        ) from None
    return Lockfile(
        {info.repo_id: linked[info] for info in declared},
        source,
        {info: linked[info] for info in dependencies},
    )


# An entry as parsed, with the kernels it depends on still to be linked to their entries.
_Parsed = tuple[LockedKernel, tuple[RepoInfo, ...]]


def _parse_entries(items: list[Any], what: str, source: str) -> dict[RepoInfo, _Parsed]:
    entries: dict[RepoInfo, _Parsed] = {}
    for position, item in enumerate(items):
        try:
            parsed = _parse_kernel(item)
        except ValueError as exc:
            raise LockfileError(
                f"{source}, {what} #{position + 1}: {exc}", hint=REGENERATE
            ) from None
        info = parsed[0].info
        if info in entries:
            raise LockfileError(f"{source} locks {info.repo_id} twice", hint=REGENERATE)
        entries[info] = parsed
    return entries


def _link(entries: Mapping[RepoInfo, _Parsed], source: str) -> dict[RepoInfo, LockedKernel]:
    """Each entry with its ``dependencies``: the entries its ``kernel_depends`` names."""
    linked: dict[RepoInfo, LockedKernel] = {}

    def link(info: RepoInfo, chain: tuple[RepoInfo, ...]) -> LockedKernel:
        if info in linked:
            return linked[info]
        locked, depends = entries[info]
        for dep in depends:
            if dep in chain or dep == info:
                cycle = format_cycle(
                    [*map(dependency_label, (*chain, info)), dependency_label(dep)]
                )
                raise LockfileError(
                    f"{source}: kernel dependencies form a cycle: {cycle}", hint=REGENERATE
                )
            if dep not in entries:
                raise LockfileError(
                    f"{source}: {info} depends on {dep}, which it does not lock",
                    hint=REGENERATE,
                )
        deps = tuple(link(dep, (*chain, info)) for dep in depends)
        linked[info] = locked._replace(dependencies=deps)
        return linked[info]

    for info in entries:
        link(info, ())
    return linked


class NewerFormatError(LockfileError):
    """A lock in a format newer than this flashhub-kernels reads: only an upgrade reads it,
    so a re-lock must not replace it unread."""


def _check_format(value: object, source: str) -> None:
    if value == FORMAT_VERSION and not isinstance(value, bool):
        return
    if isinstance(value, int) and not isinstance(value, bool) and value > FORMAT_VERSION:
        raise NewerFormatError(
            f"{source} has format version {value}; this flashhub-kernels reads version "
            f"{FORMAT_VERSION}",
            hint="upgrade flashhub-kernels",
        )
    raise LockfileError(
        f'{source} has no valid format field (expected "version": {FORMAT_VERSION})',
        hint=REGENERATE,
    )


def _parse_kernel(item: object) -> _Parsed:
    """One entry of ``"kernels"`` or ``"dependencies"``, and the kernels it depends on;
    ``ValueError`` says what is wrong with it."""
    if not isinstance(item, dict):
        raise ValueError("must be an object")
    repo_id = item.get("repo_id")
    if not isinstance(repo_id, str):
        raise ValueError('"repo_id" must be a string such as "org/pkg"')
    parse_repo_id(repo_id)
    version = check_version(item.get("version"))
    specifier = item.get("specifier", "")
    if not isinstance(specifier, str):
        raise ValueError(f'{repo_id}: "specifier" must be a string')
    variants = item.get("variants")
    if not isinstance(variants, dict) or not variants:
        raise ValueError(f'{repo_id}: "variants" must map each variant to its hash')
    hashes, signers = {}, {}
    for name, entry in variants.items():
        check_variant_segment(name)
        content_hash = entry.get("hash") if isinstance(entry, dict) else None
        if not isinstance(content_hash, str) or not _HASH.fullmatch(content_hash):
            raise ValueError(f'{repo_id}, variant {name}: "hash" must be "sha256-<64 hex>"')
        hashes[name] = content_hash
        signer = entry.get("signer")
        if signer is not None and not is_key_id(signer):
            raise ValueError(f'{repo_id}, variant {name}: "signer" must be a key id (16 hex)')
        if signer is not None:
            signers[name] = signer
    source = _variants_source(item, repo_id)
    locked = LockedKernel(repo_id, version, hashes, specifier, source, signers)
    return locked, _kernel_depends(item.get("kernel_depends", []), repo_id)


def _kernel_depends(value: object, repo_id: str) -> tuple[RepoInfo, ...]:
    what = f'{repo_id}: "kernel_depends" must list {{"repo_id": "org/pkg", "version": N}} objects'
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(what)
    depends = []
    for entry in value:
        dep_id = entry.get("repo_id")
        if not isinstance(dep_id, str):
            raise ValueError(what)
        depends.append(RepoInfo(dep_id, check_version(entry.get("version"))))
    return tuple(sorted(set(depends)))


def _variants_source(item: dict[str, Any], repo_id: str) -> VariantsSource:
    source = item.get("variants_source", "published")
    for known in _VARIANTS_SOURCES:
        if source == known:
            return known
    raise ValueError(f'{repo_id}: "variants_source" must be "published" or "probed"')
