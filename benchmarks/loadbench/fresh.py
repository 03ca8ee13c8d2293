"""Cold loads as a user's program makes them: each in a fresh ``python -c`` process that
imports torch, then times ``from flashhub_kernels import get_kernel; get_kernel(repo,
version=1)`` on an empty cache, and prints what it measured.

:func:`fresh_load` runs this client (or the 0.1.2 release, from ``--release-dir``, the
same program with that directory first on ``PYTHONPATH``); :func:`fresh_breakdown`
runs it with :mod:`loadbench.spans` installed, for where the time goes. The programs
import nothing before the load beyond ``os``, ``sys`` and ``time`` (and torch), so the
load pays for every import it makes, as in a user's process.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import CHILD_TIMEOUT_S, CRYPTO_LIBS, HTTP_LIBS, LOCK_LIBS, environ_without_flashhub

# Timed inside: after import torch, until get_kernel returns. Also the CPU time (user +
# system, every thread), the peak RSS growth (VmHWM reset through clear_refs where the
# kernel lets it) and the watched libraries the load imported. Printed as a dict literal;
# os._exit skips torch's teardown, which is no part of a load.
_LOAD = """
import os, sys, time
import torch

def status_kib(name):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(name + ":"):
                return int(line.split()[1])
    return 0

def peak_kib():
    if method.startswith("VmHWM"):
        return status_kib("VmHWM")
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

try:
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    method = "VmHWM after resetting it with /proc/self/clear_refs"
except OSError:
    method = "ru_maxrss (a lifetime peak: the growth is an upper bound)"
before, modules, cpu = status_kib("VmRSS"), set(sys.modules), os.times()
start = time.perf_counter()
from flashhub_kernels import get_kernel
get_kernel(sys.argv[1], version=1)
seconds = time.perf_counter() - start
cpu = sum(os.times()[:2]) - sum(cpu[:2])
libs = [name for name in sys.argv[2].split(",") if name in sys.modules and name not in modules]
print(repr({
    "seconds": seconds, "cpu_seconds": cpu, "libs": libs,
    "rss_before_mib": before / 1024,
    "rss_growth_mib": max(0, peak_kib() - before) / 1024,
    "rss_method": method,
}))
sys.stdout.flush()
os._exit(0)
"""
# The same load with timing spans around flashhub's functions (see loadbench.spans).
_BREAKDOWN = """
import os, sys, time
import torch
sys.path.insert(0, sys.argv[2])
from loadbench import spans
timing = spans.install()
start = time.perf_counter()
from flashhub_kernels import get_kernel
get_kernel(sys.argv[1], version=1)
seconds = time.perf_counter() - start
print(repr({"wall": seconds * 1e3, **timing.result()}))
sys.stdout.flush()
os._exit(0)
"""
# The floor of any client built on requests: in the same fresh interpreter, import
# requests, GET the variant's metadata.json on one Session, then stream each file it
# lists to its path (1 MiB chunks), hashed with sha256 on the way and compared with the
# digest. No variant choice, no locks, no staging, no version check, no import. Timed
# like the load above.
_FLOOR = """
import os, sys, time
import torch

cpu = os.times()
start = time.perf_counter()
import base64, hashlib
import requests

variant_url, out = sys.argv[1], sys.argv[2]
with requests.Session() as session:
    response = session.get(variant_url + "/metadata.json", timeout=60)
    response.raise_for_status()
    digests = response.json()["digest"]["files"]
    for relpath, digest in digests.items():
        dest = os.path.join(out, relpath)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        sha256 = hashlib.sha256()
        with session.get(f"{variant_url}/{relpath}", stream=True, timeout=60) as response:
            response.raise_for_status()
            with open(dest, "wb") as file:
                for chunk in response.iter_content(1 << 20):
                    sha256.update(chunk)
                    file.write(chunk)
        if base64.b64encode(sha256.digest()).decode() != digest:
            raise SystemExit(f"{relpath}: sha256 mismatch")
seconds = time.perf_counter() - start
cpu = sum(os.times()[:2]) - sum(cpu[:2])
print(repr({"seconds": seconds, "cpu_seconds": cpu}))
sys.stdout.flush()
os._exit(0)
"""
BENCHMARKS = Path(__file__).resolve().parent.parent
WATCHED = ",".join((*HTTP_LIBS, *LOCK_LIBS, *CRYPTO_LIBS))


def this_client() -> Path:
    """The directory the benchmark's own ``flashhub_kernels`` is imported from, for the
    children's ``PYTHONPATH`` (a venv's editable install may point elsewhere)."""
    spec = importlib.util.find_spec("flashhub_kernels")
    assert spec is not None and spec.origin is not None, "flashhub_kernels is not importable"
    return Path(spec.origin).parent.parent


def release_version(release_dir: Path) -> str | None:
    """The version of the flashhub-kernels installed in ``release_dir``, from its
    ``.dist-info``; ``None`` when there is none."""
    for info in sorted(release_dir.glob("flashhub_kernels-*.dist-info")):
        return info.name.removeprefix("flashhub_kernels-").removesuffix(".dist-info")
    return None


def run_program(
    program: str, env: dict[str, str], *args: str, python: str = sys.executable
) -> dict[str, Any]:
    """Run ``program`` in a fresh ``python -c`` and return the dict literal it prints last
    (``python``: another interpreter, such as the peer's, :mod:`loadbench.peer`)."""
    result = subprocess.run(
        [python, "-c", program, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"a fresh load failed:\n{result.stdout}\n{result.stderr}")
    value: dict[str, Any] = ast.literal_eval(result.stdout.strip().splitlines()[-1])
    return value


def child_env(flashhub_env: dict[str, str], pythonpath: Path | None = None) -> dict[str, str]:
    """This process's environment with ``flashhub_env`` and ``pythonpath`` first on the
    path; bytecode written as a normal install does (see :func:`loadbench.cli.main`)."""
    env = environ_without_flashhub()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(pythonpath), os.environ.get("PYTHONPATH", "")) if p
        )
    return env | flashhub_env


def fresh_load(flashhub_env: dict[str, str], repo_id: str, client: Path) -> dict[str, Any]:
    """A cold ``get_kernel`` of ``repo_id`` in a fresh interpreter, with the client
    imported from ``client`` (this one's directory, or a release's)."""
    return run_program(_LOAD, child_env(flashhub_env, client), repo_id, WATCHED)


def fresh_floor(variant_url: str, out: Path) -> dict[str, Any]:
    """The requests floor (see ``_FLOOR``) of the variant at ``variant_url``, into ``out``."""
    return run_program(_FLOOR, child_env({}), variant_url, str(out))


def fresh_breakdown(flashhub_env: dict[str, str], repo_id: str, client: Path) -> dict[str, Any]:
    """Milliseconds per phase of a cold ``get_kernel`` (see :mod:`loadbench.spans`)."""
    return run_program(_BREAKDOWN, child_env(flashhub_env, client), repo_id, str(BENCHMARKS))
