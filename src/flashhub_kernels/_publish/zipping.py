"""The ``"zip"`` layout of a published variant (``flashhub publish --layout zip``).

The package's files go into one archive, ``<id>.zip``, whose root is the package's root;
its native libraries stay beside the archive, in the variant directory, where the
loader finds them (see :mod:`flashhub_kernels._loading.zip_layout`)::

    build/<variant>/metadata.json      "build-layout": "zip", and the archive's digest
    build/<variant>/<id>.zip           __init__.py, _ops.py, layers.py, data/...
    build/<variant>/<id>.so

A client then fetches a variant's Python files in one request instead of one each.

The archive is reproducible: members in sorted order (an entry for each folder too), with
fixed times and modes, and stored (not compressed, so that no zlib's choices make two
publishes of one build differ): publishing the same build again writes nothing.
"""

from __future__ import annotations

import hashlib
import stat
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from ..errors import PublishError
from .layout import SourceFile, hash_file, is_native_library

# The oldest time a zip member can carry, for every member: the archive's bytes depend
# on the build's files only.
_MEMBER_TIME = (1980, 1, 1, 0, 0, 0)
_MEMBER_MODE = 0o644
_FOLDER_MODE = 0o755
_MSDOS_FOLDER = 0x10  # the attribute that marks a folder for tools that read no mode
_ENCRYPTED = 0x1  # of a member's flags
# The compression methods zipimport reads.
_READABLE = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma"}
_UNIX = 3  # the system a member's mode is meant for


def package_files(files: Mapping[str, SourceFile], py_pkg: str) -> dict[str, SourceFile]:
    """The files of a variant's package, of the ``files`` of a build of files: those
    under ``<py_pkg>/``, or all of a flattened build but that folder, which a builder
    keeps beside the files for loaders older than flattening (a module that runs
    ``../__init__.py``, found through ``__file__``); none of those reads a zip build."""
    if "__init__.py" not in files:
        return dict(files)  # all of them under <py_pkg>/
    return {rel: source for rel, source in files.items() if not rel.startswith(f"{py_pkg}/")}


def zip_package(
    files: Mapping[str, SourceFile], py_pkg: str, archive: Path
) -> dict[str, SourceFile]:
    """The files of a variant in the zip layout: the :func:`package_files` ``files``,
    written into ``archive``, and its native libraries beside it.

    Raises:
        PublishError: a native library lies in a subdirectory of the package, where it
            cannot stay beside the archive; the archive would need ZIP64; or a file
            changed since it was scanned.
    """
    prefix = "" if "__init__.py" in files else f"{py_pkg}/"
    members: dict[str, SourceFile] = {}
    natives: dict[str, SourceFile] = {}
    for rel, source in files.items():
        name = rel.removeprefix(prefix)
        if not is_native_library(name):
            members[name] = source
        elif "/" not in name:
            natives[name] = source
        else:
            raise PublishError(
                f"cannot lay {source.path} out as a zip build: a zip build's native libraries "
                "lie beside its archive, in the variant directory, and this one is in a "
                "subdirectory of the package",
                hint="move the library to the package's top level (and load it from there), "
                "or publish without --layout zip",
            )
    _write_archive(archive, members)
    return {archive.name: hash_file(archive), **natives}


def _write_archive(path: Path, members: Mapping[str, SourceFile]) -> None:
    """Write ``members`` into the archive ``path``.

    Raises:
        PublishError: the archive would need ZIP64, which zipimport reads only from
            Python 3.13 on; or a file changed since it was scanned.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # Without ZIP64, zipfile refuses what needs it: more than 65,535 members, or a
        # member or the archive past 2 GiB.
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=False) as archive:
            for name in sorted(members.keys() | _folders(members)):
                source = members.get(name)
                info = zipfile.ZipInfo(name, date_time=_MEMBER_TIME)
                info.create_system = _UNIX
                if source is None:  # a folder
                    info.external_attr = (stat.S_IFDIR | _FOLDER_MODE) << 16 | _MSDOS_FOLDER
                    archive.writestr(info, b"")
                else:
                    info.external_attr = _MEMBER_MODE << 16
                    archive.writestr(info, _scanned_bytes(source))
    except zipfile.LargeZipFile as exc:
        raise PublishError(
            f"cannot lay the package out as a zip build: its archive {path.name} would need "
            f"ZIP64 ({exc}: more than 65,535 files and folders, or a file or the archive "
            "over 2 GiB), which Python's zipimport cannot read before Python 3.13",
            hint="publish without --layout zip, or ship fewer (or smaller) files in the package",
        ) from None


def _folders(members: Iterable[str]) -> set[str]:
    """The folders of ``members``, each as its entry is named (``sub/``): zipimport finds
    a namespace package (a folder without ``__init__.py``) only by its entry."""
    return {name[: index + 1] for name in members for index, c in enumerate(name) if c == "/"}


def _scanned_bytes(source: SourceFile) -> bytes:
    """The bytes of ``source``, refused unless they are those it was scanned with."""
    data = source.path.read_bytes()
    if hashlib.sha256(data).digest() != source.digest:
        raise PublishError(
            f"{source.path} changed while it was being published",
            hint="wait for the build to finish, then publish again",
        )
    return data


def check_builders_archive(archive: Path) -> None:
    """Refuse the archive of a kernel builder's zip build that a client cannot load.

    Raises:
        PublishError: ``archive`` is no zip archive, or holds a native library (which
            cannot be loaded from inside it), an encrypted member or one compressed in
            a way zipimport does not read.
    """
    try:
        with zipfile.ZipFile(archive) as opened:
            members = opened.infolist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise PublishError(
            f"{archive} is not a zip archive ({exc})", hint="build the kernel again"
        ) from None
    for member in members:
        if is_native_library(member.filename.rpartition("/")[2]):
            raise PublishError(
                f"{archive} holds the native library {member.filename}: a zip build's native "
                "libraries lie beside its archive, in the variant directory, where they can "
                "be loaded from",
                hint="move it out of the archive, beside it (listed in metadata.json's "
                "digest), or build the kernel again",
            )
        if member.flag_bits & _ENCRYPTED:
            problem = "encrypted"
        elif member.compress_type not in _READABLE:
            method = _METHODS.get(member.compress_type, f"method {member.compress_type}")
            problem = f"compressed with {method}"
        else:
            continue
        raise PublishError(
            f"{archive} holds {member.filename} {problem}, which Python's zipimport cannot "
            "read: it reads members stored or deflated, unencrypted",
            hint="build the archive again without a password, stored or deflated",
        )
