"""Writing a file so that readers see its old bytes or its new ones, never a mix; reading
one that must be a regular file.

Used by the cache, the publisher, a ``file://`` mirror and ``flashhub keygen``. It imports
nothing but ``os``, ``errno`` and ``stat``: the cache reads and writes through it on the
import path.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

TYPE_CHECKING = False  # not typing's: the import path reads through this module
if TYPE_CHECKING:
    from typing import BinaryIO

_TOKEN_BYTES = 8  # of the temporary file's name: ".<name>.<16 hex digits>.tmp"
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # POSIX: opening a pipe waits for no writer
_NOT_FILES = {stat.S_IFIFO: "a pipe", stat.S_IFDIR: "a directory"}  # else a device


def write_atomic(
    path: Path, data: bytes, *, mode: int = 0o644, overwrite: bool = True, durable: bool = True
) -> None:
    """Write ``data`` as ``path`` in one rename, with ``mode`` whatever the umask.

    The bytes go to a new temporary file beside ``path`` (created exclusively, so never
    one a neighbour prepared), are flushed to disk (unless not ``durable``), then renamed
    over ``path``. On any failure the temporary file is removed and ``path`` is left as
    it was. Readers, and a process killed at any point, see the old file or the new one
    either way; the flush is for a power cut, after which a file written without it may
    be empty.

    Args:
        path: The file to write; its directory must exist.
        data: Its new content.
        mode: Its permission bits (``0o600`` for a secret).
        overwrite: Replace a file already at ``path``; if false, an existing file is
            refused with :class:`FileExistsError` (checked by the rename itself, a hard
            link, so two writers cannot both succeed).
        durable: ``fsync`` the bytes before the rename (about 0.5 ms on an idle disk,
            tens of ms on a busy one). Records that are checked when read, and fetched
            again when they do not parse, can do without.

    Raises:
        OSError: The file cannot be written (``FileExistsError`` without ``overwrite``).
            It names ``path``, never the temporary file, which the user knows nothing of.
    """
    tmp = path.with_name(f".{path.name}.{os.urandom(_TOKEN_BYTES).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            with os.fdopen(fd, "wb") as f:
                if os.name == "posix":  # Windows has no fchmod, and modes mean little there
                    os.fchmod(f.fileno(), mode)
                f.write(data)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                os.link(tmp, path)
        finally:
            # After a rename there is nothing left to remove; after a link, the second name.
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # the subclass, by errno


def open_regular(path: Path, buffering: int = -1) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file (or a symlink to one).

    Where someone who may create files beside it (a shared cache's group, whoever fills
    a CDN tree) put a pipe, ``open`` would wait for a writer, forever, and a device
    (``/dev/zero``) never ends: they are refused at once, as is a directory.

    Raises:
        OSError: it cannot be opened, or is not a regular file (``EINVAL``, saying what
            it is: "a pipe, not a regular file").
    """
    fd = os.open(path, os.O_RDONLY | _NONBLOCK)  # a pipe's open returns: no writer awaited
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _NOT_FILES.get(stat.S_IFMT(mode), "a device")
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(path))
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return open(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, limit: int = -1) -> bytes:
    """The bytes of ``path``, a regular file (:func:`open_regular`); with ``limit``, one
    larger is an ``OSError`` (``EFBIG``) before more is read."""
    with open_regular(path) as file:
        data = file.read(limit + 1 if limit >= 0 else -1)
    if 0 <= limit < len(data):
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def replaced_name(name: str) -> str | None:
    """The name of the file that :func:`write_atomic`'s temporary file ``name`` was to
    replace (``.index.json.0123456789abcdef.tmp`` -> ``index.json``); ``None`` for a name
    of another kind."""
    if not (name.startswith(".") and name.endswith(".tmp")):
        return None
    target, _, token = name[1:-4].rpartition(".")
    hexdigits = len(token) == 2 * _TOKEN_BYTES and all(c in "0123456789abcdef" for c in token)
    return target if target and hexdigits else None
