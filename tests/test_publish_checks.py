"""What the publisher checks of a build beyond its layout: the compiled modules it leaves
out. The checks of imports and native libraries are in test_publish.py, those of the zip
layout in test_zip_layout.py."""

from __future__ import annotations

import py_compile
from pathlib import Path

import pytest

import flashhub_kernels
from flashhub_kernels._publish import SourcelessModule, publish
from flashhub_kernels.errors import SourcelessModuleWarning
from support.builds import INIT, PY_PKG, REPO, UNIVERSAL, make_kernel, package_dir, tree_bytes

# No staging or old-version directory of a publish is left behind.
pytestmark = pytest.mark.usefixtures("no_leftover_staging")


def test_a_compiled_module_without_its_source_is_warned_of_and_not_published(
    tmp_path: Path,
) -> None:
    kernel = make_kernel(tmp_path / "kernel", (UNIVERSAL,))
    package = package_dir(kernel, UNIVERSAL)
    source = package / "compiled.py"
    source.write_text("def triple(x):\n    return x * 3\n")
    py_compile.compile(str(source), cfile=str(package / "compiled.pyc"), doraise=True)
    source.unlink()
    (package / "__init__.py").write_text(INIT + "from .compiled import triple\n")
    assert flashhub_kernels.get_local_kernel(kernel).triple(2) == 6  # Python loads the .pyc

    with pytest.warns(SourcelessModuleWarning) as caught:
        report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    shown = f"build/{UNIVERSAL}/{PY_PKG}/compiled.pyc"
    # Not the fixture's __init__.pyc beside its source, nor __pycache__'s: Python's cache.
    assert report.sourceless_modules == (SourcelessModule(shown),)
    assert report.to_dict()["sourceless_modules"] == [{"file": shown}]
    assert [str(w.message) for w in caught] == [
        f"{REPO} v1: {shown} is not published: publish ships Python sources only, and there "
        "is no compiled.py beside it. A local load imports the compiled module; the "
        "published kernel lacks it, and its import fails. Put compiled.py in the build and "
        "publish again"
    ]
    assert not [rel for rel in tree_bytes(tmp_path / "cdn") if rel.endswith(".pyc")]
