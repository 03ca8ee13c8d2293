"""A local build is checked against the digest in its ``metadata.json`` on every load,
before any of its code runs, as Hugging Face kernels 0.19.1 checks it (its
``DigestValidator``, which ``get_local_kernel`` applies to local kernels too).

Test names follow Hugging Face's where one fits. The rules of what the digest covers were
taken from its ``Digest.hash_variant``; where this client differs (the signature files
beside ``metadata.json``, a symlink to a directory), the test says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from torch import nn

import flashhub_kernels as fk
from flashhub_kernels._loading.local_digest import find_violations
from flashhub_kernels._signing.signing_keys import generate_signing_key, write_key_pair
from flashhub_kernels.errors import IntegrityError
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.preloaded import run_code
from support.trees import b64sha256, kernel_files, local_variant, write_kernel

REPO = "acme/tensor-tricks"
PY_PKG = "tensor_tricks"
INIT = f"{PY_PKG}/__init__.py"

# Loads in a child process and prints the outcome: the class of the error and whether it
# is also a RuntimeError (what Hugging Face kernels raises), then its message; or "loaded".
OUTCOME = """
import flashhub_kernels as fk
try:
    {load}
except ImportError as exc:
    print(type(exc).__name__, isinstance(exc, RuntimeError))
    print(exc)
else:
    print("loaded", k.marker())
"""
GET_LOCAL = "k = fk.get_local_kernel({path!r})"
IMPORT_MAPPED = "import flashhub.acme.tensor_tricks.v1 as k"


def write_build(
    root: Path, files: dict[str, bytes], *, digest: bool = True, **metadata: object
) -> Path:
    """A kernel repo ``root`` with one build for this machine holding ``files``, its
    ``metadata.json`` listing their digests as a kernel builder writes them (``digest``)
    and ``metadata``. Returns the variant directory."""
    variant = root / "build" / local_variant()
    for rel, data in files.items():
        (variant / rel).parent.mkdir(parents=True, exist_ok=True)
        (variant / rel).write_bytes(data)
    document: dict[str, object] = {"name": "tensor-tricks", **metadata}
    if digest:
        listed = {rel: b64sha256(data) for rel, data in sorted(files.items())}
        document["digest"] = {"algorithm": "sha256", "files": listed}
    (variant / "metadata.json").write_text(json.dumps(document))
    return variant


def marker_code(marker: Path) -> bytes:
    """A line of a kernel's code that shows it ran: it writes ``marker``."""
    return f"open({str(marker)!r}, 'w').write('ran')\n".encode()


def load_in_child(load: str, env: dict[str, str] | None = None) -> tuple[list[str], str]:
    """The lines a child that runs ``load`` prints (see :data:`OUTCOME`), and its stderr."""
    result = run_code(OUTCOME.format(load=load), env={**os.environ, **(env or {})})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines(), result.stderr


def test_local_kernel_with_modified_file_fails(tmp_path: Path) -> None:
    variant = write_build(tmp_path / "kernel", kernel_files(PY_PKG, "built"))
    marker = tmp_path / "ran"
    with (variant / INIT).open("ab") as init:  # an edit after the build
        init.write(marker_code(marker))

    lines, _ = load_in_child(GET_LOCAL.format(path=str(tmp_path / "kernel")))
    assert lines[0] == "IntegrityError True"  # an ImportError and a RuntimeError
    assert lines[1] == (
        f"Kernel 'tensor-tricks' variant {local_variant()!r} ({variant}): the files do not "
        "match the digest in metadata.json, so they may have been modified:"
    )
    assert lines[2:] == [
        f"  File hash mismatch for {INIT}",
        "  hint: rebuild the kernel, or restore its files as its build wrote them (and "
        "remove the files it did not write)",
    ]
    assert not marker.exists()  # none of the kernel's code ran


def test_local_kernel_with_unknown_and_missing_files_fails(tmp_path: Path) -> None:
    variant = write_build(tmp_path / "kernel", kernel_files(PY_PKG, "built"))
    (variant / PY_PKG / "helpers.py").unlink()
    (variant / PY_PKG / "extra.py").write_text("EXTRA = 1\n")
    (variant / ".notes").write_text("hidden files count too\n")

    lines, _ = load_in_child(GET_LOCAL.format(path=str(variant)))
    assert lines[0] == "IntegrityError True"
    assert lines[2:5] == [
        "  Unknown file: .notes",
        f"  Unknown file: {PY_PKG}/extra.py",
        f"  Missing file: {PY_PKG}/helpers.py",
    ]


