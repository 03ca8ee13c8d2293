"""The error of a zip build's archive that cannot be read, for the loader and for
``importlib.resources`` alike."""

from __future__ import annotations

from ..errors import KernelImportError


def archive_error(archive: str, problem: str) -> KernelImportError:
    """The :class:`KernelImportError` of ``archive``, which ``problem`` says is broken."""
    return KernelImportError(
        f"the kernel archive {archive} {problem}", hint="report it to the kernel's publisher"
    )
