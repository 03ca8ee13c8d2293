"""The note an error raised by a kernel's own code carries: which kernel was running
(and, where its native library could not be loaded from a ``noexec`` mount, why).

Python 3.11 prints an exception's notes under its traceback; Hugging Face kernels adds
one naming the kernel and its variant, and so does this client. Earlier Pythons have no
notes, and get none. This client's own errors (a zip build's archive that cannot give a
submodule, a kernel dependency not found) name what failed already, and get none either.
"""

from __future__ import annotations

import os

from .._utils.escaping import escape_controls
from ..errors import FlashhubError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .._models.kernel_dir import KernelDir


def add_failure_note(exc: Exception, module_name: str, kernel_dir: KernelDir) -> None:
    """Note on ``exc``, raised while the kernel in ``kernel_dir`` ran as ``module_name``, which
    kernel that was: its repo and version (or its directory) and its variant."""
    if isinstance(exc, FlashhubError):  # it names what failed already
        return
    if not hasattr(exc, "add_note"):  # before Python 3.11
        return
    if kernel_dir.info is None:
        kernel = f"the local kernel at {escape_controls(str(kernel_dir.package_dir))}"
    else:
        kernel = f"kernel {kernel_dir.info.repo_id}@v{kernel_dir.info.version}"
    variant = f", variant {escape_controls(kernel_dir.variant)}" if kernel_dir.variant else ""
    notes = [f"while importing {kernel}{variant}, as {module_name}"]
    if isinstance(exc, OSError) and _mounted_noexec(kernel_dir):
        where = "FLASHHUB_CACHE_DIR" if kernel_dir.info is not None else "the kernel"
        notes.append(
            "its files lie on a file system mounted noexec, where no native library can be "
            f"loaded: point {where} at a file system that allows executing"
        )
    for note in notes:
        exc.add_note(note)


def _mounted_noexec(kernel_dir: KernelDir) -> bool:
    """Whether the kernel's files lie on a file system mounted ``noexec`` (a hardened
    ``/tmp`` or home), which ``dlopen`` of its native library fails on."""
    try:
        return bool(os.statvfs(kernel_dir.package_dir).f_flag & os.ST_NOEXEC)
    except (OSError, AttributeError):  # no ST_NOEXEC off Linux
        return False
