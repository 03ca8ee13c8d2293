"""The kernel builder's fields of ``metadata.json``, read into typed records. Pure.

Besides the file digests (:mod:`~.manifest`), a builder writes what identifies a build
and what loading it needs::

    {
      "name": "activation", "id": "_activation_cuda_0f3c2a1", "version": 1,
      "license": "apache-2.0", "upstream": "https://...", "source": "https://...",
      "python-depends": ["einops"],
      "kernel-depends": [{"repo-id": "kernels-community/einops", "version": 1}],
      "backend": {"type": "cuda", "archs": ["8.0", "9.0a"]},
      "kernels-minver": "0.17",
      "flashhub-kernels-minver": "0.2",
      "build-layout": "files",
      "provenance": {
        "kernel-builder": {"version": "0.17.0", "commit": "<40 hex>", "dirty": false},
        "kernel": {"commit": "<40 hex>", "dirty": true}
      },
      "digest": {"algorithm": "sha256", "files": {...}}
    }

Every field is optional here (trees published before these fields existed hold only
``digest`` and ``sizes``); a field that is present must have its type, else
:class:`ManifestError` names it. ``flashhub-kernels-minver`` is this project's own:
the oldest flashhub-kernels that loads the build. A ``kernel-depends`` entry that pins
a git ``revision`` instead of a ``version`` is refused: this CDN publishes numbered
versions only. ``build-layout`` is ``"files"`` (the default) or ``"zip"``: the package's
files are then one archive, ``<id>.zip``, in the variant directory
(:mod:`~flashhub_kernels._loading.zip_layout`).
"""

from __future__ import annotations

from ..errors import KernelDependencyError, ManifestError
from .names import RepoInfo, check_version, is_digits
from .record import Record

# Real kernels depend on kernels 0 to 2 levels deep; an endless chain served by a CDN must
# end in a clear error, long before Python's recursion limit.
MAX_DEPENDENCY_DEPTH = 64

# Records, not NamedTuples, and no typing at run time: a load of a kernel whose
# metadata.json asks something of it imports this module, and defining five NamedTuples
# would cost it more than the rest of the checks.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

# The keys a load acts on: their values (when they ask for something) are recorded with
# a cache entry, so that a warm load checks them without reading metadata.json again.
LOAD_KEYS = (
    "name",
    "python-depends",
    "kernel-depends",
    "kernels-minver",
    "flashhub-kernels-minver",
    "provenance",
)
_TEXT_KEYS = ("name", "id", "license", "upstream", "source")
_HEX = frozenset("0123456789abcdefABCDEF")
METADATA_HINT = "the kernel's metadata.json is malformed; report it to the kernel's publisher"
BUILD_LAYOUTS = ("files", "zip")


class KernelDependency(Record):
    """Another kernel a build needs, at a version: an entry of ``kernel-depends``."""

    repo_id: str
    version: int

    @property
    def info(self) -> RepoInfo:
        return RepoInfo(self.repo_id, self.version)

    def __str__(self) -> str:
        return dependency_label(self.info)

    def to_json(self) -> dict[str, object]:
        return {"repo-id": self.repo_id, "version": self.version}


class BackendInfo(Record):
    """``backend``: the backend a build is for and, when stated, the architectures it
    holds code for (CUDA capabilities such as ``"9.0a"``, ROCm ``gfx`` targets)."""

    type: str
    archs: tuple[str, ...] | None = None

    @property
    def backend_type(self) -> str:
        """``type``, by the name Hugging Face kernels gives it."""
        return self.type

    def to_json(self) -> dict[str, object]:
        shown: dict[str, object] = {"type": self.type}
        return shown if self.archs is None else {**shown, "archs": list(self.archs)}


class GitState(Record):
    """The git state a build came from: its ``HEAD`` commit, and uncommitted changes."""

    commit: str
    dirty: bool

    def to_json(self) -> dict[str, object]:
        return {"commit": self.commit, "dirty": self.dirty}


class KernelBuilderVersion(Record):
    """The kernel builder that made a build: its version, and its git state when known."""

    version: str
    git: GitState | None = None


