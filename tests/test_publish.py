"""The publisher (``flashhub_kernels._publish``); the ``flashhub publish`` command is in
test_cli_publish.py."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import flashhub_kernels
from flashhub_kernels._models.manifest import (
    decode_digest,
    parse_metadata,
    parse_variants,
    parse_versions,
)
from flashhub_kernels._publish import PublishReport, publish
from flashhub_kernels.errors import (
    PublishError,
    SharedNativeLibraryWarning,
    UndeclaredDependencyWarning,
)
from support.builds import (
    CPU,
    PY_PKG,
    REPO,
    SO_BYTES,
    SO_NAME,
    UNIVERSAL,
    make_kernel,
    package_dir,
    tree_bytes,
)
from support.machines import python_310_without_tomli
from support.trees import b64sha256

# No staging or old-version directory of a publish is left behind.
pytestmark = pytest.mark.usefixtures("no_leftover_staging")


def tree_stats(root: Path) -> dict[str, tuple[int, int]]:
    return {
        p.relative_to(root).as_posix(): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
    }


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


# --- layout and manifests ------------------------------------------------------------


def test_layout_metadata_and_report(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    report = publish(kernel, repo_id=REPO, version=1, out=out, prefix="kernels")

    base = "kernels/acme/my-kern"
    package_files = ["__init__.py", "_ops.py", "helpers.py"]
    expected = {f"{base}/versions.json", f"{base}/v1/variants.json"}
    for variant, extra in ((UNIVERSAL, []), (CPU, [SO_NAME])):
        expected.add(f"{base}/v1/build/{variant}/metadata.json")
        expected |= {f"{base}/v1/build/{variant}/{PY_PKG}/{f}" for f in package_files + extra}
    assert set(tree_bytes(out)) == expected  # junk (__pycache__, .pyc, dotfiles) is not published

    assert report.written == tuple(sorted(expected))
    assert report.bytes_written == sum(len(b) for b in tree_bytes(out).values())
    assert report.version_dir == out / base / "v1"
    assert (report.noop, report.replaced, report.versions) == (False, False, (1,))
    assert [v.name for v in report.variants] == [UNIVERSAL, CPU]
    cpu_report = report.variants[1]
    assert cpu_report.files == 4
    assert cpu_report.bytes == sum(
        (kernel / "build" / CPU / PY_PKG / f).stat().st_size for f in [*package_files, SO_NAME]
    )


@pytest.mark.parametrize("variant", [UNIVERSAL, CPU])
def test_metadata_digests_match_source_and_published_files(
    kernel: Path, tmp_path: Path, variant: str
) -> None:
    out = tmp_path / "cdn"
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    variant_dir = report.version_dir / "build" / variant
    data = (variant_dir / "metadata.json").read_bytes()

    manifest = parse_metadata(data)  # the client's parser accepts what the publisher writes
    document = json.loads(data)
    assert list(document) == [
        "backend",
        "digest",
        "id",
        "kernel-depends",
        "license",
        "name",
        "python-depends",
        "sizes",
        "version",
    ]
    assert document["digest"]["algorithm"] == "sha256"
    listed = document["digest"]["files"]
    assert list(listed) == sorted(listed)
    source_dir = kernel / "build" / variant
    source_files = {
        p.relative_to(source_dir).as_posix()
        for p in source_dir.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and p.name[0] != "."
    }
    assert set(manifest.files) == source_files
    for rel, encoded in listed.items():
        raw = decode_digest(encoded)
        assert raw == sha256((source_dir / rel).read_bytes())
        assert raw == sha256((variant_dir / rel).read_bytes())
        assert encoded.endswith("=") and "-" not in encoded and "_" not in encoded  # standard b64
        assert manifest.size_of(rel) == (source_dir / rel).stat().st_size
    assert list(document["sizes"]) == list(listed)
    assert report.variants[[v.name for v in report.variants].index(variant)].content_hash == (
        manifest.content_hash
    )


def test_variants_and_versions_documents(kernel: Path, tmp_path: Path) -> None:
    report = publish(kernel, repo_id=REPO, version=3, prefix="", out=tmp_path / "cdn")
    variants = (report.version_dir / "variants.json").read_bytes()
    versions = (report.version_dir.parent / "versions.json").read_bytes()
    assert parse_variants(variants) == [UNIVERSAL, CPU]
    assert parse_versions(versions) == [3]
    assert variants == b'[\n  "torch-universal",\n  "torch213-cxx11-cpu-x86_64-linux"\n]\n'


def test_bare_build_dir_gives_the_same_output(kernel: Path, tmp_path: Path) -> None:
    publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "a")
    publish(kernel / "build", repo_id=REPO, version=1, prefix="", out=tmp_path / "b")
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")
    assert len(tree_bytes(tmp_path / "a")) == 11


@pytest.mark.parametrize("pointed_at", ["variant", "package"])
@pytest.mark.parametrize("form", ["kernel", "bare"])
def test_a_variant_directory_is_refused_naming_the_directory_to_publish(
    kernel: Path, tmp_path: Path, pointed_at: str, form: str
) -> None:
    """Pointed one level too deep: the error names the directory to pass instead."""
    expected = kernel if form == "kernel" else (kernel / "build").rename(tmp_path / "bare")
    variant = (kernel / "build" if form == "kernel" else expected) / CPU
    given = variant if pointed_at == "variant" else variant / PY_PKG
    with pytest.raises(PublishError) as caught:
        publish(given, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert f"{given} is the {pointed_at} directory of the variant {CPU}" in caught.value.message
    holding = "build" if form == "kernel" else CPU
    assert caught.value.hint == f"pass {expected}, the directory that holds {holding}/"
    assert not (tmp_path / "cdn").exists()


def test_imports_of_packages_the_build_does_not_declare_are_warned(
    kernel: Path, tmp_path: Path
) -> None:
    declared = {"python-depends": ["einops", "Some-Pkg>=1.0"]}
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text(json.dumps(declared))
    (package_dir(kernel, UNIVERSAL) / "extra.py").write_text(
        "import os, json\n"
        "import einops\n"
        "import some_pkg.sub\n"
        "import torch.nn\n"
        "from . import helpers\n"
        "from .helpers import double\n"
        "import numpy as np\n"
        "\n"
        "def lazy():\n"
        "    from triton import language\n"
        "    import numpy\n"
    )
    with pytest.warns(UndeclaredDependencyWarning) as caught:
        report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    extra = f"build/{UNIVERSAL}/{PY_PKG}/extra.py"
    assert [(u.module, u.file, u.line) for u in report.undeclared_imports] == [
        ("numpy", extra, 7),
        ("triton", extra, 10),
    ]
    assert report.to_dict()["undeclared_imports"] == [
        {"module": "numpy", "file": extra, "line": 7},
        {"module": "triton", "file": extra, "line": 10},
    ]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert messages[0].startswith(f"{REPO} v1: {extra}:7 imports numpy, which ")
    assert '"python-depends"' in messages[0]
    assert f"build/{UNIVERSAL}/metadata.json" in messages[0]
    # The CPU build, which imports only torch and itself, is not warned about.
    assert all(CPU not in message for message in messages)


OPTIONAL_IMPORTS = """\
try:
    import numpy
