"""The errors of names below ``flashhub`` that name no kernel: ``from flashhub import
get_kernel`` (each name there is a kernel's org, and the API is ``flashhub_kernels``'s),
and a version other than ``v<N>``."""

from __future__ import annotations

from ._models.names import BACKENDS, LOCAL_ORG, MAX_VERSION, parse_module_name
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


def refuse_misspelt_version(fullname: str) -> None:
    """Raise for ``flashhub.<org>.<pkg>.<name>`` (``fullname``) where ``org`` and ``pkg``
    name a kernel and ``name`` is no version of it; return for other names, whose import
    then fails as any missing module's: names no kernel can have, and the submodules of a
    local kernel (``flashhub._local.<pkg>_<digest>``), which its code may try. Not a
    ``ModuleNotFoundError``, which ``from ... import v01`` would turn into a bare
    "cannot import name"."""
    package, _, name = fullname.rpartition(".")
    parsed = parse_module_name(package)
    if parsed is None or parsed.org == LOCAL_ORG:
        return
    raise KernelImportError(
        f"No module named {fullname!r}: {name} is not a version of {package}; a kernel's "
        f"versions are imported as v<N> (v1, v2, ... up to v{MAX_VERSION}, no leading zero), "
        f"or as v<N>_<backend> for a backend's build ({', '.join(BACKENDS)})",
        hint=f"import {package}.v<N>, N the version you want",
        name=fullname,
    )
