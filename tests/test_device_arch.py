"""Reading the GPU's arch without creating a CUDA context.

On this machine (no GPU) the decision is tested with stand-ins (tests/support/
gpu_stand_in.py): a compiled stand-in NVML, and a CUDA torch whose every call that would
create a context raises and is logged. A kernel publishes builds for CUDA archs 8.0/8.6
(``CU126``), for 9.0a (``CU124``) and torch-universal, so the build a process loads says
which capability it read. The ``gpu`` tests at the end check the same on a real device.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import device_capability, run_python
from flashhub_kernels import _constants
from flashhub_kernels._variants import device_arch as _device_arch, nvml as _nvml
from flashhub_kernels._variants.device_arch import (
    Gpu,
    cuda_capability,
    cuda_order,
    gfx_target,
    kfd_gpus,
    select_visible,
)
from flashhub_kernels.layers._target import Target
from support.cdn_server import CdnServer
from support.cli_runner import PYTHON_M_FLASHHUB
from support.gpu_stand_in import (
    StandInGpu,
    build_nvml,
    context_requests,
    forked_onto_gpu_machine,
    gpu_machine_env,
    nvml_calls,
    nvml_gpus,
    proc_listing,
)
from support.preloaded import run_code
from test_arch_choice import BUILDS, CU124, CU126, REPO, publish

H100 = StandInGpu("GPU-9d1f6c0e-h100", 0x3B, "9.0")
A10 = StandInGpu("GPU-41aa70b2-a10", 0x18, "8.6")


@pytest.fixture(scope="session")
def nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stand-in ``libnvidia-ml.so.1``."""
    directory = tmp_path_factory.mktemp("nvml")
    build_nvml(directory)
    return directory


# -- which device: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, pure -----------------------------

UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-bbbc-3333"]


@pytest.mark.parametrize(
    ("spec", "visible"),
    [
        (None, [0, 1, 2]),
        ("2,0", [2, 0]),
        (" 1 , 2 ", [1, 2]),
        ("GPU-bbbc", [2]),  # a unique prefix of a UUID
        ("GPU-aaaa-1111,1", [0, 1]),
        ("GPU-bbb", []),  # a prefix of two: names no device, and ends the list
        ("0,7,1", [0]),  # the first entry that names no device ends the list, as for CUDA
        ("", []),
        ("-1", []),
        ("MIG-5f0c", [1]),  # a MIG instance: its GPU
    ],
)
def test_visible_devices_are_read_as_cuda_reads_them(spec: str | None, visible: list[int]) -> None:
    assert select_visible(UUIDS, spec, {"MIG-5f0c": 1}) == visible


def test_cuda_orders_the_newest_device_first_unless_told_pci_bus_order() -> None:
    gpus = [Gpu(g.uuid, (0, g.bus, 0), (9, 0) if g is H100 else (8, 6)) for g in (A10, H100)]
    assert [g.uuid for g in cuda_order(gpus, None)] == [H100.uuid, A10.uuid]
    assert [g.uuid for g in cuda_order(gpus, "FASTEST_FIRST")] == [H100.uuid, A10.uuid]
    assert [g.uuid for g in cuda_order(gpus, "PCI_BUS_ID")] == [A10.uuid, H100.uuid]


# -- NVML, through the stand-in library ---------------------------------------------------------


@pytest.fixture
def stand_in_nvml(
    nvml_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> pytest.MonkeyPatch:
    """This process reads the stand-in NVML, and torch has not initialized CUDA."""
    monkeypatch.setattr(_nvml, "LIBRARY", str(nvml_dir / "libnvidia-ml.so.1"))
    monkeypatch.setenv("STAND_IN_NVML_LOG", str(tmp_path / "nvml.log"))
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "STAND_IN_NVML_INIT_ERROR"):
        monkeypatch.delenv(name, raising=False)
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    return monkeypatch


@pytest.mark.parametrize(
    ("order", "visible", "capability"),
    [
        (None, None, (9, 0)),  # CUDA's default order puts the newest first
        ("PCI_BUS_ID", None, (8, 6)),  # A10 is on bus 0x18, before the H100's 0x3b
        (None, "1", (8, 6)),
        ("PCI_BUS_ID", "1", (9, 0)),
        (None, A10.uuid, (8, 6)),
        (None, "MIG-3g.40gb-0", (9, 0)),  # a MIG instance of the H100 (NVML's device 0)
    ],
)
def test_nvml_answers_for_the_first_device_this_process_sees(
    stand_in_nvml: pytest.MonkeyPatch,
    order: str | None,
    visible: str | None,
    capability: tuple[int, int],
) -> None:
    stand_in_nvml.setenv("STAND_IN_NVML_GPUS", nvml_gpus(H100, A10))
    stand_in_nvml.setenv("STAND_IN_NVML_MIGS", "MIG-3g.40gb-0=0")
    for name, value in (("CUDA_DEVICE_ORDER", order), ("CUDA_VISIBLE_DEVICES", visible)):
        if value is not None:
            stand_in_nvml.setenv(name, value)
    reading = cuda_capability()
    assert reading.capability == capability, reading.source
    assert "NVML" in reading.source