except ImportError:
    numpy = None
try:
    from scipy import linalg
except (ValueError, ModuleNotFoundError):
    linalg = None
try:
    import tqdm
except:
    tqdm = None


def lazy():
    try:
        import einops
    except Exception:
        return None
    return einops


try:
    import pandas
except ImportError as exc:
    raise ImportError("pip install pandas") from exc
try:
    import yaml
except ValueError:
    pass
try:

    def later():
        import requests
except ImportError:
    import cupy
import tqdm.auto
"""


def test_an_import_whose_import_error_is_caught_is_not_warned_of(
    kernel: Path, tmp_path: Path
) -> None:
    """Optional: in the body of a try whose except clause catches ImportError and goes on.
    Not: one it raises again, one it does not catch, one in a function or in the clause
    itself (neither runs in the body), nor the unguarded import of a module (tqdm)."""
    (package_dir(kernel, UNIVERSAL) / "extra.py").write_text(OPTIONAL_IMPORTS)
    with pytest.warns(UndeclaredDependencyWarning):
        report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert [(u.module, u.line) for u in report.undeclared_imports] == [
        ("pandas", 24),
        ("yaml", 28),
        ("requests", 34),
        ("cupy", 36),
        ("tqdm", 37),
    ]


def test_what_a_build_may_import_undeclared_is_not_warned_of(kernel: Path, tmp_path: Path) -> None:
    # Triton comes with a CUDA torch; flashhub_kernels loads the kernel (get_kernel_dep);
    # pyyaml, declared, is imported as yaml.
    cuda = kernel / "build" / "torch-cuda"
    shutil.copytree(kernel / "build" / UNIVERSAL, cuda)
    (cuda / "metadata.json").write_text(json.dumps({"python-depends": ["pyyaml>=6"]}))
    (package_dir(kernel, "torch-cuda") / "extra.py").write_text(
        "import triton\nimport yaml\nfrom flashhub_kernels import get_kernel_dep\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert report.undeclared_imports == ()


def test_a_build_that_declares_what_it_imports_publishes_without_a_warning(
    kernel: Path, tmp_path: Path
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert report.undeclared_imports == ()


def test_a_malformed_python_depends_is_refused(kernel: Path, tmp_path: Path) -> None:
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text('{"python-depends": "einops"}')
    with pytest.raises(PublishError, match=r"python-depends.*list of package names"):
        publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")


def test_an_empty_python_depends_name_is_refused_as_a_client_would(
    kernel: Path, tmp_path: Path
) -> None:
    metadata = kernel / "build" / UNIVERSAL / "metadata.json"
    metadata.write_text('{"python-depends": ["einops", ""]}')
    with pytest.raises(PublishError, match=r"python-depends.*non-empty strings") as raised:
        publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert str(metadata) in raised.value.message
    assert raised.value.hint == 'write it as "python-depends": ["einops"], or leave it out'
    assert not (tmp_path / "cdn").exists()


def _own_digest(kernel: Path, variant: str) -> dict[str, str]:
    """The digest a builder writes into the variant's metadata.json: every file of it."""
    variant_dir = kernel / "build" / variant
    return {
        p.relative_to(variant_dir).as_posix(): b64sha256(p.read_bytes())
        for p in sorted(variant_dir.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc" and p.name[0] != "."
    }


def test_build_metadata_keys_are_kept_and_sizes_replaced(kernel: Path, tmp_path: Path) -> None:
    own = {
        "python-depends": ["einops"],
        "digest": {"algorithm": "sha256", "files": _own_digest(kernel, UNIVERSAL)},
        "sizes": {"gone.py": 1},
    }
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text(json.dumps(own))
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    data = (report.version_dir / "build" / UNIVERSAL / "metadata.json").read_bytes()
    manifest = parse_metadata(data)
    assert manifest.document["python-depends"] == ["einops"]
    assert set(manifest.files) == {
        f"{PY_PKG}/__init__.py",
        f"{PY_PKG}/_ops.py",
        f"{PY_PKG}/helpers.py",
    }
    assert manifest.sizes is not None and set(manifest.sizes) == set(manifest.files)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gone.py": "AAAA"}, "gone.py is listed but not in the build"),
        ({f"{PY_PKG}/_ops.py": b64sha256(b"other")}, "_ops.py has other content"),
    ],
)
def test_a_build_whose_own_digest_disagrees_with_its_files_is_refused(
    kernel: Path, tmp_path: Path, change: dict[str, str], message: str
) -> None:
    listed = {**_own_digest(kernel, UNIVERSAL), **change}
    own = {"digest": {"algorithm": "sha256", "files": listed}}
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text(json.dumps(own))
    with pytest.raises(PublishError, match=message) as info:
        publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    assert "rebuild the kernel" in str(info.value)
    assert not (tmp_path / "cdn").exists()


