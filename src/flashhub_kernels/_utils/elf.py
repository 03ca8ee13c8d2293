"""Whether an ELF shared library is whole: the dynamic loader maps a truncated one and
then crashes the process (``SIGBUS``) reading past its end, where no Python can catch it.
"""

from __future__ import annotations

import struct
from pathlib import Path

_MAGIC = b"\x7fELF"
_PT_LOAD = 1
_PN_XNUM = 0xFFFF  # more program headers than fit e_phnum: the count is elsewhere
# e_ident[EI_CLASS] -> (the header's layout from e_phoff, a program header's layout)
_LAYOUTS = {
    1: ("I I 6x H H H H", "I I 4x 4x I"),  # ELFCLASS32: p_type, p_offset, p_filesz
    2: ("Q Q 6x H H H H", "I 4x Q 8x 8x Q"),  # ELFCLASS64: p_type, p_offset, p_filesz
}


def missing_bytes(path: Path) -> tuple[int, int] | None:
    """``(the size its headers need, its size)`` when the ELF file at ``path`` is cut
    short; ``None`` when it is whole, or not an ELF file this can read.

    Raises:
        OSError: the file cannot be read.
    """
    with path.open("rb") as file:
        ident = file.read(64)
        size = file.seek(0, 2)
        if len(ident) < 52 or ident[:4] != _MAGIC or ident[4] not in _LAYOUTS:
            return None
        order = {1: "<", 2: ">"}.get(ident[5])
        if order is None:
            return None
        header, program = (order + layout for layout in _LAYOUTS[ident[4]])
        offset = 28 if ident[4] == 1 else 32
        if len(ident) < offset + struct.calcsize(header):
            return None
        phoff, shoff, phentsize, phnum, shentsize, shnum = struct.unpack_from(header, ident, offset)
        needed = max(phoff + phentsize * phnum, shoff + shentsize * shnum if shoff else 0)
        if phnum == _PN_XNUM or phentsize < struct.calcsize(program):
            return None
        if phoff + phentsize * phnum > size:  # not read: it may name gigabytes, or no offset
            return needed, size
        file.seek(phoff)
        table = file.read(phentsize * phnum)
    for index in range(phnum):
        p_type, p_offset, p_filesz = struct.unpack_from(program, table, index * phentsize)
        if p_type == _PT_LOAD:
            needed = max(needed, p_offset + p_filesz)
    return (needed, size) if needed > size else None
