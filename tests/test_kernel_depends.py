"""What a kernel's ``metadata.json`` asks of a load, for kernels laid out as the kernel
builder writes them and served by the loopback CDN: ``python-depends`` installed,
a new enough client, a warning for a dirty build, and ``kernel-depends`` loaded first
and reached with ``get_kernel_dep``, in plain loads and in locked ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flashhub_kernels as fk
import flashhub_kernels._constants as constants
from conftest import import_in_child, run_python
from flashhub_kernels._cache.layout import Cache
from flashhub_kernels._cache.receipt import read_receipt
from flashhub_kernels._config import get_config
from flashhub_kernels._constants import RECEIPT_NAME
from flashhub_kernels._lockfiles.format import read_lockfile
from flashhub_kernels._lockfiles.pinning import lock_project
from flashhub_kernels._variants.system import SystemInfo
from flashhub_kernels.errors import (
    ClientTooOldError,
    DirtyBuildWarning,
    KernelDependencyError,
    KernelDependencyLookupError,
    KernelImportError,
    LockedContentChangedWarning,
    LockfileError,
    LockMismatchError,
    ManifestError,
    MissingPythonDependencyError,
    NoCompatibleVariantError,
)
from support.builder import (
    VARIANTS,
    loaded_variant,
    provenance,
    ran,
    ran_label,
    write_builder_kernel,
    write_dependency_chain,
)
from support.cdn_server import CdnServer
from support.cli_runner import flashhub
from support.machines import run_as
from support.projects import write_project
from support.trees import b64sha256

TOP, BASE, CHAIN = "acme/top", "acme/base", "acme/chain"
H100_BUILD = "torch213-cxx11-cu126-x86_64-linux"  # its metadata.json lists other archs
LOADED = loaded_variant()  # of the builder's VARIANTS, the one this machine loads
USES_BASE = 'from flashhub_kernels import get_kernel_dep\n\nbase = get_kernel_dep("acme/base")\n'


pytestmark = pytest.mark.usefixtures("ran_dir")  # each test's kernels record that they ran


def _loaded_modules() -> set[str]:
    """The kernel modules imported (not the empty packages above them)."""
    return {
        name for name in sys.modules if name.startswith("flashhub.acme.") and name.count(".") == 3
    }


# -- python-depends ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("depends", "package", "pip_line"),
    [
        (["nvidia-cutlass-dsl"], "nvidia-cutlass-dsl", "pip install nvidia-cutlass-dsl"),
        (["tvm-ffi"], "apache-tvm-ffi", "pip install apache-tvm-ffi"),
        (
            ["filelock", "flashhub-no-such-package>=1.0"],
            "flashhub-no-such-package>=1.0",
            "pip install 'flashhub-no-such-package>=1.0'",
        ),
    ],
)
def test_a_missing_python_dependency_fails_the_import_before_the_kernel_runs(
    cdn: CdnServer, ran_dir: Path, depends: list[str], package: str, pip_line: str
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, python_depends=depends)
    with pytest.raises(MissingPythonDependencyError) as info:
        fk.get_kernel(TOP, version=1)
    assert isinstance(info.value, ImportError)
    assert info.value.package == package
    assert f"requires the Python package {package!r}" in str(info.value)
    assert f"acme/top v1 (variant {LOADED})" in str(info.value)
    assert pip_line in str(info.value)
    assert ran(ran_dir) == []
    assert _loaded_modules() == set()


def test_a_missing_python_dependency_is_an_import_error_in_a_fresh_process(
    cdn: CdnServer, ran_dir: Path
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, python_depends=["einops-flashhub-missing"])
    error, printed = import_in_child("flashhub.acme.top.v1")
    assert issubclass(error, MissingPythonDependencyError)
    assert "pip install einops-flashhub-missing" in printed
    assert ran(ran_dir) == []
    # The entry was verified and stays cached: installing the package is all it takes.
    error, printed = import_in_child("flashhub.acme.top.v1", env={"FLASHHUB_OFFLINE": "1"})
    assert issubclass(error, MissingPythonDependencyError)


def test_installed_python_dependencies_let_the_kernel_load(cdn: CdnServer, ran_dir: Path) -> None:
    # Installed under other import names than their pip names (filelock, packaging), or
    # providing no module at all (onednn).
    write_builder_kernel(cdn.root, TOP, 1, python_depends=["filelock", "packaging>=20", "onednn"])
    assert fk.get_kernel(TOP, version=1).__name__ == "flashhub.acme.top.v1"
    assert ran(ran_dir) == [ran_label(TOP, 1)]


# -- minimum client versions -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "wanted", "message"),
    [
        ("flashhub-kernels-minver", "99.1", "requires flashhub-kernels>=99.1, but version 0.2.0"),
        ("kernels-minver", "0.19.2", "requires kernels>=0.19.2 .*implements kernels 0.19.1"),
        ("kernels-minver", "0.20", "requires kernels>=0.20 .*implements kernels 0.19.1"),
        ("kernels-minver", "1", "flashhub-kernels 0.2.0 implements kernels 0.19.1"),
    ],
)
def test_a_kernel_needing_a_newer_client_is_refused_before_it_runs(
    cdn: CdnServer, ran_dir: Path, key: str, wanted: str, message: str
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, extra={key: wanted})
    with pytest.raises(ClientTooOldError, match=message) as info:
        fk.get_kernel(TOP, version=1)
    assert isinstance(info.value, KernelImportError)
    assert "upgrade flashhub-kernels: pip install --upgrade flashhub-kernels" in str(info.value)
    assert ran(ran_dir) == []


def test_an_unmet_kernels_minver_fails_the_import_statement_of_a_fresh_process(
    cdn: CdnServer, ran_dir: Path
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, extra={"kernels-minver": "0.99.0"})
    error, printed = import_in_child("flashhub.acme.top.v1")
    assert issubclass(error, ClientTooOldError) and issubclass(error, ImportError)
    assert "requires kernels>=0.99.0" in printed and "implements kernels 0.19.1" in printed
    assert ran(ran_dir) == []


@pytest.mark.parametrize(
    "extra",
    [
        {"kernels-minver": "0.17"},
        {"kernels-minver": "0.19.1"},
        {"kernels-minver": "0.19.1.0"},
        {"flashhub-kernels-minver": "0.2"},
        {"flashhub-kernels-minver": "0.1.2", "kernels-minver": "0.10.0"},
    ],
)
def test_a_kernel_this_client_is_new_enough_for_loads(
    cdn: CdnServer, ran_dir: Path, extra: dict[str, str]
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, extra=extra)
    fk.get_kernel(TOP, version=1)
    assert ran(ran_dir) == [ran_label(TOP, 1)]


@pytest.mark.parametrize(
    ("client", "loads"),
    [
        ("0.3.0.dev1", True),  # a development version counts as the release it leads to
        ("0.3.0rc2", True),
        ("0.3.0+local.4", True),
        ("0.3", True),
        ("0.2.9", False),
        ("0.2.9.post3", False),
        ("not a version", True),  # cannot be compared: never fails the load
        ("0.3.0-dirty", True),
    ],
)
def test_the_client_version_is_compared_by_its_release(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch, client: str, loads: bool
) -> None:
    monkeypatch.setattr(constants, "__version__", client)
    write_builder_kernel(cdn.root, TOP, 1, extra={"flashhub-kernels-minver": "0.3.0"})
    if loads:
        fk.get_kernel(TOP, version=1)
        assert ran(ran_dir) == [ran_label(TOP, 1)]
        return
    with pytest.raises(ClientTooOldError) as info:
        fk.get_kernel(TOP, version=1)
    assert f"requires flashhub-kernels>=0.3.0, but version {client} is installed" in str(info.value)
    assert ran(ran_dir) == []


# -- provenance -------------------------------------------------------------------------------


_RECORD_WARNINGS = textwrap.dedent(
    """
    import json, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import flashhub.acme.top.v1
    print(json.dumps([
        [w.category.__name__, str(w.message), w.filename, w.lineno] for w in caught
        if w.category.__name__ == "DirtyBuildWarning"
    ]))
    """
)


@pytest.mark.parametrize(
    ("dirty", "sources"),
    [
        ({"kernel_dirty": True}, "kernel source had"),
        ({"builder_dirty": True}, "kernel-builder had"),
        ({"kernel_dirty": True, "builder_dirty": True}, "kernel source and kernel-builder had"),
    ],
)
def test_a_dirty_build_loads_with_a_warning_naming_the_kernel(
    cdn: CdnServer, ran_dir: Path, dirty: dict[str, bool], sources: str
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, extra={"provenance": provenance(**dirty)})
    for _load in ("cold", "warm"):
        (warning,) = json.loads(run_python(_RECORD_WARNINGS).splitlines()[-1])
        category, message, filename, lineno = warning
        assert category == "DirtyBuildWarning"
        assert f"acme/top v1 (variant {LOADED}) was built from a dirty git tree" in message
        assert sources in message and "may not be reproducible" in message
        assert (filename, lineno) == ("<string>", 5)  # the import statement
    assert ran(ran_dir) == [ran_label(TOP, 1)] * 2


def test_a_dirty_build_loads_where_warnings_are_errors(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, TOP, 1, extra={"provenance": provenance(kernel_dirty=True)})
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import flashhub.acme.top.v1; print('loaded')"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "loaded"
    assert "DirtyBuildWarning" in result.stderr  # logged instead
    with pytest.warns(DirtyBuildWarning):  # and in this process, as a warning
        fk.get_kernel(TOP, version=1, backend="cpu")


def test_a_clean_build_loads_without_a_warning(cdn: CdnServer) -> None:
    write_builder_kernel(cdn.root, TOP, 1)
    assert json.loads(run_python(_RECORD_WARNINGS).splitlines()[-1]) == []


def test_an_entry_cached_before_its_requirements_were_recorded_is_checked_all_the_same(
    cdn: CdnServer, ran_dir: Path
) -> None:
    """A receipt written by an older client lacks them: the entry's metadata.json says."""
    write_builder_kernel(cdn.root, TOP, 1, extra={"provenance": provenance(kernel_dirty=True)})
    run_python("import flashhub.acme.top.v1")
    entry = get_config().cache_dir / "kernels" / TOP / "v1" / LOADED
    receipt = json.loads((entry / RECEIPT_NAME).read_text())
    assert receipt["requires"]["provenance"]["kernel"]["dirty"] is True
    del receipt["requires"]
    (entry / RECEIPT_NAME).write_text(json.dumps(receipt))
    cdn.clear_log()
    (warning,) = json.loads(run_python(_RECORD_WARNINGS).splitlines()[-1])
    assert f"acme/top v1 (variant {LOADED}) was built from a dirty git tree" in warning[1]
    assert cdn.requests == []


