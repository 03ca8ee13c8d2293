"""The cache's records of kernel imports: the import table, and the entries in use.

The import table (``import-table/<module name>.json`` in the cache root) keeps the entry
each kernel module name loaded last, for the next process that imports the name: keyed by
what decided it, stamped with what the full lookup (:mod:`._cache.obtain`) checked, so that
any change is a miss. :mod:`._cache.table_writer` writes it; docs/design.md gives the rules.

A process that imports a kernel from the cache holds a shared ``flock`` on the entry's
directory until it exits (the kernel drops it however the process ends; a forked child
shares it). The directory is opened read-only, so this works on a read-only cache, and
costs one ``open`` and one ``flock``. Before removing an entry, ``flashhub cache clear``
and ``prune`` try an exclusive lock on it without waiting (see ``._cache.admin``), and
leave it alone while any process holds a shared one, unless told to force it. Advisory
and best effort: where ``fcntl`` is missing (Windows) or the file system refuses
``flock`` on a directory, nothing is held, nor past a quarter of the process's limit on
open files (the program's own files come first); nothing is protected then.

Both are on every warm import's path, hence one module of its own beside ``_cache``.
"""

from __future__ import annotations

import os
import stat
import sys

from . import _constants
from ._constants import (
    INDEX_NAME,
    PYPROJECT_NAME,
    TRUSTED_KEYS_VAR,
    __version__,
    default_cache_dir,
)
from ._models.kernel_dir import KernelDir

try:
    import fcntl
except ImportError:  # Windows: no flock, so entries in use are not marked
    fcntl = None  # type: ignore[assignment]

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path
    from typing import Any

    from ._models.names import RepoInfo
    from ._variants.system import SystemInfo

TABLE_DIR = "import-table"
FORMAT = 1
_MOST_BYTES = 1 << 20  # a name's rows are not read past this: the writer keeps 4 keys
_PLACING = ("XDG_CACHE_HOME", "HOME")  # what places the cache, besides FLASHHUB_* variables
# What selects and orders the devices a process sees.
_SELECTING = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
)

Stamp = list[int]  # as JSON keeps it


class TableKey:
    """One import's key (``digest``: of all that decides its lookup), and the stamps of
    each candidate repo's version directory and variant index, taken before it ran."""

    __slots__ = ("backend", "candidates", "digest", "indexes", "module", "root", "versions")

    def __init__(self, module: str, candidates: Sequence[RepoInfo], backend: str | None) -> None:
        self.module, self.candidates, self.backend = module, tuple(candidates), backend
        self.root = default_cache_dir()
        versions = [os.path.join(self.root, info.cache_path) for info in candidates]
        self.versions = [stamp(path) for path in versions]
        self.indexes = [stamp(os.path.join(path, INDEX_NAME)) for path in versions]
        self.digest = _digest(module, self.candidates, backend)


def key_of(module: str, candidates: Sequence[RepoInfo], backend: str | None) -> TableKey | None:
    """The key of importing ``module`` (for ``candidates``, ``backend`` forced if given);
    ``None`` once :func:`~flashhub_kernels.configure` set a setting or while a signed kernel's
    dependencies load, which the key does not cover: each is looked up in full."""
    # configure() imports it; another thread may be running its code, `overrides` not made.
    settings = sys.modules.get("flashhub_kernels._config")
    if getattr(settings, "overrides", None) or not hasattr(os, "getuid"):
        return None
    if (vouching := getattr(settings, "vouching_signer", None)) and vouching.get():
        return None
    try:
        return TableKey(module, candidates, backend)
    except FileNotFoundError:  # a relative cache directory, the current one removed
        return None


def lookup(key: TableKey) -> KernelDir | None:
    """The entry the table records for ``key``, marked in use; ``None``: look it up in full."""
    row: Any = read_rows(key.root, key.module).get(key.digest)  # checked as it is read
    try:
        position = int(row["repo"])
        versions, index = list(row["versions"]), row["index"]
        dirs = [(str(path), identity) for path, identity in row["dirs"]]
        stamped = [(str(path), recorded) for path, recorded in row["stamped"]]
        packages = [(str(name), recorded) for name, recorded in row["installed"].items()]
        device, read_from = row["device"], row["device_inputs"]
        kernel = _kernel_of(row, key.root, key.candidates[position])
    except (TypeError, KeyError, ValueError, IndexError, AttributeError):  # a damaged row
        return None
    depended = len(versions) in (position, position + 1)  # its own too, if judged
    if not depended or versions != key.versions[: len(versions)] or index != key.indexes[position]:
        return None
    if any(identity_of(path) != identity for path, identity in dirs):
        return None
    if any(stamp(path) != recorded for path, recorded in stamped):
        return None
    if any(installed(name) != recorded for name, recorded in packages):
        return None
    if device is not None and not _same_device(key.backend, device, read_from):
        return None
    assert kernel.entry is not None
    return kernel if mark_in_use(kernel.entry) else None


