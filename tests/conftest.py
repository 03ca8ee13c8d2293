"""Shared fixtures: a loopback CDN, a private cache, and a clean import system per test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cdn_server import CdnServer
from flashhub_kernels import _finder
from flashhub_kernels._config import reset_config


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


@pytest.fixture(autouse=True)
def flashhub_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[None]:
    """Point flashhub at the test's CDN and cache; give every test a fresh finder."""
    for name in list(os.environ):
        if name.startswith("FLASHHUB_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("FLASHHUB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLASHHUB_DISABLE_PROGRESS_BARS", "1")
    if "cdn" in request.fixturenames:
        server: CdnServer = request.getfixturevalue("cdn")
        monkeypatch.setenv("FLASHHUB_CDN_URL", server.url)
    else:  # nothing may reach a real network from a test
        monkeypatch.setenv("FLASHHUB_CDN_URL", "http://127.0.0.1:9")
    reset_config()
    _forget_kernels()
    yield
    reset_config()
    _forget_kernels()


def _forget_kernels() -> None:
    for name in [n for n in sys.modules if n.startswith("flashhub.")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _finder.KernelFinder)]
    _finder.install()


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120) -> str:
    """Run ``code`` in a fresh interpreter with this test's FLASHHUB_* environment."""
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode != 0:
        raise AssertionError(f"child failed ({result.returncode}):\n{result.stderr}")
    return result.stdout