# -- kernel-depends ---------------------------------------------------------------------------


def _publish_top_and_base(root: Path) -> None:
    write_builder_kernel(root, BASE, 2)
    body = USES_BASE + "\n\ndef quadruple(x):\n    return base._ops.double(base._ops.double(x))\n"
    write_builder_kernel(root, TOP, 1, body=body, kernel_depends=[(BASE, 2)])


def test_a_kernel_loads_the_kernels_it_depends_on_first(cdn: CdnServer, ran_dir: Path) -> None:
    _publish_top_and_base(cdn.root)
    top = fk.get_kernel(TOP, version=1)
    import flashhub.acme.base.v2 as base

    assert top.base is base  # get_kernel_dep gave the dependency's own module
    assert top.quadruple(3) == 12
    assert ran(ran_dir) == [ran_label(BASE, 2), ran_label(TOP, 1)]
    loaded = [(k.repo_id, k.version, k.variant) for k in fk.get_loaded_kernels()]
    assert loaded == [(BASE, 2, LOADED), (TOP, 1, LOADED)]
    for repo_id, version in ((TOP, 1), (BASE, 2)):
        assert (get_config().cache_dir / "kernels" / repo_id / f"v{version}" / LOADED).is_dir()


def test_a_kernel_and_its_dependencies_load_warm_with_zero_requests(
    cdn: CdnServer, ran_dir: Path
) -> None:
    _publish_top_and_base(cdn.root)
    code = "import flashhub.acme.top.v1 as k; print(k.quadruple(5), k.base.__name__)"
    assert run_python(code).split() == ["20", "flashhub.acme.base.v2"]
    cdn.clear_log()
    assert run_python(code).split() == ["20", "flashhub.acme.base.v2"]
    assert cdn.requests == []