# An editor's swap file (vim's, hidden on Unix, not on Windows), backup and auto-save file.
EDITOR_FILES = [".helpers.py.swp", "helpers.py.swp", "helpers.py~", "#helpers.py#"]


@pytest.mark.parametrize("name", EDITOR_FILES)
def test_editor_files_are_not_published(kernel: Path, tmp_path: Path, name: str) -> None:
    (package_dir(kernel, UNIVERSAL) / name).write_text("draft")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    published = tree_bytes(report.version_dir / "build" / UNIVERSAL)
    assert sorted(published) == [
        "metadata.json",
        f"{PY_PKG}/__init__.py",
        f"{PY_PKG}/_ops.py",
        f"{PY_PKG}/helpers.py",
    ]


@pytest.mark.parametrize("name", EDITOR_FILES)
def test_a_digest_listing_a_file_publish_leaves_out_says_so(
    kernel: Path, tmp_path: Path, name: str
) -> None:
    (package_dir(kernel, UNIVERSAL) / name).write_text("draft")  # listed by mistake
    listed = {**_own_digest(kernel, UNIVERSAL), f"{PY_PKG}/{name}": b64sha256(b"draft")}
    own = {"digest": {"algorithm": "sha256", "files": listed}}
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text(json.dumps(own))
    with pytest.raises(PublishError, match="which publish leaves out of every build") as info:
        publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    assert f"lists {PY_PKG}/{name}, which" in str(info.value)
    assert (
        "hidden files, __pycache__, .pyc files and editors' backup and swap files (foo.py~, "
        "#foo.py#, foo.py.swp) are never published"
    ) in str(info.value)
    assert "rebuild" not in str(info.value)  # rebuilding would not change it
    assert not (tmp_path / "cdn").exists()


