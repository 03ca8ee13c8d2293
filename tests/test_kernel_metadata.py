"""The kernel builder's fields of metadata.json: read into typed records, shown by
``flashhub info``, and written by ``flashhub publish`` in the builder's schema, so that
Hugging Face's kernels client accepts a tree this project published.
"""

from __future__ import annotations

import json
import pickle
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

import flashhub_kernels as fk
from conftest import run_python
from flashhub_kernels._loading.requirements import python_package
from flashhub_kernels._models.kernel_metadata import (
    BackendInfo,
    GitState,
    KernelDependency,
    KernelMetadata,
    load_requirements,
    parse_release,
    read_kernel_metadata,
)
from flashhub_kernels._models.manifest import parse_metadata
from flashhub_kernels._publish import publish
from flashhub_kernels.errors import ManifestError, PublishError
from support.builder import (
    BUILDER_COMMIT,
    KERNEL_COMMIT,
    RAN_DIR_VAR,
    provenance,
    write_builder_kernel,
)
from support.builds import CPU, PY_PKG, REPO, SO_NAME, UNIVERSAL, make_kernel
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.trees import b64sha256, write_kernel

DIGEST = {"algorithm": "sha256", "files": {"__init__.py": b64sha256(b"")}}
BUILDER_DOCUMENT: dict[str, Any] = {
    "name": "activation",
    "id": "_activation_cuda_0f3c2a1",
    "version": 1,
    "license": "apache-2.0",
    "upstream": "https://github.com/vllm-project/vllm.git",
    "source": "https://github.com/huggingface/kernels-community.git",
    "python-depends": ["einops"],
    "kernel-depends": [{"repo-id": "kernels-community/einops", "version": 1}],
    "backend": {"type": "cuda", "archs": ["8.0", "9.0a", "10.0f+PTX"]},
    "kernels-minver": "0.17",
    "flashhub-kernels-minver": "0.2",
    "provenance": provenance(kernel_dirty=True),
    "digest": DIGEST,
}


# -- reading ----------------------------------------------------------------------------------


def test_every_builder_field_is_read_into_its_record() -> None:
    metadata = read_kernel_metadata(BUILDER_DOCUMENT)
    assert metadata.name == "activation" and metadata.id == "_activation_cuda_0f3c2a1"
    assert (metadata.version, metadata.license) == (1, "apache-2.0")
    assert metadata.upstream == "https://github.com/vllm-project/vllm.git"
    assert metadata.source == "https://github.com/huggingface/kernels-community.git"
    assert metadata.python_depends == ("einops",)
    assert metadata.kernel_depends == (KernelDependency("kernels-community/einops", 1),)
    assert metadata.backend == BackendInfo("cuda", ("8.0", "9.0a", "10.0f+PTX"))
    assert (metadata.kernels_minver, metadata.flashhub_kernels_minver) == ("0.17", "0.2")
    assert metadata.provenance is not None
    assert metadata.provenance.builder_version == "0.17.0"
    assert metadata.provenance.builder == GitState(BUILDER_COMMIT, False)
    assert metadata.provenance.kernel == GitState(KERNEL_COMMIT, True)
    assert metadata.dirty_sources == ("kernel source",)
    assert metadata.to_json()["kernel-depends"] == BUILDER_DOCUMENT["kernel-depends"]
    assert metadata.to_json()["backend"] == BUILDER_DOCUMENT["backend"]


def test_a_manifest_of_the_older_form_has_no_builder_fields() -> None:
    document = {"digest": {"files": DIGEST["files"]}, "sizes": {"__init__.py": 0}}
    assert read_kernel_metadata(document) == KernelMetadata()
    assert load_requirements(document) == {}
    assert parse_metadata(json.dumps(document).encode()).files  # still a manifest


