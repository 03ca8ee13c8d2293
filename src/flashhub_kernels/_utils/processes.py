"""Who left a directory behind: the process and host its name records, and whether that
process may still be writing in it."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def owner_suffix() -> str:
    """``.<pid>.<host>``: the end of the name of a directory this process writes in and
    renames or removes when done (the host last: host names may hold dots)."""
    return f".{os.getpid()}.{this_host()}"


def this_host() -> str:
    """This machine's host name, as :func:`owner_suffix` records it."""
    return socket.gethostname().replace(os.sep, "_")


def another_process_alive(pid: int) -> bool:
    """Whether the process ``pid`` of this host runs, and is not this one (which, when
    it asks, is not writing in what it finds: a process killed as PID 1 of a container,
    restarted as PID 1, left it), nor a zombie (one that exited and whose parent has not
    waited for it yet: a launcher that waits for its workers in turn keeps a killed one
    so for as long as the others run)."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited and waits for its parent, where ``/proc`` tells."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (macOS), or the process went meanwhile
        return False
    fields = stat.rpartition(")")[2].split()  # the name, in parentheses, may hold spaces
    return bool(fields) and fields[0] in ("Z", "X")


def idle_for(top: Path, seconds: float) -> bool:
    """Whether nothing in the tree ``top`` was modified in the last ``seconds``: how a
    leftover whose process cannot be asked (another host's, one its name does not
    record) shows that no writer is at it."""
    since = time.time() - seconds
    try:
        if top.lstat().st_mtime > since:
            return False
        for dirpath, dirnames, filenames in os.walk(top):
            for name in dirnames + filenames:
                if os.lstat(os.path.join(dirpath, name)).st_mtime > since:
                    return False
    except OSError:
        return False  # changing under us
    return True