class Provenance(Record):
    """``provenance``: the builder's version and git state, and the kernel source's."""

    builder_version: str
    builder: GitState | None = None
    kernel: GitState | None = None

    @property
    def kernel_builder(self) -> KernelBuilderVersion:
        """The builder's version and git state, as Hugging Face kernels groups them."""
        return KernelBuilderVersion(self.builder_version, self.builder)

    @property
    def dirty(self) -> bool:
        """Whether the builder's or the kernel's tree had uncommitted changes."""
        return bool(self.dirty_sources)

    @property
    def dirty_sources(self) -> tuple[str, ...]:
        """What had uncommitted changes when the build was made; empty when clean."""
        dirty = []
        if self.kernel is not None and self.kernel.dirty:
            dirty.append("kernel source")
        if self.builder is not None and self.builder.dirty:
            dirty.append("kernel-builder")
        return tuple(dirty)

    def to_json(self) -> dict[str, object]:
        builder: dict[str, object] = {"version": self.builder_version}
        if self.builder is not None:
            builder |= self.builder.to_json()
        shown: dict[str, object] = {"kernel-builder": builder}
        if self.kernel is not None:
            shown["kernel"] = self.kernel.to_json()
        return shown


class KernelMetadata(Record):
    """The builder's fields of one variant's ``metadata.json``; ``None`` where absent."""

    name: str | None = None
    id: str | None = None
    version: int | None = None
    license: str | None = None
    upstream: str | None = None
    source: str | None = None
    python_depends: tuple[str, ...] = ()
    kernel_depends: tuple[KernelDependency, ...] = ()
    backend: BackendInfo | None = None
    kernels_minver: str | None = None
    flashhub_kernels_minver: str | None = None
    provenance: Provenance | None = None
    build_layout: str | None = None

    @property
    def archive(self) -> str | None:
        """The file a ``"zip"`` build's package is, ``<id>.zip``; ``None`` for a build of
        files."""
        return f"{self.id}.zip" if self.build_layout == "zip" else None

    @property
    def dirty_sources(self) -> tuple[str, ...]:
        return self.provenance.dirty_sources if self.provenance is not None else ()

    def to_json(self) -> dict[str, object]:
        """The fields as ``metadata.json`` spells them; absent ones are left out."""
        shown: dict[str, object] = {
            key: value
            for key, value in (
                ("name", self.name),
                ("id", self.id),
                ("version", self.version),
                ("license", self.license),
                ("upstream", self.upstream),
                ("source", self.source),
                ("kernels-minver", self.kernels_minver),
                ("flashhub-kernels-minver", self.flashhub_kernels_minver),
                ("build-layout", self.build_layout),
            )
            if value is not None
        }
        shown["python-depends"] = list(self.python_depends)
        shown["kernel-depends"] = [dep.to_json() for dep in self.kernel_depends]
        if self.backend is not None:
            shown["backend"] = self.backend.to_json()
        if self.provenance is not None:
            shown["provenance"] = self.provenance.to_json()
        return shown


def read_kernel_metadata(
    document: Mapping[str, Any], *, source: str = "metadata.json"
) -> KernelMetadata:
    """The builder's fields of a ``metadata.json`` object (``Manifest.document``).

    Raises:
        ManifestError: a field has the wrong type or form; the message names it.
    """
    text = {key: _text(document, key, source) for key in _TEXT_KEYS}
    return KernelMetadata(
        **text,
        version=_version(document, source),
        python_depends=_python_depends(document.get("python-depends"), source),
        kernel_depends=_kernel_depends(document.get("kernel-depends"), source),
        backend=_backend(document.get("backend"), source),
        kernels_minver=_minver(document, "kernels-minver", source),
        flashhub_kernels_minver=_minver(document, "flashhub-kernels-minver", source),
        provenance=_provenance(document.get("provenance"), source),
        build_layout=_build_layout(document, text["id"], source),
    )


def load_requirements(
    document: Mapping[str, Any], *, source: str = "metadata.json"
) -> dict[str, Any]:
    """The part of a ``metadata.json`` object that a load must act on, as it is spelled
    there: empty when the load has nothing to check.

    Raises:
        ManifestError: as :func:`read_kernel_metadata`.
    """
    metadata = read_kernel_metadata(document, source=source)
    acts = (
        metadata.python_depends
        or metadata.kernel_depends
        or metadata.kernels_minver
        or metadata.flashhub_kernels_minver
        or metadata.dirty_sources
    )
    return {key: document[key] for key in LOAD_KEYS if key in document} if acts else {}


