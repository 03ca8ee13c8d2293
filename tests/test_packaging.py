"""The distributions users install, as pip builds them from this checkout."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

from flashhub_kernels._utils.pyproject import load_toml
from support.projects import skip_unless_this_checkout_builds

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = load_toml((ROOT / "pyproject.toml").read_bytes())
# What the sdist is made of: the package sources, and the files that say how to build them.
BUILD_INPUTS = ("pyproject.toml", "README.md", "MANIFEST.in")


def test_the_build_backend_floor_reads_the_license_as_an_spdx_expression() -> None:
    """``license = "Apache-2.0"`` is a PEP 639 expression, which setuptools refuses before
    77 (``project.license must be valid exactly by one definition``): a build with an
    older setuptools that the floor allowed failed before writing any metadata."""
    assert isinstance(PYPROJECT["project"]["license"], str)
    requires = [Requirement(line) for line in PYPROJECT["build-system"]["requires"]]
    (setuptools,) = [r for r in requires if r.name == "setuptools"]
    assert not setuptools.specifier.contains("76.1.0")
    assert setuptools.specifier.contains("77.0.3")


def _build(kind: str, source: Path, out: Path) -> Path:
    """Build the ``sdist`` or ``wheel`` of ``source`` into ``out``, as pip does (by the
    backend's hook, in a child process run from ``source``)."""
    skip_unless_this_checkout_builds()
    code = f"from setuptools import build_meta; print(build_meta.build_{kind}({str(out)!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=source, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return out / done.stdout.strip().splitlines()[-1]


def test_the_sdist_holds_the_sources_and_no_tests_and_its_wheel_every_module(
    tmp_path: Path,
) -> None:
    """setuptools puts the suite's ``tests/test_*.py`` in an sdist by default, but not the
    conftest.py and support/ they import: an sdist held a test tree that no one can run."""
    checkout = tmp_path / "checkout"
    junk = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for tree in ("src", "tests"):
        shutil.copytree(ROOT / tree, checkout / tree, ignore=junk)
    for name in BUILD_INPUTS:
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, checkout / name)
    sdist = _build("sdist", checkout, tmp_path / "dist")

    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
        top = archive.getnames()[0].split("/")[0]
    unpacked = tmp_path / "unpacked" / top
    assert not (unpacked / "tests").exists()
    wheel = _build("wheel", unpacked, tmp_path / "dist")

    sources = {p.relative_to(ROOT / "src").as_posix() for p in (ROOT / "src").rglob("*")}
    modules = {name for name in sources if name.endswith((".py", ".pyi", "py.typed"))}
    typing = {"flashhub/__init__.pyi", "flashhub/py.typed", "flashhub_kernels/py.typed"}
    assert {"flashhub/__init__.py", *typing} <= modules
    with zipfile.ZipFile(wheel) as archive:
        packaged = {name for name in archive.namelist() if ".dist-info/" not in name}
    assert packaged == modules