def test_each_file_of_a_shared_dependency_is_downloaded_once(cdn: CdnServer) -> None:
    """A diamond: top needs left and right, which both need base."""
    write_builder_kernel(cdn.root, BASE, 2)
    for side in ("left", "right"):
        write_builder_kernel(cdn.root, f"acme/{side}", 1, kernel_depends=[(BASE, 2)])
    depends = [("acme/left", 1), ("acme/right", 1)]
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=depends)
    fk.get_kernel(TOP, version=1)
    base_files = [p for p in cdn.gets(missed_guesses=False) if "/acme/base/v2/build/" in p]
    assert len(base_files) == len(set(base_files)) == 3  # metadata.json, __init__.py, _ops.py


def test_get_kernel_dep_outside_a_kernel_import_says_where_it_works() -> None:
    with pytest.raises(KernelDependencyLookupError, match="works only while a kernel") as info:
        fk.get_kernel_dep(BASE)
    assert isinstance(info.value, RuntimeError)


def test_get_kernel_dep_of_an_undeclared_kernel_fails_the_import(
    cdn: CdnServer, ran_dir: Path
) -> None:
    write_builder_kernel(cdn.root, BASE, 2)
    body = 'from flashhub_kernels import get_kernel_dep\n\nget_kernel_dep("acme/other")\n'
    write_builder_kernel(cdn.root, TOP, 1, body=body, kernel_depends=[(BASE, 2)])
    with pytest.raises(KernelDependencyLookupError, match=r"kernel-depends lists acme/base\)"):
        fk.get_kernel(TOP, version=1)
    assert "flashhub.acme.top.v1" not in sys.modules