def test_the_legacy_sha_key_of_provenance_and_a_builder_without_git_are_read() -> None:
    legacy = {
        "kernel-builder": {"version": "0.17.0-dev0", "sha": BUILDER_COMMIT.upper(), "dirty": False},
        "kernel": {"sha": KERNEL_COMMIT, "dirty": False},
    }
    read = read_kernel_metadata({"provenance": legacy}).provenance
    assert read is not None and read.builder == GitState(BUILDER_COMMIT, False)
    no_git = read_kernel_metadata({"provenance": {"kernel-builder": {"version": "0.17.0"}}})
    assert no_git.provenance is not None and no_git.provenance.builder is None
    assert no_git.dirty_sources == ()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", 3, '"name" must be a string'),
        ("license", ["MIT"], '"license" must be a string'),
        ("version", "1", '"version" must be the kernel\'s version number'),
        ("version", True, '"version" must be'),
        ("python-depends", "einops", '"python-depends" must be a list of package names'),
        ("python-depends", [""], '"python-depends" must be a list'),
        ("kernel-depends", {"repo-id": "a/b"}, '"kernel-depends" must be a list'),
        ("kernel-depends", [{"repo-id": "a/b"}], "version must be an int >= 1"),
        ("kernel-depends", [{"repo-id": "a/b/c", "version": 1}], "invalid repo id"),
        ("kernel-depends", [{"repo-id": "a/b", "version": 1, "x": 1}], "unknown key 'x'"),
        (
            "kernel-depends",
            [{"repo-id": "a/b", "version": 1}, {"repo-id": "a/b", "version": 2}],
            "lists a/b more than once",
        ),
        ("kernel-depends", [{"repo-id": "a/b", "revision": "main"}], "numbered versions only"),
        ("backend", "cuda", '"backend" must be an object'),
        ("backend", {"archs": ["9.0"]}, '"backend" must be an object'),
        ("backend", {"type": "cuda", "archs": "9.0"}, '"archs" must be a list'),
        ("kernels-minver", 0.17, '"kernels-minver" must be a version string'),
        ("flashhub-kernels-minver", "0.2-beta", "not a version of dotted numbers"),
        ("provenance", {"kernel": {}}, '"provenance" must hold "kernel-builder"'),
        (
            "provenance",
            {"kernel-builder": {"version": "1", "commit": BUILDER_COMMIT}},
            '"commit" .* and "dirty" .* together',
        ),
        (
            "provenance",
            {"kernel-builder": {"version": "1"}, "kernel": {"commit": "abc123", "dirty": False}},
            "a full git object id",
        ),
    ],
)
def test_a_malformed_field_is_a_manifest_error_naming_it(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(ManifestError, match=message) as info:
        read_kernel_metadata({field: value}, source="acme/x@v1/build/torch-cpu/metadata.json")
    assert str(info.value).startswith("acme/x@v1/build/torch-cpu/metadata.json: ")
    assert isinstance(info.value, ImportError)


def test_a_digest_algorithm_other_than_sha256_is_refused() -> None:
    document = {"digest": {**DIGEST, "algorithm": "sha512"}}
    with pytest.raises(ManifestError, match="algorithm 'sha512'; this client verifies sha256"):
        parse_metadata(json.dumps(document).encode())
    assert parse_metadata(json.dumps({"digest": DIGEST}).encode()).files


def test_the_requirements_a_load_acts_on_are_kept_only_when_there_is_one() -> None:
    clean = {**BUILDER_DOCUMENT, "provenance": provenance()}
    for key in ("python-depends", "kernel-depends", "kernels-minver", "flashhub-kernels-minver"):
        del clean[key]
    assert load_requirements(clean) == {}
    assert load_requirements(BUILDER_DOCUMENT) == {
        key: BUILDER_DOCUMENT[key]
        for key in (
            "name",
            "python-depends",
            "kernel-depends",
            "kernels-minver",
            "flashhub-kernels-minver",
            "provenance",
        )
    }


@pytest.mark.parametrize(
    ("text", "release"),
    [("0.17.2", (0, 17, 2)), ("0.17.0", (0, 17)), ("1", (1,)), ("1.0.0", (1,)), ("0", ())],
)
def test_releases_compare_without_trailing_zeros(text: str, release: tuple[int, ...]) -> None:
    assert parse_release(text) == release


@pytest.mark.parametrize(
    ("entry", "pip", "module"),
    [
        ("einops", "einops", "einops"),
        ("tvm-ffi", "apache-tvm-ffi", "tvm_ffi"),
        ("nvidia-cutlass-dsl", "nvidia-cutlass-dsl", "cutlass"),
        ("onednn", "onednn-devel", None),
        ("PyYAML>=6", "pyyaml>=6", "yaml"),
        ("Some-Pkg >= 1.0", "Some-Pkg >= 1.0", "some_pkg"),
        ("zope.interface", "zope.interface", "zope_interface"),
    ],
)
def test_python_depends_entries_map_to_a_pip_package_and_a_module(
    entry: str, pip: str, module: str | None
) -> None:
    assert python_package(entry) == (pip, module)


# -- Metadata: a build's metadata.json as Hugging Face kernels shows it --------------------------


def test_metadata_has_every_field_the_parser_reads_and_the_digest() -> None:
    assert set(fk.Metadata._fields) == {*KernelMetadata._fields, "digest"}


def test_metadata_has_every_field_by_its_hugging_face_name(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps({**BUILDER_DOCUMENT, "build-layout": "zip"}))
    metadata = fk.Metadata.read_from_file(path)
    assert metadata == fk.Metadata.read_from_file(str(path))
    assert metadata.id == "_activation_cuda_0f3c2a1" and metadata.version == 1
    assert metadata.name is not None and str(metadata.name) == "activation"
    assert fk.Metadata.from_bytes(b'{"name": "flash-attn"}').name.python_name == "flash_attn"
    # Hugging Face kernels names the argument `bytes`.
    assert fk.Metadata.from_bytes(bytes=b'{"name": "flash-attn"}').name == "flash-attn"
    assert (metadata.build_layout, metadata.kernels_minver) == ("zip", "0.17")
    assert (metadata.license, metadata.source) == ("apache-2.0", BUILDER_DOCUMENT["source"])
    assert metadata.upstream == "https://github.com/vllm-project/vllm.git"
    assert list(metadata.python_depends) == ["einops"]
    (dependency,) = metadata.kernel_depends
    assert (dependency.repo_id, dependency.version) == ("kernels-community/einops", 1)
    assert metadata.backend is not None and metadata.backend.backend_type == "cuda"
    assert list(metadata.backend.archs or ()) == ["8.0", "9.0a", "10.0f+PTX"]
    assert metadata.digest is not None and metadata.digest.algorithm == "sha256"
    assert metadata.digest.files == DIGEST["files"]
    provenance = metadata.provenance
    assert provenance is not None and provenance.dirty
    assert provenance.kernel_builder.version == "0.17.0"
    assert provenance.kernel_builder.git == GitState(BUILDER_COMMIT, False)
    assert provenance.kernel is not None and provenance.kernel.commit == KERNEL_COMMIT
    assert metadata.flashhub_kernels_minver == "0.2"


def test_metadata_of_the_older_form_has_its_fields_absent(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps({"digest": {"files": DIGEST["files"]}, "sizes": {"__init__.py": 0}}))
    metadata = fk.Metadata.read_from_file(path)
    assert metadata == fk.Metadata(digest=metadata.digest)
    assert (metadata.name, metadata.id, metadata.version, metadata.backend) == (None,) * 4
    assert (metadata.build_layout, metadata.python_depends) == ("files", ())
    assert metadata.provenance is None
    assert metadata.digest is not None and metadata.digest.files == DIGEST["files"]
    clean = fk.Metadata.from_bytes(json.dumps({"provenance": provenance()}).encode())
    assert clean.provenance is not None and not clean.provenance.dirty


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (b"[]", "must be a JSON object"),
        (b"{", "is not valid JSON"),
        (b'{"version": "1"}', '"version" must be'),
        (b'{"build-layout": "ZIP"}', "this client loads the layouts 'files' and 'zip'"),
        (b'{"digest": {"files": {"../x": "AAAA"}}}', "file path '../x' has an empty, '.' or '..'"),
    ],
)
def test_metadata_of_a_malformed_file_is_a_manifest_error(
    tmp_path: Path, document: bytes, message: str
) -> None:
    path = tmp_path / "metadata.json"
    path.write_bytes(document)
    with pytest.raises(ManifestError, match=re.escape(message)) as info:
        fk.Metadata.read_from_file(path)
    assert str(path) in str(info.value)
    with pytest.raises(FileNotFoundError):
        fk.Metadata.read_from_file(tmp_path / "missing.json")


