"""Recording the answers of full lookups in the import table (:mod:`.._cache_imports`).

After a full lookup the finder records its answer under the import's key, with stamps
of everything the lookup read and checked: the variant index it picked from, the
version directories of the repos tried before it and its own where the pick was judged
by the metadata of the version's entries (taken before the lookup ran, so a change made
meanwhile is a miss), the identity, owner and mode of every directory the trust checks
judged, the receipt and every file it vouches for (each checked against the receipt
first), where some builds' packages (tvm-ffi, MLX) are installed if one of those builds
could be picked, and the device's reading where the device took part in the choice.

Recording is best effort: a cache that cannot be written keeps no table, nor one whose
``import-table`` is not a directory only this user could have written (a symlink a
neighbour planted), and of two processes recording at once, one row may be lost (that
import looks its kernel up in full again, and records it).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from pathlib import Path

from .._cache_imports import (
    FORMAT,
    TABLE_DIR,
    device_inputs,
    device_reading,
    identity_of,
    installed,
    is_private,
    read_rows,
    stamp,
    table_file,
)
from .._config import get_config
from .._constants import RECEIPT_NAME
from .._utils.filesystem import write_atomic
from .._variants.system import this_system
from .layout import Cache, recorded_pick
from .receipt import Receipt, read_receipt
from .trust import check_chain, dirs_below, root_chain

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .._cache_imports import TableKey
    from .._models.kernel_dir import KernelDir

# Keys kept per module name, the latest last: a few settings or systems used in turn.
KEYS_PER_NAME = 4
# The packages whose presence the variant choice reads, by the framework of the builds
# that need them.
_NEEDING = {"tvm_ffi": "tvm-ffi", "mlx": "mlx"}


def record(key: TableKey, kernel_dir: KernelDir) -> None:
    """Record ``kernel_dir``, the full lookup's answer for ``key``, for the next import."""
    row = _row(key, kernel_dir)
    if row is None:
        return
    rows = read_rows(key.root, key.module)
    if rows.get(key.digest) == row:
        return
    rows.pop(key.digest, None)
    rows[key.digest] = row
    for digest in list(rows)[:-KEYS_PER_NAME]:
        del rows[digest]
    data = json.dumps({"format": FORMAT, "rows": rows}, separators=(",", ":"))
    table = Path(key.root, TABLE_DIR)
    with contextlib.suppress(OSError):  # a read-only cache: each import looks up in full
        with contextlib.suppress(FileExistsError):
            table.mkdir(mode=0o700)
        # Only into a directory the reader trusts: not through a symlink, which another
        # user may have planted where others may create entries (a sticky or shared
        # root), nor into another user's directory; else no table is kept.
        if is_private(os.lstat(table), stat.S_IFDIR):
            file = Path(table_file(key.root, key.module))
            write_atomic(file, data.encode(), mode=0o600, durable=False)


def _row(key: TableKey, kernel_dir: KernelDir) -> dict[str, Any] | None:
    """The row of ``kernel_dir``, found by a full lookup for ``key``; ``None`` for a cold
    load (it wrote the index that the key stamped as missing), and where the entry does
    not pass the checks that lookup made (it changed since)."""
    info, variant, entry = kernel_dir.info, kernel_dir.variant, kernel_dir.entry
    if info not in key.candidates or variant is None or entry is None:
        return None
    position = key.candidates.index(info)
    if key.indexes[position] is None:
        return None  # a cold load: it wrote the index after the key stamped it
    cache = Cache.from_config(get_config())
    receipt = read_receipt(entry)
    if cache.root != Path(key.root) or receipt is None:
        return None
    check_chain(cache.root, entry, shared=cache.shared)
    if receipt.changed_file(entry) is not None:
        return None
    document = cache.read_index_document(info)
    judged = recorded_pick(document, this_system(key.backend).key) != variant
    read_from = device_inputs() if judged else None  # before the reading it stands for
    # A pick judged by the builds' metadata read that of the version's other entries too.
    versions = key.versions[: position + 1] if judged else key.versions[:position]
    return {
        "repo": position,
        "variant": variant,
        "versions": versions,
        "index": key.indexes[position],
        "device": device_reading(key.backend) if judged else None,
        "device_inputs": read_from,
        "installed": {name: installed(name) for name in _packages_that_count(document)},
        "dirs": [[path, identity_of(path)] for path in _judged_dirs(cache, entry)],
        "stamped": [[path, stamp(path)] for path in _vouched_files(entry, receipt)],
        "kernel": {
            "package": os.path.relpath(kernel_dir.package_dir, entry),
            "signer": kernel_dir.signer,
            "natives": kernel_dir.natives,
            "requires": kernel_dir.requires,
        },
    }


def _packages_that_count(document: Mapping[str, Any]) -> list[str]:
    """The packages some builds need (tvm-ffi's, MLX's) whose presence can change the
    pick from this index: where it lists such a build, or not every build (a probe would
    try them when the package is installed)."""
    from .._variants.grammar import as_variant

    present = document.get("present")  # read as recorded_pick reads it: no judge imported
    if document.get("complete") is not True or not isinstance(present, list):
        return list(_NEEDING)
    frameworks = {as_variant(str(name)).framework for name in present}
    return [package for package, framework in _NEEDING.items() if framework in frameworks]


def _judged_dirs(cache: Cache, entry: Path) -> list[str]:
    """The directories (and symlinks) the trust checks judged on the way to ``entry``,
    each once (the root as named too: one replaced there is another cache)."""
    root = cache.root
    judged = (*root_chain(root, shared=cache.shared), root, *dirs_below(root, entry))
    return list(dict.fromkeys(str(path) for path in judged))


def _vouched_files(entry: Path, receipt: Receipt) -> list[str]:
    """The receipt and every file it vouches for."""
    return [str(entry / name) for name in (RECEIPT_NAME, *receipt.files, *receipt.bytecode)]
