"""Hugging Face kernels' own ``tests/test_entry_points.py``, ported to this package.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0). The test name and assertions follow
the original; what differs:

- The distribution is ``flashhub-kernels``, whose ``egg_info.writers`` entry point copies
  a project's ``flashhub.lock`` into its metadata, as HF's copies ``kernels.lock``.
- Not in HF's test: the console scripts (``flashhub``, ``flashhub-kernel-load``) load too,
  since a script whose module is not shipped fails every time it is run.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, distribution

import pytest


def _entry_points(group: str) -> list[EntryPoint]:
    return [ep for ep in distribution("flashhub-kernels").entry_points if ep.group == group]


def test_egg_info_writer_entry_point_is_importable() -> None:
    """The ``egg_info.writers`` entry point is loaded by setuptools during *any*
    ``egg_info`` run in an environment where ``flashhub-kernels`` is installed, including
    builds of unrelated packages. If it points at a module that is not shipped, every such
    build fails with ``ModuleNotFoundError``."""
    entry_points = _entry_points("egg_info.writers")
    assert entry_points, "no egg_info.writers entry point registered"

    for ep in entry_points:
        try:
            writer = ep.load()
        except ModuleNotFoundError as e:
            pytest.fail(f"entry point {ep.name} = {ep.value!r} is not importable: {e}")
        assert callable(writer)


def test_console_scripts_are_importable() -> None:
    scripts = {ep.name: ep for ep in _entry_points("console_scripts")}
    assert {"flashhub", "flashhub-kernel-load"} <= set(scripts)
    for ep in scripts.values():
        assert callable(ep.load()), f"console script {ep.name} = {ep.value!r}"
