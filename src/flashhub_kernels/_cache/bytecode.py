"""The bytecode of a cache entry: compiled from its verified sources before the entry is
committed, and recorded in its receipt."""

from __future__ import annotations

import contextlib
import os
import py_compile  # here, not where it is used: download threads compile (see _utils.threads)
import re
import sys
import tempfile
from collections.abc import Collection, Iterable
from pathlib import Path

# A .pyc header's flags (PEP 552) -> how py_compile writes such a file.
_INVALIDATION_MODES = {
    0: py_compile.PycInvalidationMode.TIMESTAMP,
    1: py_compile.PycInvalidationMode.UNCHECKED_HASH,
    3: py_compile.PycInvalidationMode.CHECKED_HASH,
}
_PYCACHE = "__pycache__"
_CACHE_TAG = re.compile(r"[a-z]+-?[0-9]+")  # sys.implementation.cache_tag: cpython-311
# The name another tool's import hook gives the bytecode it writes beside a source:
# pytest's assertion rewriting (y.cpython-311-pytest-9.2.0.pyc, .pyo under -O), or a hook
# that passes its own optimization tag to cache_from_source, which is not a level
# (typeguard: y.cpython-311.opt-typeguard461.pyc; beartype: .opt-beartype0v23v1.pyc).
_HOOK_BYTECODE = re.compile(
    rf"(?P<stem>[^.]+)\.(?P<tag>{_CACHE_TAG.pattern})"
    r"(?:-(?P<pytest>pytest)-.+\.py[co]|\.(?P<optimization>opt-[0-9]*[A-Za-z][A-Za-z0-9]*)\.pyc)"
)


def receipt_stamp(path: str | Path) -> tuple[int, int]:
    """The size and ``mtime_ns`` of a file: its stamp as a receipt records it (the import
    table stamps a file with more: see :func:`.._cache_imports.stamp`)."""
    st = os.stat(path, follow_symlinks=False)
    return st.st_size, st.st_mtime_ns


def bytecode_path(source: str) -> str:
    """The path of ``source``'s bytecode for this Python, in the ``__pycache__`` beside it,
    as :func:`importlib.util.cache_from_source` gives it without ``sys.pycache_prefix``
    (``PYTHONPYCACHEPREFIX``): an entry's bytecode is part of the entry, so it is in it."""
    head, name = os.path.split(source)
    level = f".opt-{sys.flags.optimize}" if sys.flags.optimize else ""
    tag = sys.implementation.cache_tag
    return os.path.join(head, _PYCACHE, f"{name.rpartition('.')[0]}.{tag}{level}.pyc")


def sources_to_compile(listed: set[str]) -> list[str]:
    """The Python files of an entry whose bytecode the cache compiles: all but those
    shipped with their bytecode (verified like any file: not ours to replace)."""
    return [
        relpath
        for relpath in sorted(listed)
        if relpath.endswith(".py") and Path(bytecode_path(relpath)).as_posix() not in listed
    ]