@pytest.mark.parametrize("has_metadata", [True, False], ids=["with-metadata", "without"])
def test_metadata_of_a_directory_is_a_value_error_naming_the_file_to_pass(
    tmp_path: Path, has_metadata: bool
) -> None:
    variant = tmp_path / "build" / CPU
    variant.mkdir(parents=True)
    if has_metadata:
        (variant / "metadata.json").write_text(json.dumps(BUILDER_DOCUMENT))
    # A ValueError, as Hugging Face kernels raises; an OSError, as reading it raised before.
    with pytest.raises(ValueError, match="is a directory") as info:
        fk.Metadata.read_from_file(variant)
    assert isinstance(info.value, IsADirectoryError)
    assert "reads a metadata.json file\n  hint: pass " in str(info.value)
    assert (f"pass {variant / 'metadata.json'}," in str(info.value)) == has_metadata


def test_a_loaded_kernel_has_the_metadata_of_its_build(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(RAN_DIR_VAR, str(tmp_path))
    (document,) = write_builder_kernel(cdn.root, "acme/top", 1, variants=["torch-cpu"]).values()
    write_kernel(cdn.root, "acme/nested", 1)  # <variant>/<py_pkg>/: metadata.json beside it
    top = fk.get_kernel("acme/top", version=1, backend="cpu")
    nested = fk.get_kernel("acme/nested", version=1)
    loaded = {kernel.module: kernel for kernel in fk.get_loaded_kernels()}
    metadata = loaded[top].metadata
    assert metadata.name is not None and metadata.name.python_name == "top"
    assert (metadata.id, metadata.version) == (document["id"], 1)
    assert metadata == fk.Metadata.from_bytes(json.dumps(document).encode())
    nested_files = loaded[nested].metadata.digest
    assert nested_files is not None and "nested/__init__.py" in nested_files.files

    package = tmp_path / "bare" / "bare_kernel"  # a package without a metadata.json
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    bare = fk.get_local_kernel(package)
    assert loaded_record(bare).metadata == fk.Metadata()


def test_a_loaded_kernels_metadata_reads_as_the_0_1_2_dict(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """0.1.2's LoadedKernel.metadata was the parsed metadata.json; 0.1.2 code reads it so,
    while Hugging Face's code reads the same object's fields."""
    monkeypatch.setenv(RAN_DIR_VAR, str(tmp_path))
    (document,) = write_builder_kernel(cdn.root, "acme/top", 1, variants=["torch-cpu"]).values()
    code = """
        import json
        import flashhub_kernels as fk
        fk.get_kernel("acme/top", version=1, backend="cpu")
        [loaded] = fk.get_loaded_kernels()
        metadata = loaded.metadata
        assert metadata.name.python_name == "top" and metadata["name"] == "top"
        assert metadata.get("no-such-key") is None and "digest" in metadata
        assert metadata.digest.files == metadata["digest"]["files"]
        published = json.loads(PUBLISHED)
        assert metadata == published and published == metadata and metadata != {}
        assert metadata.copy() == published and type(metadata.copy()) is dict
        print(json.dumps({key: metadata[key] for key in metadata.keys()}))
    """
    published = f"PUBLISHED = {json.dumps(document)!r}\n"
    printed = run_python(published + textwrap.dedent(code)).splitlines()[-1]
    assert json.loads(printed) == document


def test_metadata_is_a_read_only_mapping_of_its_document(tmp_path: Path) -> None:
    document = {"name": "my-kernel", "digest": DIGEST, "x-publisher-note": [1, 2]}
    path = tmp_path / "metadata.json"
    path.write_text(json.dumps(document))
    metadata = fk.Metadata.read_from_file(path)

    assert dict(metadata) == document and len(metadata) == 3
    assert metadata["x-publisher-note"] == [1, 2] and metadata.name == "my-kernel"
    with pytest.raises(KeyError):
        metadata["id"]
    with pytest.raises(TypeError):
        metadata["name"] = "other"  # type: ignore[index]
    copied = pickle.loads(pickle.dumps(metadata))
    assert copied == metadata and dict(copied) == document
    assert not fk.Metadata() and dict(fk.Metadata()) == {}  # as 0.1.2's {} without a file


def loaded_record(module: object) -> fk.LoadedKernel:
    (record,) = [kernel for kernel in fk.get_loaded_kernels() if kernel.module is module]
    return record


# -- flashhub info ----------------------------------------------------------------------------


def _publish_builder_kernel(root: Path) -> None:
    archs = {"type": "cpu", "archs": ["x86-64-v3"]}
    extra = {
        "backend": archs,
        "source": "https://github.com/acme/kernels.git",
        "kernels-minver": "0.17",
        "flashhub-kernels-minver": "0.2",
        "provenance": provenance(kernel_dirty=True),
    }
    write_builder_kernel(
        root,
        "acme/top",
        1,
        python_depends=["einops"],
        kernel_depends=[("acme/base", 2)],
        extra=extra,
        variants=["torch-cpu"],
    )


def test_flashhub_info_shows_the_builder_fields(cdn: CdnServer) -> None:
    _publish_builder_kernel(cdn.root)
    result = flashhub("info", "acme/top", "--version", "1", "--backend", "cpu")  # a cpu build
    assert result.returncode == 0, result.stderr
    lines = [line.strip() for line in result.stdout.splitlines()]
    assert re.search(r"^name: top \(version 1, id _top_cpu_[0-9a-f]{7}\)$", "\n".join(lines), re.M)
    for expected in (
        "license: apache-2.0",
        "upstream: https://github.com/acme/top.git",
        "source: https://github.com/acme/kernels.git",
        "backend: cpu, archs x86-64-v3",
        "python-depends: einops",
        "kernel-depends: acme/base v2",
        "requires: flashhub-kernels>=0.2, Hugging Face kernels API>=0.17",
        f"provenance: kernel-builder 0.17.0 at {BUILDER_COMMIT[:12]}, kernel source at "
        f"{KERNEL_COMMIT[:12]}; DIRTY: kernel source had uncommitted changes",
    ):
        assert expected in lines


def test_flashhub_info_json_holds_the_builder_fields(cdn: CdnServer) -> None:
    _publish_builder_kernel(cdn.root)
    result = flashhub("info", "acme/top", "--version", "1", "--backend", "cpu", "--json")
    assert result.returncode == 0, result.stderr
    (variant,) = json.loads(result.stdout)["variants"]
    metadata = variant["metadata"]
    assert metadata["name"] == "top" and metadata["version"] == 1
    assert metadata["license"] == "apache-2.0"
    assert metadata["upstream"] == "https://github.com/acme/top.git"
    assert metadata["source"] == "https://github.com/acme/kernels.git"
    assert metadata["backend"] == {"type": "cpu", "archs": ["x86-64-v3"]}
    assert metadata["python-depends"] == ["einops"]
    assert metadata["kernel-depends"] == [{"repo-id": "acme/base", "version": 2}]
    assert (metadata["kernels-minver"], metadata["flashhub-kernels-minver"]) == ("0.17", "0.2")
    assert metadata["provenance"]["kernel"] == {"commit": KERNEL_COMMIT, "dirty": True}
    assert metadata["dirty"] is True


@pytest.mark.usefixtures("cpu_only_torch")  # the builds are CPU builds only
def test_flashhub_info_offline_shows_the_cached_builder_fields(cdn: CdnServer) -> None:
    write_builder_kernel(cdn.root, "acme/base", 2, variants=["torch-cpu"])
    _publish_builder_kernel(cdn.root)
    fk.install_kernel("acme/top", version=1)  # cached (einops is not installed: not loaded)
    result = flashhub("info", "acme/top", "--version", "1", "--json", env={"FLASHHUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    (variant,) = json.loads(result.stdout)["variants"]
    assert variant["metadata"]["kernel-depends"] == [{"repo-id": "acme/base", "version": 2}]


def test_flashhub_info_of_an_older_tree_shows_no_builder_fields(cdn: CdnServer) -> None:
    from support.trees import write_kernel

    write_kernel(cdn.root, "acme/old", 1, ["torch-universal"])
    result = flashhub("info", "acme/old", "--version", "1", "--json")
    (variant,) = json.loads(result.stdout)["variants"]
    assert variant["metadata"] == {"python-depends": [], "kernel-depends": [], "dirty": False}
    text = flashhub("info", "acme/old", "--version", "1").stdout
    assert "name:" not in text and "backend:" not in text


# -- flashhub publish writes the builder's schema ---------------------------------------------

_HF_BACKENDS = {"cann", "cpu", "cuda", "metal", "neuron", "rocm", "tpu", "xpu"}
_HF_NAME = re.compile(r"^[a-z][-a-z0-9]*[a-z0-9]$")


def hf_schema_errors(document: dict[str, Any]) -> list[str]:
    """What Hugging Face's kernels client (its ``Metadata`` type) refuses in a
    metadata.json: its required fields, their types, the name's form, the backends and
    digest algorithms it knows."""
    errors = []

    def need(key: str, kind: type | tuple[type, ...]) -> None:
        if not isinstance(document.get(key), kind) or isinstance(document.get(key), bool):
            errors.append(f"{key}: {document.get(key)!r}")

    need("name", str)
    need("id", str)
    need("version", int)
    need("license", str)
    need("python-depends", list)
    if not _HF_NAME.match(str(document.get("name"))):
        errors.append(f"name {document.get('name')!r} is not a kernel name")
    if not all(isinstance(d, str) for d in document.get("python-depends", [])):
        errors.append("python-depends holds a non-string")
    for dep in document.get("kernel-depends", []):
        if set(dep) != {"repo-id", "version"} or not isinstance(dep["version"], int):
            errors.append(f"kernel-depends entry {dep!r}")
    backend = document.get("backend")
    if not isinstance(backend, dict) or backend.get("type") not in _HF_BACKENDS:
        errors.append(f"backend {backend!r}")
    elif "archs" in backend and not isinstance(backend["archs"], list):
        errors.append("backend archs")
    digest = document.get("digest")
    if not isinstance(digest, dict) or digest.get("algorithm") not in ("sha256", "sha512"):
        errors.append(f"digest {digest!r}")
    elif not all(isinstance(v, str) for v in digest.get("files", {}).values()):
        errors.append("digest files")
    for key in ("upstream", "source"):
        if key in document and not isinstance(document[key], str):
            errors.append(key)
    return errors


def _published(out: Path, variant: str, repo: str = REPO, version: int = 1) -> dict[str, Any]:
    path = out / "kernels" / repo / f"v{version}" / "build" / variant / "metadata.json"
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def test_publish_writes_the_builders_schema_derived_from_the_build(
    kernel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=3, out=out)
    cpu, universal = _published(out, CPU, version=3), _published(out, UNIVERSAL, version=3)
    for document in (cpu, universal):
        assert hf_schema_errors(document) == []
        assert document["name"] == "my-kern"
        assert document["version"] == 3
        assert document["license"] == "unknown"
        assert document["python-depends"] == [] and document["kernel-depends"] == []
        assert document["digest"]["algorithm"] == "sha256"
        assert list(document["sizes"]) == list(document["digest"]["files"])
    assert cpu["backend"] == {"type": "cpu"} and universal["backend"] == {"type": "cpu"}
    assert cpu["id"] == SO_NAME.partition(".")[0]  # the op namespace of its native library
    assert re.fullmatch(rf"_{PY_PKG}_cpu_[0-9a-f]{{7}}", universal["id"])


def test_publish_takes_the_license_and_name_of_the_kernels_build_toml(
    kernel: Path, tmp_path: Path
) -> None:
    (kernel / "build.toml").write_text(
        '[general]\nname = "my-kernel"\nlicense = "Apache-2.0"\n'
        'upstream = "https://github.com/acme/up.git"\n'
    )
    (kernel / "pyproject.toml").write_text('[project]\nname = "x"\nlicense = "MIT"\n')
    publish(kernel / "build", repo_id=REPO, version=1, out=tmp_path / "cdn")
    document = _published(tmp_path / "cdn", UNIVERSAL)
    assert (document["name"], document["license"]) == ("my-kernel", "Apache-2.0")
    assert document["upstream"] == "https://github.com/acme/up.git"
    assert hf_schema_errors(document) == []


def test_publish_falls_back_on_the_license_of_pyproject(kernel: Path, tmp_path: Path) -> None:
    (kernel / "pyproject.toml").write_text('[project]\nname = "x"\nlicense = {text = "MIT"}\n')
    publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")
    assert _published(tmp_path / "cdn", UNIVERSAL)["license"] == "MIT"


def test_publish_refuses_a_build_toml_that_is_not_toml(kernel: Path, tmp_path: Path) -> None:
    (kernel / "build.toml").write_text("[general\n")
    with pytest.raises(PublishError, match=r"build.toml is not valid TOML"):
        publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")


def test_publish_keeps_the_builders_own_fields(cdn: CdnServer, tmp_path: Path) -> None:
    """A tree the builder wrote, published again: its fields and digests stay as they are."""
    written = write_builder_kernel(
        tmp_path / "built", "acme/top", 1, python_depends=["einops"], variants=["torch-cpu"]
    )
    build = tmp_path / "built" / "kernels" / "acme" / "top" / "v1" / "build"
    (build.parent / "variants.json").unlink()
    publish(build, repo_id="acme/top", version=1, out=cdn.root)
    document = _published(cdn.root, "torch-cpu", "acme/top")
    builder = written["torch-cpu"]
    assert {k: v for k, v in document.items() if k != "sizes"} == builder
    assert hf_schema_errors(document) == []


def test_publish_refuses_malformed_builder_fields(kernel: Path, tmp_path: Path) -> None:
    (kernel / "build" / UNIVERSAL / "metadata.json").write_text('{"backend": "cuda"}')
    with pytest.raises(PublishError, match='"backend" must be an object'):
        publish(kernel, repo_id=REPO, version=1, out=tmp_path / "cdn")


def test_a_published_tree_in_the_builders_schema_loads(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    out = tmp_path / "cdn"
    publish(make_kernel(tmp_path / "kernel", (UNIVERSAL,)), repo_id=REPO, version=1, out=out)
    fk.configure(cdn_url=out.as_uri())
    loaded = fk.get_kernel(REPO, version=1)
    assert torch.equal(loaded.double(torch.ones(2)), torch.full((2,), 2.0))
