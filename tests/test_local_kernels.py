"""LOCAL_KERNELS: repo ids served from local kernel directories, with no request to the CDN."""

from __future__ import annotations

import importlib
import os
import pickle
from pathlib import Path

import pytest
import torch
from torch import nn

import flashhub_kernels as fk
from conftest import run_python
from flashhub_kernels._loading.local import parse_local_kernels
from flashhub_kernels.errors import (
    KernelNotFoundError,
    LocalKernelNotFoundError,
    ManifestError,
    NoCompatibleVariantError,
)
from flashhub_kernels.layers import LayerRepository, kernelize, use_kernel_mapping
from support.cdn_server import CdnServer
from support.machines import CPU_BUILD, CUDA_BUILD, CUDA_MACHINE, run_as
from support.preloaded import run_code
from support.trees import kernel_files, local_variant, write_kernel

REPO = "acme/tensor-tricks"
OTHER_VARIANTS = ["torch-universal", "torch212-cxx11-cu126-x86_64-linux"]

LAYERS_PY = b"""import torch
from torch import nn


class Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2
"""


def write_build(root: Path, py_pkg: str, variants: list[str]) -> Path:
    """A kernel repo ``root``: ``build/<variant>/<py_pkg>/``, each marked ``local:<variant>``."""
    for variant in variants:
        for relpath, data in kernel_files(py_pkg, f"local:{variant}").items():
            path = root / "build" / variant / relpath
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    return root


def test_parse_local_kernels() -> None:
    parsed = parse_local_kernels(" acme/a=/x/a : :acme/b=rel/b=c:acme/a=~/a2:")
    assert parsed == {"acme/a": Path("~/a2").expanduser(), "acme/b": Path("rel/b=c")}
    assert parse_local_kernels("") == {}


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        ("acme/tensor-tricks", "is not 'org/pkg=/path/to/kernel'"),
        ("acme/a=/x:acme/b=", "is not 'org/pkg=/path/to/kernel'"),
        ("acme/a,acme/b=/x", "invalid repo id"),
        ("=/x", "invalid repo id"),
    ],
)
def test_a_malformed_value_is_a_value_error_naming_the_variable(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, value: str, detail: str
) -> None:
    monkeypatch.setenv("LOCAL_KERNELS", value)
    with pytest.raises(ValueError, match="LOCAL_KERNELS entry") as info:
        fk.get_kernel(REPO, version=1)
    assert detail in str(info.value)
    assert cdn.requests == []


