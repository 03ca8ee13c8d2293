"""Turn a kernel build directory into the CDN tree of one published version.

The input is either form (a ``build/`` subdirectory, when present, is used)::

    <build_dir>/<variant>/<py_pkg>/...            a bare build directory
    <kernel_dir>/build/<variant>/<py_pkg>/...     a kernel directory holding build/

The output, under ``<out>/<prefix>/<org>/<pkg>/``, is ready to upload to a static host
(``out`` is a directory, or an object store URL such as ``s3://bucket/prefix``, written
directly: see :mod:`.destination`)::

    versions.json                          every published version, merged with what is there
    v<N>/variants.json                     the variant names of this version
    v<N>/build/<variant>/metadata.json     the kernel builder's schema (see .metadata):
                                           {"digest": {"algorithm": "sha256", "files":
                                            {relpath: base64 sha256}}, "sizes": {...},
                                            "name", "id", "version", "backend", ...}
    v<N>/build/<variant>/<py_pkg>/...      a copy of every file of the variant (with
                                           layout="zip": <id>.zip and the native
                                           libraries, see .zipping)

A published version is immutable: publishing different content under an existing
version is refused unless ``force=True``; publishing the same content again changes
nothing on disk.

With signing keys, each of the three documents gets a ``.sig`` beside it
(``versions.json.sig``, ``v<N>/variants.json.sig``, ``.../metadata.json.sig``; see
:mod:`.._signing`). The ``.sig`` files of a new version are written with its files, each
just before its document; those of a version already in place, and ``versions.json.sig``,
are replaced one by one. Several keys sign in one publish, so that a new version and
the ``versions.json`` that lists it carry the old and the new key's signatures while
keys are rotated. :func:`sign_tree` signs a tree published without a key.
A signature is not content: adding one never makes a version "different".

The modules of this package follow the steps: :mod:`.build` reads the build directory
(:mod:`.zipping` lays a variant out as a zip build) and :mod:`.metadata` makes each
variant's ``metadata.json``, :mod:`.checks` checks its sources and what it shares with
published versions, :mod:`.compare` compares it with
the version already in place, :mod:`.signatures` signs, :mod:`.writing` writes (in an
order that is safe for readers of an object store) through a :mod:`.destination`;
:mod:`.publisher` runs them in order.
"""

from __future__ import annotations

from .publisher import publish
from .report import (
    FileRelativePath,
    PublishReport,
    SharedNativeLibrary,
    SourcelessModule,
    UndeclaredImport,
    VariantReport,
)
from .signatures import KeySource, SignReport, sign_tree

__all__ = [
    "FileRelativePath",
    "KeySource",
    "PublishReport",
    "SharedNativeLibrary",
    "SignReport",
    "SourcelessModule",
    "UndeclaredImport",
    "VariantReport",
    "publish",
    "sign_tree",
]