def table_file(root: str, module: str) -> str:
    """The file of the table that holds the rows of ``module`` (a dotted identifier)."""
    return os.path.join(root, TABLE_DIR, f"{module}.json")


def read_rows(root: str, module: str) -> dict[str, Any]:
    """The rows of ``module`` by key digest; empty when there are none, or none that only
    this user (or root) could have written, file and directory (a planted row could name
    a trusted signer for an unsigned entry)."""
    import json

    flags = os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        directory = os.open(os.path.join(root, TABLE_DIR), flags | os.O_DIRECTORY)
    except OSError:
        return {}
    try:
        if not is_private(os.fstat(directory), stat.S_IFDIR):
            return {}
        fd = os.open(f"{module}.json", flags, dir_fd=directory)
    except OSError:
        return {}
    finally:
        os.close(directory)
    try:
        st = os.fstat(fd)
        if not is_private(st, stat.S_IFREG) or st.st_size > _MOST_BYTES:
            return {}
        data = json.loads(os.read(fd, st.st_size + 1))
    except (OSError, ValueError, RecursionError):  # RecursionError: nested too deeply
        return {}
    finally:
        os.close(fd)
    rows = data.get("rows") if isinstance(data, dict) else None
    if not isinstance(rows, dict) or data.get("format") != FORMAT:
        return {}
    return rows


def is_private(st: os.stat_result, kind: int) -> bool:
    """A file of ``kind`` that only this user (or root) could have written."""
    mine = st.st_uid in (os.getuid(), 0)  # type: ignore[attr-defined,unused-ignore]
    writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    return stat.S_IFMT(st.st_mode) == kind and mine and not writable


def device_reading(backend: str | None) -> str | None:
    """What the variant choice reads of this system's device, as text (``None`` without
    one whose archs builds may list)."""
    system = _judged_system(backend)
    if not system.knows_device:
        return None
    from ._variants.device_arch import with_device

    return with_device(system).key


def device_inputs() -> list[object] | None:
    """What the device's reading (:func:`device_reading`) is read from, unread: the
    variables that select and order the devices, the devices the drivers list (each by
    name and identity), this boot and the process's cgroup (:func:`~._constants.gpu_access`);
    ``None`` where the reading asks more (torch has initialized the GPU runtime, a MIG
    instance is selected)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return None
    selecting = [os.environ.get(name) for name in _SELECTING]
    if "MIG-" in (selecting[0] or ""):
        return None
    listings = [_listing(_constants.PROC_GPUS), _listing(_constants.KFD_NODES)]
    return [selecting, *listings, *_constants.gpu_access()]


def _same_device(backend: str | None, reading: str, read_from: object) -> bool:
    """Whether this system's device still reads as ``reading``: unread where what it is
    read from is as it was (``read_from``), else read again."""
    inputs = device_inputs()
    return (inputs is not None and inputs == read_from) or device_reading(backend) == reading


def _listing(directory: str) -> list[list[object]] | None:
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return None
    return [[name, identity_of(os.path.join(directory, name))] for name in names]


def installed(package: str) -> Stamp | None:
    """Where ``package`` is installed, stamped; ``None`` where it is not."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # a damaged row's name: no package, none relative
        return None
    if spec is None:
        return None
    origin = spec.origin or next(iter(spec.submodule_search_locations or ()), "")
    return stamp(origin, follow_symlinks=True)