def test_local_kernels_override_of_a_modified_build_fails(tmp_path: Path) -> None:
    variant = write_build(tmp_path / "kernel", kernel_files(PY_PKG, "built"))
    marker = tmp_path / "ran"
    (variant / PY_PKG / "_ops.py").write_bytes(marker_code(marker) + b"MARKER = 'edited'\n")

    env = {"LOCAL_KERNELS": f"{REPO}={tmp_path / 'kernel'}"}
    lines, _ = load_in_child(IMPORT_MAPPED, env)
    assert lines[0] == "IntegrityError True"
    assert f"  File hash mismatch for {PY_PKG}/_ops.py" in lines
    assert not marker.exists()


def test_local_kernel_without_digest_loads_quietly(tmp_path: Path) -> None:
    write_build(tmp_path / "kernel", kernel_files(PY_PKG, "undigested"), digest=False)

    lines, stderr = load_in_child(GET_LOCAL.format(path=str(tmp_path / "kernel")))
    assert lines == ["loaded undigested"]
    assert stderr == ""


def test_local_kernel_without_digest_says_so_at_info_level(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    variant = write_build(tmp_path / "kernel", kernel_files(PY_PKG, "undigested"), digest=False)
    with caplog.at_level("INFO", logger="flashhub_kernels"):
        assert fk.get_local_kernel(tmp_path / "kernel").marker() == "undigested"
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "INFO",
            f"{variant / 'metadata.json'} records no digest: the local kernel's files "
            "are not verified",
        )
    ]


def test_bytecode_of_a_previous_import_does_not_fail_the_next_load(tmp_path: Path) -> None:
    variant = write_build(tmp_path / "kernel", kernel_files(PY_PKG, "compiled"))
    load = GET_LOCAL.format(path=str(tmp_path / "kernel"))
    writing_bytecode = {"PYTHONDONTWRITEBYTECODE": ""}

    assert load_in_child(load, writing_bytecode)[0] == ["loaded compiled"]
    assert list((variant / PY_PKG / "__pycache__").glob("*.pyc"))  # the first load wrote it
    (variant / PY_PKG / "stale.pyc").write_bytes(b"a .pyc beside its source")
    assert load_in_child(load, writing_bytecode)[0] == ["loaded compiled"]


@pytest.mark.parametrize(
    "listed", [f"{PY_PKG}/helpers.pyc", f"{PY_PKG}/__pycache__/helpers.cpython-311.pyc"]
)
def test_a_digest_listing_bytecode_it_holds_says_bytecode_is_never_part_of_a_build(
    tmp_path: Path, listed: str
) -> None:
    # Loads pass over bytecode, which an import writes, and publish never ships it: a
    # digest listing it is malformed, not a build missing the file that is right there.
    files = {**kernel_files(PY_PKG, "built"), listed: b"bytecode a tool digested"}
    variant = write_build(tmp_path / "kernel", files)
    assert (variant / listed).is_file()

    lines, _ = load_in_child(GET_LOCAL.format(path=str(tmp_path / "kernel")))
    assert lines == [
        "ManifestError True",
        f"{variant / 'metadata.json'}: the digest lists {listed}, but bytecode (.pyc files, "
        "__pycache__ directories) is never part of a build: an import writes it, so a load "
        "does not check it, and `flashhub publish` does not ship it",
        "  hint: build the kernel with a digest that leaves out .pyc files and __pycache__ "
        "directories",
    ]


def test_a_dependency_mapped_to_a_modified_build_fails_before_the_kernel_runs(
    tmp_path: Path,
) -> None:
    dep_files = kernel_files("dep", "dependency")
    dep_variant = write_build(tmp_path / "dep", dep_files, name="dep")
    dep_marker, kernel_marker = tmp_path / "dep-ran", tmp_path / "kernel-ran"
    with (dep_variant / "dep" / "__init__.py").open("ab") as init:
        init.write(marker_code(dep_marker))
    files = kernel_files(PY_PKG, "depending")
    files[INIT] = marker_code(kernel_marker) + files[INIT]
    write_build(
        tmp_path / "kernel", files, **{"kernel-depends": [{"repo-id": "acme/dep", "version": 1}]}
    )

    env = {"LOCAL_KERNELS": f"acme/dep={tmp_path / 'dep'}"}
    lines, _ = load_in_child(GET_LOCAL.format(path=str(tmp_path / "kernel")), env)
    assert lines[0] == "IntegrityError True"
    assert lines[1].startswith(f"Kernel 'dep' variant {local_variant()!r} ({dep_variant})")
    assert not dep_marker.exists() and not kernel_marker.exists()