def test_modes_ignore_the_umask(kernel: Path, tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        report = publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    finally:
        os.umask(old)
    paths = [tmp_path / "cdn", *(tmp_path / "cdn").rglob("*")]
    modes = {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_file()}
    dir_modes = {stat.S_IMODE(p.stat().st_mode) for p in paths if p.is_dir()}
    assert (modes, dir_modes) == ({0o644}, {0o755})
    assert len(report.written) == 11


# --- determinism and immutability ----------------------------------------------------


def test_deterministic_output(tmp_path: Path) -> None:
    first = make_kernel(tmp_path / "k1")
    second = make_kernel(tmp_path / "k2")  # same content, different place and mtimes
    os.utime(second / "build" / CPU / PY_PKG / SO_NAME, (1, 1))
    publish(first, repo_id=REPO, version=1, prefix="", out=tmp_path / "a")
    publish(second, repo_id=REPO, version=1, prefix="", out=tmp_path / "b")
    a, b = tree_bytes(tmp_path / "a"), tree_bytes(tmp_path / "b")
    assert a == b
    assert a["acme/my-kern/v1/build/torch213-cxx11-cpu-x86_64-linux/my_kern/" + SO_NAME] == SO_BYTES


def test_republishing_identical_content_is_a_noop(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    before = tree_stats(out)
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    forced = publish(kernel, repo_id=REPO, version=1, prefix="", out=out, force=True)
    assert report.noop and forced.noop
    assert (report.written, report.bytes_written, report.replaced) == ((), 0, False)
    assert tree_stats(out) == before  # same inodes and mtimes: nothing rewritten


def test_a_tree_from_a_publisher_without_sizes_is_left_as_it_is(
    kernel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdn"
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    for manifest in report.version_dir.glob("build/*/metadata.json"):  # as written before
        document = json.loads(manifest.read_bytes())
        del document["sizes"]
        manifest.write_text(json.dumps(document))
    before = tree_bytes(out)
    again = publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    assert again.noop and tree_bytes(out) == before


def test_noop_version_still_lands_in_versions_json(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    (report.version_dir.parent / "versions.json").unlink()
    again = publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    assert not again.noop
    assert again.written == ("acme/my-kern/versions.json",)
    assert parse_versions((report.version_dir.parent / "versions.json").read_bytes()) == [1]


def test_different_content_is_refused(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    before = tree_bytes(out)
    (kernel / "build" / CPU / PY_PKG / SO_NAME).write_bytes(SO_BYTES + b"v2")
    with pytest.raises(PublishError) as info:
        publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    assert "already published" in info.value.message
    assert SO_NAME in info.value.message  # names a changed file
    assert info.value.hint is not None
    assert "--version 2" in info.value.hint and "--force" in info.value.hint
    assert tree_bytes(out) == before
    assert [p.name for p in (out / "acme" / "my-kern").iterdir() if p.name.startswith(".")] == []


@pytest.mark.filterwarnings("ignore::flashhub_kernels.errors.SharedNativeLibraryWarning")
def test_a_conflict_suggests_the_next_free_version(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    pkg = out / "acme" / "my-kern"
    for version in (1, 2):
        publish(kernel, repo_id=REPO, version=version, prefix="", out=out)
    (kernel / "build" / CPU / PY_PKG / SO_NAME).write_bytes(b"a new build")

    def suggested() -> str:
        with pytest.raises(PublishError) as info:
            publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
        return info.value.hint or ""

    assert "publish as --version 3," in suggested()  # v2 exists
    (pkg / "versions.json").write_text("[1, 2, 5]")  # e.g. written by another publisher host
    assert "publish as --version 6," in suggested()
    (pkg / "versions.json").unlink()
    assert "publish as --version 3," in suggested()  # the directories alone


def test_added_file_is_a_difference(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    (kernel / "build" / UNIVERSAL / PY_PKG / "extra.py").write_text("X = 1\n")
    with pytest.raises(
        PublishError, match=r"1 new, e\.g\. build/torch-universal/my_kern/extra\.py"
    ):
        publish(kernel, repo_id=REPO, version=1, prefix="", out=out)


def test_force_replaces_a_version(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    so = kernel / "build" / CPU / PY_PKG / SO_NAME
    so.write_bytes(b"new build")
    (kernel / "build" / UNIVERSAL / PY_PKG / "helpers.py").unlink()
    (kernel / "build" / UNIVERSAL / PY_PKG / "__init__.py").write_text("from ._ops import ops\n")

    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=out, force=True)
    assert report.replaced and not report.noop
    variant_dir = report.version_dir / "build" / CPU
    assert (variant_dir / PY_PKG / SO_NAME).read_bytes() == b"new build"
    assert not (report.version_dir / "build" / UNIVERSAL / PY_PKG / "helpers.py").exists()
    manifest = parse_metadata((variant_dir / "metadata.json").read_bytes())
    assert manifest.files[f"{PY_PKG}/{SO_NAME}"] == sha256(b"new build")
    assert sorted(p.name for p in report.version_dir.parent.iterdir()) == ["v1", "versions.json"]


@pytest.mark.filterwarnings("ignore::flashhub_kernels.errors.SharedNativeLibraryWarning")
def test_versions_json_is_merged(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    pkg = out / "acme" / "my-kern"
    publish(kernel, repo_id=REPO, version=2, prefix="", out=out)
    assert parse_versions((pkg / "versions.json").read_bytes()) == [2]
    publish(kernel, repo_id=REPO, version=1, prefix="", out=out)
    (pkg / "versions.json").write_text("[7, 1, 2]")  # e.g. written by another publisher host
    report = publish(kernel, repo_id=REPO, version=3, prefix="", out=out)
    assert report.versions == (1, 2, 3, 7)
    assert (pkg / "versions.json").read_bytes() == b"[\n  1,\n  2,\n  3,\n  7\n]\n"
    assert sorted(p.name for p in pkg.iterdir()) == ["v1", "v2", "v3", "versions.json"]


SO_FILE = f"build/{CPU}/{PY_PKG}/{SO_NAME}"


def test_a_version_with_an_earlier_versions_native_library_warns(
    kernel: Path, tmp_path: Path
) -> None:
    """Two versions of one build share its library: side by side, both run on one copy."""
    out = tmp_path / "cdn"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say about a first version
        assert publish(kernel, repo_id=REPO, version=1, out=out).shared_natives == ()
    with pytest.warns(SharedNativeLibraryWarning) as caught:
        report = publish(kernel, repo_id=REPO, version=2, out=out)
    (warning,) = caught
    assert warning.filename == __file__  # it points at the publish() call
    message = str(warning.message)
    assert message.startswith(f"{REPO} v2: {SO_FILE} is byte-identical to v1's {SO_FILE}")
    assert "both versions run on the one copy loaded first" in message and "rebuild" in message
    assert [(s.file, s.version, s.other_file, s.same_bytes) for s in report.shared_natives] == [
        (SO_FILE, 1, SO_FILE, True)
    ]
    assert report.to_dict()["shared_natives"] == [
        {"file": SO_FILE, "version": 1, "other_file": SO_FILE, "same_bytes": True}
    ]


def test_a_rebuild_that_kept_the_library_name_warns(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, out=out)
    (package_dir(kernel) / SO_NAME).write_bytes(SO_BYTES + b"rebuilt")
    with pytest.warns(SharedNativeLibraryWarning, match="both register the op namespace") as c:
        report = publish(kernel, repo_id=REPO, version=2, out=out)
    assert "_my_kern_cpu_1a2b3c" in str(c[0].message)
    assert "the one imported second raises NativeLibraryConflictError" in str(c[0].message)
    assert [s.same_bytes for s in report.shared_natives] == [False]


def test_a_new_native_build_publishes_without_a_warning(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, out=out)
    library = package_dir(kernel) / SO_NAME
    library.rename(library.with_name("_my_kern_cpu_4d5e6f.so"))
    library.with_name("_my_kern_cpu_4d5e6f.so").write_bytes(SO_BYTES + b"v2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert publish(kernel, repo_id=REPO, version=2, out=out).shared_natives == ()


def test_malformed_versions_json_is_refused(kernel: Path, tmp_path: Path) -> None:
    pkg = tmp_path / "cdn" / "acme" / "my-kern"
    pkg.mkdir(parents=True)
    (pkg / "versions.json").write_text('{"not": "a list"}')
    with pytest.raises(PublishError, match=r"versions\.json"):
        publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [("", "acme/my-kern"), ("kernels", "kernels/acme/my-kern"), ("/a/b/", "a/b/acme/my-kern")],
)
def test_prefix(kernel: Path, tmp_path: Path, prefix: str, expected: str) -> None:
    out = tmp_path / "cdn"
    report = publish(kernel, repo_id=REPO, version=1, out=out, prefix=prefix)
    assert report.version_dir == out / expected / "v1"
    assert (out / expected / "versions.json").is_file()
    assert all(path.startswith(f"{expected}/") for path in report.written)


def test_bad_arguments_raise_value_error(kernel: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repo id"):
        publish(kernel, repo_id="a/b/c", version=1, prefix="", out=tmp_path / "cdn")
    with pytest.raises(ValueError, match=">= 1"):
        publish(kernel, repo_id=REPO, version=0, prefix="", out=tmp_path / "cdn")
    with pytest.raises(ValueError, match="prefix"):
        publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn", prefix="../up")
    assert not (tmp_path / "cdn").exists()


# --- validation ----------------------------------------------------------------------


def _write(relpath: str, text: str) -> Callable[[Path], None]:
    def write(kernel: Path) -> None:
        path = package_dir(kernel) / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    return write


BAD_BUILDS: dict[str, tuple[Callable[[Path], object], list[str]]] = {
    "bad variant name": (
        lambda k: (k / "build" / CPU).rename(k / "build" / "torch213-cxx11-x86_64-linux"),
        ["torch213-cxx11-x86_64-linux", "variant"],
    ),
    "missing __init__.py": (lambda k: (package_dir(k) / "__init__.py").unlink(), ["__init__.py"]),
    "wrong package dir name": (
        lambda k: package_dir(k).rename(package_dir(k).with_name("mykern")),
        ["'my_kern'", "'mykern'"],
    ),
    "stray file beside the package": (
        lambda k: (package_dir(k).parent / "README.md").write_text("hi"),
        ["'README.md'", "exactly one package directory"],
    ),
    "stray file among the variants": (
        lambda k: (k / "build" / "notes.txt").write_text("hi"),
        ["notes.txt", "variant directories"],
    ),
    "import of the package": (_write("a.py", "import my_kern\n"), ["a.py:1", "my_kern"]),
    "from-import of the package": (
        _write("sub/b.py", "import os\n\nfrom my_kern._ops import ops\n"),
        ["sub/b.py:3", "my_kern._ops", "relative"],
    ),
    "nested absolute self-import": (
        _write("c.py", "def f():\n    import my_kern.helpers as h\n    return h\n"),
        ["c.py:2", "my_kern.helpers"],
    ),
    "import through the hook": (
        _write("d.py", "from flashhub.acme.my_kern.v1 import ops\n"),
        ["d.py:1", "flashhub.acme.my_kern.v1"],
    ),
    "not valid Python": (_write("e.py", "def (:\n"), ["e.py:1", "not valid Python"]),
    "symlinked file": (
        lambda k: (package_dir(k) / "link.py").symlink_to(package_dir(k) / "helpers.py"),
        ["link.py", "symlink"],
    ),
    "symlinked variant": (
        lambda k: (k / "build" / "torch-cpu").symlink_to(k / "build" / CPU),
        ["torch-cpu", "symlink"],
    ),
    "empty build": (
        lambda k: [p.rename(k / p.name) for p in (k / "build").iterdir()],
        ["no build variants"],
    ),
    "bad build metadata.json": (
        lambda k: (package_dir(k).parent / "metadata.json").write_text("[1]"),
        ["metadata.json", "JSON object"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_BUILDS))
def test_invalid_builds_are_refused(kernel: Path, tmp_path: Path, case: str) -> None:
    mutate, expected = BAD_BUILDS[case]
    mutate(kernel)
    with pytest.raises(PublishError) as info:
        publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    for fragment in expected:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert not (tmp_path / "cdn").exists()  # validation happens before anything is written


def test_a_build_directory_that_links_outside_the_kernel_is_refused(tmp_path: Path) -> None:
    elsewhere = make_kernel(tmp_path / "another-project")  # a build the kernel's is not
    kernel = tmp_path / "kernel"
    kernel.mkdir()
    (kernel / "build").symlink_to(elsewhere / "build")
    with pytest.raises(PublishError) as info:
        publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    assert f"{kernel / 'build'} is a symlink" in str(info.value)
    assert not (tmp_path / "cdn").exists()


def test_missing_build_dir(tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="not a directory"):
        publish(tmp_path / "nope", repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")


# my_kern_other is another package, not the kernel: allowed, but warned as undeclared.
@pytest.mark.filterwarnings("ignore::flashhub_kernels.errors.UndeclaredDependencyWarning")
def test_allowed_imports_pass(kernel: Path, tmp_path: Path) -> None:
    _write(
        "ok.py",
        "import os.path\nimport torch.nn as nn\nimport my_kern_other\n"
        "from . import helpers\nfrom .helpers import double\nfrom .. import x\n",
    )(kernel)
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    assert report.variants[1].files == 5


def test_report_type(kernel: Path, tmp_path: Path) -> None:
    report = publish(kernel, repo_id=REPO, version=1, prefix="", out=tmp_path / "cdn")
    assert isinstance(report, PublishReport)
    assert json.loads(json.dumps(report.to_dict()))["repo_id"] == REPO


def test_default_prefix_matches_the_clients_default(kernel: Path, tmp_path: Path) -> None:
    report = publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert report.version_dir == tmp_path / "cdn" / "kernels" / "acme" / "my-kern" / "v1"


def test_leftovers_a_publish_cannot_tell_dead_are_removed_once_idle_for_a_day(
    kernel: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Staging directories another host (on a shared file system), a live process of
    this host, or an older publisher (no pid and host in the name) may still be filling
    are kept until nothing in them changed for a day; an old version whose ``v<N>`` is
    gone is kept, with a warning saying how to restore it."""
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, out=out)
    pkg = out / "kernels" / REPO
    host = socket.gethostname()
    names = [
        ".v2.staging-abcd1234.123.another-host",
        f".v2.staging-abcd1234.{os.getppid()}.{host}",  # a live process
        ".v2.staging-abcd1234",
        f".v3.old-abcd1234.{os.getppid()}.{host}",  # v3 missing
    ]
    for name in names:
        (pkg / name / "build").mkdir(parents=True)
        (pkg / name / "build" / "file.py").write_text("")
    publish(kernel, repo_id=REPO, version=1, out=out)
    assert sorted(p.name for p in pkg.glob(".v*")) == sorted(names)

    day_ago = time.time() - 24 * 3600 - 60
    for path in pkg.glob(".v*/**/*"):
        os.utime(path, (day_ago, day_ago))
    for path in pkg.glob(".v*"):
        os.utime(path, (day_ago, day_ago))
    with caplog.at_level(logging.WARNING, logger="flashhub_kernels"):
        publish(kernel, repo_id=REPO, version=1, out=out)
    assert [p.name for p in pkg.glob(".v*")] == [names[3]]
    assert f"move that directory back to {pkg / 'v3'}" in caplog.text
    shutil.rmtree(pkg / names[3])


def test_publish_on_python_310_without_tomli_says_what_it_needs_to_read_build_toml(
    tmp_path: Path,
) -> None:
    python = python_310_without_tomli()
    if python is None:
        pytest.skip("needs a Python 3.10 without tomli (on PATH, or installed by pyenv)")
    kernel = tmp_path / "kern"
    (kernel / "build" / "torch-universal" / "kern").mkdir(parents=True)
    (kernel / "build" / "torch-universal" / "kern" / "__init__.py").write_text("X = 1\n")
    (kernel / "build.toml").write_text('[general]\nname = "kern"\n')
    src = Path(flashhub_kernels.__file__).parents[1]
    command = [python, "-m", "flashhub_kernels", "publish", kernel, "--repo-id", "acme/kern"]
    result = subprocess.run(
        [*map(str, command), "--version", "1", "--out", str(tmp_path / "cdn")],
        env={**os.environ, "PYTHONPATH": str(src)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"error: cannot read {kernel / 'build.toml'}: reading TOML on Python 3.10 needs the "
        "'tomli' package\n  hint: pip install tomli, or use Python 3.11 or newer\n"
    )
