"""A command run on a terminal (a pty) as a user runs it there, and the screen its output
leaves: for what progress bars draw, clear and leave behind."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


def read_all(fd: int, into: list[bytes]) -> None:
    """Append what the terminal ``fd`` gives to ``into`` until its last writer closes it."""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal's last handle
            return
        if not chunk:
            return
        into.append(chunk)


@dataclass(frozen=True)
class TerminalRun:
    """What a command run on a terminal returned, and wrote there (stdout and stderr as
    the terminal received them, escape sequences included)."""

    returncode: int
    output: str


def run_on_a_terminal(
    argv: Sequence[str], *, env: Mapping[str, str], columns: int = 200
) -> TerminalRun:
    """``argv`` with its stdout and stderr on a terminal ``columns`` wide (wide enough, by
    default, that no line of a command's report wraps), in ``env``."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal, env=env
    )
    os.close(terminal)
    received: list[bytes] = []
    reader = threading.Thread(target=read_all, args=(controller, received), daemon=True)
    reader.start()
    try:
        code = process.wait(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(10)
        os.close(controller)
    return TerminalRun(code, b"".join(received).decode())


_WRITES = re.compile(r"\x1b\[(\d*)([A-Za-z])|.", re.DOTALL)


def screen(output: str) -> list[str]:
    """The lines ``output`` leaves on a terminal, their trailing blanks cut, the empty
    ones below the last line written left out: each character is written where the
    cursor stands, which a carriage return moves to the start of its line, a newline
    down a line, and ``ESC [ n A`` up ``n`` lines; other escape sequences draw nothing."""
    rows: list[list[str]] = [[]]
    row = column = 0
    for match in _WRITES.finditer(output):
        text, up = match.group(), match.group(2) == "A"
        if text == "\r":
            column = 0
        elif text == "\n":
            row += 1
            rows.extend([] for _ in range(row + 1 - len(rows)))
        elif up:
            row = max(0, row - int(match.group(1) or 1))
        elif not match.group(2):
            line = rows[row]
            line.extend(" " * (column + 1 - len(line)))
            line[column] = text
            column += 1
    lines = ["".join(line).rstrip() for line in rows]
    while lines and not lines[-1]:
        lines.pop()
    return lines