def stamp(path: str, *, follow_symlinks: bool = False) -> Stamp | None:
    """What changes when anything about the file at ``path`` does (ctime cannot be set
    back); ``None`` when there is none. ``follow_symlinks`` for a file read through a link."""
    try:
        st = os.stat(path, follow_symlinks=follow_symlinks)
    except (OSError, ValueError):
        return None
    identity = [st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid]
    return [*identity, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def identity_of(path: str) -> Stamp | None:
    """Which directory is at ``path``, its owner and mode: what the trust checks judge,
    not its times, which change as entries come and go."""
    found = stamp(path)
    return found and found[:5]


def _digest(module: str, candidates: tuple[RepoInfo, ...], backend: str | None) -> str:
    import hashlib

    keys = os.environ.get(TRUSTED_KEYS_VAR)
    inputs = (
        __version__,
        module,
        [(info.repo_id, info.version) for info in candidates],
        os.getuid(),  # type: ignore[attr-defined,unused-ignore]  # key_of checked it exists
        os.getgroups(),
        sorted(
            (name, os.environ[name])
            for name in os.environ  # the names alone: decoding every value costs 20 us
            if name.startswith("FLASHHUB_") or name in _PLACING
        ),
        stamp(PYPROJECT_NAME, follow_symlinks=True),
        stamp(os.path.expanduser(keys.strip()), follow_symlinks=True) if keys else None,
        _system_inputs(backend),
    )
    return hashlib.blake2b(repr(inputs).encode(), digest_size=16).hexdigest()


def _system_inputs(backend: str | None) -> tuple[object, ...]:
    """What :func:`~.._variants.system.detect_system` reads, unjudged (judging imports
    more than the rest of a hit costs): whatever it comes to read, this reads too, but
    for the packages some builds need (tvm-ffi), which a row checks where they count."""
    if "torch" not in sys.modules:  # the process's first load
        from ._utils.ctrl_c import import_torch

        import_torch()
    import torch

    version, privateuse = torch.version, getattr(torch._C, "_get_privateuse1_backend_name", None)
    gil = getattr(sys, "_is_gil_enabled", None)
    return (
        backend,
        sys.version,
        os.uname(),
        gil() if gil else None,
        torch.__version__,
        torch.compiled_with_cxx11_abi(),
        hasattr(torch.backends, "tpu"),
        hasattr(torch, "neuron"),
        version.cuda,
        getattr(version, "rocm", None) or getattr(version, "hip", None),
        sys.platform == "darwin" and torch.backends.mps.is_available(),  # else never
        getattr(version, "xpu", None),
        privateuse() if privateuse else None,
        _judged_system(backend) if privateuse and privateuse() == "npu" else None,
    )


def _judged_system(backend: str | None) -> SystemInfo:
    """This system's record, judged (the judge is imported only where a row needs it:
    a device's reading, Ascend's system, which reads the installed CANN's version too)."""
    from ._variants.system import this_system

    return this_system(backend)


def _kernel_of(row: dict[str, Any], root: str, info: RepoInfo) -> KernelDir:
    """The :class:`KernelDir` a row records."""
    from pathlib import Path

    variant, kernel = str(row["variant"]), row["kernel"]
    package = str(kernel["package"])  # strings: a Path costs more than the checks
    if variant in ("", ".", "..") or "/" in variant or os.path.isabs(package):
        raise ValueError(f"not a path inside the version: {variant!r}, {package}")
    if ".." in package.split("/"):
        raise ValueError(f"not a path inside the entry: {package}")
    entry = Path(root, info.cache_path, variant)
    natives, requires = kernel["natives"], kernel["requires"]
    return KernelDir(
        entry / package,
        info,
        variant,
        entry,
        kernel["signer"] and str(kernel["signer"]),
        None if natives is None else tuple((str(path), int(size)) for path, size in natives),
        None if requires is None else dict(requires),
    )


# -- entries in use --------------------------------------------------------------------

_held: dict[str, int] = {}  # entry directory -> the descriptor holding its shared lock


def mark_in_use(entry: Path) -> bool:
    """Hold a shared lock on ``entry`` for the rest of this process; ``False`` when the
    entry was moved away before the lock was taken (``flashhub cache clear`` was removing
    it): look it up again. An entry that cannot be locked is ``True``: loaded, unprotected."""
    if fcntl is None or (len(_held) >= 16 and len(_held) >= _open_files_limit() // 4):
        return True
    key = str(entry)
    held = _held.get(key)
    if held is not None:
        if _is_at(held, entry):
            return True
        if _held.pop(key, None) == held:  # removed and cached again since: lock the new one
            os.close(held)
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while clear or prune removes it
    except OSError:
        os.close(fd)
        return True
    if not _is_at(fd, entry):
        os.close(fd)
        return False
    if _held.setdefault(key, fd) != fd:  # another thread marked it meanwhile
        os.close(fd)
    return True


def _open_files_limit() -> int:
    import resource  # once 16 entries are held

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _is_at(fd: int, entry: Path) -> bool:
    """Whether the directory open as ``fd`` is still the one at ``entry``."""
    try:
        current = os.stat(entry)
    except OSError:
        return False
    held = os.fstat(fd)
    return (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino)
