"""Whether this process names a kernel's files by the bytes everyone else does.

A CDN serves a file at the UTF-8 of its name (``%C3%A4`` for ``ä``), and the publisher,
the cache and the kernel's own code in a UTF-8 locale name it on disk by those bytes.
Python in a locale of another encoding, with its UTF-8 mode off, does not: an ASCII one
has no bytes for ``ä``, a Latin-1 one names it ``b"\\xe4"`` (a file no other process
finds), and reads the UTF-8 name ``b"\\xc3\\xa4"`` as ``Ã¤``.
"""

from __future__ import annotations

import codecs
import os
import sys
from collections.abc import Iterable

from ..errors import CacheError

UTF8_LOCALE_HINT = "run in a UTF-8 locale (LC_ALL=C.UTF-8), or set PYTHONUTF8=1"


def named_as_utf8(name: str) -> bool:
    """Whether this process names ``name`` on disk by its UTF-8 bytes: always in a UTF-8
    locale, and for an ASCII name in any; never for a name read from disk that is not
    UTF-8 (a lone surrogate stands for each byte of it)."""
    try:
        return os.fsencode(name) == name.encode("utf-8")
    except UnicodeEncodeError:
        return False


def check_cached_names(relpaths: Iterable[str], holder: str) -> None:
    """Refuse to fetch, check or replace the cache entry of ``holder`` (``org/pkg@v1
    variant NAME``) listing a file this process does not name by its UTF-8 bytes: it
    could not create it (ASCII), or would create a file no other process finds, and take
    an entry a UTF-8 process cached for one that lost it (Latin-1).

    Raises:
        CacheError: naming the file and the encoding, with the hint to use UTF-8.
    """
    for relpath in relpaths:
        if not named_as_utf8(relpath):
            raise CacheError(
                f"{holder} holds the file {relpath!r}, a name the file system encoding of "
                f"this process ({sys.getfilesystemencoding()}) cannot hold as UTF-8",
                hint=UTF8_LOCALE_HINT,
            )


def name_error() -> tuple[str, str]:
    """Why a file of a build whose name :func:`named_as_utf8` refuses cannot be published
    as it is named, and what to do: a reason and a hint."""
    if codecs.lookup(sys.getfilesystemencoding()).name == "utf-8":
        return (
            "its name is not valid UTF-8 (each \\udcXX shown stands for a byte 0xXX that is not)",
            "rename the file: a CDN serves each file at the UTF-8 of its name",
        )
    return (
        f"the file system encoding of this process ({sys.getfilesystemencoding()}) does not "
        "read its name as UTF-8, the name a CDN serves it at",
        UTF8_LOCALE_HINT,
    )