MIG_OF_THE_A10 = "MIG-5f0c1111-2222"


@pytest.mark.parametrize(
    ("visible", "capability", "unknown"),
    [
        (MIG_OF_THE_A10, (8, 6), None),
        (f"{MIG_OF_THE_A10},MIG-typo", (8, 6), "MIG-typo"),
        ("1,MIG-typo", (8, 6), "MIG-typo"),  # the list ends at the entry that names no device
        (f"{A10.uuid[:8]},MIG-typo", (8, 6), "MIG-typo"),
        ("MIG-typo,0", None, "MIG-typo"),
        ("MIG-5f0c", None, "MIG-5f0c"),  # CUDA documents prefixes of GPU UUIDs only
    ],
)
def test_a_mig_entry_nvml_does_not_know_ends_the_list_as_cuda_ends_it(
    stand_in_nvml: pytest.MonkeyPatch,
    visible: str,
    capability: tuple[int, int] | None,
    unknown: str | None,
) -> None:
    stand_in_nvml.setenv("STAND_IN_NVML_GPUS", nvml_gpus(H100, A10))
    stand_in_nvml.setenv("STAND_IN_NVML_MIGS", f"{MIG_OF_THE_A10}=1")
    stand_in_nvml.setenv("CUDA_VISIBLE_DEVICES", visible)
    reading = cuda_capability()
    assert reading.capability == capability, reading.source
    said = f"NVML (which knows no MIG instance {unknown}, so CUDA's list ends there: name"
    assert (said in reading.source) == (unknown is not None), reading.source


def test_an_nvml_error_about_a_mig_instance_names_it(stand_in_nvml: pytest.MonkeyPatch) -> None:
    stand_in_nvml.setenv("STAND_IN_NVML_GPUS", nvml_gpus(H100))
    stand_in_nvml.setenv("STAND_IN_NVML_MIGS", "MIG-4b2e=5")  # of a GPU NVML cannot find
    stand_in_nvml.setenv("CUDA_VISIBLE_DEVICES", "MIG-4b2e")
    reading = cuda_capability()
    assert reading.capability is None
    assert reading.source == (
        "NVML cannot tell: nvmlDeviceGetDeviceHandleFromMigDeviceHandle for MIG-4b2e failed"
        " with NVML error 6"
    )


def test_devices_that_differ_are_said(stand_in_nvml: pytest.MonkeyPatch) -> None:
    stand_in_nvml.setenv("STAND_IN_NVML_GPUS", nvml_gpus(H100, A10))
    reading = cuda_capability()
    assert reading.capability == (9, 0)
    assert "the visible devices differ (9.0, 8.6)" in reading.source


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"STAND_IN_NVML_INIT_ERROR": "9"}, "nvmlInit_v2 failed with NVML error 9"),
        ({"CUDA_VISIBLE_DEVICES": ""}, "NVML: no device this process sees"),
        ({"STAND_IN_NVML_GPUS": ""}, "NVML: no device this process sees"),
    ],
)
def test_no_answer_from_nvml_leaves_the_arch_unknown_and_says_why(
    stand_in_nvml: pytest.MonkeyPatch, env: dict[str, str], why: str
) -> None:
    stand_in_nvml.setenv("STAND_IN_NVML_GPUS", nvml_gpus(H100))
    for name, value in env.items():
        stand_in_nvml.setenv(name, value)
    reading = cuda_capability()
    assert reading.capability is None
    assert why in reading.source


def test_a_machine_without_nvml_leaves_the_arch_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_nvml, "LIBRARY", "libnvidia-ml-missing.so.1")
    reading = _device_arch._read_cuda_capability()
    assert reading.capability is None
    assert "libnvidia-ml-missing.so.1 could not be loaded" in reading.source


# -- the record: NVML is asked once per machine ---------------------------------------------------


def cgroup_files(directory: Path, cgroup: str, namespace: int) -> tuple[Path, Path]:
    """Files in ``directory`` that stand for ``/proc/self/cgroup``, telling ``cgroup``, and
    for ``/proc/self/ns/cgroup``, a link to the cgroup namespace ``namespace``."""
    directory.mkdir(parents=True)
    (directory / "cgroup").write_text(f"{cgroup}\n")
    (directory / "namespace").symlink_to(f"cgroup:[{namespace}]")
    return directory / "cgroup", directory / "namespace"


def in_cgroup(monkeypatch: pytest.MonkeyPatch, files: tuple[Path, Path]) -> None:
    """This process is in the cgroup ``files`` (of :func:`cgroup_files`) tell."""
    monkeypatch.setattr(_constants, "PROC_CGROUP", str(files[0]))
    monkeypatch.setattr(_constants, "CGROUP_NAMESPACE", str(files[1]))


