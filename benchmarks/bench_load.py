"""Kernel loading against the limits of this machine.

    python benchmarks/bench_load.py [--size-mib 512] [--realistic-mib 128]
                                    [--small-files 200] [--runs 5] [--procs 16] [--json OUT]

It writes synthetic CDN trees into a temporary directory, serves them from a loopback
HTTP server that sends bodies with sendfile(2), and prints one table: for each row the
median, min and max over ``--runs`` runs of flashhub-kernels and of a baseline measured
in the same run, their ratio, and the row's target with pass/FAIL. Targets are printed,
never asserted; the exit status is 0 whenever the benchmark itself ran.

Targets:
  1a  a cold load of one big file (``--size-mib``) at least as fast as ``curl -o FILE``
      of the same file (ratio <= 1.00);
  2a  a cold load of ``--small-files`` files of 10 KiB within 3x of one ``curl -K``
      process fetching the same URLs (ratio <= 3.00);
  3   warm imports within 1.5x of the same package imported from a plain directory,
      with no HTTP request and no HTTP library imported, and not slowed (<= 1.20x) by
      1000 other kernels in the cache;
  4b  ``--procs`` processes cold-loading the same kernel at once make 1 GET per file;
  5   peak RSS growth of the big-file cold load under 64 MiB;
  6   ``flashhub --help`` under 150 ms, and ``import flashhub`` / ``import
      flashhub_kernels`` import neither torch nor an HTTP or file-lock library
      (requests, urllib3, filelock, http.client);
  7   a cold load of a realistic kernel variant (one ``.so`` of ``--realistic-mib`` and
      10 small Python files) within 1.2x of one ``curl -K`` process (ratio <= 1.20).

Every measured load runs in a fresh process forked from a multiprocessing "forkserver"
that has already imported torch, so a child starts with torch imported and only the
call under test is timed. A child also runs this script's imports (stdlib only, and
none that a load would import if torch has not: ``median`` is written out to keep
``decimal`` out).
See docs/performance.md for what each row means.
"""

from __future__ import annotations

import argparse
import base64
import collections
import functools
import hashlib
import importlib
import importlib.util
import json
import multiprocessing
import os
import platform
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, TypeVar

ORG = "bench"
PREFIX = "kernels"
VARIANT = "torch-universal"  # pure Python: fits every system, so no variant logic differs
SMALL_FILE_BYTES = 10 * 1024
MIB = 1 << 20
CHILD_TIMEOUT_S = 900.0
# The targets (see the module docstring); printed with each row, never asserted.
TARGET_BIG_VS_CURL = 1.0
TARGET_SMALL_VS_CURL = 3.0
TARGET_REALISTIC_VS_CURL = 1.2
TARGET_WARM_VS_PLAIN = 1.5
TARGET_RSS_MIB = 64.0
TARGET_HELP_MS = 150.0
CROWDED_CACHE_KERNELS = 1000  # row 3d: other kernels in the cache beside the one imported
TARGET_CROWDED_VS_ALONE = 1.2  # "does not scale": noise, not a factor
# Row 7: a realistic kernel variant, one compiled extension and the package's Python files.
REALISTIC_SO = "_realistic_cpu_abc123.so"
REALISTIC_PY_FILES = (  # __init__.py among them: 10 Python files
    "__init__.py",
    "_ops.py",
    "layers.py",
    "functional.py",
    "utils.py",
    "_meta.py",
    "_dispatch.py",
    "_autotune.py",
    "_shapes.py",
    "testing.py",
)
REALISTIC_PY_BYTES = 3 * 1024  # each Python file: about this size
# Imported by neither ``import flashhub`` nor ``import flashhub_kernels`` (row 6c), nor by
# a warm load (row 3e, where torch, imported before, has already brought http.client in).
HTTP_LIBS = ("requests", "urllib3", "http.client")
LOCK_LIBS = ("filelock",)


def log(message: str) -> None:
    """Progress goes to stderr; the table alone goes to stdout."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- results -------------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    """The median (not ``statistics``: it imports ``decimal``, which flashhub's warm path
    imports too, and a child must not have it preloaded)."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


@dataclass(frozen=True)
class Stat:
    """Median, min and max of repeated measurements, in the row's unit."""

    median: float
    min: float
    max: float
    values: tuple[float, ...]  # in the order measured (kept in the --json output)

    @classmethod
    def of(cls, values: Sequence[float]) -> Stat:
        return cls(median(values), min(values), max(values), tuple(values))


@dataclass
class Row:
    """One line of the table: flashhub against a baseline measured in the same run."""

    key: str
    name: str
    unit: str
    ours: Stat | None
    baseline_name: str = ""
    baseline: Stat | None = None
    target: str = ""
    passed: bool | None = None
    notes: list[str] = field(default_factory=list)
    text: str = ""  # shown instead of ``ours`` when the row is not a measurement
    has_ratio: bool = True  # False where a ratio would mean nothing (RSS growth)

    @property
    def ratio(self) -> float | None:
        if not self.has_ratio or self.ours is None or self.baseline is None:
            return None
        if self.baseline.median == 0:
            return None
        return self.ours.median / self.baseline.median


def ratio_row(row: Row, limit: float) -> Row:
    """Judge ``row`` by ``ratio <= limit`` (ratios are flashhub / baseline, lower is better)."""
    row.target = f"<= {limit:.2f}x"
    row.passed = None if row.ratio is None else row.ratio <= limit
    return row


# -- the CDN tree ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    """A file already written (and hashed) once, hard-linked into further variants."""

    path: Path
    digest: str


@dataclass(frozen=True)
class Kernel:
    """One published kernel: version 1, one ``torch-universal`` variant."""

    name: str
    files: Mapping[str, str]  # path relative to the variant dir -> base64 sha256

    @property
    def repo_id(self) -> str:
        return f"{ORG}/{self.name}"

    @property
    def py_pkg(self) -> str:
        return self.name.replace("-", "_")

    @property
    def module(self) -> str:
        return f"flashhub.{ORG}.{self.py_pkg}.v1"

    @property
    def variant_path(self) -> str:
        """URL path of the variant directory on the server."""
        return f"/{PREFIX}/{ORG}/{self.name}/v1/build/{VARIANT}"

    def file_paths(self) -> list[str]:
        return [f"{self.variant_path}/{relpath}" for relpath in self.files]


