"""Code written for Hugging Face kernels 0.19.1 or flashhub-kernels 0.1.2 that passes
``trust_remote_code=`` or ``user_agent=`` runs unchanged: each function and repository
that takes them there takes them here, ``get_kernel`` in 0.1.2's positional order too.
``trust_remote_code`` is checked and changes nothing; ``user_agent`` reaches the
``User-Agent`` of the CDN requests the call makes. A value of the wrong type is refused
before any request."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import MakeProject, run_python
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.trees import cpu_variant, kernel_files, local_variant, write_variant

REPO = "acme/doubler"
SENT = "my-app/1.0"  # what the calls below append to the User-Agent

LAYERS = b"""import torch
from torch import nn


class Twice(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2
"""


@pytest.fixture
def lockfile(cdn: CdnServer, make_project: MakeProject) -> Path:
    """acme/doubler v1 (a function and a layer) on the ``cdn``, locked by a project."""
    files = kernel_files("doubler", "doubler")
    files["doubler/__init__.py"] += b"from . import layers\n"
    files["doubler/layers.py"] = LAYERS
    builds = sorted({local_variant(), cpu_variant()})  # one on a CPU-only torch
    for variant in builds:  # the CPU build is what backend="cpu" loads on a GPU machine
        write_variant(cdn.root, REPO, 1, variant, files)
    (cdn.root / "kernels" / REPO / "v1" / "variants.json").write_text(json.dumps(builds))
    (cdn.root / "kernels" / REPO / "versions.json").write_text("[1]")
    project = make_project({REPO: "==1"}, publish=False)
    assert flashhub("lock", project).returncode == 0
    cdn.clear_log()
    return project / "flashhub.lock"


# Each call as Hugging Face kernels' code (or 0.1.2's) writes it, and what it prints.
CALLS = {
    "get_kernel": (
        "print(fk.get_kernel(REPO, version=1, trust_remote_code=True, "
        "user_agent={'my-app': '1.0'}).marker())",
        "doubler",
    ),
    "get_kernel, 0.1.2's positional order": (
        "print(fk.get_kernel(REPO, None, 1, 'cpu', 'my-app/1.0', [REPO]).__name__)",
        "flashhub.acme.doubler.v1_cpu",
    ),
    "install_kernel": (
        "print(fk.install_kernel(REPO, version=1, user_agent='my-app/1.0', "
        "trust_remote_code=[REPO]).name)",
        local_variant(),
    ),
    "get_locked_kernel": (
        "print(fk.get_locked_kernel(REPO, lockfile=LOCK, trust_remote_code=True, "
        "user_agent='my-app/1.0').marker())",
        "doubler",
    ),
    "LayerRepository": (
        "print(fk.LayerRepository(repo_id=REPO, layer_name='Twice', version=1, "
        "trust_remote_code=True, user_agent={'my-app': '1.0'}).load().__name__)",
        "Twice",
    ),
    "has_kernel": ("print(fk.has_kernel(REPO, version=1, trust_remote_code=True))", "True"),
    "LockedLayerRepository": (
        "print(fk.LockedLayerRepository(repo_id=REPO, layer_name='Twice', lockfile=LOCK, "
        "trust_remote_code=True).load().__name__)",
        "Twice",
    ),
    "FuncRepository": (
        "print(fk.FuncRepository(repo_id=REPO, func_name='some_function', version=1, "
        "trust_remote_code=[REPO]).load()()(1))",
        "2",
    ),
    "LockedFuncRepository": (
        "print(fk.LockedFuncRepository(repo_id=REPO, func_name='some_function', "
        "lockfile=LOCK, trust_remote_code=True).load()()(1))",
        "2",
    ),
}
SENDERS = {"get_kernel", "get_kernel, 0.1.2's positional order", "install_kernel"}
SENDERS |= {"get_locked_kernel", "LayerRepository"}


@pytest.mark.parametrize("name", CALLS)
def test_a_call_written_for_hugging_face_or_0_1_2_loads(
    name: str, cdn: CdnServer, lockfile: Path
) -> None:
    call, printed = CALLS[name]
    code = f"""
        import warnings
        import flashhub_kernels as fk
        warnings.simplefilter("ignore", DeprecationWarning)  # the function repositories'
        REPO, LOCK = {REPO!r}, {str(lockfile)!r}
        {call}
    """
    assert run_python(textwrap.dedent(code)).splitlines()[-1] == printed
    agents = {request.headers["User-Agent"] for request in cdn.requests}
    assert agents, "the kernel was downloaded"
    if name in SENDERS:
        assert agents == {f"flashhub-kernels/{fk.__version__}; {SENT}"}
    else:
        assert agents == {f"flashhub-kernels/{fk.__version__}"}


def test_get_local_kernel_takes_them(cdn: CdnServer, tmp_path: Path) -> None:
    package = tmp_path / "doubler"
    for relpath, data in kernel_files("doubler", "local doubler").items():
        (tmp_path / relpath).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relpath).write_bytes(data)
    code = (
        "import flashhub_kernels as fk\n"
        f"kernel = fk.get_local_kernel({str(package)!r}, trust_remote_code=True, "
        "user_agent={'my-app': '1.0'})\n"
        "print(kernel.marker())"
    )
    assert run_python(code).splitlines()[-1] == "local doubler"


def _calls(trust_remote_code: object, user_agent: object) -> dict[str, Callable[[], object]]:
    """Every taker, called with these values (``user_agent`` where it is taken)."""
    version = {"version": 1, "trust_remote_code": trust_remote_code}
    sending = {**version, "user_agent": user_agent}
    return {
        "get_kernel": lambda: fk.get_kernel(REPO, **sending),
        "get_kernel positionally": lambda: fk.get_kernel(
            REPO, None, 1, None, user_agent, trust_remote_code
        ),
        "install_kernel": lambda: fk.install_kernel(REPO, **sending),
        "has_kernel": lambda: fk.has_kernel(REPO, **version),
        "get_locked_kernel": lambda: fk.get_locked_kernel(
            REPO,
            lockfile="flashhub.lock",
            trust_remote_code=trust_remote_code,
            user_agent=user_agent,
        ),
        "get_local_kernel": lambda: fk.get_local_kernel(
            "no-such-dir", trust_remote_code=trust_remote_code, user_agent=user_agent
        ),
        "LayerRepository": lambda: fk.LayerRepository(REPO, "Twice", **sending),
        "LockedLayerRepository": lambda: fk.LockedLayerRepository(
            REPO, "Twice", trust_remote_code=trust_remote_code
        ),
        "FuncRepository": lambda: fk.FuncRepository(REPO, "some_function", **version),
        "LockedFuncRepository": lambda: fk.LockedFuncRepository(
            REPO, "some_function", trust_remote_code=trust_remote_code
        ),
    }


@pytest.mark.parametrize("value", ["yes", 1, None, ("acme/doubler",), ["acme/doubler", 1]])
@pytest.mark.parametrize("name", _calls(True, None))
def test_a_trust_remote_code_hugging_face_would_not_take_is_refused(
    name: str, value: object, cdn: CdnServer, cache_dir: Path
) -> None:
    with pytest.raises(TypeError, match=r"trust_remote_code must be True, False or a list"):
        _calls(value, None)[name]()
    assert not cdn.requests and not cache_dir.exists()


SENDING = ["get_kernel", "get_kernel positionally", "install_kernel", "get_locked_kernel"]
SENDING += ["get_local_kernel", "LayerRepository"]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (3, TypeError),
        (["my-app/1.0"], TypeError),
        ("my-app/1.0\r\nX-Injected: 1", ValueError),
        ({"my-app": "1.0\n"}, ValueError),
        ("my-app/1.0 ünï", ValueError),
    ],
)
@pytest.mark.parametrize("name", SENDING)
def test_a_user_agent_that_cannot_be_sent_is_refused(
    name: str, value: object, error: type[Exception], cdn: CdnServer, cache_dir: Path
) -> None:
    with pytest.raises(error, match=r"user_agent"):
        _calls(True, value)[name]()
    assert not cdn.requests and not cache_dir.exists()


def test_the_user_agent_is_sent_for_its_call_alone(cdn: CdnServer, lockfile: Path) -> None:
    """Neither a load that failed nor one that succeeded lends it to the next call."""
    code = f"""
        import flashhub_kernels as fk
        from flashhub_kernels.errors import KernelNotFoundError
        try:
            fk.get_kernel({REPO!r}, version=9, user_agent="failed/1")
        except KernelNotFoundError:
            pass
        fk.get_kernel({REPO!r}, version=1, user_agent="{SENT}")
        print(fk.has_kernel({REPO!r}, version=1))
    """
    assert run_python(textwrap.dedent(code)).splitlines()[-1] == "True"
    agents = [request.headers["User-Agent"] for request in cdn.requests]
    plain = f"flashhub-kernels/{fk.__version__}"
    assert set(agents) == {f"{plain}; failed/1", f"{plain}; {SENT}", plain}
    assert agents[-1] == plain  # has_kernel's