def test_a_dependency_cycle_is_refused_with_the_chain(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, "acme/a", 1, kernel_depends=[("acme/b", 2)])
    write_builder_kernel(cdn.root, "acme/b", 2, kernel_depends=[("acme/a", 1)])
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[("acme/a", 1)])
    with pytest.raises(KernelDependencyError) as info:
        fk.get_kernel(TOP, version=1)
    assert "cycle: acme/top v1 -> acme/a v1 -> acme/b v2 -> acme/a v1" in str(info.value)
    assert isinstance(info.value, ImportError)
    assert ran(ran_dir) == []
    assert _loaded_modules() == set()


def test_a_kernel_depending_on_itself_is_refused(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[(TOP, 1)])
    with pytest.raises(KernelDependencyError, match=r"cycle: acme/top v1 -> acme/top v1\n"):
        fk.get_kernel(TOP, version=1)


def test_a_dependency_chain_past_64_levels_fails_the_import_before_any_kernel_runs(
    cdn: CdnServer, ran_dir: Path
) -> None:
    write_dependency_chain(cdn.root, CHAIN, 66)  # under v1, v66 is 65 levels deep

    raised, printed = import_in_child("flashhub.acme.chain.v1")

    assert issubclass(raised, KernelDependencyError) and issubclass(raised, ImportError)
    assert "more than 64 levels deep: acme/chain v1 -> acme/chain v2 -> acme/chain v3" in printed
    assert "acme/chain v65 -> acme/chain v66\n" in printed
    assert ran(ran_dir) == []
    fk.get_kernel(CHAIN, version=2)  # under v2, v66 is 64 levels deep: the most there may be
    assert ran(ran_dir) == [ran_label(CHAIN, v) for v in range(66, 1, -1)]


