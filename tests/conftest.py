"""Shared fixtures: a loopback CDN, a private cache, and a clean import system per test.

For the transport tests: more CDNs (``make_cdn``: https, auth, gzip), a throwaway CA
(``ca_pem``, ``tls_context``), and real proxies (``start_proxy``: pproxy, http or socks5).
For the lock and CLI tests: projects that declare kernels (``project``, ``make_project``,
``probed_project``). For the cache, terminal and publisher tests: a cache entry with code
planted in it (``planted_cache``), a version with hostile variant names
(``hostile_kernel``), and a kernel's build directory (``kernel``). The example kernels,
compiled once per session (``built``).
"""

from __future__ import annotations

import compileall
import importlib
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flashhub_kernels import _cache_imports as imports, _finder, get_kernel
from flashhub_kernels._cache.directories import ensure_dir
from flashhub_kernels._config import overrides
from flashhub_kernels._network import reachability as _reachability, versions as _versions
from flashhub_kernels.layers import _mapping
from support.builder import RAN_DIR_VAR
from support.builds import make_kernel
from support.cdn_server import CdnServer
from support.machines import run_as_cpu_only
from support.preloaded import run_code
from support.projects import (
    CUDA,
    NOARCH_CUDA,
    REPO,
    UNIVERSAL,
    publish_tensor_tricks,
    write_project,
)
from support.trees import ESCAPE, FORGED, cpu_variant, local_variant, write_kernel


@pytest.fixture
def fresh_base_mapping(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test starts without a process-wide layer mapping and leaves none behind (for a
    module of layer tests: ``pytestmark = pytest.mark.usefixtures("fresh_base_mapping")``)."""
    monkeypatch.setattr(_mapping, "_base", {})
    yield


@pytest.fixture
def cdn(tmp_path: Path) -> Iterator[CdnServer]:
    """A static CDN on 127.0.0.1 serving ``tmp_path / "cdn"``."""
    root = tmp_path / "cdn"
    root.mkdir()
    server = CdnServer(root).start()
    yield server
    server.stop()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def ran_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the builder kernels' code records that it ran (see ``support/builder.py``;
    children inherit the variable)."""
    path = tmp_path / "ran"
    path.mkdir()
    monkeypatch.setenv(RAN_DIR_VAR, str(path))
    return path


@pytest.fixture
def cpu_only_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolve kernels in this process as this machine would with a CPU-only build of its
    torch (``machines.run_as_cpu_only``): for a test that expects what such a machine
    loads, whatever build of torch runs the suite."""
    run_as_cpu_only(monkeypatch)


@pytest.fixture(autouse=True)
def flashhub_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[None]:
    """Point flashhub at the test's CDN and cache; give every test a fresh finder."""
    for name in list(os.environ):
        if name.startswith("FLASHHUB_") or name.lower() in NETWORK_ENV or name == "LOCAL_KERNELS":
            monkeypatch.delenv(name)
    # ~/.netrc must not lend credentials to a test; a test that wants one sets NETRC
    monkeypatch.setenv("NETRC", str(tmp_path / "no-such-netrc"))
    monkeypatch.setenv("FLASHHUB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLASHHUB_DISABLE_PROGRESS_BARS", "1")
    # Request counts stay those of the load itself; test_version_notice turns it back on.
    monkeypatch.setenv("FLASHHUB_NO_VERSION_CHECK", "1")
    if "cdn" in request.fixturenames:
        server: CdnServer = request.getfixturevalue("cdn")
        monkeypatch.setenv("FLASHHUB_CDN_URL", server.url)
    else:  # nothing may reach a real network from a test
        monkeypatch.setenv("FLASHHUB_CDN_URL", "http://127.0.0.1:9")
    overrides.clear()
    _forget_kernels()
    yield
    overrides.clear()
    _forget_kernels()


# Settings requests reads from the environment: tests start without any of them.
NETWORK_ENV = {
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "ftp_proxy",
    "requests_ca_bundle",
    "curl_ca_bundle",
    "ssl_cert_file",
    "ssl_cert_dir",
    "netrc",
}


def _forget_kernels() -> None:
    for name in [n for n in sys.modules if n.startswith("flashhub.")]:
        del sys.modules[name]
    _versions._version_checked.clear()  # each test checks for newer versions afresh
    _reachability._failed_to_connect.clear()  # nor is a mirror put off by another test's
    while imports._held:  # nor does this process use the entries it imported any more
        os.close(imports._held.popitem()[1])
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _finder.KernelFinder)]
    _finder.install()