def test_a_modified_zip_build_fails(tmp_path: Path) -> None:
    variant = tmp_path / "zipped" / "build" / "torch-universal"
    variant.mkdir(parents=True)
    archive = variant / "_zipped_0a1b2c3.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("__init__.py", "def marker():\n    return 'zipped'\n")
    metadata = {"id": "_zipped_0a1b2c3", "build-layout": "zip", "name": "zipped"}
    metadata["digest"] = {"files": {archive.name: b64sha256(archive.read_bytes())}}
    (variant / "metadata.json").write_text(json.dumps(metadata))
    load = GET_LOCAL.format(path=str(tmp_path / "zipped"))
    assert load_in_child(load)[0] == ["loaded zipped"]

    marker = tmp_path / "ran"
    with zipfile.ZipFile(archive, "w") as zipped:  # rebuilt by hand, its digest kept
        zipped.writestr("__init__.py", marker_code(marker) + b"def marker():\n    return 0\n")
    lines, _ = load_in_child(load)
    assert lines[0] == "IntegrityError True"
    assert f"  File hash mismatch for {archive.name}" in lines
    assert not marker.exists()


LAYERS = b"""from torch import nn


class Double(nn.Module):
    def forward(self, x):
        return x * 2
"""


def test_local_layer_repository_of_a_modified_build_fails(tmp_path: Path) -> None:
    files = {INIT: b"from . import layers\n", f"{PY_PKG}/layers.py": LAYERS}
    variant = write_build(tmp_path / "kernel", files)
    (variant / PY_PKG / "layers.py").write_bytes(LAYERS.replace(b"x * 2", b"x * 3"))

    @fk.use_kernel_forward_from_hub("Double")
    class Identity(nn.Module):
        def forward(self, x: object) -> object:
            return x

    repo = fk.LocalLayerRepository(tmp_path / "kernel", layer_name="Double")
    with (
        fk.use_kernel_mapping({"Double": {"cpu": repo}}, inherit_mapping=False),
        pytest.raises(IntegrityError, match=r"File hash mismatch for tensor_tricks/layers\.py"),
    ):
        fk.kernelize(nn.Sequential(Identity()), device="cpu", mode=fk.Mode.INFERENCE)


@pytest.mark.signing
def test_a_signed_published_tree_and_a_copy_of_its_cache_entry_load_as_local_builds(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1)
    key = generate_signing_key()
    write_key_pair(key, tmp_path / "acme.key")
    assert flashhub("sign", cdn.root, "--key", tmp_path / "acme.key").returncode == 0
    monkeypatch.setenv("FLASHHUB_TRUSTED_KEYS", key.public_line)
    entry = fk.install_kernel(REPO, version=1)
    # Beside metadata.json: its signature, the receipt, and the bytecode compiled at commit.
    assert (entry / "metadata.json.sig").is_file() and (entry / ".flashhub-receipt.json").is_file()
    assert list(entry.glob(f"{PY_PKG}/__pycache__/*.pyc"))
    copy = shutil.copytree(entry, tmp_path / "copy" / local_variant())

    published = cdn.root / "kernels" / REPO / "v1"
    assert (published / "build" / local_variant() / "metadata.json.sig").is_file()
    env = {"LOCAL_KERNELS": f"{REPO}={published}"}
    assert load_in_child(IMPORT_MAPPED, env)[0] == [f"loaded {REPO}@v1:{local_variant()}"]
    assert load_in_child(GET_LOCAL.format(path=str(copy)))[0] == [
        f"loaded {REPO}@v1:{local_variant()}"
    ]


# -- what the digest covers, as Hugging Face's Digest.hash_variant counts files --------------


