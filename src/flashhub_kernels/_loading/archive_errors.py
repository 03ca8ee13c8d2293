"""The error of a zip build's archive that cannot be read, for the loader and for
``importlib.resources`` alike."""

from __future__ import annotations

import os
import sys
import zipfile

from ..errors import KernelImportError


def archive_error(archive: str, problem: str) -> KernelImportError:
    """The :class:`KernelImportError` of ``archive``, which ``problem`` says is broken; or
    which is gone, removed from the cache while this process used it."""
    if not os.path.exists(archive):
        return KernelImportError(
            f"the kernel archive {archive} was removed while this process used it ({problem})",
            hint="load the kernel again in a new process (flashhub cache clear --force and "
            "prune --force remove entries in use)",
        )
    return KernelImportError(
        f"the kernel archive {archive} {problem}", hint="report it to the kernel's publisher"
    )


def no_init_error(archive: str, reason: Exception) -> KernelImportError:
    """The error of ``archive``, in which zipimport finds no ``__init__.py`` (``reason``):
    one that zipfile finds there is a ZIP64 archive, which zipimport reads as empty
    before Python 3.13."""
    if sys.version_info < (3, 13) and _zipfile_finds_init(archive):
        return KernelImportError(
            f"the kernel archive {archive} is a ZIP64 archive (of more than 65,535 files, or "
            "over 2 GiB), which Python's zipimport cannot read before Python 3.13",
            hint="load the kernel with Python 3.13 or newer, or ask its publisher for an "
            "archive without ZIP64",
        )
    where = "at its root, where a zip build keeps the package's files"
    return archive_error(archive, f"holds no __init__.py {where} ({reason})")


def _zipfile_finds_init(archive: str) -> bool:
    try:
        with zipfile.ZipFile(archive) as opened:
            return "__init__.py" in opened.NameToInfo
    except (zipfile.BadZipFile, OSError, ValueError):
        return False
