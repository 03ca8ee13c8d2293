"""The ``metadata.json`` a variant is published with, in the kernel builder's schema.

Hugging Face's kernels client reads a variant only when its ``metadata.json`` holds
the builder's identifying fields, so the publisher writes them all::

    name, id, version, license, python-depends, kernel-depends, backend {type[, archs]}
    digest {"algorithm": "sha256", "files": {...}}, sizes

A field the build's own ``metadata.json`` states (a builder wrote it) is published as
it is. One it lacks is derived:

- ``name``: ``[general] name`` of the kernel's ``build.toml``, else the repo's package
  name (lower case, ``_`` -> ``-``); ``license``, ``upstream``, ``source``: from
  ``build.toml``'s ``[general]``, else the license of ``pyproject.toml``'s
  ``[project]``, else ``"unknown"`` (no upstream or source);
- ``version``: the version being published;
- ``id``: the op namespace of the variant's one native library (its file name up to the
  first dot, as the builder names both), else ``_<py_pkg>_<backend>_<7 hex>`` from the
  variant's content hash;
- ``backend``: the variant name's backend (``torch-universal``, pure Python, as
  ``cpu``: the schema has no universal backend); ``python-depends`` and
  ``kernel-depends``: empty.

``build.toml`` and ``pyproject.toml`` are looked for in the kernel directory: the one
passed, when it holds ``build/``, or the parent of a directory named ``build``.

A build's own ``"digest"`` must list exactly the files published, with the same
sha256, else the build changed after it was made and is refused; ``sizes`` is always
written anew. Its own ``backend`` is refused where a load would offer the build to
other GPUs than it says: a misspelt ``type`` or ``archs`` (which a load ignores), a
``type`` other than the variant name's backend, or CUDA archs spelled as nvcc spells
them (``sm_80`` for ``8.0``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._constants import MANIFEST_NAME
from .._models.kernel_dir import NATIVE_SUFFIXES
from .._models.kernel_metadata import read_kernel_metadata
from .._models.manifest import check_relative_path, content_hash, decode_digest, encode_digest
from .._models.names import RepoInfo
from .._utils.pyproject import load_toml, lookup
from .._variants.compat import read_target
from .._variants.grammar import as_variant, parse_variant
from ..errors import LockfileError, ManifestError, PublishError
from .layout import SourceFile

# The backend each backend of a variant name is published as (the builder's names).
_BACKEND_TYPES = {"npu": "cann", None: "cpu"}  # None: torch-universal
# The keys of "backend" that a load reads.
_BACKEND_KEYS = ("type", "archs")
# A CUDA arch as nvcc names it (sm_80, sm80, compute_90a), not as builders write it (8.0).
_NVCC_ARCH = re.compile(r"(sm|compute)_?([0-9]{2,3})([af]?)", re.IGNORECASE)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-")


def kernel_defaults(build_dir: Path, repo: RepoInfo) -> dict[str, object]:
    """The fields every variant of the kernel gets unless its own metadata.json has them."""
    kernel_dir = build_dir if (build_dir / "build").is_dir() else None
    if kernel_dir is None and build_dir.name == "build":
        kernel_dir = build_dir.parent
    general = _toml_table(kernel_dir / "build.toml", "general") if kernel_dir else {}
    project = _toml_table(kernel_dir / "pyproject.toml", "project") if kernel_dir else {}
    defaults: dict[str, object] = {
        "name": _text(general.get("name")) or _kernel_name(repo.name),
        "version": repo.version,
        "license": _text(general.get("license")) or _license(project.get("license")),
        "python-depends": [],
        "kernel-depends": [],
    }
    for key in ("upstream", "source"):
        value = _text(general.get(key))
        if value:
            defaults[key] = value
    return defaults


def variant_metadata(
    variant: str,
    files: Mapping[str, SourceFile],
    own: Mapping[str, Any],
    defaults: Mapping[str, object],
    py_pkg: str,
    path: Path,
) -> dict[str, object]:
    """The ``metadata.json`` document of ``variant``: ``own`` (the build's, read from
    ``path``) with what it lacks derived, and the digests and sizes of ``files``.

    Raises:
        PublishError: the build's own digests disagree with ``files``, one of its
            builder fields is malformed, a load would read its ``backend`` otherwise
            than its builder meant, or it says it is a zip build and ``files`` lack its
            archive ``<id>.zip``.
    """
    if "digest" in own:
        _check_own_digest(own["digest"], files, path)
    digests = {rel: source.digest for rel, source in files.items()}
    derived = {
        **defaults,
        "id": _variant_id(files, py_pkg, _backend_type(variant), content_hash(digests)),
        "backend": {"type": _backend_type(variant)},
    }
    document: dict[str, object] = {
        **derived,
        **{key: value for key, value in own.items() if key not in ("digest", "sizes")},
        "digest": {
            "algorithm": "sha256",
            "files": {rel: encode_digest(digest) for rel, digest in sorted(digests.items())},
        },
        "sizes": {rel: source.size for rel, source in sorted(files.items())},
    }
    try:
        archive = read_kernel_metadata(document, source=str(path)).archive
    except ManifestError as exc:
        raise PublishError(exc.message, hint="fix the build's metadata.json") from None
    if "backend" in own:  # a builder's, checked as a client just read it
        _check_own_backend(variant, document, path)
    if archive is not None and archive not in files:
        raise PublishError(
            f'{path} says "build-layout": "zip", but {path.parent} holds no {archive}, the '
            "archive named after its id",
            hint='build the kernel again, or fix "id" in its metadata.json',
        )
    return document


def zip_archive_name(document: Mapping[str, object], path: Path) -> str:
    """The archive, ``<id>.zip``, of ``document``'s build laid out as a zip build; its
    ``id`` (the build's own, from ``path``, if it has one) checked as a client checks it,
    before anything is written under that name.

    Raises:
        PublishError: the ``id`` is no file name (``"../x"``).
    """
    try:
        archive = read_kernel_metadata(
            {**document, "build-layout": "zip"}, source=str(path)
        ).archive
        assert archive is not None, "a zip build names its archive"
        check_relative_path(archive)
    except ManifestError as exc:
        raise PublishError(exc.message, hint="fix the build's metadata.json") from None
    except ValueError as exc:
        raise PublishError(f"{path}: {exc}", hint="fix the build's metadata.json") from None
    return archive


def _check_own_digest(digest: object, files: Mapping[str, SourceFile], path: Path) -> None:
    """Refuse a build whose ``metadata.json`` lists other files, or other digests, than
    the files it holds: the build was changed after the builder hashed it."""
    listed = digest.get("files") if isinstance(digest, dict) else None
    if not isinstance(listed, dict):
        raise PublishError(
            f'"digest" in {path} must be {{"algorithm": "sha256", "files": {{...}}}}',
            hint="fix it, or delete the digest: publish writes the file digests itself",
        )
    algorithm = digest.get("algorithm", "sha256") if isinstance(digest, dict) else None
    if algorithm != "sha256":
        raise PublishError(
            f"{path} lists {algorithm!r} digests; publish checks a build's own digests "
            "against sha256 only",
            hint="build the kernel with sha256 digests, or delete its digest",
        )
    unbuilt = sorted(listed.keys() - files.keys())
    left_out = next((rel for rel in unbuilt if _on_disk(path.parent, rel)), None)
    if left_out is not None:
        raise PublishError(
            f"{path} lists {left_out}, which publish leaves out of every build: hidden files, "
            "__pycache__, .pyc files and editors' backup and swap files (foo.py~, #foo.py#, "
            "foo.py.swp) are never published",
            hint="remove it from the build and from the digest, or rename it if it must ship",
        )
    changed = _first_difference(listed, files)
    if changed is not None:
        raise PublishError(
            f"the files of {path.parent} do not match the digests of its {MANIFEST_NAME}: "
            f"{changed}",
            hint="the build changed after it was made: rebuild the kernel, or restore the "
            "files it was built with",
        )


def _on_disk(variant_dir: Path, rel: str) -> bool:
    """Whether the digest's ``rel`` names something in ``variant_dir`` (that the build left out)."""
    try:
        return (variant_dir / rel).exists()
    except (OSError, ValueError):  # a name no file can have (a NUL), or too long
        return False


def _first_difference(listed: Mapping[str, object], files: Mapping[str, SourceFile]) -> str | None:
    for rel in sorted(listed.keys() | files.keys()):
        if rel not in files:
            return f"{rel} is listed but not in the build"
        if rel not in listed:
            return f"{rel} is in the build but not listed"
        try:
            if decode_digest(listed[rel]) != files[rel].digest:
                return f"{rel} has other content than its digest"
        except ValueError as exc:
            return f"{rel}: {exc}"
    return None


def _check_own_backend(variant: str, document: Mapping[str, Any], path: Path) -> None:
    """Refuse a build's ``backend`` that a load would read otherwise than its builder
    meant, which changes the GPUs the build is offered to: a misspelt key, a type
    other than the variant name's backend, or CUDA archs spelled as nvcc spells them."""
    backend = document["backend"]
    for key in sorted(set(backend) - set(_BACKEND_KEYS)):
        # Only a misspelling: a key unlike both may be a newer builder's.
        meant = difflib.get_close_matches(key.lower(), _BACKEND_KEYS, n=1, cutoff=0.75)
        if meant:
            raise PublishError(
                f'{path}: "backend" holds {key!r}, which a load ignores: it reads "type" '
                'and "archs" only, so the build would be offered to the GPUs that the key '
                "may have meant to leave out",
                hint=f'rename it "{meant[0]}"',
            )
    target = read_target(document)
    built_for = as_variant(variant).backend
    if built_for is not None and target.backend != built_for:
        raise PublishError(
            f'{path} says "backend": {{"type": {json.dumps(backend["type"])}}}, but the name '
            f"of the variant {variant} says it is built for {built_for}: a load offers it to "
            f"{built_for} machines by its name, and never checks its archs against their device",
            hint=f'write "type": "{_backend_type(variant)}", or move the build to the variant '
            "of its backend",
        )
    nvcc = {arch: match for arch in target.archs if (match := _NVCC_ARCH.fullmatch(arch))}
    if target.backend == "cuda" and nvcc:
        archs = [_cuda_arch(nvcc[arch]) if arch in nvcc else arch for arch in target.archs]
        raise PublishError(
            f'{path} spells "archs" as nvcc does ({", ".join(nvcc)}): a load compares '
            'compute capabilities such as "8.0" or "9.0a", passes over an arch it cannot '
            "read, and offers a build whose archs it reads none of to every GPU",
            hint=f'write "archs": {json.dumps(archs)}',
        )


def _cuda_arch(nvcc: re.Match[str]) -> str:
    """The builder's spelling of an arch as nvcc names it: ``sm_90a`` -> ``9.0a``,
    ``compute_80`` (PTX, which the driver compiles for newer GPUs too) -> ``8.0+PTX``."""
    kind, digits, suffix = nvcc.groups()
    ptx = "+PTX" if kind.lower() == "compute" and not suffix else ""
    return f"{digits[:-1]}.{digits[-1]}{suffix.lower()}{ptx}"


def _backend_type(variant: str) -> str:
    parsed = parse_variant(variant)
    if parsed.framework == "sdk" and parsed.backend is None:
        return "agnostic"  # an SDK for any backend, as the builder writes it
    return _BACKEND_TYPES.get(parsed.backend, parsed.backend or "cpu")


def _variant_id(files: Mapping[str, SourceFile], py_pkg: str, backend: str, digest: str) -> str:
    natives = {
        rel.rsplit("/", 1)[-1].partition(".")[0] for rel in files if rel.endswith(NATIVE_SUFFIXES)
    }
    if len(natives) == 1:
        return natives.pop()
    return f"_{py_pkg}_{backend}_{digest.removeprefix('sha256-')[:7]}"


def _kernel_name(pkg: str) -> str:
    """The repo's package name as the builder's schema spells names: lower case letters,
    digits and ``-``, starting with a letter."""
    name = "".join(c for c in pkg.lower().replace("_", "-") if c in _NAME_CHARS)
    name = name.lstrip("-0123456789").rstrip("-")
    return name if len(name) >= 2 else "kernel"


def _license(value: object) -> str:
    if isinstance(value, dict):
        value = value.get("text")
    return _text(value) or "unknown"


def _text(value: object) -> str | None:
    return (value.strip() or None) if isinstance(value, str) else None


def _toml_table(path: Path, table: str) -> dict[str, Any]:
    """``[table]`` of the TOML file at ``path``; empty when there is no such file."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    try:
        found = lookup(load_toml(data), table)
    except LockfileError as exc:  # no TOML parser: Python 3.10 without tomli
        raise PublishError(f"cannot read {path}: {exc.message}", hint=exc.hint) from None
    except ValueError as exc:
        raise PublishError(
            f"{path} {exc}", hint="fix the file: publish reads the kernel's name and license there"
        ) from None
    return found if isinstance(found, dict) else {}
