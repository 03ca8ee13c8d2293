"""The names, modes and types of a published version's tree, shared by the publisher's
modules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from .._constants import MANIFEST_NAME
from .._models.record import Record
from .._utils.hashing import sha256_file

FILE_MODE = 0o644
DIR_MODE = 0o755
VARIANTS = "variants.json"
VERSIONS = "versions.json"
VERSION_DIR = re.compile(r"v([1-9][0-9]*)")
# The files of a variant that kernel builders leave out of its digest, besides Python
# bytecode: the manifest and its sigstore signature, which are about the build, not of it.
UNHASHED_FILES = frozenset({MANIFEST_NAME, MANIFEST_NAME + ".sigstore"})
# The names of native libraries, versioned ones too (libdep.so.1.2; a macOS library's
# version comes before its .dylib).
_NATIVE_LIBRARY = re.compile(r".+\.(?:so(?:\.[0-9]+)*|dylib)")


class SourceFile(Record):
    """One file of a variant in the build directory, hashed when scanned."""

    path: Path
    digest: bytes
    size: int


# What goes into the version directory: relative path -> literal bytes or a build file.
Tree = Mapping[str, bytes | SourceFile]


def is_native_library(name: str) -> bool:
    """Whether the file ``name`` is a native library, which a zip build keeps beside its
    archive."""
    return _NATIVE_LIBRARY.fullmatch(name) is not None


def hash_file(path: Path) -> SourceFile:
    """``path`` as a :class:`SourceFile`, hashed now."""
    return SourceFile(path, sha256_file(path), path.stat().st_size)
