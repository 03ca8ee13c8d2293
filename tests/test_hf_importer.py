"""Hugging Face kernels' own ``tests/test_importer.py``, ported to this API.

Ported from Hugging Face kernels 0.19.1 (Apache-2.0). Test names and assertions follow the
original; what differs:

- HF calls its internal ``_import_from_path(variant_dir, deps, repo_info)``; here the
  kernel is loaded through the public paths: ``get_kernel`` from the loopback CDN (HF's
  ``repo_info`` with a revision) and ``get_local_kernel`` for a variant directory (HF's
  ``repo_info=None``). ``_loaded_kernels`` is ``get_loaded_kernels()``.
- The module a kernel imports as is its ``flashhub.<org>.<pkg>.v<N>`` name, not its
  ``metadata.json`` ``id``; HF's revisions of one id are versions of one repo here.
- The note a failed import carries names the kernel by its repo and version (or its
  directory), with the variant; its wording is this client's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from flashhub_kernels import get_kernel, get_loaded_kernels, get_local_kernel
from support.cdn_server import CdnServer
from support.hf_kernels import package, this_machine, write_hf_kernel, write_hf_variant
from support.trees import local_variant

BROKEN = "test/broken"
METADATA = {"id": "broken_1_cuda", "license": "Apache-2.0", "python-depends": ["torch"]}
# Counts its runs in a file beside the test, then fails as HF's broken kernel does.
BROKEN_INIT = """import pathlib
runs = pathlib.Path({runs!r})
runs.write_text(runs.read_text() + "ran\\n" if runs.exists() else "ran\\n")
raise RuntimeError("kernel is broken")
"""


def _load_broken(tmp_path: Path, cdn: CdnServer, local: bool) -> tuple[Callable[[], object], str]:
    """A loader of the broken kernel, from the CDN or a local variant directory, and the
    module name it imports as."""
    files = {"__init__.py": BROKEN_INIT.format(runs=str(tmp_path / "runs"))}
    if local:
        fields = {**METADATA, "name": "broken", "version": 1, "backend": {"type": "cpu"}}
        write_hf_variant(tmp_path, BROKEN, 1, local_variant(), files, fields)
        variant_dir = tmp_path / "kernels" / BROKEN / "v1" / "build" / local_variant()
        return (lambda: get_local_kernel(variant_dir)), "flashhub._local."
    write_hf_kernel(cdn.root, BROKEN, 1, this_machine(), package("broken", files), METADATA)
    return (lambda: get_kernel(BROKEN, version=1)), "flashhub.test.broken.v1"


@pytest.mark.parametrize("local", [False, True], ids=["cdn", "local"])
def test_failed_import_cleans_up_sys_modules(tmp_path: Path, cdn: CdnServer, local: bool) -> None:
    load, import_name = _load_broken(tmp_path, cdn, local)
    for attempt in (1, 2):
        with pytest.raises(RuntimeError, match="kernel is broken") as exc_info:
            load()
        assert not [name for name in sys.modules if name.startswith(import_name)]
        assert get_loaded_kernels() == []
        if sys.version_info >= (3, 11):
            notes = exc_info.value.__notes__
            assert any("broken" in note and local_variant() in note for note in notes)
            assert any((str(tmp_path) if local else f"{BROKEN}@v1") in note for note in notes)
        # A retry imports from scratch: the kernel's code runs again.
        assert (tmp_path / "runs").read_text() == "ran\n" * attempt


LAZY_INIT = "from . import layers\ndef load_lazy():\n    from . import lazy\n    return lazy\n"


def test_revisions_with_same_metadata_id_have_separate_submodules(cdn: CdnServer) -> None:
    for version in (1, 2):
        files = {
            "__init__.py": LAZY_INIT,
            **{name: f"revision = {version}\n" for name in ("layers.py", "lazy.py")},
        }
        files = package("broken", files)
        write_hf_kernel(cdn.root, BROKEN, version, this_machine(), files, METADATA)
    modules = []
    for version in (1, 2):
        module = get_kernel(BROKEN, version=version)
        modules.append(module)
        assert get_kernel(BROKEN, version=version) is module

    old, new = modules
    assert old is not new
    assert old.layers is not new.layers
    assert old.layers.revision == 1
    assert new.layers.revision == 2
    # Imports made after both revisions are loaded must remain isolated too.
    assert old.load_lazy().revision == 1
    assert new.load_lazy().revision == 2
