"""The CDN's JSON documents: parse, validate, encode digests. Pure functions, no I/O.

``metadata.json`` is the manifest of one variant::

    {"digest": {"algorithm": "sha256", "files": {"<relative path>": "<base64 sha256>"}},
     "sizes": {"<path>": <bytes>}}

Exactly the listed files make up the variant; ``sizes`` is optional, and so is
``algorithm`` (``sha256``, the only one accepted). The kernel builder's other fields
(name, dependencies, backend, provenance) are :mod:`~.kernel_metadata`'s. Everything here
treats the documents as hostile input: size, shape, every path, digest and size are
checked before any of it is used to build a URL or a file name.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

from .._constants import MANIFEST_NAME, MANIFEST_SIGNATURE_NAME, RECEIPT_NAME
from .._utils.escaping import escape_controls
from .._utils.parsing import parse_capped
from ..errors import ManifestError
from .names import MAX_VERSION, RepoInfo
from .record import Record

_CONTROL_CHARACTER = re.compile("[\x00-\x1f\x7f]")  # NUL and the other C0 controls, DEL
# A variant name becomes the name of a cache directory: no leading dot, since the cache's
# staging, partial and trash directories start with one.
_VARIANT_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")

MAX_DOCUMENT_BYTES = 1 << 20
# A builder's metadata.json nests 3 levels. The bound is fixed, not Python's recursion
# limit: what a load records of a document is read again from deeper call stacks.
MAX_NESTING = 32
MAX_FILES = 10_000
_MOST_BYTES = 2**63  # past the largest file offset (off_t) a file system allows
MAX_PATH_LENGTH = 1024  # bytes of UTF-8, the whole path
MAX_SEGMENT_LENGTH = 255  # bytes of UTF-8: NAME_MAX of the usual file systems
# Files the cache writes beside a variant's own files; a manifest may not list them.
RESERVED_NAMES = frozenset({MANIFEST_NAME, RECEIPT_NAME, MANIFEST_SIGNATURE_NAME})
_RESERVED_KEYS = frozenset(name.casefold() for name in RESERVED_NAMES)
_HINT = "the CDN serves a broken or tampered document; report it to the kernel's publisher"


class Manifest(Record):
    """A validated ``metadata.json``: relative path -> raw 32-byte sha256, and the whole
    JSON object, other keys kept.

    ``sizes`` maps every listed path to its size in bytes when the document states
    them (``None`` when it does not). They bound downloads; the content hash leaves
    them out, so a manifest with or without them names the same content.
    """

    files: Mapping[str, bytes]
    document: Mapping[str, Any]
    sizes: Mapping[str, int] | None = None

    @property
    def content_hash(self) -> str:
        """``sha256-<hex>`` over the sorted (path, digest) pairs: what lock files pin."""
        return content_hash(self.files)

    def size_of(self, path: str) -> int | None:
        """The size ``metadata.json`` states for ``path``, or ``None`` when it states none."""
        return None if self.sizes is None else self.sizes[path]


def content_hash(files: Mapping[str, bytes]) -> str:
    """Hash a variant's identity: for each path in order, ``path NUL digest``."""
    hasher = hashlib.sha256()
    for path in sorted(files):
        hasher.update(path.encode("utf-8") + b"\0" + files[path])
    return f"sha256-{hasher.hexdigest()}"


def decode_digest(value: object) -> bytes:
    """Accept standard, unpadded or URL-safe base64, optionally ``sha256-`` prefixed."""
    if not isinstance(value, str):
        raise ValueError(f"digest must be a base64 string, got {type(value).__name__}")
    text = value.removeprefix("sha256-").strip()
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"digest {value!r} is not valid base64") from None
    if len(raw) != 32:
        raise ValueError(f"digest {value!r} decodes to {len(raw)} bytes, a sha256 has 32")
    return raw


def encode_digest(raw: bytes) -> str:
    """The form writers emit: standard base64 with padding."""
    return base64.b64encode(raw).decode("ascii")


def check_variant_segment(name: object) -> str:
    """Return ``name`` if a variant of that name is safe as one path segment: 1 to 200
    ASCII letters, digits, ``.``, ``-`` and ``_``, the first a letter or digit; raise
    ``ValueError`` otherwise.

    Not the variant grammar (:func:`~.._variants.grammar.is_variant_name`): a name from
    the CDN or a lock file need only be safe to look up, not one a system can load.
    """
    if not isinstance(name, str) or not _VARIANT_SEGMENT.fullmatch(name):
        raise ValueError(f"{name!r} is not a variant name (letters, digits, '.', '-' and '_')")
    return name


