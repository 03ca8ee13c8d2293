"""The distributions users install, as pip builds them from this checkout."""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement

from flashhub_kernels._utils.pyproject import load_toml

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = load_toml((ROOT / "pyproject.toml").read_bytes())


def test_the_build_backend_floor_reads_the_license_as_an_spdx_expression() -> None:
    """``license = "Apache-2.0"`` is a PEP 639 expression, which setuptools refuses before
    77 (``project.license must be valid exactly by one definition``): a build with an
    older setuptools that the floor allowed failed before writing any metadata."""
    assert isinstance(PYPROJECT["project"]["license"], str)
    requires = [Requirement(line) for line in PYPROJECT["build-system"]["requires"]]
    (setuptools,) = [r for r in requires if r.name == "setuptools"]
    assert not setuptools.specifier.contains("76.1.0")
    assert setuptools.specifier.contains("77.0.3")