@pytest.fixture
def listed(stand_in_nvml: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The driver lists the H100 and the A10 (this process's ``_constants.PROC_GPUS``), and NVML
    knows them; returns the stand-in NVML's log."""
    listing = proc_listing(tmp_path / "proc", H100, A10)
    stand_in_nvml.setattr(_constants, "PROC_GPUS", str(listing))
    stand_in_nvml.setenv("STAND_IN_NVML_GPUS", nvml_gpus(H100, A10))
    (tmp_path / "cache").mkdir()
    return tmp_path / "nvml.log"


def test_nvml_is_asked_once_then_the_cache_record_answers(listed: Path, cache_dir: Path) -> None:
    first = cuda_capability()
    assert listed.read_text().count("nvmlInit_v2") == 1
    assert (cache_dir / "gpus").read_text().splitlines() == [
        f"{H100.uuid} 9.0",
        f"{A10.uuid} 8.6",
        f"{_device_arch.cgroup_key()} {H100.uuid},{A10.uuid}",  # this process may open both
    ]
    assert (cache_dir / "gpus").stat().st_mode & 0o777 == 0o600
    second = cuda_capability()
    assert listed.read_text().count("nvmlInit_v2") == 1  # not asked again
    assert first.capability == second.capability == (9, 0)
    assert "NVML's earlier answer" in second.source


def test_a_gpu_the_record_does_not_know_is_asked_of_nvml(listed: Path, cache_dir: Path) -> None:
    (cache_dir / "gpus").write_text(f"{H100.uuid} 9.0\n")  # recorded on another machine
    assert cuda_capability().capability == (9, 0)
    assert listed.read_text().count("nvmlInit_v2") == 1
    assert f"{A10.uuid} 8.6" in (cache_dir / "gpus").read_text().splitlines()


def test_a_process_its_device_cgroup_limits_is_judged_by_the_gpus_it_may_open(
    listed: Path, cache_dir: Path, stand_in_nvml: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two jobs on a node: one given both GPUs, one given the A10 alone by its device cgroup
    (NVML: NO_PERMISSION for the H100). The driver lists both to each; the record says which
    each may open, once NVML told it in that cgroup."""
    both = cgroup_files(tmp_path / "both", "0::/slurm/job_11/step_0", 4026531835)
    a10 = cgroup_files(tmp_path / "a10", "0::/slurm/job_12/step_0", 4026531835)

    def read_in(files: tuple[Path, Path], denied: str) -> _device_arch.DeviceArch:
        in_cgroup(stand_in_nvml, files)
        stand_in_nvml.setenv("STAND_IN_NVML_DENY", denied)
        return cuda_capability()

    assert read_in(both, "").capability == (9, 0)
    assert read_in(a10, "0").capability == (8, 6)  # NVML asked: the record knows no A10 job
    for files, denied, capability, seen in ((a10, "0", (8, 6), 1), (both, "", (9, 0), 2)):
        reading = read_in(files, denied)
        assert reading.capability == capability
        assert f"(NVML's earlier answer), device 0 of {seen} " in reading.source
    assert listed.read_text().count("nvmlInit_v2") == 2  # once in each cgroup


def test_a_record_that_knows_no_cgroup_is_asked_of_nvml_once_unless_there_is_none(
    listed: Path, cache_dir: Path, stand_in_nvml: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A record an earlier version wrote knows every GPU, and no cgroup: NVML says which
    this process may open, and the record keeps it. Where ``/proc/self/cgroup`` cannot be
    read, the record answers for every GPU the driver lists."""
    (cache_dir / "gpus").write_text(f"{H100.uuid} 9.0\n{A10.uuid} 8.6\n")
    stand_in_nvml.setenv("STAND_IN_NVML_DENY", "0")
    a10 = cgroup_files(tmp_path / "a10", "0::/slurm/job_12/step_0", 4026531835)
    in_cgroup(stand_in_nvml, a10)
    assert [cuda_capability().capability for _ in range(2)] == [(8, 6), (8, 6)]
    assert listed.read_text().count("nvmlInit_v2") == 1
    assert f"{_device_arch.cgroup_key()} {A10.uuid}" in (cache_dir / "gpus").read_text()
    stand_in_nvml.delenv("STAND_IN_NVML_DENY")
    stand_in_nvml.setattr(_constants, "PROC_CGROUP", str(tmp_path / "unreadable"))
    assert cuda_capability().capability == (9, 0)  # the record alone, as before cgroups
    assert listed.read_text().count("nvmlInit_v2") == 1


def test_the_record_keeps_the_latest_cgroups(
    listed: Path, cache_dir: Path, stand_in_nvml: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each job of a batch system has a cgroup of its own: the record keeps the 256 written
    last, so that it does not grow with every job a shared cache sees."""
    earlier = [f"cgroup-{i:016x} {H100.uuid}" for i in range(256)]
    (cache_dir / "gpus").write_text("\n".join([f"{H100.uuid} 9.0", *earlier]) + "\n")
    in_cgroup(stand_in_nvml, cgroup_files(tmp_path / "job", "0::/slurm/job_13/step_0", 1))
    assert cuda_capability().capability == (9, 0)
    lines = (cache_dir / "gpus").read_text().splitlines()
    assert lines[2:] == [*earlier[1:], f"{_device_arch.cgroup_key()} {H100.uuid},{A10.uuid}"]


def test_a_mig_instance_is_asked_of_nvml(
    listed: Path, cache_dir: Path, stand_in_nvml: pytest.MonkeyPatch
) -> None:
    cuda_capability()
    stand_in_nvml.setenv("STAND_IN_NVML_MIGS", "MIG-1g.10gb-1=1")
    stand_in_nvml.setenv("CUDA_VISIBLE_DEVICES", "MIG-1g.10gb-1")
    assert cuda_capability().capability == (8, 6)  # the A10's
    assert listed.read_text().count("nvmlInit_v2") == 2


def test_a_cache_that_cannot_be_written_keeps_no_record(
    listed: Path, cache_dir: Path, stand_in_nvml: pytest.MonkeyPatch
) -> None:
    stand_in_nvml.setenv("FLASHHUB_CACHE_DIR", str(cache_dir / "missing" / "cache"))
    assert cuda_capability().capability == (9, 0)
    assert cuda_capability().capability == (9, 0)
    assert listed.read_text().count("nvmlInit_v2") == 2


def test_a_pipe_in_place_of_the_record_is_no_record(listed: Path, cache_dir: Path) -> None:
    """A named pipe a neighbour sharing the cache put there is not waited on (a read that
    waits is let go below, so that the test fails rather than hangs): NVML is asked, and
    its answer recorded in the pipe's place."""
    record = cache_dir / "gpus"
    os.mkfifo(record, 0o600)
    readings = []
    reader = threading.Thread(target=lambda: readings.append(cuda_capability()), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():
        while reader.is_alive():  # a writer comes and goes: each read it waits in ends
            with contextlib.suppress(OSError):  # ENXIO: no read waits at this moment
                os.close(os.open(record, os.O_WRONLY | os.O_NONBLOCK))
            reader.join(0.1)
        pytest.fail("reading the record waited for a writer to the pipe")
    assert [reading.capability for reading in readings] == [(9, 0)]
    assert listed.read_text().count("nvmlInit_v2") == 1
    assert record.read_text().splitlines()[:2] == [f"{H100.uuid} 9.0", f"{A10.uuid} 8.6"]


def test_a_library_without_nvml_s_functions_leaves_the_arch_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_nvml, "LIBRARY", "libc.so.6")  # loads, and holds no NVML
    reading = _device_arch._read_cuda_capability()
    assert reading.capability is None
    assert "libc.so.6 has no nvmlInit_v2" in reading.source


# -- ROCm: the amdgpu topology in sysfs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "name"),
    [(90010, "gfx90a"), (90402, "gfx942"), (110000, "gfx1100"), (120001, "gfx1201")],
)
def test_kfd_target_versions_name_gfx_targets(version: int, name: str) -> None:
    assert gfx_target(version) == name


def _kfd_tree(root: Path, nodes: dict[str, dict[str, int]]) -> Path:
    for name, properties in nodes.items():
        (root / name).mkdir(parents=True)
        lines = [f"{key} {value}" for key, value in properties.items()]
        (root / name / "properties").write_text("\n".join(["cpu_cores_count 0", *lines]) + "\n")
    return root


def test_rocm_devices_come_from_the_kfd_topology_cpus_left_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = {
        "0": {"gfx_target_version": 0, "unique_id": 0},  # the CPU
        "1": {"gfx_target_version": 90402, "unique_id": 0xAB},
        "10": {"gfx_target_version": 110000, "unique_id": 0xCD},
        "2": {"gfx_target_version": 90010, "unique_id": 0xEF},
    }
    root = _kfd_tree(tmp_path / "nodes", nodes)
    assert kfd_gpus(str(root)) == [
        ("GPU-00000000000000ab", "gfx942"),
        ("GPU-00000000000000ef", "gfx90a"),
        ("GPU-00000000000000cd", "gfx1100"),
    ]
    monkeypatch.setattr(_constants, "KFD_NODES", str(root))
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    assert _device_arch.rocm_gfx().gfx == "gfx942"
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "GPU-00000000000000cd,1")
    assert _device_arch.rocm_gfx().gfx == "gfx1100"
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")  # of those ROCr leaves
    assert _device_arch.rocm_gfx().gfx == "gfx90a"


# -- a kernel import, in the forms a user runs it -----------------------------------------------

SHOW = """
import os, sys, torch
import flashhub_kernels._constants
flashhub_kernels._constants.PROC_GPUS = os.environ["STAND_IN_PROC_GPUS"]
import flashhub.acme.relu.v1 as k
print(k.marker(), torch.cuda.is_initialized(), "flashhub_kernels._variants.nvml" in sys.modules)
"""


def _chosen(variant: str, version: int = 1) -> str:
    return f"{REPO}@v{version}:{variant}"


def run_on(env: dict[str, str], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -c code args`` on the machine ``env`` (of ``gpu_machine_env``) describes, in
    a child forked with torch imported, where it must succeed."""
    forked_code, forked_env = forked_onto_gpu_machine(code, env)
    result = run_code(forked_code, *args, env={**os.environ, **forked_env})
    assert result.returncode == 0, result.stderr
    return result


def test_an_import_judges_the_device_by_nvml_cold_and_warm_and_starts_no_cuda(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    listing = proc_listing(tmp_path / "proc", H100)
    extra = {"STAND_IN_PROC_GPUS": str(listing)}
    env = gpu_machine_env(tmp_path, H100, nvml=nvml_dir, extra=extra)
    cold = run_on(env, SHOW).stdout
    cdn.clear_log()
    warm = run_on(env, SHOW).stdout
    assert cold.split() == [_chosen(CU124), "False", "True"]  # 9.0a fits the H100
    assert warm.split() == [_chosen(CU124), "False", "False"]  # the record: NVML not loaded
    assert cdn.gets() == []
    assert context_requests(tmp_path) == []
    # NVML answered the cold load; the warm one read the cache's record of that answer.
    assert nvml_calls(tmp_path).count("nvmlInit_v2") == 1


NO_BUILD_FOR_THE_DEVICE = """
import torch
import flashhub_kernels as fk
try:
    fk.get_kernel("acme/relu", version=1)
except fk.errors.NoCompatibleVariantError as exc:
    print(exc.message.splitlines()[0])
    print(exc.hint)
"""


def test_no_build_for_the_device_names_the_device_read_and_the_build_to_ask_for(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    """As for a machine named with its device (--cuda-capability): the published build
    is there, for other archs; the one to ask for is compiled for this device."""
    publish(cdn.root, 1, {CU126: ["8.0", "8.6"]})
    env = gpu_machine_env(tmp_path, H100, nvml=nvml_dir)
    said, hint = run_on(env, NO_BUILD_FOR_THE_DEVICE).stdout.splitlines()
    assert said.endswith(", CUDA capability 9.0). Published variants:")
    assert f"{CU126} compiled for CUDA capability 9.0, or torch-universal" in hint
    assert context_requests(tmp_path) == []


SHOW_LOOKUP = SHOW.replace(
    "import flashhub.acme.relu.v1 as k\n",
    "import flashhub.acme.relu.v1 as k\n"
    "print('flashhub_kernels._cache.obtain' in sys.modules,"
    " 'flashhub_kernels._variants.device_arch' in sys.modules)\n",
)


def test_the_import_table_reads_the_device_again_for_a_pick_it_decided(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    """The builds list archs, so the device took part in the choice: the table's answer
    holds only while the device reads the same, and reading it starts no CUDA either."""
    publish(cdn.root, 1, BUILDS)
    h100 = {"STAND_IN_PROC_GPUS": str(proc_listing(tmp_path / "h100", H100))}
    a10 = {"STAND_IN_PROC_GPUS": str(proc_listing(tmp_path / "a10", A10))}
    on_h100 = gpu_machine_env(tmp_path, H100, nvml=nvml_dir, extra=h100)
    on_a10 = gpu_machine_env(tmp_path, A10, nvml=nvml_dir, extra=a10)
    loads = [run_on(on_h100, SHOW_LOOKUP).stdout.split() for _ in range(3)]
    # cold, then looked up in full and recorded, then the table's answer: the device is
    # not read again while what its reading is read from (the driver's listing) is as it was
    assert [load[:2] for load in loads] == [["True", "True"], ["True", "True"], ["False", "False"]]
    assert {load[2] for load in loads} == {_chosen(CU124)}  # 9.0a fits the H100
    assert {load[3] for load in loads} == {"False"}  # no CUDA context
    swapped = run_on(on_a10, SHOW_LOOKUP).stdout.split()
    assert swapped[:4] == ["True", "True", _chosen(CU126), "False"]  # the A10 is 8.6
    assert context_requests(tmp_path) == []


IN_A_CGROUP = SHOW_LOOKUP.replace(
    "import flashhub.acme.relu.v1 as k\n",
    'flashhub_kernels._constants.PROC_CGROUP = os.environ["STAND_IN_PROC_CGROUP"]\n'
    'flashhub_kernels._constants.CGROUP_NAMESPACE = os.environ["STAND_IN_CGROUP_NAMESPACE"]\n'
    "import flashhub.acme.relu.v1 as k\n",
)


def in_a_cgroup(directory: Path, cgroup: str, namespace: int) -> dict[str, str]:
    """The variables that give a child of ``IN_A_CGROUP`` the cgroup ``cgroup``, in the
    cgroup namespace ``namespace`` (see :func:`cgroup_files`)."""
    proc_cgroup, cgroup_namespace = cgroup_files(directory, cgroup, namespace)
    return {
        "STAND_IN_PROC_CGROUP": str(proc_cgroup),
        "STAND_IN_CGROUP_NAMESPACE": str(cgroup_namespace),
    }


@pytest.mark.parametrize(
    ("h100_job", "a10_job"),
    [
        (("0::/slurm/job_11/step_0", 4026531835), ("0::/slurm/job_12/step_0", 4026531835)),
        (("0::/", 4026532401), ("0::/", 4026532502)),  # containers, each in its own namespace
    ],
    ids=["cgroups", "cgroup-namespaces"],
)
def test_the_import_table_reads_the_device_again_in_another_device_cgroup(
    cdn: CdnServer,
    tmp_path: Path,
    nvml_dir: Path,
    h100_job: tuple[str, int],
    a10_job: tuple[str, int],
) -> None:
    """Two jobs of one user on a node, each given one GPU by its device cgroup (Slurm's
    ConstrainDevices, a container's devices): the driver lists both GPUs to each, and
    CUDA_VISIBLE_DEVICES and the boot are the same; NVML refuses each the other's GPU.
    The table's answer for one job's device is not the other's."""
    publish(cdn.root, 1, BUILDS)
    listing = {"STAND_IN_PROC_GPUS": str(proc_listing(tmp_path / "proc", H100, A10))}

    def job(name: str, cgroup: tuple[str, int], denied: str) -> dict[str, str]:
        extra = {**listing, **in_a_cgroup(tmp_path / name, *cgroup), "STAND_IN_NVML_DENY": denied}
        return gpu_machine_env(tmp_path, H100, A10, nvml=nvml_dir, extra=extra)

    on_h100 = job("h100", h100_job, "1")
    h100_loads = [run_on(on_h100, IN_A_CGROUP).stdout.split() for _ in range(3)]
    assert h100_loads[2][:3] == ["False", "False", _chosen(CU124)]  # the table's answer
    a10_load = run_on(job("a10", a10_job, "0"), IN_A_CGROUP).stdout.split()
    assert a10_load[1:4] == ["True", _chosen(CU126), "False"]  # its device read: the A10
    assert context_requests(tmp_path) == []


FORKED_AFTER_CUDA = """
import multiprocessing, torch

def load(queue):
    try:
        import flashhub.acme.relu.v{version} as k
        queue.put((k.marker(), torch.cuda.is_initialized()))
    except BaseException as exc:
        queue.put(repr(exc))

if __name__ == "__main__":
    {use_cuda}  # the parent uses its GPU, then forks a worker
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    worker = context.Process(target=load, args=(queue,))
    worker.start()
    print(queue.get(timeout=120))
    worker.join()
"""
# Then the parent loads v1 itself, asking torch: CUDA is initialized in it.
PARENT_LOADS = """
    import flashhub.acme.relu.v1 as k
    print(k.marker())
"""


def run_script(directory: Path, source: str, env: dict[str, str] | None = None) -> str:
    """Run ``source`` as a script file in ``directory`` (multiprocessing's spawn imports
    the parent's main module by its path) in a fresh interpreter; return its output."""
    script = directory / "script.py"
    script.write_text(source)
    result = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_worker_forked_after_cuda_was_initialized_imports_a_kernel(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    publish(cdn.root, 2, BUILDS)
    env = gpu_machine_env(tmp_path, H100, nvml=nvml_dir)
    script = FORKED_AFTER_CUDA.format(version=2, use_cuda="torch.cuda.init()") + PARENT_LOADS
    worker, parent = run_on(env, script).stdout.splitlines()
    assert worker == repr((_chosen(CU124, 2), False))  # NVML: the H100
    assert parent == _chosen(CU126)  # torch: the stand-in's initialized device, 8.6
    assert context_requests(tmp_path) == []


SPAWNED_UNPICKLE = """
import multiprocessing, pickle, torch
import flashhub.acme.relu.v1 as k

if __name__ == "__main__":
    blob = pickle.dumps(k.Thing(7))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        print(pool.apply(pickle.loads, (blob,)).value)
"""


def test_a_spawned_worker_unpickling_a_kernel_object_starts_no_cuda(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    env = gpu_machine_env(tmp_path, H100, nvml=nvml_dir)
    assert run_script(tmp_path, SPAWNED_UNPICKLE, env).split() == ["7"]
    assert context_requests(tmp_path) == []
    # The parent and the worker each judged the device, through NVML.
    assert nvml_calls(tmp_path).count("nvmlDeviceGetCudaComputeCapability") == 2


KERNELIZE_FOR_RANGES = """
import torch
from torch import nn
from flashhub_kernels import CUDAProperties, Device, LocalLayerRepository, Mode
from flashhub_kernels import kernelize, use_kernel_forward_from_hub, use_kernel_mapping

@use_kernel_forward_from_hub("Half")
class Half(nn.Module):
    def forward(self, x):
        return x

def tag(module):
    name = module.forward.__module__  # flashhub._local.layers_<tag>_<digest>.layers
    return name.split(".")[-2].split("_")[1] if name.startswith("flashhub.") else "original"

def layer(tag):
    return LocalLayerRepository({local!r} + "/layers_" + tag, layer_name="Half")

mapping = {{"Half": {{
    Device("cuda", CUDAProperties(90, 90)): layer("sm90"),
    Device("cuda", CUDAProperties(80, 89)): layer("sm8x"),
}}}}
model = nn.Sequential(nn.Linear(2, 2), Half())  # still on the CPU
with use_kernel_mapping(mapping):
    for device in ("cuda", "cuda:1", "cuda:2"):
        kernelize(model, mode=Mode.INFERENCE, device=device)
        print(tag(model[1]))
    print(torch.cuda.is_initialized())
    {use_cuda}
    kernelize(model, mode=Mode.INFERENCE, device="cuda")
    print(tag(model[1]))
"""


def test_kernelize_for_capability_ranges_reads_the_gpus_without_a_context(
    tmp_path: Path, nvml_dir: Path
) -> None:
    """A model kernelized for the GPU before it is moved there: the capability of the
    device named comes from NVML, and torch is asked only once CUDA is initialized."""
    for tag in ("sm90", "sm8x"):
        package = tmp_path / "local" / f"layers_{tag}"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("from . import layers\n")
        (package / "layers.py").write_text(
            "from torch import nn\n\nclass Half(nn.Module):\n"
            "    def forward(self, x):\n        return x[..., : x.shape[-1] // 2]\n"
        )
    env = gpu_machine_env(tmp_path, H100, A10, nvml=nvml_dir)
    script = KERNELIZE_FOR_RANGES.format(
        local=str(tmp_path / "local"), use_cuda="torch.cuda.init()"
    )
    # NVML's order: the H100 first (CUDA's default), then the A10; no device 2: the original
    assert run_on(env, script).stdout.split() == ["sm90", "sm8x", "original", "False", "sm8x"]
    assert context_requests(tmp_path) == []  # the last answer is torch's initialized 8.6
    assert nvml_calls(tmp_path).count("nvmlInit_v2") == 1  # read once for every layer


def test_a_rocm_gpu_s_capability_is_read_from_the_kfd_topology(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = {"1": {"gfx_target_version": 90402}, "2": {"gfx_target_version": 110000}}
    monkeypatch.setattr(_constants, "KFD_NODES", str(_kfd_tree(tmp_path / "nodes", nodes)))
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    for name in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    _device_arch._driver_capabilities.cache_clear()  # read once per process, as it is
    assert [Target("rocm", i).capability() for i in (None, 1, 2)] == [94, 110, None]
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    assert Target("rocm").capability() == 110


CHECK_ARCH = """
import os, sys, torch
import flashhub_kernels as fk
import flashhub_kernels._constants
flashhub_kernels._constants.PROC_GPUS = os.environ["STAND_IN_PROC_GPUS"]
try:
    k = fk.get_kernel("acme/relu", version=1, check_arch={check_arch})
    print(k.marker(), torch.cuda.is_initialized(), "flashhub_kernels._variants.nvml" in sys.modules)
except ImportError as exc:
    print(type(exc).__name__)
"""


def test_check_arch_false_neither_reads_the_device_nor_checks_its_arch(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, {CU126: ["8.0", "8.6"]})  # no build for the H100
    extra = {"STAND_IN_PROC_GPUS": str(proc_listing(tmp_path / "proc", H100))}
    env = gpu_machine_env(tmp_path, H100, nvml=nvml_dir, extra=extra)
    unchecked = run_on(env, CHECK_ARCH.format(check_arch=False)).stdout
    assert unchecked.split() == [_chosen(CU126), "False", "False"]
    assert nvml_calls(tmp_path) == [] and context_requests(tmp_path) == []
    checked = run_on(env, CHECK_ARCH.format(check_arch=True)).stdout
    assert checked.split() == ["NoCompatibleVariantError"]
    assert "nvmlDeviceGetCudaComputeCapability" in nvml_calls(tmp_path)
    assert context_requests(tmp_path) == []


def test_when_nvml_cannot_tell_the_archs_are_not_checked_and_verbose_says_so(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    # The driver is not loaded (NVML_ERROR_DRIVER_NOT_LOADED); a machine without the
    # library at all is test_a_machine_without_nvml_leaves_the_arch_unknown.
    cannot_tell = {"STAND_IN_NVML_INIT_ERROR": "9"}
    env = gpu_machine_env(tmp_path, H100, nvml=nvml_dir, extra=cannot_tell)
    result = run_on(env, PYTHON_M_FLASHHUB, "-v", "get", REPO, "--version", "1", "--json")
    assert json.loads(result.stdout)["variant"] == CU126  # the first by name
    assert "the CUDA device's arch is unknown, so the archs builds list are not checked" in (
        result.stderr
    )
    assert "NVML cannot tell: nvmlInit_v2 failed with NVML error 9" in result.stderr
    assert context_requests(tmp_path) == []


CHANGES_THE_DEVICE_BETWEEN_LOADS = """
import os, sys
import flashhub_kernels as fk
print(fk.get_kernel("acme/relu", version=1).marker())
os.environ["CUDA_VISIBLE_DEVICES"] = "1"  # before its first use of the GPU
print(fk.get_kernel("acme/relu", version=2).marker())
"""


def test_a_device_chosen_between_two_loads_judges_the_second(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    publish(cdn.root, 2, BUILDS)
    env = gpu_machine_env(tmp_path, H100, A10, nvml=nvml_dir)
    first, second = run_on(env, CHANGES_THE_DEVICE_BETWEEN_LOADS).stdout.splitlines()
    assert (first, second) == (_chosen(CU124), _chosen(CU126, 2))  # the H100, then the A10
    assert context_requests(tmp_path) == []


def test_a_gpu_this_process_may_not_open_is_left_out_as_cuda_leaves_it_out(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    """A container's device cgroup: NVML lists the A10 and answers NO_PERMISSION for it;
    the H100 is still read, not the whole reading given up."""
    publish(cdn.root, 1, BUILDS)
    env = gpu_machine_env(tmp_path, H100, A10, nvml=nvml_dir, extra={"STAND_IN_NVML_DENY": "1"})
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # the A10 (bus 0x18) first, were it seen
    result = run_on(env, PYTHON_M_FLASHHUB, "-v", "get", REPO, "--version", "1", "--json")
    assert json.loads(result.stdout)["variant"] == CU124
    assert f"the CUDA device's arch is 9.0, read from NVML, device 0 of 1 ({H100.uuid})" in (
        result.stderr
    )
    assert context_requests(tmp_path) == []


ARCH_BUILDS = {CU126: ["8.0", "8.6"], CU124: ["9.0a"]}


@pytest.mark.parametrize("offline", [False, True], ids=["online", "offline"])
@pytest.mark.parametrize(("gpu", "chosen"), [(H100, CU124), (A10, CU126)], ids=["h100", "a10"])
def test_info_chooses_by_the_archs_builds_list_as_a_load_does(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path, gpu: StandInGpu, chosen: str, offline: bool
) -> None:
    publish(cdn.root, 1, ARCH_BUILDS)
    env = gpu_machine_env(tmp_path, gpu, nvml=nvml_dir)
    if offline:  # the cache answers: every variant in it
        for variant, archs in ARCH_BUILDS.items():
            device = ("--cuda-capability", archs[0].rstrip("a"))
            run_on(
                env, PYTHON_M_FLASHHUB, "get", REPO, "--version", "1", "--system", variant, *device
            )
        env = {**env, "FLASHHUB_OFFLINE": "1"}
    result = run_on(env, PYTHON_M_FLASHHUB, "info", REPO, "--version", "1", "--json")
    document = json.loads(result.stdout)
    assert document["chosen"] == chosen
    assert [v["variant"] for v in document["variants"] if v["compatible"]] == [chosen]
    assert context_requests(tmp_path) == []


def test_verbose_says_where_the_capability_was_read(
    cdn: CdnServer, tmp_path: Path, nvml_dir: Path
) -> None:
    publish(cdn.root, 1, BUILDS)
    env = gpu_machine_env(tmp_path, A10, nvml=nvml_dir)
    result = run_on(env, PYTHON_M_FLASHHUB, "-v", "get", REPO, "--version", "1")
    assert Path(result.stdout.strip()).name == CU126
    assert f"the CUDA device's arch is 8.6, read from NVML, device 0 of 1 ({A10.uuid})" in (
        result.stderr
    )


# -- on a real GPU ------------------------------------------------------------------------------


def _real_capability() -> str:
    return "{}.{}".format(*device_capability())


REAL_SHOW = """
import torch
import flashhub.acme.relu.v{version} as k
print(k.marker(), torch.cuda.is_initialized())
"""


@pytest.mark.gpu
def test_nvml_reads_the_capability_torch_reads() -> None:
    gpus, _ = _nvml.read_gpus()
    assert gpus, "NVML lists no GPU on a machine where torch sees one"
    assert _real_capability() in {"{}.{}".format(*gpu[2]) for gpu in gpus}


@pytest.mark.gpu
def test_on_a_gpu_an_import_reads_the_device_and_creates_no_cuda_context(cdn: CdnServer) -> None:
    from support.trees import local_variant

    capability = _real_capability()
    # The exact build runs on no device; only a reading of this one picks torch-cuda.
    builds: dict[str, list[str] | None] = {local_variant(): ["5.0a"], "torch-cuda": [capability]}
    publish(cdn.root, 1, builds)
    for _ in ("cold", "warm"):
        out = run_python(REAL_SHOW.format(version=1))
        assert out.split() == [_chosen("torch-cuda"), "False"]


@pytest.mark.gpu
def test_on_a_gpu_a_worker_forked_after_cuda_imports_a_kernel(
    cdn: CdnServer, tmp_path: Path
) -> None:
    from support.trees import local_variant

    builds: dict[str, list[str] | None] = {local_variant(): ["5.0a"], "torch-cuda": None}
    publish(cdn.root, 1, builds)
    script = FORKED_AFTER_CUDA.format(version=1, use_cuda='torch.zeros(1, device="cuda")')
    assert run_script(tmp_path, script).strip() == repr((_chosen("torch-cuda"), False))