def check_relative_path(path: object) -> str:
    """Return ``path`` if it is a safe, normalised relative path with ``/`` separators."""
    if not isinstance(path, str) or not path:
        raise ValueError(f"file path {path!r} must be a non-empty string")
    length = len(_utf8(path))
    if length > MAX_PATH_LENGTH:
        raise ValueError(f"file path of {length} bytes is too long (at most {MAX_PATH_LENGTH})")
    if "\\" in path:
        raise ValueError(f"file path {path!r} contains a backslash; paths use '/'")
    if _CONTROL_CHARACTER.search(path):
        raise ValueError(f"file path {path!r} contains NUL or a control character")
    if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise ValueError(f"file path {path!r} is absolute; it must be relative to the variant")
    for segment in path.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(f"file path {path!r} has an empty, '.' or '..' segment")
        if len(_utf8(segment)) > MAX_SEGMENT_LENGTH:
            raise ValueError(
                f"file path {path[:60]!r}... has a name over {MAX_SEGMENT_LENGTH} bytes, "
                "longer than a file system allows"
            )
    return path


def _utf8(text: str) -> bytes:
    """``text`` as UTF-8; a lone surrogate (JSON allows ``"\\ud800"``) is refused."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"file path {text!r} is not valid Unicode (a lone surrogate)") from None


def _is_reserved(path: str) -> bool:
    """Whether ``path`` is, or lies under, a name the cache writes into an entry.

    Compared as the duplicate check compares paths: a case-insensitive file system
    stores ``METADATA.JSON`` as ``metadata.json``.
    """
    first = path.split("/", 1)[0]
    return unicodedata.normalize("NFC", first).casefold() in _RESERVED_KEYS


def load_json(data: bytes, what: str) -> Any:
    """Parse a CDN document of at most 1 MiB, nested at most :data:`MAX_NESTING` levels;
    :class:`ManifestError` naming ``what``."""
    try:
        document = parse_capped(data, json.loads, "JSON", json.JSONDecodeError, MAX_DOCUMENT_BYTES)
    except ValueError as exc:
        raise ManifestError(f"{what} {exc}", hint=_HINT) from None
    # Each level of nesting takes a bracket: a document with few needs no walk.
    if data.count(b"[") + data.count(b"{") > MAX_NESTING and _nests_deeper(document, MAX_NESTING):
        raise ManifestError(
            f"{what} is nested too deeply (more than {MAX_NESTING} levels)", hint=_HINT
        )
    return document


def _nests_deeper(document: Any, levels: int) -> bool:
    """Whether ``document`` holds objects and lists more than ``levels`` levels deep;
    walked one level at a time, not recursively."""
    layer = [document] if isinstance(document, dict | list) else []
    for _ in range(levels):
        inner = (item.values() if isinstance(item, dict) else item for item in layer)
        layer = [value for values in inner for value in values if isinstance(value, dict | list)]
    return bool(layer)


def manifest_source(info: RepoInfo, variant: str) -> str:
    """A variant's ``metadata.json`` as messages name it:
    ``org/pkg@v1/build/<variant>/metadata.json`` (the variant's control characters escaped)."""
    return f"{info}/build/{escape_controls(variant)}/{MANIFEST_NAME}"


def parse_metadata(data: bytes, *, source: str = "metadata.json") -> Manifest:
    """Validate a ``metadata.json`` document; raise :class:`ManifestError` if unsafe."""
    return manifest_of(load_json(data, source), source)


def manifest_of(document: Any, source: str) -> Manifest:
    """The :class:`Manifest` a parsed ``metadata.json`` (from ``source``) states; raise
    :class:`ManifestError` if unsafe."""
    if not isinstance(document, dict) or not isinstance(document.get("digest"), dict):
        raise ManifestError(f'{source} must be an object with a "digest" object', hint=_HINT)
    parsed = _parse_files(_listed_files(document["digest"], source), source)
    _check_no_file_is_a_directory(parsed, source)
    sizes = _parse_sizes(document["sizes"], parsed, source) if "sizes" in document else None
    return Manifest(files=parsed, document=document, sizes=sizes)


def _listed_files(digest: dict[str, Any], source: str) -> dict[Any, Any]:
    """The ``"files"`` of a manifest's ``"digest"`` object, refused unless sha256 digests
    of 1 to :data:`MAX_FILES` files."""
    algorithm = digest.get("algorithm", "sha256")
    if algorithm != "sha256":
        raise ManifestError(
            f'{source}: "digest" uses the algorithm {repr(algorithm)[:40]}; this client '
            "verifies sha256 digests only",
            hint='publish the kernel with sha256 digests ("algorithm": "sha256", the '
            "kernel builder's default)",
        )
    files = digest.get("files")
    if not isinstance(files, dict) or not files:
        raise ManifestError(
            f'{source} must list its files in "digest": {{"files": {{...}}}}', hint=_HINT
        )
    if len(files) > MAX_FILES:
        raise ManifestError(
            f"{source} lists {len(files)} files, over the limit of {MAX_FILES}", hint=_HINT
        )
    return files


def _parse_files(files: dict[Any, Any], source: str) -> dict[str, bytes]:
    """Each listed path, checked, with its raw 32-byte digest."""
    parsed: dict[str, bytes] = {}
    seen: dict[str, str] = {}
    for path, digest in files.items():
        try:
            check_relative_path(path)
            raw = decode_digest(digest)
        except ValueError as exc:
            raise ManifestError(f"{source}: {exc}", hint=_HINT) from None
        if _is_reserved(path):
            raise ManifestError(
                f"{source} lists {path!r}, a name the cache keeps for itself", hint=_HINT
            )
        # Two names that one file system may store as one file would overwrite each other.
        key = unicodedata.normalize("NFC", path).casefold()
        if key in seen:
            raise ManifestError(f"{source} lists {_one_file(seen[key], path)}", hint=_HINT)
        seen[key] = path
        parsed[path] = raw
    return parsed


def _one_file(first: str, second: str) -> str:
    """Two listed paths that one file system stores as one file, said so that they read
    apart: the NFC and NFD forms of a name look the same, so they are shown escaped."""
    if unicodedata.normalize("NFC", first) == unicodedata.normalize("NFC", second):
        return (
            f"{first!a} and {second!a}, one name in two Unicode normalisations, "
            "which a normalising file system (macOS) stores as one file"
        )
    return (
        f"{first!r} and {second!r}, names that differ only in case (or Unicode "
        "normalisation), which a case-insensitive file system (macOS, Windows) stores as one file"
    )


def _parse_sizes(sizes: object, files: Mapping[str, bytes], source: str) -> dict[str, int]:
    """Validate ``"sizes"``: a size in bytes, an int >= 0, for exactly the listed files."""
    if not isinstance(sizes, dict):
        raise ManifestError(f'{source}: "sizes" must map each listed file to its size', hint=_HINT)
    missing, extra = sorted(files.keys() - sizes.keys()), sorted(sizes.keys() - files.keys())
    if missing:
        raise ManifestError(f'{source}: "sizes" gives no size for {missing[0]!r}', hint=_HINT)
    if extra:
        raise ManifestError(
            f'{source}: "sizes" gives a size for {extra[0]!r}, which "digest" does not list',
            hint=_HINT,
        )
    for path, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size < _MOST_BYTES:
            raise ManifestError(
                f"{source}: the size of {path!r} must be a number of bytes >= 0 that a "
                f"file can have (under 2**63), got {repr(size)[:40]}",
                hint=_HINT,
            )
    return dict(sizes)


def _check_no_file_is_a_directory(files: Mapping[str, bytes], source: str) -> None:
    """``a`` and ``a/b`` cannot both be files."""
    directories = {key.rsplit("/", 1)[0] for key in files if "/" in key}
    directories |= {d.rsplit("/", i)[0] for d in directories for i in range(1, d.count("/") + 1)}
    clash = sorted(directories & files.keys())
    if clash:
        raise ManifestError(
            f"{source} lists {clash[0]!r} both as a file and a directory", hint=_HINT
        )


def parse_variants(data: bytes, *, source: str = "variants.json") -> list[str]:
    """Validate a ``variants.json``: a list of variant-name strings."""
    document = load_json(data, source)
    if not isinstance(document, list) or not all(isinstance(v, str) for v in document):
        raise ManifestError(f"{source} must be a JSON list of variant names", hint=_HINT)
    if any(not 0 < len(v) <= 200 for v in document):
        raise ManifestError(f"{source} holds an empty or over-long variant name", hint=_HINT)
    return list(dict.fromkeys(document))


def parse_versions(data: bytes, *, source: str = "versions.json") -> list[int]:
    """Validate a ``versions.json``: a list of ints from 1 to :data:`~.names.MAX_VERSION`.
    Returned sorted, unique."""
    document = load_json(data, source)
    if not isinstance(document, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_VERSION for v in document
    ):
        raise ManifestError(
            f"{source} must be a JSON list of version numbers from 1 to {MAX_VERSION}", hint=_HINT
        )
    return sorted(set(document))


def dump_json(document: object) -> bytes:
    """The canonical byte form the publisher and the cache write: stable, sorted, newline."""
    return (json.dumps(document, indent=2, sort_keys=True) + "\n").encode("utf-8")