def parse_python_depends(value: object) -> tuple[str, ...]:
    """``python-depends``: a list of package names, none of them empty; the reader of a
    ``metadata.json`` and the publisher both check it so.

    Raises:
        ValueError: ``value`` is no such list.
    """
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError('"python-depends" must be a list of package names (non-empty strings)')
    return tuple(value)


def dependency_label(info: RepoInfo) -> str:
    """A kernel as a chain of dependencies names it: ``org/pkg v1``."""
    return f"{info.repo_id} v{info.version}"


def format_cycle(chain: Sequence[str]) -> str:
    """``a/x v1 -> b/y v2 -> a/x v1``: a chain of kernels, each depending on the next."""
    return " -> ".join(chain)


def dependency_cycle(chain: Sequence[str]) -> KernelDependencyError:
    """The error for kernels that depend on each other: ``chain`` (``org/pkg vN``, each
    depending on the next) ends with the kernel it began with."""
    return KernelDependencyError(
        f"kernel dependencies form a cycle: {format_cycle(chain)}",
        hint="a kernel cannot depend on itself, directly or through others: report it to "
        "the kernels' publisher",
    )


def check_dependency(chain: Sequence[str], dep: str) -> None:
    """Refuse ``dep`` as a dependency of the last kernel of ``chain`` (``org/pkg vN``,
    each depending on the next) where it closes a cycle or goes past
    :data:`MAX_DEPENDENCY_DEPTH` levels below the first kernel.

    Raises:
        KernelDependencyError: the message spells out the chain.
    """
    if dep in chain:
        raise dependency_cycle([*chain, dep])
    if len(chain) > MAX_DEPENDENCY_DEPTH:
        raise KernelDependencyError(
            f"kernel dependencies go more than {MAX_DEPENDENCY_DEPTH} levels deep: "
            f"{format_cycle([*chain, dep])}",
            hint="a chain this deep is a publisher's mistake: report it to the kernels' publisher",
        )


def parse_release(text: str) -> tuple[int, ...]:
    """``"0.17.2"`` -> ``(0, 17, 2)``, trailing zeros dropped, so ``"1.0"`` equals ``"1"``.

    Raises:
        ValueError: ``text`` is not dotted numbers.
    """
    parts = text.split(".")
    if not all(is_digits(part) and len(part) <= 9 for part in parts):
        raise ValueError(f"{text!r} is not a version of dotted numbers such as '0.17'")
    release = [int(part) for part in parts]
    while release and release[-1] == 0:
        release.pop()
    return tuple(release)


# -- the fields ---------------------------------------------------------------------------


def _error(source: str, message: str) -> ManifestError:
    return ManifestError(f"{source}: {message}", hint=METADATA_HINT)


def _text(document: Mapping[str, Any], key: str, source: str) -> str | None:
    value = document.get(key)
    if value is not None and not isinstance(value, str):
        raise _error(source, f'"{key}" must be a string, got {_shown(value)}')
    return value


def _version(document: Mapping[str, Any], source: str) -> int | None:
    value = document.get("version")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _error(source, f'"version" must be the kernel\'s version number, got {_shown(value)}')
    return value


def _minver(document: Mapping[str, Any], key: str, source: str) -> str | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _error(
            source, f'"{key}" must be a version string such as "0.17", got {_shown(value)}'
        )
    try:
        parse_release(value)
    except ValueError as exc:
        raise _error(source, f'"{key}": {exc}') from None
    return value


def _build_layout(document: Mapping[str, Any], kernel_id: str | None, source: str) -> str | None:
    """``build-layout``; a ``"zip"`` build names its archive by its ``id``, which must then
    be a file name."""
    value = document.get("build-layout")
    if value is None:
        return None
    if value not in BUILD_LAYOUTS:
        raise ManifestError(
            f'{source}: "build-layout" is {_shown(value)}; this client loads the layouts '
            f"{' and '.join(repr(layout) for layout in BUILD_LAYOUTS)}",
            hint="upgrade flashhub-kernels; if it is the newest, report it to the kernel's "
            "publisher",
        )
    if value == "zip" and (not kernel_id or "/" in kernel_id or "\\" in kernel_id):
        raise _error(
            source,
            f'a "zip" build names its archive <id>.zip, so its "id" must be a file name, '
            f"got {_shown(kernel_id)}",
        )
    return str(value)


