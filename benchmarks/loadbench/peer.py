"""The peer: Hugging Face ``kernels`` 0.19.1 (HF), loading the kernels of rows 2 and 7 from
a loopback Hugging Face Hub, cold and warm, in fresh interpreters (rows 9a-9d).

:func:`hf_venv` installs HF into a virtual environment of its own, kept between runs
(:func:`default_venv`, or ``--hf-venv DIR``): pip installs ``kernels`` and its own
dependencies there (huggingface_hub among them), then a ``.pth`` file puts the site-packages
that torch is imported from here after them, so HF's interpreter imports the benchmark's
torch and no second copy is downloaded. :class:`HubSide` serves the kernels from the test
suite's Hub server (``tests/support/hub_server.py``) on branch ``v1``, laid out as a kernel
builder writes them, and :func:`hf_load` times HF's ``get_kernel`` in a fresh interpreter
as :func:`loadbench.fresh.fresh_load` times flashhub's.
"""

from __future__ import annotations

import collections
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .common import log
from .fresh import run_program
from .trees import VARIANT, Kernel

HF_KERNELS = "0.19.1"
BRANCH = "v1"  # HF's get_kernel(repo, revision="v1"): the branch kernel builders push to
TORCH_PTH = "flashhub-bench-torch.pth"
HUB_SERVER = Path(__file__).resolve().parents[2] / "tests" / "support" / "hub_server.py"
PIP_TIMEOUT_S = 600
# Variables that would change what HF does or where it looks; the loads set their own.
_HF_VARIABLES = ("HF_", "HUGGINGFACE_", "KERNELS_", "LOCAL_KERNELS", "UNSTABLE_KERNELS")
_VERSIONS = (
    "import importlib.metadata as m; print(m.version('kernels'), m.version('huggingface_hub'))"
)
_IMPORTS = (
    "import torch, kernels, huggingface_hub; "
    "print(kernels.__version__, huggingface_hub.__version__, torch.__version__)"
)
# Timed as loadbench.fresh times flashhub's load: after import torch, until get_kernel
# returns (importing kernels included); the CPU time of every thread; os._exit skips
# torch's teardown. trust_remote_code: the run's organisation is no trusted publisher.
_HF_LOAD = """
import os, sys, time
import torch

cpu = os.times()
start = time.perf_counter()
from kernels import get_kernel
get_kernel(sys.argv[1], revision=sys.argv[2], trust_remote_code=True)
seconds = time.perf_counter() - start
cpu = sum(os.times()[:2]) - sum(cpu[:2])
print(repr({"seconds": seconds, "cpu_seconds": cpu}))
sys.stdout.flush()
os._exit(0)
"""


@dataclass(frozen=True)
class HfVenv:
    """A virtual environment where HF kernels is installed and torch importable."""

    path: Path
    kernels: str  # the versions installed there
    huggingface_hub: str
    torch: str

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def describe(self) -> str:
        return (
            f"kernels {self.kernels}, huggingface_hub {self.huggingface_hub} in {self.path} "
            f"(torch {self.torch} from this interpreter's site-packages)"
        )