def compile_bytecode(entry: Path, sources: Iterable[str]) -> dict[str, tuple[int, int, str]]:
    """Compile the Python files ``sources`` (paths in ``entry``) into ``__pycache__``;
    return the receipt's record of each ``.pyc`` written.

    The entry's bytecode is compiled while it is written, so that importing it never
    writes (a warm load works from a read-only cache, and writes nothing), whatever
    ``PYTHONDONTWRITEBYTECODE`` says: the cache is not a source tree. It is hash-based
    and unchecked (PEP 552): valid whatever the modification times (a copy of the cache
    that lost them keeps it), and Python does not re-read the source on each import to
    check it. The receipt vouches for it instead, as for the sources: the warm path
    compares each ``.pyc``'s size and mtime, ``flashhub cache verify`` its sha256.
    """
    written = {}
    for relpath in sources:
        source = entry / relpath
        bytecode = Path(bytecode_path(str(source)))
        # A file that does not compile is reported by the import, with its traceback.
        with contextlib.suppress(py_compile.PyCompileError, OSError):
            py_compile.compile(
                str(source),
                cfile=str(bytecode),
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
            written[bytecode.relative_to(entry).as_posix()] = bytecode_record(bytecode)
    return written


def bytecode_record(path: Path) -> tuple[int, int, str]:
    """What a receipt records of a ``.pyc`` file: its size, ``mtime_ns`` and sha256."""
    from .._utils.hashing import sha256_file  # the cold path and the cache commands only

    return (*receipt_stamp(path), sha256_file(path).hex())


def foreign_bytecode(entry: Path, known: Collection[str]) -> list[str]:
    """What the ``__pycache__`` directories of ``entry`` hold besides ``known`` (the
    bytecode its receipt records or its manifest lists) that is not this Python's
    bytecode of a file ``known`` lists, byte for byte as Python compiles it (under ``-O``
    too): what an import could run that no one verified. Paths relative to ``entry``."""
    foreign = []
    for directory, subdirectories, names in os.walk(entry):
        if os.path.basename(directory) != _PYCACHE:
            continue
        for name in sorted(names + subdirectories):
            relpath = Path(directory, name).relative_to(entry).as_posix()
            if relpath in known or _another_pythons(relpath, known):
                continue
            if not _compiled_from_known(entry, relpath, known):
                foreign.append(relpath)
    return foreign


def hook_bytecode(relpath: str, known: Collection[str]) -> tuple[str, str] | None:
    """Whether ``relpath`` is bytecode that another tool's import hook wrote for a source
    ``known`` lists, in the ``__pycache__`` beside it with this Python's cache tag and the
    tool's own suffix: the source and the tool (``pytest``, or the optimization tag that
    names it: ``opt-typeguard461``); ``None`` for another name. Such a file is no more
    verified than any other: that tool's loader runs it (pytest checks only the source's
    mtime and size)."""
    directory, _, name = relpath.rpartition("/")
    matched = _HOOK_BYTECODE.fullmatch(name)
    if matched is None or matched["tag"] != sys.implementation.cache_tag:
        return None
    source = _source_of(directory, matched["stem"])
    if source not in known:
        return None
    return source, matched["pytest"] or matched["optimization"]


def _another_pythons(relpath: str, known: Collection[str]) -> bool:
    """Whether ``relpath`` is another Python's bytecode of a source ``known`` lists
    (``x/__pycache__/y.cpython-312.pyc``): this Python never runs it, nor can compile it
    to compare, so it is that Python's ``cache verify`` that checks it."""
    named = _bytecode_name(relpath)
    return named is not None and named[1] != sys.implementation.cache_tag and named[0] in known


def _compiled_from_known(entry: Path, relpath: str, known: Collection[str]) -> bool:
    """Whether the file ``relpath`` is the bytecode this Python writes for a source that
    ``known`` lists, at the optimization level and in the mode its name and header say."""
    named = _bytecode_name(relpath)
    if named is None or named[1] != sys.implementation.cache_tag or named[0] not in known:
        return False
    source, _tag, level = named
    path = entry / relpath
    try:
        if path.is_symlink() or not path.is_file():
            return False
        data = path.read_bytes()
        mode = _INVALIDATION_MODES.get(int.from_bytes(data[4:8], "little"))
        if mode is None:
            return False
        with tempfile.TemporaryDirectory() as scratch:
            compiled = Path(scratch, "compiled.pyc")
            py_compile.compile(
                str(entry / source),
                cfile=str(compiled),
                doraise=True,
                optimize=level,
                invalidation_mode=mode,
            )
            return compiled.read_bytes() == data
    except (OSError, py_compile.PyCompileError):
        return False


def _bytecode_name(relpath: str) -> tuple[str, str, int] | None:
    """What the name of a bytecode file in a ``__pycache__`` says: the source it was
    compiled from, the interpreter's cache tag and the optimization level
    (``x/__pycache__/y.cpython-311.opt-1.pyc``: ``x/y.py``, ``cpython-311``, 1); ``None``
    for a name of another form."""
    directory, _, name = relpath.rpartition("/")
    parts = name.split(".")
    level = 0
    if len(parts) == 4 and parts[2].startswith("opt-") and parts[2][4:].isdigit():
        level = int(parts.pop(2)[4:])
    if len(parts) != 3 or parts[2] != "pyc" or _CACHE_TAG.fullmatch(parts[1]) is None:
        return None
    return _source_of(directory, parts[0]), parts[1], level


def _source_of(pycache: str, stem: str) -> str:
    """The source whose bytecode ``stem.<tag>...pyc`` in the ``__pycache__`` directory
    ``pycache`` (``x/__pycache__``, relative to the entry) is: ``x/<stem>.py``."""
    return f"{pycache.removesuffix(_PYCACHE)}{stem}.py"