def run_python(
    code: str,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
    fresh: bool = False,
    torch_only: bool = False,
) -> str:
    """Run ``code`` as ``python -c`` with this test's FLASHHUB_* environment (in ``cwd``):
    in a process forked with torch imported (``support.preloaded``; with ``torch_only``,
    torch alone, for which libraries a load imports), or with ``fresh`` in a new
    interpreter (for what its start imports)."""
    child_env = {**os.environ, **(env or {})}
    result = run_code(
        code, env=child_env, cwd=cwd, timeout=timeout, fresh=fresh, torch_only=torch_only
    )
    if result.returncode != 0:
        raise AssertionError(f"child failed ({result.returncode}):\n{result.stderr}")
    return result.stdout


# Loads a kernel in a new interpreter; prints how far its peak memory rose during the load,
# and "loaded" or the class of the error the load raised.
PEAK_RISE = """
import resource, flashhub_kernels as fk, torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    fk.get_kernel({repo!r}, version=1)
    outcome = "loaded"
except ImportError as exc:
    outcome = type(exc).__name__
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024, outcome)
"""


def load_peak_rise(repo: str) -> tuple[int, str]:
    """Load version 1 of ``repo`` in a new interpreter (torch imported first): by how many
    bytes its peak memory rose during the load, and ``"loaded"`` or the class name of the
    ``ImportError`` it raised."""
    rise, outcome = run_python(PEAK_RISE.format(repo=repo), fresh=True).split()
    return int(rise), outcome


# Offline, has_kernel then get_kernel in a new process: what each returns, or raises.
HAS_THEN_GET = """
import flashhub_kernels as fk
for ask in (fk.has_kernel, fk.get_kernel):
    try:
        print(type(ask({repo!r}, version={version})).__name__)
    except Exception as error:
        print(type(error).__name__)
"""


def has_then_get(repo: str, version: int, env: dict[str, str] | None = None) -> list[str]:
    """What ``has_kernel`` and ``get_kernel`` of ``repo`` at ``version`` give offline, in a
    new process (with ``env`` set too)."""
    code = HAS_THEN_GET.format(repo=repo, version=version)
    return run_python(code, env={**(env or {}), "FLASHHUB_OFFLINE": "1"}).split()


def device_capability() -> tuple[int, int]:
    """The compute capability of GPU 0 as torch reads it, asked in a child process (CUDA
    initialized in a pytest worker would break the tests that fork after it there)."""
    out = run_python("import torch; print(*torch.cuda.get_device_capability(0))")
    major, minor = out.split()
    return int(major), int(minor)


def import_in_child(
    module: str, *, env: dict[str, str] | None = None, first: str = ""
) -> tuple[type[BaseException], str]:
    """``import module`` in a fresh process (after the code ``first``), where it must fail:
    the class of what it raised, and the traceback it printed (with every cause), as a
    user would see it."""
    code = first + (
        "import sys, traceback\n"
        "try:\n"
        f"    import {module}\n"
        "except BaseException as exc:\n"
        "    print(type(exc).__module__, type(exc).__qualname__)\n"
        "    traceback.print_exc()\n"
        "    sys.exit(1)\n"
    )
    result = run_code(code, env={**os.environ, **(env or {})})
    assert result.returncode == 1, f"the import did not fail:\n{result.stdout}{result.stderr}"
    module_name, qualname = result.stdout.splitlines()[-1].split()
    return getattr(importlib.import_module(module_name), qualname), result.stderr