def default_venv() -> Path:
    """Where the HF venv is kept between runs: ``$XDG_CACHE_HOME/flashhub-bench/...``."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "flashhub-bench" / f"hf-kernels-{HF_KERNELS}"


def hf_env(**variables: str) -> dict[str, str]:
    """This process's environment for HF's interpreter: no ``PYTHONPATH`` (flashhub's
    checkout) and none of HF's own variables but ``variables``; bytecode written as a
    normal install does; no telemetry, no progress bars."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("FLASHHUB_", *_HF_VARIABLES))
        and name not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    }
    env |= {"HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    return env | variables


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _python(argv: Sequence[str | Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in argv],
        env=hf_env(),
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
        check=False,
    )


def _site_packages(python: Path) -> Path:
    found = _python([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    if found.returncode != 0 or not found.stdout.strip():
        raise OSError(f"{python} does not say where its site-packages are")
    return Path(found.stdout.strip())


def _torch_site() -> Path:
    """The site-packages that torch is imported from here (not importing it)."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin is not None, "torch is not importable"
    return Path(spec.origin).parent.parent


def _install(path: Path) -> str | None:
    """Create the venv at ``path`` (where there is none) and pip-install HF kernels into
    it; the reason when that fails."""
    python = path / "bin" / "python"
    log(f"installing HF kernels {HF_KERNELS} into {path} (pip)")
    if not python.exists():
        made = _python([sys.executable, "-m", "venv", path])
        if made.returncode != 0:
            return f"python -m venv failed: {_last_line(made.stderr + made.stdout)}"
    # Without the benchmark's site-packages on its path, pip installs every dependency
    # into the venv instead of taking the benchmark's copies for installed ones.
    (_site_packages(python) / TORCH_PTH).unlink(missing_ok=True)
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    installed = _python([*pip, "--retries", "1", "--timeout", "30", f"kernels=={HF_KERNELS}"])
    if installed.returncode != 0:
        return f"pip install kernels=={HF_KERNELS} failed: {_last_line(installed.stderr)}"
    return None


def hf_venv(path: Path | None) -> HfVenv | str:
    """The HF venv at ``path`` (default: :func:`default_venv`), installed there first if
    HF kernels is not; or why it cannot be used (the rows then say skipped)."""
    path = (path or default_venv()).absolute()
    try:
        return _set_up(path)
    except (OSError, subprocess.SubprocessError) as error:
        return f"HF kernels cannot be set up in {path}: {error}"


def _set_up(path: Path) -> HfVenv | str:
    python = path / "bin" / "python"
    versions = _python([python, "-c", _VERSIONS]) if python.exists() else None
    if versions is None or versions.returncode != 0 or versions.stdout.split()[0] != HF_KERNELS:
        failure = _install(path)
        if failure is not None:
            return failure
    (_site_packages(python) / TORCH_PTH).write_text(f"{_torch_site()}\n")
    imported = _python([python, "-c", _IMPORTS])
    if imported.returncode != 0:
        return f"HF kernels does not import in {path}: {_last_line(imported.stderr)}"
    kernels, hub, torch = imported.stdout.split()
    return HfVenv(path, kernels, hub, torch)


def _hub_server_module() -> ModuleType:
    """The test suite's Hub server, loaded from its file (tests/ is no package)."""
    name = "flashhub_tests_hub_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HUB_SERVER)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


class HubSide:
    """The run's loopback Hugging Face Hub, serving kernels as a kernel builder pushes them:
    ``build/<variant>/`` with the same files as the CDN's variant and a builder's
    ``metadata.json``, on branch :data:`BRANCH`. Every request is logged (:meth:`taken`)."""

    def __init__(self, server: Any) -> None:
        self._server = server

    @property
    def url(self) -> str:
        return str(self._server.url)

    @classmethod
    @contextmanager
    def serving(cls, cdn: Path, kernels: Sequence[Kernel]) -> Iterator[HubSide]:
        hub_server = _hub_server_module()
        server = hub_server.HubServer().start()
        try:
            for kernel in kernels:
                variant_dir = cdn / kernel.variant_path.lstrip("/")
                files = {rel: (variant_dir / rel).read_bytes() for rel in kernel.files}
                tree = hub_server.builder_variant(VARIANT, files, name=kernel.name)
                server.push(kernel.repo_id, tree, branch=BRANCH)
            yield cls(server)
        finally:
            server.stop()

    def clear(self) -> None:
        self._server.clear_log()

    def taken(self) -> collections.Counter[str]:
        """The requests logged since :meth:`clear`, by kind: ``GET api/revision``,
        ``GET api/tree``, ``HEAD file``, ``GET file``."""
        kinds: collections.Counter[str] = collections.Counter()
        for request in list(self._server.requests):
            parts = request.path.strip("/").split("/")
            kind = f"api/{parts[4]}" if parts[0] == "api" and len(parts) > 4 else "file"
            kinds[f"{request.method} {kind}"] += 1
        return kinds


def hf_load(venv: HfVenv, hub: HubSide, hf_home: Path, repo_id: str) -> dict[str, Any]:
    """HF's ``get_kernel(repo_id, revision="v1")`` in a fresh interpreter of ``venv``, with
    its cache in ``hf_home`` (empty: a cold load; filled by one: a warm one); with the
    requests the Hub saw, by kind."""
    hub.clear()
    env = hf_env(HF_ENDPOINT=hub.url, HF_HOME=str(hf_home))
    result = run_program(_HF_LOAD, env, repo_id, BRANCH, python=str(venv.python))
    result["requests"] = hub.taken()
    return result
