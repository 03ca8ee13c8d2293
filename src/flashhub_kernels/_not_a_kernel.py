"""The errors of names below ``flashhub`` that name no kernel, which the finder refuses:
``from flashhub import get_kernel`` (each name there is a kernel's org, and the API is
``flashhub_kernels``'s), a version other than ``v<N>``, and a local kernel another process
loaded."""

from __future__ import annotations

from ._loading.local import unknown_local_module
from ._models.names import BACKENDS, LOCAL_ORG, MAX_VERSION, parse_module_name
from .errors import KernelImportError


def refusal(fullname: str) -> ImportError:
    """The error of importing ``fullname``, a name the finder refused. Only the local
    kernel's is a ``ModuleNotFoundError``: ``from flashhub import get_kernel`` would turn
    one into a bare "cannot import name"."""
    parsed = parse_module_name(fullname)
    if parsed is None:
        return _misspelt_version_error(fullname)
    if parsed.org == LOCAL_ORG:
        return unknown_local_module(fullname)
    return _api_name_error(fullname, parsed.org)


def _api_name_error(fullname: str, name: str) -> KernelImportError:
    """The error for importing ``flashhub.<name>`` (``fullname``) where ``name`` is one of
    the API's, or ``__main__`` (``python -m flashhub``)."""
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


def _misspelt_version_error(fullname: str) -> KernelImportError:
    """The error for importing ``flashhub.<org>.<pkg>.<name>`` (``fullname``), ``name`` no
    version of the kernel."""
    package, _, name = fullname.rpartition(".")
    return KernelImportError(
        f"No module named {fullname!r}: {name} is not a version of {package}; a kernel's "
        f"versions are imported as v<N> (v1, v2, ... up to v{MAX_VERSION}, no leading zero), "
        f"or as v<N>_<backend> for a backend's build ({', '.join(BACKENDS)})",
        hint=f"import {package}.v<N>, N the version you want",
        name=fullname,
    )