def unshare_mount() -> list[str]:
    """The command that runs the rest in a mount namespace of its own, as root there (to
    mount a small tmpfs for the cache, or the cache read-only)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1), to mount in a namespace of the test's own")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    command = ["unshare", *user, "--mount", "true"]
    if subprocess.run(command, capture_output=True, check=False).returncode != 0:
        pytest.skip("this machine allows no mount namespace (unshare --mount)")
    return command[:-1]


def python_after_mount(
    mount: str, code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code args``, run once ``mount`` (a shell command) has mounted, in a
    mount namespace of its own (:func:`unshare_mount`); exit status 3 where it could not."""
    script = f'{mount} || exit 3; exec "$0" -c "$@"'
    return subprocess.run(
        [*unshare_mount(), "sh", "-c", script, sys.executable, code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


# Bound and never listened on, for as long as the tests run: no server can take their ports.
_REFUSING: list[socket.socket] = []


def refused_port() -> int:
    """A port of 127.0.0.1 that refuses every connection while the tests run: a socket of
    this process holds it, bound but not listening. (A port bound and released at once
    could be taken meanwhile by a server of another worker, which would then answer.)"""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _REFUSING.append(sock)
    return int(sock.getsockname()[1])


@pytest.fixture
def black_hole() -> Iterator[str]:
    """The URL of a mirror whose connections never complete, as behind a firewall that
    drops them: a listener of this process that never accepts, its backlog filled by
    connections that this fixture holds, so that the SYNs of any other are dropped."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    held = [listener]
    try:
        for _ in range(8):  # connect until a connection waits in vain: the backlog is full
            probe = socket.socket()
            held.append(probe)
            probe.settimeout(0.2)
            try:
                probe.connect(("127.0.0.1", port))
            except TimeoutError:
                break
        else:
            pytest.fail(f"the backlog of the listener on port {port} never filled")
        yield f"http://127.0.0.1:{port}"
    finally:
        for sock in held:
            sock.close()


def pytest_unconfigure() -> None:
    """Release the ports :func:`refused_port` held (else each is reported unclosed at exit)."""
    while _REFUSING:
        _REFUSING.pop().close()


MakeCdn = Callable[..., CdnServer]


@pytest.fixture
def make_cdn(tmp_path: Path) -> Iterator[MakeCdn]:
    """Start more CDNs: ``make_cdn(root=None, **options)``, options as :class:`CdnServer`
    takes them (``tls=``, ``auth=``, ``encoding=``, ``drop_reused=``). The default root is
    the ``cdn`` fixture's, ``tmp_path / "cdn"``. The caller points flashhub at it."""
    servers: list[CdnServer] = []

    def make(root: Path | None = None, **options: Any) -> CdnServer:
        root = root if root is not None else tmp_path / "cdn"
        root.mkdir(parents=True, exist_ok=True)
        server = CdnServer(root, **options).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def certificate_authority(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """A throwaway CA (trustme) and its certificate as a PEM file."""
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    pem = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    return ca, pem


@pytest.fixture
def ca_pem(certificate_authority: tuple[Any, Path]) -> Path:
    """The PEM file of the CA that signed ``tls_context``'s certificate."""
    return certificate_authority[1]


@pytest.fixture(scope="session")
def tls_context(certificate_authority: tuple[Any, Path]) -> ssl.SSLContext:
    """A server context whose certificate (for 127.0.0.1 and localhost) the CA signed."""
    ca, _pem = certificate_authority
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    return context


@pytest.fixture
def tls_cdn(make_cdn: MakeCdn, tls_context: ssl.SSLContext) -> CdnServer:
    """An https CDN serving ``tmp_path / "cdn"`` (the ``cdn`` fixture's root) with a
    certificate nothing trusts until a test sets REQUESTS_CA_BUNDLE to ``ca_pem``."""
    return make_cdn(tls=tls_context)


@dataclass
class Proxy:
    """A pproxy process; ``targets()`` lists where it relayed each connection."""

    url: str  # without credentials
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    def targets(self, *, at_least: int = 0, timeout: float = 5.0) -> list[str]:
        """``host:port`` of every connection relayed so far (waits for ``at_least``)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.log.read_text(errors="replace").splitlines()
            found = [line.split(" -> ", 1)[1].strip() for line in lines if " -> " in line]
            if len(found) >= at_least or time.monotonic() > deadline:
                return found
            time.sleep(0.05)


StartProxy = Callable[..., Proxy]
PPROXY_MAIN = Path(__file__).resolve().parent / "support" / "pproxy_main.py"
PPROXY_SERVING = re.compile(r"Serving on \S+ 127\.0\.0\.1:(\d+) by ")


def _serving_port(log: Path, process: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """The port pproxy says (in ``log``) it listens on; it is stopped, and the test fails
    with its log, when it ends or says nothing of the kind in ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if serving := PPROXY_SERVING.search(log.read_text(errors="replace")):
            return int(serving.group(1))
        time.sleep(0.05)
    process.kill()
    process.wait()
    raise AssertionError(f"pproxy did not start:\n{log.read_text(errors='replace')}")


@pytest.fixture
def start_proxy(tmp_path: Path) -> Iterator[StartProxy]:
    """``start_proxy("http" | "socks5", auth="user:password", pem=None)``: a real proxy on
    127.0.0.1 (pproxy; ``http`` also tunnels with CONNECT), stopped after the test. With
    ``pem`` (a key and its certificate chain), an ``http`` proxy speaks TLS: an
    ``https://`` proxy."""
    pytest.importorskip("pproxy")
    proxies: list[Proxy] = []

    def start(scheme: str = "http", *, auth: str | None = None, pem: Path | None = None) -> Proxy:
        log = tmp_path / f"pproxy-{len(proxies)}.log"
        tls = "+ssl" if pem else ""
        # Port 0: pproxy binds a free port and says which (one found free before it starts
        # could be taken meanwhile, as refused_port says).
        listen = f"{scheme}{tls}://127.0.0.1:0" + (f"#{auth}" if auth else "")
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, str(PPROXY_MAIN), "-l", listen, "-v"]
                + (["--ssl", str(pem)] if pem else []),
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        port = _serving_port(log, process)
        url_scheme = "https" if pem else scheme
        proxy = Proxy(f"{url_scheme}://127.0.0.1:{port}", port, process, log)
        proxies.append(proxy)
        return proxy

    yield start
    for proxy in proxies:
        proxy.process.terminate()
    for proxy in proxies:
        try:
            proxy.process.wait(10)
        except subprocess.TimeoutExpired:
            proxy.process.kill()
            proxy.process.wait()


# -- projects that lock kernels ----------------------------------------------------------------

MakeProject = Callable[..., Path]


@pytest.fixture
def make_project(tmp_path: Path, cdn: CdnServer) -> MakeProject:
    """``make_project(dependencies=None, *, publish=True)``: ``tmp_path / "project"`` with a
    pyproject.toml declaring ``dependencies`` (by default ``acme/tensor-tricks >=1,<3``),
    after publishing acme/tensor-tricks v1 to v3 on the ``cdn`` (``publish=False``: the
    test has published what it locks)."""

    def make(dependencies: dict[str, str | int] | None = None, *, publish: bool = True) -> Path:
        if publish:
            publish_tensor_tricks(cdn.root)
        return write_project(tmp_path / "project", dependencies or {REPO: ">=1,<3"})

    return make


@pytest.fixture
def project(make_project: MakeProject) -> Path:
    """A project declaring ``acme/tensor-tricks >=1,<3`` (locks v2: three variants)."""
    return make_project()


@pytest.fixture
def probed_project(make_project: MakeProject, cdn: CdnServer, cpu_only_torch: None) -> Path:
    """A project declaring ``acme/tensor-tricks ==1``, whose v1 has no variants.json: this
    system's build, torch-universal and two CUDA builds (``CUDA``, ``NOARCH_CUDA``). The
    system is this machine with a CPU-only torch (``cpu_only_torch``), so its build is
    ``cpu_variant()`` and it loads neither CUDA build, whatever torch runs the tests."""
    variants = [cpu_variant(), UNIVERSAL, CUDA, NOARCH_CUDA]
    write_kernel(cdn.root, REPO, 1, variants, with_variants_json=False)
    return make_project({REPO: "==1"}, publish=False)


# -- hostile names and planted code -----------------------------------------------------------

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def assert_terminal_safe(text: str) -> None:
    """No control character but the newlines (and tabs) of the text's own layout."""
    assert not RAW_CONTROL.search(text), repr(text)


@pytest.fixture
def hostile_kernel(cdn: CdnServer) -> CdnServer:
    """acme/tensor-tricks v1, whose variants.json lists names with ESC, CR and a newline
    (``trees.ESCAPE``, ``trees.FORGED``) beside the one build it publishes (``CUDA``)."""
    write_kernel(cdn.root, REPO, 1, [CUDA])
    variants = cdn.root / "kernels" / REPO / "v1" / "variants.json"
    variants.write_text(json.dumps([CUDA, ESCAPE, FORGED]))
    return cdn


NOBODY = 65534
PLANTED = "import pathlib; pathlib.Path({marker!r}).write_text('planted code ran')\n"


def needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("handing a directory to another user (chown to nobody) needs root")


@pytest.fixture
def planted_cache(cdn: CdnServer, cache_dir: Path, tmp_path: Path) -> Path:
    """A verified entry of acme/tensor-tricks v1 with code planted in it; returns the
    marker path that the planted code would create."""
    write_kernel(cdn.root, REPO, 1)
    get_kernel(REPO, version=1)
    marker = tmp_path / "planted-marker"
    init = cache_dir / f"kernels/{REPO}/v1/{local_variant()}/tensor_tricks/__init__.py"
    # Same size and mtime as the verified file, so only the ownership check stands between
    # the planted code and the next import.
    original = init.stat()
    planted = PLANTED.format(marker=str(marker)).encode()
    init.write_bytes(planted + b"#" * (original.st_size - len(planted)))
    os.utime(init, ns=(original.st_atime_ns, original.st_mtime_ns))
    return marker


def plant_partial(cache_dir: Path, variant: str, digest: bytes) -> Path:
    """Where an interrupted download of acme/tensor-tricks v1 ``variant`` keeps the file
    that hashes to ``digest``, its directories made as the client makes them (0700); the
    caller creates the file."""
    kept = ensure_dir(cache_dir / f"kernels/{REPO}/v1/.partial-{variant}")
    return kept / digest.hex()


# -- the example kernels, compiled ------------------------------------------------------------

PROJECT = Path(__file__).resolve().parents[1]
EXAMPLES = PROJECT / "examples" / "kernels"


@pytest.fixture(scope="session")
def built() -> list[Any]:
    """Compile the example kernels once per session (cached on disk between sessions):
    one ``BuiltKernel(repo_id, version, build_dir)`` per publishable version."""
    return build_examples(cuda=False)


@pytest.fixture(scope="session")
def built_cuda() -> list[Any]:
    """The example kernels as ``built``, with their CUDA variants (``build_all --cuda``)."""
    return build_examples(cuda=True)


def build_examples(*, cuda: bool) -> list[Any]:
    """``build_all(cuda=cuda)`` of the example kernels, under a file lock: each
    pytest-xdist worker has its own session, and the second should find the first one's
    build rather than compile the same sources beside it."""
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    from filelock import FileLock

    from build_all import build_all

    with FileLock(EXAMPLES / ".build.lock"):
        built: list[Any] = build_all(verbose=False, cuda=cuda)
    return built


# -- a kernel's build directory, for the publisher ---------------------------------------------


@pytest.fixture
def kernel(tmp_path: Path) -> Path:
    """``tmp_path / "kernel"``: a build directory with two variants (``builds.make_kernel``)."""
    return make_kernel(tmp_path / "kernel")


@pytest.fixture
def no_leftover_staging(tmp_path: Path) -> Iterator[None]:
    """After the test: no staging or old-version directory of a publish is left behind."""
    yield
    leftovers = [p for p in tmp_path.rglob(".v*") if ".staging-" in p.name or ".old-" in p.name]
    assert leftovers == []


# -- bytecode, where PYTHONDONTWRITEBYTECODE would leave none ------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile the project's sources once, in the process that runs the workers.

    The suite starts some 700 interpreters, forked or new, and each imports flashhub
    afresh: with no bytecode on disk (a clean clone under PYTHONDONTWRITEBYTECODE) each
    compiled the modules it imports again, 60 ms of CPU in a child that loads a kernel
    cold. Up-to-date files are skipped, so a second run checks their dates only.
    """
    if not hasattr(config, "workerinput"):
        for tree in (PROJECT / "src", PROJECT / "tests" / "support"):
            compileall.compile_dir(tree, quiet=2)


@pytest.hookimpl(wrapper=True)
def pytest_collection() -> Generator[None, object, object]:
    """Keep the test modules pytest rewrites for their asserts, as it does where bytecode
    may be written: rewriting them all again costs each worker 7 s of CPU per run."""
    before, sys.dont_write_bytecode = sys.dont_write_bytecode, False
    try:
        return (yield)
    finally:
        sys.dont_write_bytecode = before


# -- tests that need a GPU, or the signing extra ------------------------------------------------

SIGNING_EXTRA = "needs the signing extra: pip install 'flashhub-kernels[signing]'"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, saying why, the ``gpu`` tests where there is no CUDA GPU to run them on, and
    the ``signing`` tests where ``cryptography`` cannot be imported."""
    _skip_marked(items, "gpu", _no_gpu_reason, "needs a CUDA GPU")
    _skip_marked(items, "signing", _no_signing_reason, SIGNING_EXTRA)


def _skip_marked(
    items: list[pytest.Item], marker: str, why_not: Callable[[], str | None], needs: str
) -> None:
    """Skip the items marked ``marker`` where ``why_not`` gives a reason."""
    marked = [item for item in items if item.get_closest_marker(marker)]
    reason = why_not() if marked else None
    if reason is None:
        return
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=f"{needs}: {reason}"))


def _no_signing_reason() -> str | None:
    """Why ``cryptography`` cannot be imported here; ``None`` when it can."""
    try:
        import cryptography  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def _no_gpu_reason() -> str | None:
    """Why this machine runs no ``gpu`` test; ``None`` when it can.

    The GPU is counted in a child process: asking torch here would initialize CUDA in
    the test process, and tests that fork must start without it.
    """
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU-only build"
    count = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if count.returncode != 0 or count.stdout.strip() in ("", "0"):
        return f"torch {torch.__version__} sees no CUDA device"
    return None
