"""Which package's lock a locked load finds: the package of the module that called it, in a
namespace package too, and through the standard library (a scheduler, a thread pool)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from conftest import MakeProject
from flashhub_kernels._lockfiles.format import LOCKFILE_NAME
from flashhub_kernels._lockfiles.pinning import lock_project
from flashhub_kernels.errors import LockfileError, LockfileNotFoundError
from support.projects import REPO, lockfile_of, write_project
from support.trees import local_variant

LOCAL = local_variant()


def _locks(make_project: MakeProject) -> tuple[bytes, bytes]:
    """The bytes of a lock that pins v1 of the kernel, and of one that pins v2."""
    project = make_project({REPO: 1})
    lock_project(project)
    v1 = lockfile_of(project).read_bytes()
    write_project(project, {REPO: 2})
    lock_project(project)
    return v1, lockfile_of(project).read_bytes()


def _distribution(site: Path, name: str, files: dict[str, str], lock: bytes | None) -> None:
    """Install ``files`` (path: source) in ``site`` as the distribution ``name``, with
    ``lock`` in its metadata as a setuptools build ships it."""
    for path, source in files.items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(source)
    dist_info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    record = [*files, f"{dist_info.name}/METADATA"]
    if lock is not None:
        (dist_info / LOCKFILE_NAME).write_bytes(lock)
        record.append(f"{dist_info.name}/{LOCKFILE_NAME}")
    (dist_info / "RECORD").write_text("".join(f"{path},,\n" for path in record))


LOADS = (
    "from flashhub_kernels import get_locked_kernel\n"
    f"def load():\n    return get_locked_kernel({REPO!r}).marker()\n"
)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory on ``sys.path`` to install into; the working directory has no lock."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for name in [n for n in sys.modules if n.partition(".")[0] in ("corp", "shared", "handing")]:
        monkeypatch.delitem(sys.modules, name)
    return site


def test_each_distribution_of_a_namespace_package_finds_its_own_lock(
    make_project: MakeProject, site: Path
) -> None:
    v1, v2 = _locks(make_project)
    _distribution(site, "corp-vision", {"corp/vision/__init__.py": LOADS}, v1)
    _distribution(
        site, "corp-audio", {"corp/audio/__init__.py": "", "corp/audio/models.py": LOADS}, v2
    )

    import corp.audio.models  # type: ignore[import-not-found]
    import corp.vision  # type: ignore[import-not-found]

    assert corp.vision.load() == f"{REPO}@v1:{LOCAL}"
    assert corp.audio.models.load() == f"{REPO}@v2:{LOCAL}"


def test_a_package_several_distributions_ship_a_lock_for_is_refused_naming_them(
    make_project: MakeProject, site: Path
) -> None:
    v1, v2 = _locks(make_project)
    _distribution(site, "shared-core", {"shared/__init__.py": LOADS}, v1)
    _distribution(site, "shared-plugin", {"shared/plugin.py": LOADS}, v2)

    import shared.plugin  # type: ignore[import-not-found]

    assert shared.plugin.load() == f"{REPO}@v2:{LOCAL}", "its module is the plugin's alone"
    with pytest.raises(LockfileError, match="shared-core, shared-plugin all provide 'shared'"):
        shared.load()


def test_a_malformed_lock_in_a_distributions_metadata_says_to_reinstall_it(
    make_project: MakeProject, site: Path
) -> None:
    _distribution(site, "corp-vision", {"corp/vision/__init__.py": LOADS}, b'{"version": 1}')

    import corp.vision

    with pytest.raises(LockfileError, match="in the metadata of corp-vision must list") as e:
        corp.vision.load()
    assert e.value.hint is not None
    assert "pip install --force-reinstall corp-vision" in e.value.hint
    assert "flashhub lock" not in e.value.hint


HANDING = f"""
import sched
from concurrent.futures import ThreadPoolExecutor
from flashhub_kernels import get_locked_kernel

def scheduled():
    scheduler = sched.scheduler()
    event = scheduler.enter(0, 1, get_locked_kernel, ({REPO!r},))
    scheduler.run()
    return event

def pooled():
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(get_locked_kernel, {REPO!r}).result().marker()
"""


def test_a_load_the_standard_library_runs_finds_the_lock_of_the_package_that_ran_it(
    make_project: MakeProject, site: Path
) -> None:
    _, v2 = _locks(make_project)
    (site / "handing").mkdir()
    (site / "handing" / "__init__.py").write_text(HANDING)
    (site / "handing" / LOCKFILE_NAME).write_bytes(v2)
    import handing  # type: ignore[import-not-found]

    handing.scheduled()  # sched's frames lie between the package and the load

    assert "flashhub.acme.tensor_tricks.v2" in sys.modules
    with pytest.raises(LockfileNotFoundError) as raised:
        handing.pooled()  # the package is not on the worker's stack at all
    assert "only the standard library called flashhub-kernels" in str(raised.value)
    assert "hand the thread or pool a function of your package" in str(raised.value)
