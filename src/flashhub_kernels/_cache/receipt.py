"""The receipt of a cache entry: what its files were when they were verified.

``.flashhub-receipt.json``, written in the entry when it is committed (:mod:`.staging`),
lists every file's size and mtime, so that a warm load trusts the entry with ``stat``
only, and re-hashing (``flashhub cache verify``) has the digests to compare with.
"""

from __future__ import annotations

import json
import os
import stat

from .._constants import RECEIPT_NAME
from .._models.kernel_dir import NATIVE_SUFFIXES, KernelDir
from .._models.record import Record
from .._utils.filesystem import read_regular

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    from .._models.names import RepoInfo

_SECOND = 10**9  # in nanoseconds


class Receipt(Record):
    """Written when an entry is verified; lets the warm path trust it with ``stat`` only.

    ``files`` maps each path to its ``(size, mtime_ns)``; ``bytecode`` each ``.pyc``
    compiled from the verified sources before the commit to ``(size, mtime_ns, sha256
    hex)``: a damaged or substituted one fails the same ``stat`` check as a changed
    source, and ``flashhub cache verify`` re-hashes them. ``signer`` is the id of the
    trusted key that signed the manifest; ``requires`` what a load of the entry must
    check (see :func:`~flashhub_kernels._models.kernel_metadata.load_requirements`):
    ``{}`` for nothing, ``None`` in a receipt written before it was recorded. ``package``
    is a ``"zip"`` build's archive, the file imported as the kernel.
    """

    content_hash: str
    files: Mapping[str, tuple[int, int]]
    bytecode: Mapping[str, tuple[int, int, str]]
    signer: str | None = None
    requires: Mapping[str, Any] | None = None
    package: str | None = None

    def changed_file(self, entry: Path) -> str | None:
        """The first file that is missing, not a regular file, or changed; else ``None``."""
        for relpath, (size, mtime_ns) in self.files.items():
            if _changed(entry / relpath, size, mtime_ns):
                return relpath
        for relpath, (size, mtime_ns, _digest) in self.bytecode.items():
            if _changed(entry / relpath, size, mtime_ns):
                return relpath
        return None


def _changed(path: Path, size: int, mtime_ns: int) -> bool:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return True
    if not stat.S_ISREG(st.st_mode) or st.st_size != size:
        return True
    return not _same_mtime(st.st_mtime_ns, mtime_ns)


def _same_mtime(found: int, recorded: int) -> bool:
    """Whether ``found`` is the mtime recorded, or that mtime as a copy keeping whole
    seconds only made it (tar's default and ustar formats, container image layers)."""
    return found in (recorded, recorded - recorded % _SECOND)


def read_receipt(entry: Path) -> Receipt | None:
    """The receipt of the committed entry ``entry``; ``None`` when it has none, or one
    that is not a regular file or does not parse (nested too deeply included)."""
    try:
        data = json.loads(read_regular(entry / RECEIPT_NAME))
        files = {str(p): (int(s), int(m)) for p, (s, m) in data["files"].items()}
        bytecode = {
            str(p): (int(s), int(m), str(d)) for p, (s, m, d) in data.get("bytecode", {}).items()
        }
        signer, requires, package = (data.get(k) for k in ("signer", "requires", "package"))
        return Receipt(
            str(data["content_hash"]),
            files,
            bytecode,
            str(signer) if signer else None,
            requires if isinstance(requires, dict) else None,
            str(package) if package else None,
        )
    except (OSError, KeyError, TypeError, ValueError, AttributeError, RecursionError):
        return None


def package_dir_of(entry: Path, py_pkg: str) -> Path:
    """The directory of a verified entry imported as the kernel: ``<py_pkg>/`` when the
    variant ships it, else the entry itself (a flattened build, whose ``__init__.py``,
    ``_ops.py``, ... lie in the variant directory); ``<py_pkg>/`` when it has both."""
    package = entry / py_pkg
    return package if (package / "__init__.py").is_file() else entry


def cached_kernel(entry: Path, info: RepoInfo, variant: str, receipt: Receipt) -> KernelDir:
    """The kernel in a verified entry, as its receipt describes it."""
    natives = tuple(
        (rel, size) for rel, (size, _) in receipt.files.items() if rel.endswith(NATIVE_SUFFIXES)
    )
    package = entry / receipt.package if receipt.package else package_dir_of(entry, info.py_pkg)
    return KernelDir(package, info, variant, entry, receipt.signer, natives, receipt.requires)