def _python_depends(value: object, source: str) -> tuple[str, ...]:
    if value is None:
        return ()
    try:
        return parse_python_depends(value)
    except ValueError as exc:
        raise _error(source, str(exc)) from None


def _kernel_depends(value: object, source: str) -> tuple[KernelDependency, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _error(source, '"kernel-depends" must be a list of {"repo-id": ..., "version": N}')
    depends = tuple(_kernel_dependency(entry, source) for entry in value)
    repos = [dep.repo_id for dep in depends]
    twice = sorted({repo for repo in repos if repos.count(repo) > 1})
    if twice:
        raise _error(source, f'"kernel-depends" lists {twice[0]} more than once')
    return depends


def _kernel_dependency(entry: object, source: str) -> KernelDependency:
    what = '"kernel-depends" entries must be {"repo-id": "org/pkg", "version": N}'
    if not isinstance(entry, dict):
        raise _error(source, f"{what}, got {_shown(entry)}")
    repo_id = entry.get("repo-id")
    if not isinstance(repo_id, str):
        raise _error(source, f"{what}, got {_shown(entry)}")
    if "revision" in entry:
        raise _error(
            source,
            f'"kernel-depends" pins {repo_id} to the revision {_shown(entry["revision"])}; '
            "this CDN publishes numbered versions only, so the dependency must name its "
            '"version"',
        )
    unknown = sorted(set(entry) - {"repo-id", "version"})
    if unknown:
        raise _error(
            source, f'"kernel-depends" entry for {repo_id} has an unknown key {unknown[0]!r}'
        )
    try:
        info = RepoInfo(repo_id, check_version(entry.get("version")))
    except ValueError as exc:
        raise _error(source, f'"kernel-depends" entry for {_shown(repo_id)}: {exc}') from None
    return KernelDependency(info.repo_id, info.version)


def _backend(value: object, source: str) -> BackendInfo | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if not isinstance(value, dict) or not isinstance(kind, str) or not kind:
        raise _error(source, '"backend" must be an object {"type": "cuda", "archs": [...]}')
    archs = value.get("archs")
    if archs is None:
        return BackendInfo(kind)
    if not isinstance(archs, list) or not all(isinstance(a, str) and a for a in archs):
        raise _error(source, '"backend": "archs" must be a list of names such as "9.0a"')
    return BackendInfo(kind, tuple(archs))


def _provenance(value: object, source: str) -> Provenance | None:
    if value is None:
        return None
    builder = value.get("kernel-builder") if isinstance(value, dict) else None
    version = builder.get("version") if isinstance(builder, dict) else None
    if not isinstance(value, dict) or not isinstance(builder, dict) or not isinstance(version, str):
        raise _error(
            source,
            '"provenance" must hold "kernel-builder": {"version": ..., "commit": ..., '
            '"dirty": ...}',
        )
    kernel = value.get("kernel")
    return Provenance(
        version,
        _git_state(builder, "kernel-builder", source, optional=True),
        None if kernel is None else _git_state(kernel, "kernel", source, optional=False),
    )


def _git_state(value: object, what: str, source: str, *, optional: bool) -> GitState | None:
    """``{"commit": <hex>, "dirty": bool}`` (``sha`` is the older name of ``commit``)."""
    if not isinstance(value, dict):
        raise _error(source, f'"provenance": "{what}" must be an object')
    commit = value.get("commit", value.get("sha"))
    dirty = value.get("dirty")
    if optional and commit is None and dirty is None:
        return None
    if not (
        isinstance(commit, str) and len(commit) in (40, 64) and set(commit) <= _HEX
    ) or not isinstance(dirty, bool):
        raise _error(
            source,
            f'"provenance": "{what}" must give its "commit" (a full git object id) and '
            '"dirty" (true or false) together',
        )
    return GitState(commit.lower(), dirty)


def _shown(value: object) -> str:
    return repr(value)[:60]
