"""The facts about this machine and checkout that head the report: CPU, memory, OS, the
disk under the temporary directory (and what creating a file there costs), Python and
package versions, curl, the git commit."""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .fresh import release_version

REPO = Path(__file__).resolve().parents[2]


def _first_line(argv: Sequence[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "?"
    lines = result.stdout.strip().splitlines()
    return lines[0] if lines else "?"


def _proc(name: str) -> str:
    """The text of ``/proc/<name>``, or nothing where there is no such file."""
    path = Path("/proc") / name
    return path.read_text() if path.exists() else ""


def _mount_of(path: Path) -> str:
    best = ("", "?", "?")
    for line in _proc("mounts").splitlines():
        device, mount, fstype = line.split()[:3]
        if str(path).startswith(mount) and len(mount) >= len(best[0]):
            best = (mount, device, fstype)
    return f"{best[2]} on {best[1]} (mounted at {best[0]})"


def _file_creation(work: Path, files: int = 200) -> str:
    """What creating a file costs under ``work``, where the caches and curl's output go.

    Every client of the cold rows creates each file it downloads, curl included. On ext4
    without a journal that cost grows with the inodes freed in the last minute (see
    :meth:`loadbench.bench.Bench.discard`), so the report states it as measured here
    just before the rows. The probe's files stay until the benchmark ends, like the rows'.
    """
    probe = work / "creation-probe"
    probe.mkdir()
    start, cpu = time.perf_counter(), os.times()
    for i in range(files):
        os.close(os.open(probe / f"f{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    wall, system = time.perf_counter() - start, os.times().system - cpu.system
    return (
        f"{wall / files * 1e6:.0f} us per new empty file ({files} in a fresh directory, "
        f"{system * 1e3:.0f} ms of system time)"
    )


def _cpu() -> str:
    models = re.findall(r"^model name\s*:\s*(.+)$", _proc("cpuinfo"), re.MULTILINE)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    model = models[0] if models else platform.processor() or "?"
    return f"{model}; {os.cpu_count()} logical cores, {usable} usable"


def _memory() -> str:
    mem = re.search(r"^MemTotal:\s*(\d+) kB", _proc("meminfo"), re.MULTILINE)
    return f"{int(mem.group(1)) / 1024**2:.1f} GiB" if mem else "?"


def _packages() -> str:
    from importlib.metadata import PackageNotFoundError, version  # kept out of the children

    def pkg(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    return (
        f"torch {pkg('torch')}, flashhub-kernels {pkg('flashhub-kernels')}, "
        f"requests {pkg('requests')}, urllib3 {pkg('urllib3')}, filelock {pkg('filelock')}"
    )


def _curl() -> str:
    if not shutil.which("curl"):
        return "not on PATH"
    return " ".join(_first_line(["curl", "--version"]).split()[:2])


def _source() -> str:
    commit = _first_line(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"])
    dirty = _first_line(["git", "-C", str(REPO), "status", "--porcelain", "src"])
    return f"git {commit}" + (" + uncommitted changes in src/" if dirty != "?" else "")


def _release(release_dir: Path | None) -> str:
    if release_dir is None:
        return "not measured (no --release-dir)"
    return f"flashhub-kernels {release_version(release_dir)} from {release_dir}"


def machine_facts(work: Path, handler: str, release_dir: Path | None) -> dict[str, str]:
    return {
        "cpu": _cpu(),
        "memory": _memory(),
        "os": platform.platform(),
        "disk (temp dir)": f"{work}: {_mount_of(work)}",
        "file creation": _file_creation(work),
        "python": f"{platform.python_version()} ({sys.executable})",
        "packages": _packages(),
        "curl": _curl(),
        "server": f"ThreadingHTTPServer in this process, {handler} request handler "
        "(--server), HTTP/1.1 keep-alive, TCP_NODELAY, Range",
        "release compared": _release(release_dir),
        "source": _source(),
    }