def listed(files: dict[str, bytes]) -> dict[str, bytes]:
    """Each file's raw sha256, as ``metadata.json``'s digest is parsed."""
    return {rel: hashlib.sha256(data).digest() for rel, data in files.items()}


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_what_the_digest_covers_and_passes_over(tmp_path: Path) -> None:
    covered = {
        "pkg/__init__.py": b"x = 1\n",
        ".hidden": b"h",
        "pkg/old.pyo": b"o",
        "sub/metadata.json": b"{}",  # only the top-level metadata.json is left out
    }
    write_files(tmp_path, covered)
    write_files(
        tmp_path,
        {
            "metadata.json": b"{}",
            "pkg/__pycache__/__init__.cpython-311.pyc": b"c",
            "__pycache__/anything": b"c",
            "pkg/loose.pyc": b"c",
            # Not in Hugging Face's: the files that sign metadata.json, or that the cache
            # keeps beside it, which no digest can list.
            "metadata.json.sig": b"s",
            "metadata.json.sigstore": b"s",
            ".flashhub-receipt.json": b"r",
        },
    )
    (tmp_path / "empty").mkdir()
    os.mkfifo(tmp_path / "fifo")  # passed over, as Hugging Face does: never opened
    assert find_violations(tmp_path, listed(covered)) == []
    assert find_violations(tmp_path, {}) == [f"Unknown file: {rel}" for rel in sorted(covered)]


def test_symlinks_count_as_what_they_point_to(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write_files(outside, {"code.py": b"code", "lib/more.py": b"more"})
    variant = tmp_path / "variant"
    variant.mkdir()
    (variant / "code.py").symlink_to(outside / "code.py")
    assert find_violations(variant, listed({"code.py": b"code"})) == []
    assert find_violations(variant, listed({"code.py": b"other"})) == [
        "File hash mismatch for code.py"
    ]

    # Hugging Face passes a symlinked directory over, unverified code and all.
    (variant / "lib").symlink_to(outside / "lib")
    assert find_violations(variant, listed({"code.py": b"code"})) == [
        "Symlink to a directory, whose files no digest covers: lib"
    ]
    (variant / "lib").unlink()

    # Hugging Face fails with an OSError here; this is a violation like any other.
    (variant / "gone.py").symlink_to(tmp_path / "nowhere")
    assert find_violations(variant, listed({"code.py": b"code", "gone.py": b""})) == [
        "Unreadable file (No such file or directory): gone.py"
    ]
    assert find_violations(variant, listed({"code.py": b"code"})) == ["Unknown file: gone.py"]


def test_a_long_list_of_violations_is_cut_short(tmp_path: Path) -> None:
    variant = write_build(tmp_path / "kernel", {INIT: b""})
    write_files(variant, {f"{PY_PKG}/extra_{i:02}.py": b"" for i in range(25)})
    with pytest.raises(IntegrityError) as raised:
        fk.get_local_kernel(variant)
    lines = raised.value.message.splitlines()
    assert lines[1:] == [f"  Unknown file: {PY_PKG}/extra_{i:02}.py" for i in range(20)] + [
        "  ... and 5 more"
    ]


def test_a_package_in_a_project_whose_metadata_json_is_another_tools_loads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A package given directly, in a project whose own metadata.json has a "digest" of
    # another kind: that file is no kernel build's, so there is nothing to check.
    project = tmp_path / "project"
    write_files(project, kernel_files(PY_PKG, "in a project"))
    (project / "metadata.json").write_text('{"name": "my-project", "digest": "3f2a9c"}')
    with caplog.at_level("INFO", logger="flashhub_kernels"):
        assert fk.get_local_kernel(project / PY_PKG).marker() == "in a project"
    assert [r.getMessage() for r in caplog.records] == [
        f"{project / 'metadata.json'} records no digest: the local kernel's files are not verified"
    ]


def test_a_malformed_digest_of_a_local_build_says_to_rebuild_not_to_report_to_a_cdn(
    tmp_path: Path,
) -> None:
    variant = write_build(tmp_path / "kernel", kernel_files(PY_PKG, "built"), digest=False)
    document = json.loads((variant / "metadata.json").read_text())
    document["digest"] = {"files": {INIT: "not base64 of a sha256"}}
    (variant / "metadata.json").write_text(json.dumps(document))
    with pytest.raises(IntegrityError) as raised:
        fk.get_local_kernel(tmp_path / "kernel")
    assert raised.value.message.startswith(f"{variant / 'metadata.json'}")
    assert raised.value.hint == (
        "rebuild the kernel, or, where that metadata.json is not the build's, load the "
        "package from a directory of its own"
    )