def test_get_kernel_and_the_import_hook_load_the_local_build(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo_dir = write_build(tmp_path / "dev" / "tensor-tricks", "tensor_tricks", OTHER_VARIANTS)
    write_build(repo_dir, "tensor_tricks", [local_variant()])
    write_kernel(cdn.root, "acme/other", 1)
    monkeypatch.setenv("LOCAL_KERNELS", f"acme/unused=/nowhere:{REPO}={repo_dir}")

    k = fk.get_kernel(REPO, version=1)
    import flashhub.acme.tensor_tricks.v1 as by_statement

    assert by_statement is k and k.__name__ == "flashhub.acme.tensor_tricks.v1"
    assert k.marker() == f"local:{local_variant()}"
    assert k.helpers.shout() == k.marker().upper()
    package_dir = repo_dir.resolve() / "build" / local_variant() / "tensor_tricks"
    assert Path(k.__file__) == package_dir / "__init__.py"
    v2 = importlib.import_module("flashhub.acme.tensor_tricks.v2")  # every version maps
    assert v2 is not k and v2.marker() == k.marker()
    assert fk.has_kernel(REPO) and fk.has_kernel(REPO, version=7)
    assert cdn.requests == []

    other = fk.get_kernel("acme/other", version=1)  # repos not mapped still use the CDN
    assert other.marker().startswith("acme/other@v1")
    assert cdn.gets() and all("/acme/other/" in p for p in cdn.gets())

    loaded = {r.module.__name__: r for r in fk.get_loaded_kernels()}
    record = loaded["flashhub.acme.tensor_tricks.v1"]
    assert (record.repo_id, record.version, record.variant) == (REPO, 1, local_variant())
    assert record.path == package_dir and record.module is k


@pytest.mark.parametrize("form", ["build", "variant", "package"])
def test_the_path_may_be_a_build_variant_or_package_dir(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str
) -> None:
    build = write_build(tmp_path / "dev", "under_score", [local_variant()]) / "build"
    path = {
        "build": build,
        "variant": build / local_variant(),
        "package": build / local_variant() / "under_score",
    }[form]
    # The module name's segment may stand for either spelling: the mapped one is used.
    monkeypatch.setenv("LOCAL_KERNELS", f"acme/under_score={path}")
    import flashhub.acme.under_score.v3 as k

    assert k.marker() == f"local:{local_variant()}"
    record = fk.get_loaded_kernels()[-1]
    assert record.repo_id == "acme/under_score" and record.version == 3
    assert record.variant == (local_variant() if form == "build" else None)
    assert cdn.requests == []


def test_a_missing_path_fails_when_that_repo_loads(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, "acme/other", 1)
    missing = tmp_path / "no-such-kernel"
    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={missing}")
    assert fk.get_kernel("acme/other", version=1).marker().startswith("acme/other@v1")
    cdn.clear_log()

    # A FileNotFoundError, as Hugging Face kernels raises, from the hook and get_kernel.
    with pytest.raises(LocalKernelNotFoundError, match="LOCAL_KERNELS maps") as info:
        import flashhub.acme.tensor_tricks.v1  # noqa: F401
    assert isinstance(info.value, FileNotFoundError)
    assert f"Cannot find a build variant for this system in {missing}" in str(info.value)
    assert "does not exist" in str(info.value)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fk.get_kernel(REPO, version=1)
    assert not fk.has_kernel(REPO, version=1)

    missing.mkdir()  # exists, but holds no kernel
    with pytest.raises(KernelNotFoundError, match="no kernel package found"):
        fk.get_kernel(REPO, version=1)
    assert cdn.requests == []


def test_layer_repository_uses_the_local_build(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "dev" / "build" / "torch-universal" / "doubler"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import layers\n")
    (package / "layers.py").write_bytes(LAYERS_PY)
    monkeypatch.setenv("LOCAL_KERNELS", f"acme/doubler={tmp_path / 'dev'}")

    @fk.use_kernel_forward_from_hub("Double")
    class Identity(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    model = nn.Sequential(Identity())
    repo = LayerRepository("acme/doubler", "Double", version=1)
    with use_kernel_mapping({"Double": {"cpu": repo}}, inherit_mapping=False):
        kernelize(model, device="cpu")
    assert torch.equal(model(torch.ones(2)), torch.full((2,), 2.0))
    assert repo.load().__module__ == "flashhub.acme.doubler.v1.layers"
    assert cdn.requests == []


def test_a_pickle_from_a_local_kernel_needs_the_kernel_loaded_in_the_new_process(
    tmp_path: Path,
) -> None:
    repo = write_build(tmp_path / "my-kernel", "my_kernel", [local_variant()])
    kernel = fk.get_local_kernel(repo)
    pickled = tmp_path / "marker.pickle"
    pickled.write_bytes(pickle.dumps(kernel.marker))  # a function pickles by module name
    unpickle = f"import pickle; print(pickle.loads(open({str(pickled)!r}, 'rb').read())())"

    caught = (
        "import pickle\n"
        "try:\n"
        f"    pickle.loads(open({str(pickled)!r}, 'rb').read())\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name)\n"
        "    print(exc)\n"
    )
    name, message = run_python(caught).split("\n", 1)
    assert name == kernel.__name__
    assert "get_local_kernel(path)" in message and "LOCAL_KERNELS" in message
    failed = run_code(unpickle, env=dict(os.environ))
    assert failed.returncode == 1 and "AttributeError" not in failed.stderr

    # What the hint says works: load it first, from the same path.
    loaded_first = f"import flashhub_kernels as fk; fk.get_local_kernel({str(repo)!r}); {unpickle}"
    assert run_python(loaded_first).strip() == f"local:{local_variant()}"


def test_a_repo_in_the_org_local_kernels_are_named_under_is_refused(cdn: CdnServer) -> None:
    """``flashhub._local`` holds get_local_kernel()'s modules, so no CDN kernel could be
    imported from an org named ``_local``: its repo id is refused, before any request."""
    write_kernel(cdn.root, "_local/tensor-tricks", 1)
    with pytest.raises(ValueError, match="org '_local' is reserved; use another"):
        fk.get_kernel("_local/tensor-tricks", version=1)
    assert cdn.requests == []


@pytest.mark.parametrize("name", ["no-such-kernel", "k" * 300], ids=["missing", "name too long"])
def test_get_local_kernel_of_a_path_that_does_not_exist_says_so(tmp_path: Path, name: str) -> None:
    # A FileNotFoundError, as 0.1.2 and Hugging Face kernels raise: their callers catch it
    # (a name too long to look up was a bare OSError).
    missing = tmp_path / name
    code = f"""
from flashhub_kernels import get_local_kernel
try:
    get_local_kernel({str(missing)!r})
except FileNotFoundError as e:
    print(type(e).__name__, e)
"""
    caught = run_python(code)
    assert caught.startswith(f"LocalKernelNotFoundError {missing} does not exist")
    assert "hint: pass the directory of a kernel repo" in caught


def test_a_local_repo_whose_builds_do_not_fit_says_so_with_each_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    only_cuda = "torch212-cxx11-cu126-x86_64-linux"  # an older torch's build: never this one
    repo = write_build(tmp_path / "dev", "tensor_tricks", [only_cuda])
    with pytest.raises(NoCompatibleVariantError) as info:
        fk.get_local_kernel(repo)
    message = str(info.value)
    assert f"no build in {repo / 'build'} fits this system" in message
    assert f"- {only_cuda}: " in message and "no kernel package found" not in message
    assert f"build the kernel for this system ({local_variant()}" in message

    monkeypatch.setenv("LOCAL_KERNELS", f"{REPO}={repo}")
    with pytest.raises(NoCompatibleVariantError, match=f"LOCAL_KERNELS maps {REPO} to {repo}"):
        fk.get_kernel(REPO, version=1)


def test_a_local_metadata_json_nested_too_deeply_is_an_import_error_naming_it(
    tmp_path: Path,
) -> None:
    repo = write_build(tmp_path / "dev", "tensor_tricks", [local_variant()])
    metadata = repo / "build" / local_variant() / "metadata.json"
    metadata.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ManifestError) as info:
        fk.get_local_kernel(repo)
    assert isinstance(info.value, ImportError)
    assert f"{metadata} is nested too deeply" in info.value.message


@pytest.mark.parametrize("form", ["repo", "variant"])
def test_get_local_kernel_takes_the_package_name_older_releases_passed(
    tmp_path: Path, form: str
) -> None:
    repo = write_build(tmp_path / "dev", "first", [local_variant()])
    write_build(repo, "second", [local_variant()])  # a variant holding two packages
    path = repo if form == "repo" else repo / "build" / local_variant()
    with pytest.raises(KernelNotFoundError) as ambiguous:
        fk.get_local_kernel(path)  # which of the two is not for it to guess
    assert "several kernel packages ('first', 'second')" in ambiguous.value.message
    assert "package_name='first'" in (ambiguous.value.hint or "")

    assert fk.get_local_kernel(path, "second").__file__ == str(
        repo / "build" / local_variant() / "second" / "__init__.py"
    )
    with pytest.raises(KernelNotFoundError) as info:
        fk.get_local_kernel(path, "third")
    assert "no kernel package 'third' found" in info.value.message
    assert "build/<variant>/third/__init__.py" in (info.value.hint or "")


@pytest.mark.parametrize("form", ["repo", "variant"])
def test_of_several_packages_get_local_kernel_loads_the_one_metadata_names(
    tmp_path: Path, form: str
) -> None:
    repo = write_build(tmp_path / "dev", "my_kernel", [local_variant()])
    write_build(repo, "a_helper", [local_variant()])  # sorts first: not the one named
    variant_dir = repo / "build" / local_variant()
    (variant_dir / "metadata.json").write_text('{"name": "my-kernel", "version": 1}')
    path = repo if form == "repo" else variant_dir
    loaded = run_python(  # as a user of Hugging Face kernels writes it
        "from pathlib import Path\nfrom flashhub_kernels import get_local_kernel\n"
        f"print(get_local_kernel(Path({str(path)!r})).__file__)"
    )
    assert loaded.strip() == str(variant_dir / "my_kernel" / "__init__.py")

    (variant_dir / "metadata.json").write_text('{"name": "neither", "version": 1}')
    with pytest.raises(KernelNotFoundError) as info:
        fk.get_local_kernel(path)
    assert "several kernel packages ('a_helper', 'my_kernel')" in info.value.message
    assert "no metadata.json there names one of them" in info.value.message
    assert fk.get_local_kernel(path, package_name="a_helper").__file__ == str(
        variant_dir / "a_helper" / "__init__.py"
    )


def test_get_local_kernel_loads_from_a_path_whose_bytes_are_not_utf8(tmp_path: Path) -> None:
    # A directory named on a Latin-1 system (b"d\xe9v"): Python holds the byte as a lone
    # surrogate, which the module's name, derived from the path, once failed to encode.
    repo = write_build(tmp_path / os.fsdecode(b"d\xe9v"), "tensor_tricks", [local_variant()])
    kernel = fk.get_local_kernel(repo)
    assert kernel.marker() == f"local:{local_variant()}"
    assert os.fsencode(kernel.__file__).startswith(os.fsencode(repo))


def test_a_backend_passed_second_as_0_1_2_took_it_forces_that_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0.1.2's get_local_kernel(repo_path, backend=None): the second argument was the backend.
    run_as(monkeypatch, CUDA_MACHINE)
    repo = write_build(tmp_path / "dev", "tricks", [CUDA_BUILD, CPU_BUILD])
    assert fk.get_local_kernel(repo).marker() == f"local:{CUDA_BUILD}"
    with pytest.warns(DeprecationWarning, match="'cpu' is read as backend='cpu'"):
        assert fk.get_local_kernel(repo, "cpu").marker() == f"local:{CPU_BUILD}"
    with pytest.raises(ValueError, match="rocm"), pytest.warns(DeprecationWarning):
        fk.get_local_kernel(repo, "rocm")  # a backend this torch cannot run, as with backend=
