"""What a kernel's ``metadata.json`` asks of the process that loads it, checked before
any of the kernel's code runs:

- ``flashhub-kernels-minver`` and ``kernels-minver``: this client is new enough (our own
  version, and the Hugging Face kernels release whose API it implements), as Hugging Face
  kernels checks its own: by release numbers (``0.3.0.dev1`` and ``0.3.0rc1`` are
  ``0.3.0``), and never failing a load for a version that cannot be read;
- ``python-depends``: each Python package is installed (found, not imported);
- ``provenance``: a build made from a dirty git tree is warned about.
"""

from __future__ import annotations

import sys

from .._constants import HF_KERNELS_API
from .._models.kernel_metadata import KernelMetadata, parse_release
from .._utils.callers import warn_at_caller
from ..errors import ClientTooOldError, DirtyBuildWarning, MissingPythonDependencyError

_UPGRADE = "pip install --upgrade flashhub-kernels"

# python-depends names whose pip package or import name is not the name itself (those
# the kernel builder knows, and a few common ones): normalized name -> (pip, import).
# No import name: the package installs no Python module (a native library), so there
# is nothing to look for.
_PACKAGES: dict[str, tuple[str, str | None]] = {
    "tvm-ffi": ("apache-tvm-ffi", "tvm_ffi"),
    "apache-tvm-ffi": ("apache-tvm-ffi", "tvm_ffi"),
    "nvidia-cutlass-dsl": ("nvidia-cutlass-dsl", "cutlass"),
    "onednn": ("onednn-devel", None),
    "onednn-devel": ("onednn-devel", None),
    "pyyaml": ("pyyaml", "yaml"),
    "pillow": ("pillow", "PIL"),
    "scikit-learn": ("scikit-learn", "sklearn"),
    "opencv-python": ("opencv-python", "cv2"),
    "beautifulsoup4": ("beautifulsoup4", "bs4"),
}


def check_requirements(metadata: KernelMetadata, kernel: str) -> None:
    """Raise unless this process can load the kernel described as ``kernel``; warn about
    a dirty build.

    Raises:
        ClientTooOldError: the kernel needs a newer flashhub-kernels.
        MissingPythonDependencyError: a package of ``python-depends`` is not installed.
    """
    check_client(metadata, kernel)
    check_python_depends(metadata.python_depends, kernel)
    if metadata.dirty_sources:
        warn_at_caller(
            f"{kernel} was built from a dirty git tree "
            f"({' and '.join(metadata.dirty_sources)} had uncommitted changes): its "
            "recorded git revision does not fully identify the sources it was built "
            "from, so the build may not be reproducible",
            DirtyBuildWarning,
        )


def check_client(metadata: KernelMetadata, kernel: str) -> None:
    """Raise :class:`ClientTooOldError`, naming both versions, unless this client is at
    least the ``flashhub-kernels-minver`` and implements the ``kernels-minver`` asked."""
    from .._constants import __version__

    wanted = metadata.flashhub_kernels_minver
    if wanted is not None and _below(__version__, wanted):
        raise ClientTooOldError(
            f"{kernel} requires flashhub-kernels>={wanted}, but version {__version__} is installed",
            hint=f"upgrade flashhub-kernels: {_UPGRADE}",
        )
    wanted = metadata.kernels_minver
    if wanted is not None and _below(HF_KERNELS_API, wanted):
        raise ClientTooOldError(
            f"{kernel} requires kernels>={wanted} (the Hugging Face kernels API, its "
            f"kernels-minver), but flashhub-kernels {__version__} implements kernels "
            f"{HF_KERNELS_API}",
            hint=f"upgrade flashhub-kernels: {_UPGRADE}",
        )


def check_python_depends(depends: tuple[str, ...], kernel: str) -> None:
    """Raise :class:`MissingPythonDependencyError` for the first package not installed."""
    for requirement in depends:
        pip, module = python_package(requirement)
        if module is not None and not _installed(module):
            import shlex  # only to say what to install

            line = f"pip install {shlex.quote(pip)}"
            raise MissingPythonDependencyError(
                f"{kernel} requires the Python package {pip!r} (python-depends in its "
                f"metadata.json), which is not installed: no module named {module!r}",
                package=pip,
                hint=f"install it: {line}",
            )


def python_package(requirement: str) -> tuple[str, str | None]:
    """What to ``pip install`` for a ``python-depends`` entry (``einops``,
    ``Some-Pkg>=1.0``, ``tvm-ffi``), and the module it provides (``None``: none)."""
    name = requirement
    for position, char in enumerate(requirement):
        if not (char.isalnum() or char in "-_."):
            name = requirement[:position]
            break
    key = "-".join(filter(None, name.lower().replace("_", "-").replace(".", "-").split("-")))
    known = _PACKAGES.get(key)
    if known is not None:
        return known[0] + requirement[len(name) :].strip(), known[1]
    return requirement.strip(), name.lower().replace("-", "_").replace(".", "_")


def _installed(module: str) -> bool:
    """Whether ``module`` (its top-level package) can be imported, without importing it."""
    import importlib.util

    top = module.partition(".")[0]
    if top in sys.modules:
        return True
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _below(installed: str, wanted: str) -> bool:
    """Whether the ``installed`` version is older than the release ``wanted``; ``False``
    when ``installed`` cannot be read (a version from a VCS checkout, say)."""
    release = _release_of(installed)
    return release is not None and release < parse_release(wanted)


def _release_of(version: str) -> tuple[int, ...] | None:
    """The release numbers of a version (``0.2.0``; ``0.3.0.dev1``, ``0.3.0rc1`` and
    ``0.3.0+local`` are ``0.3.0``): a build names releases only, and a development or
    pre-release version implements the release it leads to. ``None`` when ``version``
    is not a PEP 440 version."""
    try:
        return parse_release(version)  # a release: no need to import packaging
    except ValueError:
        pass
    from packaging.version import Version

    try:
        return parse_release(".".join(str(part) for part in Version(version).release))
    except ValueError:  # packaging's InvalidVersion is one
        return None