def test_a_dependency_pinned_to_a_git_revision_is_refused_before_any_file_is_fetched(
    cdn: CdnServer,
) -> None:
    revision = {"kernel-depends": [{"repo-id": BASE, "revision": "0123abc"}]}
    write_builder_kernel(cdn.root, TOP, 1, extra=revision)
    with pytest.raises(ManifestError, match="numbered versions only") as info:
        fk.get_kernel(TOP, version=1)
    assert "revision '0123abc'" in str(info.value)
    assert [p for p in cdn.gets() if not p.endswith(".json")] == []


def test_a_missing_dependency_fails_the_import_of_the_kernel(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[(BASE, 7)])
    with pytest.raises(fk.errors.KernelNotFoundError, match="acme/base@v7"):
        fk.get_kernel(TOP, version=1)
    assert ran(ran_dir) == []


def test_check_arch_false_holds_for_the_kernels_a_kernel_depends_on(
    cdn: CdnServer, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ampere_only = {"backend": {"type": "cuda", "archs": ["8.0"]}}
    write_builder_kernel(cdn.root, BASE, 2, variants=[H100_BUILD], extra=ampere_only)
    write_builder_kernel(cdn.root, TOP, 1, body=USES_BASE, kernel_depends=[(BASE, 2)])
    run_as(monkeypatch, SystemInfo((2, 13), True, "cuda", "cu126", "x86_64", "linux", (9, 0)))
    with pytest.raises(NoCompatibleVariantError, match=r"this device is 9\.0"):
        fk.get_kernel(TOP, version=1)
    assert ran(ran_dir) == []

    top = fk.get_kernel(TOP, version=1, check_arch=False)
    assert ran(ran_dir) == [ran_label(BASE, 2), ran_label(TOP, 1)]
    (base,) = [k for k in fk.get_loaded_kernels() if k.repo_id == BASE]
    assert top.base is base.module and base.variant == H100_BUILD


# -- locks ------------------------------------------------------------------------------------


def _lock(cdn: CdnServer, tmp_path: Path) -> Path:
    _publish_top_and_base(cdn.root)
    project = write_project(tmp_path / "project", {TOP: ">=1"})
    result = flashhub("lock", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "acme/top >=1: v1 (2 variants, depends on acme/base@v2)" in result.stdout
    assert "acme/base ==2: v2 (2 variants)" in result.stdout
    return project


def test_the_lock_lists_a_kernel_and_the_kernels_it_depends_on(
    cdn: CdnServer, tmp_path: Path
) -> None:
    project = _lock(cdn, tmp_path)
    document = json.loads((project / "flashhub.lock").read_text())
    (top,) = document["kernels"]
    (base,) = document["dependencies"]
    assert (top["repo_id"], top["version"]) == (TOP, 1)
    assert top["kernel_depends"] == [{"repo_id": BASE, "version": 2}]
    assert (base["repo_id"], base["version"], base["specifier"]) == (BASE, 2, "==2")
    assert set(base["variants"]) == set(VARIANTS)
    lock = read_lockfile(project / "flashhub.lock")
    assert [(k.repo_id, k.version) for k in lock.kernels[TOP].tree()] == [(BASE, 2), (TOP, 1)]
    assert lock.to_bytes() == (project / "flashhub.lock").read_bytes()
    again = flashhub("lock", cwd=project)
    assert again.returncode == 0 and lock.to_bytes() == (project / "flashhub.lock").read_bytes()


def test_a_locked_kernel_and_its_dependencies_download_and_load_offline(
    cdn: CdnServer, tmp_path: Path, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _lock(cdn, tmp_path)
    result = flashhub("download", "--json", cwd=project)
    assert result.returncode == 0, result.stderr
    statuses = {(r["repo_id"], r["status"]) for r in json.loads(result.stdout)["results"]}
    assert statuses == {(TOP, "downloaded"), (BASE, "downloaded")}
    monkeypatch.chdir(project)
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    cdn.clear_log()
    code = (
        "from flashhub_kernels import load_kernel\n"
        "k = load_kernel('acme/top')\n"
        "print(k.quadruple(2), k.base.__name__)"
    )
    assert run_python(code, cwd=project).split() == ["8", "flashhub.acme.base.v2"]
    assert cdn.requests == []


def test_a_locked_load_downloads_the_dependencies_checked_against_the_lock(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _lock(cdn, tmp_path)
    monkeypatch.chdir(project)
    # The dependency's CDN copy changes after locking, its metadata.json to match.
    variant = cdn.root / "kernels" / BASE / "v2" / "build" / LOADED
    (variant / "_ops.py").write_text("def double(x):\n    return x * 3\n")
    manifest = json.loads((variant / "metadata.json").read_text())
    manifest["digest"]["files"]["_ops.py"] = b64sha256((variant / "_ops.py").read_bytes())
    (variant / "metadata.json").write_text(json.dumps(manifest))
    with pytest.raises(LockMismatchError, match=f"acme/base@v2 variant {LOADED}"):
        fk.get_locked_kernel(TOP)
    assert _loaded_modules() == set()
    with pytest.raises(LockfileError, match=rf"acme/base@v2 \(variant {LOADED}\), which acme/top"):
        fk.load_kernel(TOP)  # the cache only: the dependency is not there


def test_a_dependency_added_to_a_locked_manifest_is_refused_before_it_runs(
    cdn: CdnServer, tmp_path: Path, ran_dir: Path
) -> None:
    # acme/top is locked with no dependencies. The CDN then adds one to its metadata.json,
    # a kernel of the attacker's, and leaves the files (and so the content hash) alone.
    write_builder_kernel(cdn.root, TOP, 1)
    write_builder_kernel(cdn.root, "evil/payload", 1)
    project = write_project(tmp_path / "project", {TOP: ">=1"})
    assert flashhub("lock", cwd=project).returncode == 0
    manifest_path = cdn.root / "kernels" / TOP / "v1" / "build" / LOADED / "metadata.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["kernel-depends"] = [{"repo-id": "evil/payload", "version": 1}]
    manifest_path.write_text(json.dumps(manifest))
    refused = "depends on evil/payload v1, which the lock does not pin"
    download = flashhub("download", cwd=project)
    assert download.returncode != 0 and refused in download.stderr
    for load, error in (
        ("get_locked_kernel", "LockMismatchError"),
        ("load_kernel", "LockfileError"),
    ):
        code = (
            f"from flashhub_kernels import {load}\n"
            f"from flashhub_kernels.errors import {error}\n"
            f"try:\n    {load}('acme/top')\n"
            f"except {error} as exc:\n    print(exc)"
        )
        assert refused in run_python(code, cwd=project)
    assert ran(ran_dir) == []


def test_a_relock_of_a_version_whose_kernel_depends_changed_warns_naming_them(
    cdn: CdnServer, tmp_path: Path
) -> None:
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[(BASE, 2)])
    write_builder_kernel(cdn.root, BASE, 2)
    write_builder_kernel(cdn.root, "evil/payload", 1)
    project = write_project(tmp_path / "project", {TOP: ">=1"})
    lock_project(project)
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[("evil/payload", 1)])

    with pytest.warns(LockedContentChangedWarning) as caught:
        lock = lock_project(project)

    [warning] = caught
    assert "acme/top@v1: its kernel-depends on the CDN differ from those" in str(warning.message)
    assert "(added evil/payload@v1; removed acme/base@v2)" in str(warning.message)
    assert warning.filename == __file__, "it points at the caller's line"
    assert [(k.repo_id, k.version) for k in lock.kernels[TOP].tree()] == [
        ("evil/payload", 1),
        (TOP, 1),
    ]


def test_a_lock_that_omits_a_dependency_is_refused(cdn: CdnServer, tmp_path: Path) -> None:
    project = _lock(cdn, tmp_path)
    document = json.loads((project / "flashhub.lock").read_text())
    del document["dependencies"]
    (project / "flashhub.lock").write_text(json.dumps(document))
    with pytest.raises(LockfileError, match="acme/top@v1 depends on acme/base@v2, which it"):
        read_lockfile(project / "flashhub.lock")


def test_locking_refuses_a_dependency_cycle(cdn: CdnServer, tmp_path: Path) -> None:
    write_builder_kernel(cdn.root, "acme/a", 1, kernel_depends=[("acme/b", 1)])
    write_builder_kernel(cdn.root, "acme/b", 1, kernel_depends=[("acme/a", 1)])
    project = write_project(tmp_path / "project", {"acme/a": "==1"})
    result = flashhub("lock", cwd=project)
    assert result.returncode != 0
    assert "cycle: acme/a v1 -> acme/b v1 -> acme/a v1" in result.stderr
    assert not (project / "flashhub.lock").exists()


def test_locking_a_kernel_whose_dependency_is_missing_names_the_kernel_that_needs_it(
    cdn: CdnServer, tmp_path: Path
) -> None:
    write_builder_kernel(cdn.root, "acme/dangling", 1, kernel_depends=[("acme/ghost", 3)])
    project = write_project(tmp_path / "project", {"acme/dangling": "==1"})
    result = flashhub("lock", cwd=project)
    assert result.returncode == 1
    assert "error: acme/dangling v1 -> acme/ghost v3 (kernel-depends): " in result.stderr
    assert not (project / "flashhub.lock").exists()


def test_locking_refuses_a_dependency_chain_past_64_levels(cdn: CdnServer, tmp_path: Path) -> None:
    write_dependency_chain(cdn.root, CHAIN, 66)
    project = write_project(tmp_path / "project", {CHAIN: "==1"})
    result = flashhub("lock", cwd=project)
    assert result.returncode != 0
    assert "more than 64 levels deep: acme/chain v1 -> " in result.stderr
    assert not (project / "flashhub.lock").exists()


def test_prune_keeps_the_locked_dependencies(cdn: CdnServer, tmp_path: Path) -> None:
    project = _lock(cdn, tmp_path)
    assert flashhub("download", cwd=project).returncode == 0
    result = flashhub("cache", "prune", "--keep-locked", str(project))
    assert result.returncode == 0, result.stderr
    cache = Cache.from_config(get_config())
    for repo_id, version in ((TOP, 1), (BASE, 2)):
        info = fk.RepoInfo(repo_id, version)
        assert read_receipt(cache.entry_dir(info, LOADED)) is not None


def test_a_warm_load_of_a_builder_kernel_with_nothing_to_check_imports_nothing_more(
    cdn: CdnServer,
) -> None:
    from test_import_cost import _imported_by

    write_builder_kernel(cdn.root, TOP, 1)
    run_python("import flashhub.acme.top.v1")
    added = _imported_by("import flashhub.acme.top.v1", setup="import torch")
    assert "flashhub.acme.top.v1" in added
    checks = {"_loading.kernel_deps", "_models.kernel_metadata", "_loading.requirements"}
    assert {f"flashhub_kernels.{name}" for name in checks} & added == set()


# -- local builds -----------------------------------------------------------------------------


def test_a_local_build_is_checked_from_its_own_metadata(tmp_path: Path, ran_dir: Path) -> None:
    write_builder_kernel(tmp_path / "local", TOP, 1, python_depends=["flashhub-missing-dep"])
    version_dir = tmp_path / "local" / "kernels" / TOP / "v1"
    with pytest.raises(MissingPythonDependencyError, match="pip install flashhub-missing-dep"):
        fk.get_local_kernel(version_dir)
    assert ran(ran_dir) == []


def test_a_local_override_loads_its_dependencies_from_the_cdn(
    cdn: CdnServer, tmp_path: Path, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _publish_top_and_base(tmp_path / "local")
    write_builder_kernel(cdn.root, BASE, 2)
    local_top = tmp_path / "local" / "kernels" / TOP / "v1"
    monkeypatch.setenv("LOCAL_KERNELS", f"{TOP}={local_top}")
    top = fk.get_kernel(TOP, version=1)
    assert top.__file__ == str(local_top / "build" / LOADED / "__init__.py")
    assert top.base.__file__.startswith(str(get_config().cache_dir))
    assert top.quadruple(1) == 4
    assert ran(ran_dir) == [ran_label(BASE, 2), ran_label(TOP, 1)]
