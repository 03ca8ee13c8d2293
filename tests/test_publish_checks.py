"""What the publisher checks of a build beyond its layout: the compiled modules it leaves
out, and the ``backend`` its own ``metadata.json`` states. The checks of imports and
native libraries are in test_publish.py, those of the zip layout in test_zip_layout.py."""

from __future__ import annotations

import json
import py_compile
import shutil
import warnings
from pathlib import Path

import pytest

import flashhub_kernels
from flashhub_kernels._models.manifest import parse_metadata
from flashhub_kernels._publish import SourcelessModule, publish
from flashhub_kernels.errors import PublishError, SourcelessModuleWarning
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


# --- the backend a build's own metadata.json states ------------------------------------

CUDA = "torch213-cxx11-cu128-x86_64-linux"


def with_backend(kernel: Path, backend: dict[str, object], variant: str = CUDA) -> Path:
    """``kernel`` with ``variant`` (the universal build's files) stating ``backend`` in its
    own metadata.json; that file's path."""
    variant_dir = kernel / "build" / variant
    if not variant_dir.exists():
        shutil.copytree(kernel / "build" / UNIVERSAL, variant_dir)
    metadata = variant_dir / "metadata.json"
    metadata.write_text(json.dumps({"backend": backend}))
    return metadata


def refused(kernel: Path, out: Path) -> PublishError:
    """The error that publishing ``kernel`` into ``out`` raises; nothing is written there."""
    with pytest.raises(PublishError) as raised:
        publish(kernel, repo_id=REPO, version=1, out=out)
    assert not out.exists()
    return raised.value


def test_cuda_archs_spelled_as_nvcc_does_are_refused_with_the_builders_spelling(
    kernel: Path, tmp_path: Path
) -> None:
    """A load passes over an arch it cannot read: these would offer the build to every GPU."""
    archs = ["sm_80", "sm86", "compute_90", "9.0a", "SM_100f"]
    metadata = with_backend(kernel, {"type": "cuda", "archs": archs})
    error = refused(kernel, tmp_path / "cdn")
    assert error.message == (
        f'{metadata} spells "archs" as nvcc does (sm_80, sm86, compute_90, SM_100f): a load '
        'compares compute capabilities such as "8.0" or "9.0a", passes over an arch it cannot '
        "read, and offers a build whose archs it reads none of to every GPU"
    )
    assert error.hint == 'write "archs": ["8.0", "8.6", "9.0+PTX", "9.0a", "10.0f"]'


@pytest.mark.parametrize(
    ("backend", "key", "hint"),
    [
        ({"type": "cuda", "arch": ["8.0"]}, "arch", 'rename it "archs"'),
        ({"type": "cuda", "Type": "cuda", "archs": ["8.0"]}, "Type", 'rename it "type"'),
        ({"type": "cuda", "archs": ["8.0"], "Arch": "8.0"}, "Arch", 'rename it "archs"'),
    ],
)
def test_a_misspelt_backend_key_a_load_ignores_is_refused(
    kernel: Path, tmp_path: Path, backend: dict[str, object], key: str, hint: str
) -> None:
    metadata = with_backend(kernel, backend)
    error = refused(kernel, tmp_path / "cdn")
    assert error.message == (
        f'{metadata}: "backend" holds {key!r}, which a load ignores: it reads "type" and '
        '"archs" only, so the build would be offered to the GPUs that the key may have '
        "meant to leave out"
    )
    assert error.hint == hint


def test_a_backend_type_other_than_the_variant_names_is_refused(
    kernel: Path, tmp_path: Path
) -> None:
    metadata = with_backend(kernel, {"type": "rocm", "archs": ["gfx942"]})
    error = refused(kernel, tmp_path / "cdn")
    assert error.message == (
        f'{metadata} says "backend": {{"type": "rocm"}}, but the name of the variant {CUDA} '
        "says it is built for cuda: a load offers it to cuda machines by its name, and "
        "never checks its archs against their device"
    )
    assert error.hint == ('write "type": "cuda", or move the build to the variant of its backend')


def test_a_backend_as_builders_write_it_is_published_as_it_is(kernel: Path, tmp_path: Path) -> None:
    """Archs of a form no client knows yet (a newer builder's) are not nvcc's, nor is a
    key unlike ``type`` and ``archs`` a misspelling of them; a build for any backend
    (torch-universal) states the one it was made on."""
    archs = ["8.0", "9.0a", "10.0f", "9.0+PTX", "hopper-next"]
    cuda = {"type": "cuda", "archs": archs, "cuda-minver": "12.4"}
    with_backend(kernel, cuda)
    with_backend(kernel, {"type": "cuda"}, UNIVERSAL)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    for variant, backend in ((CUDA, cuda), (UNIVERSAL, {"type": "cuda"})):
        data = (report.version_dir / "build" / variant / "metadata.json").read_bytes()
        assert parse_metadata(data).document["backend"] == backend
