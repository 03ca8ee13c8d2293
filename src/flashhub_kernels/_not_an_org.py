"""The error of ``from flashhub import get_kernel``: below ``flashhub`` each name is a
kernel's org, and the API is ``flashhub_kernels``'s."""

from __future__ import annotations

from .errors import KernelImportError


def api_name_error(fullname: str, name: str) -> KernelImportError:
    """The error for importing ``flashhub.<name>`` (``fullname``) where ``name`` is one of
    the API's, or ``__main__`` (``python -m flashhub``). Not a ``ModuleNotFoundError``, which
    ``from flashhub import get_kernel`` would turn into a bare "cannot import name"."""
    if name == "__main__":
        return KernelImportError(
            f"No module named {fullname!r}: flashhub is where kernels are imported from "
            "(import flashhub.<org>.<pkg>.v<N>), not a command to run",
            hint="run the flashhub command, or python -m flashhub_kernels",
            name=fullname,
        )
    return KernelImportError(
        f"No module named {fullname!r}: below flashhub each name is a kernel's org (import "
        f"flashhub.<org>.<pkg>.v<N>), and {name} is the API's, which flashhub_kernels exports",
        hint=f"from flashhub_kernels import {name}",
        name=fullname,
    )