def b64_sha256(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def random_blob(path: Path, size: int) -> Blob:
    """Write ``size`` random bytes (incompressible, unlike zeros) and hash them on the way."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hasher = hashlib.sha256()
    with open(path, "wb") as file:
        for offset in range(0, size, MIB):
            chunk = os.urandom(min(MIB, size - offset))
            hasher.update(chunk)
            file.write(chunk)
    return Blob(path, base64.b64encode(hasher.digest()).decode())


def publish(cdn: Path, name: str, files: Mapping[str, bytes | Blob]) -> Kernel:
    """Write a kernel the way the publisher lays it out: files, metadata.json, index files."""
    version_dir = cdn / PREFIX / ORG / name / "v1"
    variant_dir = version_dir / "build" / VARIANT
    digests: dict[str, str] = {}
    for relpath, content in files.items():
        path = variant_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Blob):
            os.link(content.path, path)
            digests[relpath] = content.digest
        else:
            path.write_bytes(content)
            digests[relpath] = b64_sha256(content)
    (variant_dir / "metadata.json").write_text(json.dumps({"digest": {"files": digests}}))
    (version_dir / "variants.json").write_text(json.dumps([VARIANT]))
    (version_dir.parent / "versions.json").write_text("[1]")
    return Kernel(name, digests)


def init_py(what: str) -> bytes:
    source = f'"""Synthetic benchmark kernel: {what}."""\n\nfrom pathlib import Path\n\n'
    return (source + "HERE = Path(__file__).parent\n").encode()


def py_module(what: str, size: int) -> bytes:
    """Valid Python source of about ``size`` bytes: :func:`init_py`, then small functions.

    Nothing in it imports the package's other modules or its extension, so importing the
    package (as ``get_kernel`` does) costs about what it costs in the other rows.
    """
    source = init_py(what).decode()
    i = 0
    while len(source) < size:
        source += (
            f"\n\ndef op_{i}(x, k={i}):\n"
            f'    """Scale ``x`` by {i} and shift it by {i}: padding of a realistic size."""\n'
            f"    return x * k + {i}\n"
        )
        i += 1
    return source.encode()


WARM_FILES = {
    "__init__.py": b'"""A small kernel package."""\n\nimport torch\n\n'
    b"from . import layers\nfrom ._ops import add, scale\n\n__all__ = ['add', 'layers', 'scale']\n",
    "_ops.py": b"import torch\n\n\ndef add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
    b"    return a + b\n\n\ndef scale(a: torch.Tensor, k: float) -> torch.Tensor:\n"
    b"    return a * k\n",
    "layers.py": b"import torch\n\nfrom ._ops import add\n\n\nclass Add(torch.nn.Module):\n"
    b"    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
    b"        return add(a, b)\n",
}


@dataclass(frozen=True)
class Trees:
    cdn: Path
    big: Kernel  # one large file (plus its __init__.py)
    small: Kernel  # many 10 KiB files
    warm: Kernel  # a small package for the warm import
    crowd: Kernel  # the large file and the small files together, for the 16 processes
    realistic: Kernel  # one .so and 10 small Python files
    plain_dir: Path  # the warm kernel's package as a plain directory for sys.path


def build_trees(work: Path, size_mib: int, small_files: int, realistic_mib: int) -> Trees:
    cdn, blobs = work / "cdn", work / "blobs"
    big_blob = random_blob(blobs / "weights.bin", size_mib * MIB)
    so_blob = random_blob(blobs / REALISTIC_SO, realistic_mib * MIB)
    # ``small_files`` files in all: __init__.py and small_files - 1 data files.
    small_blobs = {
        f"data/part_{i:04d}.bin": random_blob(blobs / f"part_{i:04d}.bin", SMALL_FILE_BYTES)
        for i in range(small_files - 1)
    }

    def package(
        py_pkg: str, what: str, files: Mapping[str, bytes | Blob]
    ) -> dict[str, bytes | Blob]:
        tree: dict[str, bytes | Blob] = {f"{py_pkg}/__init__.py": init_py(what)}
        tree.update({f"{py_pkg}/{rel}": content for rel, content in files.items()})
        return tree

    big = publish(cdn, "big-file", package("big_file", "one big file", {"weights.bin": big_blob}))
    small = publish(cdn, "small-files", package("small_files", "small files", small_blobs))
    warm = publish(
        cdn, "warm-import", {f"warm_import/{rel}": data for rel, data in WARM_FILES.items()}
    )
    crowd_files = {"weights.bin": big_blob, **small_blobs}
    crowd = publish(cdn, "crowd", package("crowd", "big and small files", crowd_files))
    realistic_files: dict[str, bytes | Blob] = {
        f"realistic/{name}": py_module(f"realistic variant, {name}", REALISTIC_PY_BYTES)
        for name in REALISTIC_PY_FILES
    }
    realistic_files[f"realistic/{REALISTIC_SO}"] = so_blob
    realistic = publish(cdn, "realistic", realistic_files)
    plain_dir = work / "plain"
    (plain_dir / "warm_import").mkdir(parents=True)
    for rel, data in WARM_FILES.items():
        (plain_dir / "warm_import" / rel).write_bytes(data)
    return Trees(cdn, big, small, warm, crowd, realistic, plain_dir)


# -- the loopback CDN --------------------------------------------------------------------------


class CdnServer(ThreadingHTTPServer):
    """Static files from ``root``: keep-alive, ``Range: bytes=N-``, sendfile bodies, GET counts.

    The tree is fixed before the server starts, so every file is looked up once, here, and
    files up to ``INLINE_BYTES`` are held in memory and sent with their headers in one
    write. With the lean request parsing of :class:`CdnHandler` this cuts the server's CPU
    time per small response from ~470 us (stock handler, ``Path.resolve`` per request) to
    ~40 us on the machine of docs/performance.md, so row 2 does not measure the server.
    """

    daemon_threads = True
    request_queue_size = 512  # 16 processes x 8 connections may arrive at once
    INLINE_BYTES = 256 * 1024

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), CdnHandler)
        self.files: dict[str, tuple[Path, int, bytes | None]] = {}
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            size = path.stat().st_size
            inline = path.read_bytes() if size <= self.INLINE_BYTES else None
            self.files["/" + path.relative_to(root).as_posix()] = (path, size, inline)
        self._gets: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client hung up: normal
            super().handle_error(request, client_address)

    def count(self, path: str) -> None:
        with self._lock:
            self._gets[path] += 1

    def gets(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(self._gets)

    def reset(self) -> None:
        with self._lock:
            self._gets.clear()


class CdnHandler(BaseHTTPRequestHandler):
    """GET only. Parses the request line and headers itself: the stdlib's email-based
    header parser costs about as much per request as curl spends on a whole request."""

    server: CdnServer
    protocol_version = "HTTP/1.1"  # keep-alive: handle() loops until close_connection

    def setup(self) -> None:
        super().setup()
        # Large bodies go out as headers then sendfile: without this, Nagle's algorithm and
        # the client's delayed ACK could hold the second write back for 40 ms.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle_one_request(self) -> None:
        request_line = self.rfile.readline(65537)
        parts = request_line.split()
        if len(parts) != 3:
            self.close_connection = True
            return
        headers: dict[bytes, bytes] = {}
        while (line := self.rfile.readline(65537)) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        self.close_connection = headers.get(b"connection", b"").lower() == b"close"
        if parts[0] != b"GET":
            self._send(405, b"", close=True)
            return
        url_path = urllib.parse.unquote(parts[1].decode("latin-1").split("?", 1)[0])
        self.server.count(url_path)
        self._serve(url_path, headers.get(b"range", b"").decode("latin-1"))

    def _serve(self, url_path: str, range_header: str) -> None:
        found = self.server.files.get(url_path)
        if found is None:
            self._send(404, b"")
            return
        path, size, inline = found
        match = re.fullmatch(r"bytes=(\d+)-", range_header)
        start = int(match.group(1)) if match else 0
        if start > size:
            self._send(416, b"", f"Content-Range: bytes */{size}\r\n")
            return
        extra = f"Content-Range: bytes {start}-{size - 1}/{size}\r\n" if match else ""
        status = 206 if match else 200
        if inline is not None:
            self._send(status, inline[start:], extra)
            return
        self._send(status, b"", extra, length=size - start)
        with open(path, "rb") as body:
            if size > start:
                self.connection.sendfile(body, start, size - start)

    def _send(
        self,
        status: int,
        body: bytes,
        extra: str = "",
        *,
        length: int | None = None,
        close: bool = False,
    ) -> None:
        """Status line, headers and ``body`` in one write (``length`` if the body follows)."""
        reason = self.responses.get(status, ("",))[0]
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n{extra}"
            + ("Connection: close\r\n" if close else "")
            + "\r\n"
        )
        self.connection.sendall(head.encode("latin-1") + body)


@contextmanager
def serve(root: Path) -> Iterator[CdnServer]:
    server = CdnServer(root)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# -- child processes ---------------------------------------------------------------------------


class Children:
    """Fresh processes forked from a server process that has imported torch."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("forkserver")
        self.ctx.set_forkserver_preload(["torch"])
        # Start the fork server now, without torch's "Failed to initialize NumPy" warning.
        old = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = "ignore:Failed to initialize NumPy"
        try:
            forkserver.ensure_running()
        finally:
            if old is None:
                del os.environ["PYTHONWARNINGS"]
            else:
                os.environ["PYTHONWARNINGS"] = old

    def run(self, func: Callable[..., Any], *args: Any) -> Any:
        """Run ``func(*args)`` in a fresh child; return its result or raise its error."""
        return self.run_many([(func, args)])[0]

    def run_many(self, calls: Sequence[tuple[Callable[..., Any], tuple[Any, ...]]]) -> list[Any]:
        """Start every call in its own child at once; return their results in order."""
        started = []
        for func, args in calls:
            receiver, sender = self.ctx.Pipe(duplex=False)
            process = self.ctx.Process(target=_child_main, args=(sender, func, args))
            process.start()
            sender.close()
            started.append((process, receiver))
        try:
            return [self._result(process, receiver) for process, receiver in started]
        finally:
            for process, _receiver in started:  # after a failure: do not leave any behind
                if process.is_alive():
                    process.kill()
                process.join()

    @staticmethod
    def _result(process: multiprocessing.process.BaseProcess, receiver: Connection) -> Any:
        if not receiver.poll(CHILD_TIMEOUT_S):
            raise RuntimeError(f"a child gave no answer within {CHILD_TIMEOUT_S:.0f} s")
        try:
            status, value = receiver.recv()
        except EOFError:
            process.join(5)
            status, value = "error", f"the child died (exit code {process.exitcode})"
        if status != "ok":
            raise RuntimeError(f"child failed:\n{value}")
        return value


def _child_main(conn: Connection, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # Cache bytecode as a normal install does; the fork server inherits -B from this
    # interpreter when it was started with PYTHONDONTWRITEBYTECODE (see main).
    sys.dont_write_bytecode = False
    try:
        conn.send(("ok", func(*args)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _use_env(env: Mapping[str, str]) -> None:
    for name in [n for n in os.environ if n.startswith("FLASHHUB_")]:
        del os.environ[name]
    os.environ.update(env)


def _status_kib(field_name: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field_name}:"):
            return int(line.split()[1])
    raise KeyError(field_name)


def _ru_maxrss_kib() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # bytes on macOS


class PeakRss:
    """Peak RSS growth from now on: VmHWM reset through clear_refs, else ru_maxrss."""

    def __init__(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self.method = "VmHWM after resetting it with /proc/self/clear_refs"
        except OSError:
            self.method = "ru_maxrss (a lifetime peak: the growth is an upper bound)"
        self.before_kib = self._now_kib()

    def _now_kib(self) -> int:
        try:
            return _status_kib("VmRSS")
        except (OSError, KeyError):
            return _ru_maxrss_kib()

    def _peak_kib(self) -> int:
        if self.method.startswith("VmHWM"):
            return _status_kib("VmHWM")
        return _ru_maxrss_kib()

    def result(self) -> dict[str, Any]:
        return {
            "rss_before_mib": self.before_kib / 1024,
            "rss_growth_mib": max(0, self._peak_kib() - self.before_kib) / 1024,
            "rss_method": self.method,
        }


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """User + system CPU time of this process (every thread) or of its waited-for children."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def child_get_kernel(env: Mapping[str, str], repo_id: str) -> dict[str, Any]:
    """A cold (or warm) ``get_kernel``: the call alone is timed, with the CPU time (user +
    system, every thread of the child) it took, the HTTP and lock libraries it imported (a
    one-off cost inside that CPU time) and its peak RSS growth."""
    _use_env(env)
    import flashhub_kernels

    before = set(sys.modules)
    rss = PeakRss()
    cpu = cpu_seconds()
    start = time.perf_counter()
    flashhub_kernels.get_kernel(repo_id, version=1)
    seconds = time.perf_counter() - start
    cpu = cpu_seconds() - cpu
    imported = set(sys.modules) - before
    libs = [name for name in (*HTTP_LIBS, *LOCK_LIBS) if name in imported]
    return {"seconds": seconds, "cpu_seconds": cpu, "libs": libs, **rss.result()}


def child_warm_libs(env: Mapping[str, str], module: str, repo_id: str) -> list[str]:
    """The HTTP and lock libraries that warm loads import: ``import flashhub``, the first
    import of ``module`` through the hook and a ``get_kernel`` (cache already warm)."""
    _use_env(env)
    before = set(sys.modules)
    import flashhub  # noqa: F401
    import flashhub_kernels

    importlib.import_module(module)
    flashhub_kernels.get_kernel(repo_id, version=1)
    imported = set(sys.modules) - before
    return [name for name in (*HTTP_LIBS, *LOCK_LIBS) if name in imported]


def child_requests_download(url: str, dest: str) -> dict[str, Any]:
    """The plain-``requests`` baseline: stream to a file in 1 MiB chunks, no hashing."""
    import requests

    rss = PeakRss()
    start = time.perf_counter()
    with requests.get(url, stream=True, timeout=60) as response, open(dest, "wb") as file:
        response.raise_for_status()
        for chunk in response.iter_content(1 << 20):
            file.write(chunk)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, **rss.result()}


def child_crowd_load(env: Mapping[str, str], repo_id: str, barrier: Any) -> dict[str, float]:
    """One of ``--procs`` processes that start ``get_kernel`` together at a barrier."""
    _use_env(env)
    import flashhub_kernels

    barrier.wait(timeout=CHILD_TIMEOUT_S)
    start = time.monotonic()  # CLOCK_MONOTONIC: comparable across processes
    flashhub_kernels.get_kernel(repo_id, version=1)
    return {"start": start, "end": time.monotonic()}


def _forget(module: str) -> None:
    """Drop ``module`` and its submodules, so the next import creates it afresh."""
    for name in [n for n in sys.modules if n == module or n.startswith(module + ".")]:
        del sys.modules[name]


def child_first_import(env: Mapping[str, str], module: str, plain_dir: str | None) -> float:
    """Microseconds of the first import of ``module`` in this process (cache already warm)."""
    _use_env(env)
    import flashhub  # noqa: F401  (the import hook, as user code has it)

    if plain_dir is not None:
        sys.path.insert(0, plain_dir)
    start = time.perf_counter()
    importlib.import_module(module)
    return (time.perf_counter() - start) * 1e6


def child_reimports(
    env: Mapping[str, str], modules: Sequence[str], plain_dir: str, count: int
) -> dict[str, float]:
    """Median microseconds of re-importing each module ``count`` times, interleaved."""
    _use_env(env)
    import flashhub  # noqa: F401

    sys.path.insert(0, plain_dir)
    for module in modules:  # first imports (the warm path proper) are row 3a
        importlib.import_module(module)
    samples: dict[str, list[float]] = {module: [] for module in modules}
    for _ in range(count):
        for module in modules:
            _forget(module)
            start = time.perf_counter()
            importlib.import_module(module)
            samples[module].append((time.perf_counter() - start) * 1e6)
    return {module: median(values) for module, values in samples.items()}


# -- measuring -------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass
class Bench:
    args: argparse.Namespace
    trees: Trees
    server: CdnServer
    children: Children
    scratch: Path
    curl: str | None
    _serial: int = 0

    def env(self, cache_dir: Path) -> dict[str, str]:
        return {
            "FLASHHUB_CDN_URL": self.server.url,
            "FLASHHUB_CDN_PREFIX": PREFIX,
            "FLASHHUB_CACHE_DIR": str(cache_dir),
            "FLASHHUB_DISABLE_PROGRESS_BARS": "1",
        }

    def fresh_dir(self, what: str) -> Path:
        self._serial += 1
        path = self.scratch / f"{what}-{self._serial}"
        path.mkdir(parents=True)
        return path

    def url(self, url_path: str) -> str:
        return self.server.url + url_path

    def cold_load(self, kernel: Kernel) -> dict[str, Any]:
        """``get_kernel`` in a child with a fresh, empty cache; with the GETs it made."""
        cache = self.fresh_dir("cache")
        settle()
        self.server.reset()
        result: dict[str, Any] = self.children.run(
            child_get_kernel, self.env(cache), kernel.repo_id
        )
        result["requests"] = sum(self.server.gets().values())
        shutil.rmtree(cache)
        return result

    def curl_config(self, kernel: Kernel, parallel: Sequence[str] = ()) -> dict[str, float]:
        """One ``curl -s [parallel] -K config`` process fetching every file of ``kernel``'s
        variant: the config lists a url/output pair per file. Wall and CPU milliseconds."""
        assert self.curl is not None
        out = self.fresh_dir("curl")
        lines = []
        for i, path in enumerate(kernel.file_paths()):
            lines += [f'url = "{self.url(path)}"', f'output = "{out / f"f{i:04d}.bin"}"']
        config = out / "curl.config"
        config.write_text("\n".join(lines) + "\n")
        settle()
        result = run_command([self.curl, "-s", *parallel, "-K", str(config)])
        fetched = list(out.glob("f*.bin"))
        if len(fetched) != len(kernel.files):
            raise RuntimeError(f"curl -K fetched {len(fetched)} files, not {len(kernel.files)}")
        written = sum(path.stat().st_size for path in fetched)
        expected = sum(self.server.files[path][1] for path in kernel.file_paths())
        if written != expected:
            raise RuntimeError(f"curl -K wrote {written} bytes, not {expected}")
        shutil.rmtree(out)
        return result

    def rounds(
        self, label: str, measurements: Mapping[str, Callable[[], T]], runs: int | None = None
    ) -> dict[str, list[T]]:
        """Take every measurement once per run, after one untimed warm-up round.

        Each run starts at a different measurement, so no side always goes first.
        """
        runs = runs or self.args.runs
        names = list(measurements)
        results: dict[str, list[T]] = {name: [] for name in names}
        for run in range(-1, runs):
            log(f"{label}: " + ("warm-up" if run < 0 else f"run {run + 1}/{runs}"))
            shift = run % len(names)
            for name in names[shift:] + names[:shift]:
                value = measurements[name]()
                if run >= 0:
                    results[name].append(value)
        return results


def settle() -> None:
    """Flush dirty pages of earlier runs so their writeback does not land in this one."""
    os.sync()


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, float]:
    """Wall and CPU (user + system) milliseconds of one command, which must succeed."""
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - start
    return {"ms": wall * 1e3, "cpu_ms": (cpu_seconds(resource.RUSAGE_CHILDREN) - cpu) * 1e3}


def time_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    """Wall milliseconds of one command, which must succeed."""
    return run_command(argv, env)["ms"]


def mb_per_s(size: int, milliseconds: float) -> float:
    return size / milliseconds / 1e3


def row_big_file(bench: Bench) -> list[Row]:
    """Rows 1 and 5: cold load of one large file vs curl and requests; its peak RSS."""
    kernel = bench.trees.big
    weights = bench.url(f"{kernel.variant_path}/big_file/weights.bin")
    size = bench.args.size_mib * MIB

    def curl() -> float:
        assert bench.curl is not None
        out = bench.fresh_dir("curl") / "weights.bin"
        settle()
        milliseconds = time_command([bench.curl, "-s", "-o", str(out), weights])
        if out.stat().st_size != size:
            raise RuntimeError(f"curl wrote {out.stat().st_size} bytes, not {size}")
        shutil.rmtree(out.parent)
        return milliseconds

    def plain_requests() -> dict[str, Any]:
        out = bench.fresh_dir("requests") / "weights.bin"
        settle()
        result: dict[str, Any] = bench.children.run(child_requests_download, weights, str(out))
        shutil.rmtree(out.parent)
        return result

    measurements: dict[str, Callable[[], Any]] = {
        "flashhub": lambda: bench.cold_load(kernel),
        "requests": plain_requests,
    }
    if bench.curl:
        measurements["curl"] = curl
    results = bench.rounds(f"row 1: cold load of {bench.args.size_mib} MiB", measurements)
    ours, plain = results["flashhub"], results["requests"]

    ours_ms = Stat.of([r["seconds"] * 1e3 for r in ours])
    name = f"cold load, 1 file of {bench.args.size_mib} MiB"
    rate = f"flashhub {mb_per_s(size, ours_ms.median):.0f} MB/s"
    vs_curl = Row("1a", name, "ms", ours_ms, "curl -s -o FILE")
    if bench.curl:
        vs_curl.baseline = Stat.of(results["curl"])
        vs_curl.notes.append(f"{rate}, curl {mb_per_s(size, vs_curl.baseline.median):.0f} MB/s")
    else:
        vs_curl.notes.append("curl baseline skipped: curl is not on PATH")
    vs_requests = Row(
        "1b", name, "ms", ours_ms, "requests iter_content(1 MiB), no hash", target="(reference)"
    )
    rss = Row(
        "5",
        f"peak RSS growth, cold load of {bench.args.size_mib} MiB",
        "MiB",
        Stat.of([r["rss_growth_mib"] for r in ours]),
        "requests download, same measure",
        target=f"< {TARGET_RSS_MIB:.0f} MiB (max)",
        has_ratio=False,
    )
    vs_requests.baseline = Stat.of([r["seconds"] * 1e3 for r in plain])
    plain_rate = mb_per_s(size, vs_requests.baseline.median)
    vs_requests.notes.append(f"{rate}, requests {plain_rate:.0f} MB/s")
    rss.baseline = Stat.of([r["rss_growth_mib"] for r in plain])
    assert rss.ours is not None
    rss.passed = rss.ours.max < TARGET_RSS_MIB
    before = Stat.of([r["rss_before_mib"] for r in ours]).median
    rss.notes.append(
        f"peak RSS during get_kernel minus RSS just before it ({before:.0f} MiB, torch "
        f"imported), in the row-1 children; peak = {ours[0]['rss_method']}"
    )
    return [ratio_row(vs_curl, TARGET_BIG_VS_CURL), vs_requests, rss]


def cpu_per_request(loads: Sequence[Mapping[str, Any]]) -> str:
    """flashhub's CPU time per request over :meth:`Bench.cold_load` results (medians)."""
    per_request = median([load["cpu_seconds"] * 1e6 / max(1, load["requests"]) for load in loads])
    cpu_ms = median([load["cpu_seconds"] * 1e3 for load in loads])
    requests = median([load["requests"] for load in loads])
    libs = " ".join(loads[0]["libs"]) or "none"
    return (
        f"{per_request:.0f} us/request ({cpu_ms:.1f} ms user+sys over {requests:.0f} GETs, "
        f"including the import of these libraries by get_kernel: {libs})"
    )


def curl_cpu_per_request(runs: Sequence[Mapping[str, float]], requests: int) -> str:
    """A curl process's CPU time per request over :meth:`Bench.curl_config` results."""
    cpu_ms = median([run["cpu_ms"] for run in runs])
    return f"{cpu_ms * 1e3 / requests:.0f} us/request ({cpu_ms:.1f} ms over {requests} GETs)"


def row_small_files(bench: Bench) -> list[Row]:
    """Row 2: cold load of many small files vs one curl process fetching the same URLs."""
    kernel = bench.trees.small
    count = len(kernel.files)

    measurements: dict[str, Callable[[], Any]] = {"flashhub": lambda: bench.cold_load(kernel)}
    if bench.curl:
        measurements["sequential"] = lambda: bench.curl_config(kernel)
        measurements["parallel"] = lambda: bench.curl_config(
            kernel, ["--parallel", "--parallel-max", "8"]
        )
    results = bench.rounds(f"row 2: cold load of {count} small files", measurements)

    name = f"cold load, {count} files of 10 KiB"
    ours = Stat.of([r["seconds"] * 1e3 for r in results["flashhub"]])
    cpu = "client CPU (user+sys of the loading child, during get_kernel): flashhub " + (
        cpu_per_request(results["flashhub"])
    )
    if not bench.curl:
        row = Row("2", name, "ms", ours, "curl -K", target="(skipped)")
        row.notes += ["curl baselines skipped: curl is not on PATH", cpu]
        return [row]
    sequential, parallel = results["sequential"], results["parallel"]
    seq = Row("2a", name, "ms", ours, "curl -s -K config", Stat.of([r["ms"] for r in sequential]))
    par = Row(
        "2b",
        name,
        "ms",
        ours,
        "curl -s --parallel-max 8 -K config",
        Stat.of([r["ms"] for r in parallel]),
    )
    ratio_row(seq, TARGET_SMALL_VS_CURL)
    seq.notes.append(
        f"the target (within {TARGET_SMALL_VS_CURL:.1f}x of one `curl -K` process fetching "
        "the same URLs) is judged against 2a"
    )
    seq.notes.append(f"{cpu}; curl -K {curl_cpu_per_request(sequential, count)}")
    par.target = "(reference)"
    par.notes.append("curl with 8 transfers at once: a stricter comparison, not the target")
    par.notes.append(f"curl --parallel CPU: {curl_cpu_per_request(parallel, count)}")
    return [seq, par]


def row_realistic(bench: Bench) -> list[Row]:
    """Row 7: cold load of a realistic variant (one .so, 10 Python files) vs ``curl -K``."""
    kernel = bench.trees.realistic
    mib = bench.args.realistic_mib
    count = len(kernel.files)

    measurements: dict[str, Callable[[], Any]] = {"flashhub": lambda: bench.cold_load(kernel)}
    if bench.curl:
        measurements["curl"] = lambda: bench.curl_config(kernel)
    results = bench.rounds(f"row 7: cold load of a realistic variant ({mib} MiB)", measurements)

    ours = results["flashhub"]
    size = sum(bench.server.files[path][1] for path in kernel.file_paths())
    row = Row(
        "7",
        f"cold load, realistic variant: {mib} MiB .so + {len(REALISTIC_PY_FILES)} .py files",
        "ms",
        Stat.of([r["seconds"] * 1e3 for r in ours]),
        "curl -s -K config",
    )
    row.notes.append(
        f"package realistic/: {REALISTIC_SO} ({mib} MiB of random bytes) and "
        f"{len(REALISTIC_PY_FILES)} Python files of about {REALISTIC_PY_BYTES // 1024} KiB "
        f"(__init__.py among them); curl fetches the same {count} URLs, "
        "one url/output pair each in its config"
    )
    rate = f"flashhub {mb_per_s(size, row.ours.median):.0f} MB/s" if row.ours else ""
    cpu = f"flashhub CPU {cpu_per_request(ours)}"
    if bench.curl:
        curl = results["curl"]
        row.baseline = Stat.of([r["ms"] for r in curl])
        row.notes.append(f"{rate}, curl {mb_per_s(size, row.baseline.median):.0f} MB/s")
        row.notes.append(f"{cpu}; curl CPU {curl_cpu_per_request(curl, count)}")
    else:
        row.notes += ["curl baseline skipped: curl is not on PATH", f"{rate}; {cpu}"]
    return [ratio_row(row, TARGET_REALISTIC_VS_CURL)]


REIMPORTS = 200  # re-imports per run and module in row 3b


def row_warm_import(bench: Bench) -> list[Row]:
    """Row 3: warm ``import flashhub...`` vs the same package from a plain directory."""
    kernel = bench.trees.warm
    cache = bench.fresh_dir("warm-cache")
    env = bench.env(cache)
    plain_dir, plain = str(bench.trees.plain_dir), "warm_import"
    log("row 3: filling the cache, compiling both copies' bytecode")
    bench.children.run(child_get_kernel, env, kernel.repo_id)
    bench.children.run(child_first_import, env, plain, plain_dir)
    crowded_env = bench.env(crowded_cache(cache, bench.fresh_dir("crowded-cache")))
    bench.server.reset()
    libs: list[str] = bench.children.run(child_warm_libs, env, kernel.module, kernel.repo_id)
    flip = [False]

    def reimports() -> dict[str, float]:
        flip[0] = not flip[0]  # alternate which module goes first
        order = [kernel.module, plain] if flip[0] else [plain, kernel.module]
        result: dict[str, float] = bench.children.run(
            child_reimports, env, order, plain_dir, REIMPORTS
        )
        return result

    results = bench.rounds(
        "row 3: warm imports",
        {
            "first": lambda: bench.children.run(child_first_import, env, kernel.module, None),
            "plain first": lambda: bench.children.run(child_first_import, env, plain, plain_dir),
            "again": reimports,
            "crowded": lambda: bench.children.run(
                child_first_import, crowded_env, kernel.module, None
            ),
        },
    )
    made = sum(bench.server.gets().values())

    baseline = f"import {plain} from a plain dir on sys.path"
    first = Row(
        "3a",
        "warm import, first in a fresh process",
        "us",
        Stat.of(results["first"]),
        baseline,
        Stat.of(results["plain first"]),
    )
    first.notes.append(
        f"import {kernel.module}, once per fresh process (torch and the flashhub hook "
        "imported before); includes reading the cache index and receipt and stat-ing every file"
    )
    again = Row(
        "3b",
        "warm re-import, fresh module each time",
        "us",
        Stat.of([r[kernel.module] for r in results["again"]]),
        baseline,
        Stat.of([r[plain] for r in results["again"]]),
    )
    again.notes.append(
        f"median of {REIMPORTS} imports per run in one process, the module and its "
        "submodules deleted from sys.modules before each"
    )
    requests = Row(
        "3c", "HTTP requests made by the warm imports", "requests", Stat.of([made]), target="== 0"
    )
    requests.passed = made == 0
    requests.notes.append("counted at the server over every warm load of rows 3a, 3b and 3e")
    http_libs = [name for name in libs if name in HTTP_LIBS]
    imported = Row(
        "3e",
        "HTTP/lock libs imported by warm loads",
        "",
        None,
        target="no HTTP lib",
        passed=not http_libs,
        text=" ".join(libs) or "none",
    )
    imported.notes.append(
        "modules among " + ", ".join((*HTTP_LIBS, *LOCK_LIBS)) + " that import flashhub, "
        f"a first import of {kernel.module} and a warm get_kernel bring in, in a child with "
        "torch imported (torch imports http.client itself: row 6c checks it without torch); "
        "a lock library is listed but not judged"
    )
    crowded = Row(
        "3d",
        f"warm import, first, {CROWDED_CACHE_KERNELS} other kernels cached",
        "us",
        Stat.of(results["crowded"]),
        "the same import, only this kernel cached (3a)",
        Stat.of(results["first"]),
    )
    crowded.notes.append(
        "nothing on the warm path may scale with the number of kernels in the cache; "
        "the CDN is not contacted at all (3c), so what it publishes cannot matter either"
    )
    return [
        ratio_row(first, TARGET_WARM_VS_PLAIN),
        ratio_row(again, TARGET_WARM_VS_PLAIN),
        requests,
        ratio_row(crowded, TARGET_CROWDED_VS_ALONE),
        imported,
    ]


def crowded_cache(warm: Path, crowded: Path) -> Path:
    """A copy of the warm cache plus ``CROWDED_CACHE_KERNELS`` other verified kernels."""
    shutil.copytree(warm, crowded, dirs_exist_ok=True, symlinks=True)
    source = next((crowded / "kernels" / ORG).iterdir())
    for i in range(CROWDED_CACHE_KERNELS):
        shutil.copytree(source, crowded / "kernels" / f"other{i % 10}" / f"kernel-{i}")
    return crowded


def row_crowd(bench: Bench) -> list[Row]:
    """Row 4: ``--procs`` processes cold-load one kernel at once; single flight per file."""
    kernel = bench.trees.crowd
    procs = bench.args.procs
    metadata = f"{kernel.variant_path}/metadata.json"
    variants = f"/{PREFIX}/{kernel.repo_id}/v1/variants.json"

    def crowd() -> dict[str, Any]:
        cache = bench.fresh_dir("crowd-cache")
        barrier = bench.children.ctx.Barrier(procs)
        settle()
        bench.server.reset()
        call = (child_crowd_load, (bench.env(cache), kernel.repo_id, barrier))
        results = bench.children.run_many([call] * procs)
        gets = bench.server.gets()
        shutil.rmtree(cache)
        return {
            "wall_ms": (max(r["end"] for r in results) - min(r["start"] for r in results)) * 1e3,
            "max_gets": max(gets[path] for path in kernel.file_paths()),
            "docs": (gets[metadata], gets[variants]),
        }

    results = bench.rounds(
        f"row 4: {procs} processes at once",
        {"crowd": crowd, "single": lambda: bench.cold_load(kernel)["seconds"] * 1e3},
    )
    crowds = results["crowd"]

    wall = Row(
        "4a",
        f"{procs} processes cold-load at once: wall",
        "ms",
        Stat.of([c["wall_ms"] for c in crowds]),
        "1 process, same kernel",
        Stat.of(results["single"]),
        target="(reference)",
    )
    wall.notes.append(
        f"kernel of {len(kernel.files)} files ({bench.args.size_mib} MiB + 10 KiB files); "
        "children start together at a barrier; wall = last end - first start"
    )
    gets = Row(
        "4b",
        f"{procs} processes at once: GETs per file",
        "GET",
        Stat.of([c["max_gets"] for c in crowds]),
        target="== 1 per file",
    )
    gets.passed = max(c["max_gets"] for c in crowds) == 1
    gets.notes.append(
        "max over the variant's files; GETs of (metadata.json, variants.json) per run: "
        + ", ".join(f"({m}, {v})" for m, v in (c["docs"] for c in crowds))
    )
    return [wall, gets]


# Neither import may bring in torch, an HTTP library or a file-lock library.
IMPORT_CHECK = (
    "import sys, flashhub_kernels, flashhub\n"
    f"print(' '.join(m for m in {('torch', *HTTP_LIBS, *LOCK_LIBS)!r} if m in sys.modules))"
)


def row_startup(bench: Bench) -> list[Row]:
    """Row 6: interpreter start-up costs, and what ``import flashhub_kernels`` pulls in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHHUB_")}
    python = sys.executable
    cli = shutil.which("flashhub", path=str(Path(python).parent)) or shutil.which("flashhub")
    commands = {
        "pass": [python, "-c", "pass"],
        "import": [python, "-c", "import flashhub_kernels"],
    }
    if cli:
        commands["help"] = [cli, "--help"]
    results = bench.rounds(
        "row 6: start-up times",
        {key: functools.partial(time_command, argv, env) for key, argv in commands.items()},
        runs=max(bench.args.runs, 10),  # cheap and noisy: more samples
    )

    bare = Stat.of(results["pass"])
    rows = [
        Row(
            "6a",
            'python -c "import flashhub_kernels"',
            "ms",
            Stat.of(results["import"]),
            'python -c "pass"',
            bare,
            target="(reference)",
        )
    ]
    if cli:
        help_row = Row(
            "6b", "flashhub --help", "ms", Stat.of(results["help"]), 'python -c "pass"', bare
        )
        help_row.target = f"< {TARGET_HELP_MS:.0f} ms"
        help_row.passed = Stat.of(results["help"]).median < TARGET_HELP_MS
        rows.append(help_row)
    else:
        rows.append(Row("6b", "flashhub --help", "ms", None, target="(skipped: no script)"))
    found = subprocess.run(
        [python, "-c", IMPORT_CHECK], env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    check = Row(
        "6c",
        "torch/HTTP/lock libs imported by import flashhub(_kernels)",
        "",
        None,
        target="none",
        passed=not found,
        text=found or "none",
    )
    watched = ", ".join(("torch", *HTTP_LIBS, *LOCK_LIBS))
    check.notes.append(
        f"in a fresh interpreter: which of {watched} are in sys.modules after "
        "import flashhub_kernels, flashhub"
    )
    return [*rows, check]


# -- report --------------------------------------------------------------------------------


def _num(value: float) -> str:
    if float(value).is_integer() and abs(value) < 1e6:
        return str(int(value))
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _stat(stat: Stat | None, unit: str) -> str:
    if stat is None:
        return "-"
    spread = f"[{_num(stat.min)}-{_num(stat.max)}]" if len(stat.values) > 1 else ""
    return " ".join(part for part in (_num(stat.median), unit, spread) if part)


def _result(passed: bool | None) -> str:
    return {True: "pass", False: "FAIL", None: "-"}[passed]


def format_table(rows: Sequence[Row]) -> list[str]:
    header = (
        "row",
        "measured",
        "flashhub",
        "baseline",
        "baseline value",
        "ratio",
        "target",
        "result",
    )
    cells = [header]
    for row in rows:
        ratio = row.ratio
        cells.append(
            (
                row.key,
                row.name,
                row.text or _stat(row.ours, row.unit),
                row.baseline_name or "-",
                _stat(row.baseline, row.unit),
                f"{ratio:.2f}x" if ratio is not None else "-",
                row.target or "-",
                _result(row.passed),
            )
        )
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in cells
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def report(rows: Sequence[Row], facts: Mapping[str, str], args: argparse.Namespace) -> str:
    out = [
        "flashhub-kernels load benchmark (benchmarks/bench_load.py)",
        f"args: --size-mib {args.size_mib} --realistic-mib {args.realistic_mib} "
        f"--small-files {args.small_files} --runs {args.runs} --procs {args.procs}",
        *(f"{key}: {value}" for key, value in facts.items()),
        "",
        "values: median [min-max] over the runs; ratio = flashhub / baseline medians "
        "(time or size: lower is better); targets: see the module docstring",
        "",
        *format_table(rows),
        "",
        "notes:",
    ]
    out += [f"  {row.key}: {note}" for row in rows for note in row.notes]
    return "\n".join(out)


def _first_line(argv: Sequence[str]) -> str:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "?"
    lines = result.stdout.strip().splitlines()
    return lines[0] if lines else "?"


def _mount_of(path: Path) -> str:
    best = ("", "?", "?")
    mounts = Path("/proc/mounts")
    for line in mounts.read_text().splitlines() if mounts.exists() else []:
        device, mount, fstype = line.split()[:3]
        if str(path).startswith(mount) and len(mount) >= len(best[0]):
            best = (mount, device, fstype)
    return f"{best[2]} on {best[1]} (mounted at {best[0]})"


def machine_facts(work: Path) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    def pkg(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    meminfo = Path("/proc/meminfo").read_text() if Path("/proc/meminfo").exists() else ""
    mem = re.search(r"^MemTotal:\s*(\d+) kB", meminfo, re.MULTILINE)
    repo = Path(__file__).resolve().parent.parent
    commit = _first_line(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"])
    dirty = _first_line(["git", "-C", str(repo), "status", "--porcelain", "src"])
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return {
        "cpu": f"{models[0] if models else platform.processor() or '?'}; "
        f"{os.cpu_count()} logical cores, {usable} usable",
        "memory": f"{int(mem.group(1)) / 1024**2:.1f} GiB" if mem else "?",
        "os": platform.platform(),
        "disk (temp dir)": f"{work}: {_mount_of(work)}",
        "python": f"{platform.python_version()} ({sys.executable})",
        "packages": f"torch {pkg('torch')}, flashhub-kernels {pkg('flashhub-kernels')}, "
        f"requests {pkg('requests')}, urllib3 {pkg('urllib3')}, filelock {pkg('filelock')}",
        "curl": " ".join(_first_line(["curl", "--version"]).split()[:2])
        if shutil.which("curl")
        else "not on PATH",
        "server": "stdlib ThreadingHTTPServer in this process, bodies by sendfile(2), keep-alive",
        "source": f"git {commit}" + (" + uncommitted changes in src/" if dirty != "?" else ""),
    }


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=512, help="size of the big file")
    parser.add_argument(
        "--realistic-mib", type=int, default=128, help="size of the .so in the realistic variant"
    )
    parser.add_argument("--small-files", type=int, default=200, help="files in the small variant")
    parser.add_argument("--runs", type=int, default=5, help="runs per row (median, min, max)")
    parser.add_argument("--procs", type=int, default=16, help="concurrent processes in row 4")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the rows as JSON")
    args = parser.parse_args(argv)
    counts = (args.size_mib, args.realistic_mib, args.runs, args.procs)
    if min(counts) < 1 or args.small_files < 2:
        parser.error("sizes and counts must be positive (--small-files at least 2)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # Without bytecode caching every import compiles from source (flashhub's own modules
    # in an editable install, and every kernel), which no normal install does.
    no_bytecode = os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None
    curl = shutil.which("curl")
    if curl is None:
        log("curl is not on PATH: the curl baselines are skipped")
    with tempfile.TemporaryDirectory(prefix="flashhub-bench-") as tmp:
        work = Path(tmp)
        facts = machine_facts(work)
        if no_bytecode:
            facts["bytecode"] = "PYTHONDONTWRITEBYTECODE dropped for the measured processes"
        load_before = os.getloadavg()[0]
        log(f"writing the CDN trees under {work}")
        trees = build_trees(work, args.size_mib, args.small_files, args.realistic_mib)
        log("starting the fork server (imports torch once)")
        children = Children()
        with serve(trees.cdn) as server:
            bench = Bench(args, trees, server, children, work / "scratch", curl)
            rows = [
                *row_big_file(bench),
                *row_small_files(bench),
                *row_realistic(bench),
                *row_warm_import(bench),
                *row_crowd(bench),
                *row_startup(bench),
            ]
    facts["load before the run"] = (
        f"{load_before:.2f} (1-minute load average: other processes on these cores add noise)"
    )
    rows.sort(key=lambda row: row.key)
    print(report(rows, facts, args), flush=True)
    if args.json is not None:
        document = {
            "machine": facts,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "rows": [asdict(row) | {"ratio": row.ratio} for row in rows],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
