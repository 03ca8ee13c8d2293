"""A GPU machine, for tests on a machine without one: a stand-in for the driver's NVML
(``nvml_stand_in.c``, compiled by :func:`build_nvml`) and a CUDA build of torch whose
device must not be initialized (``cuda_stand_in/sitecustomize.py``), both given to a
child process by :func:`gpu_machine_env`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent


class StandInGpu(NamedTuple):
    """A GPU the stand-in NVML lists: its UUID, PCI bus number and compute capability."""

    uuid: str
    bus: int
    capability: str


def build_nvml(directory: Path) -> Path:
    """Compile the stand-in NVML into ``directory`` as ``libnvidia-ml.so.1``."""
    library = directory / "libnvidia-ml.so.1"
    source = HERE / "nvml_stand_in.c"
    command = ["gcc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)]
    subprocess.run(command, check=True, capture_output=True)
    return library


def nvml_gpus(*gpus: StandInGpu) -> str:
    """``gpus`` as ``STAND_IN_NVML_GPUS`` lists them."""
    return ";".join(f"{gpu.uuid},0,{gpu.bus:x},0,{gpu.capability}" for gpu in gpus)


def gpu_machine_env(
    logs: Path, *gpus: StandInGpu, nvml: Path, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a child process on a machine with ``gpus`` and a CUDA torch:
    NVML is the stand-in in the directory ``nvml`` (found before a real one), and both
    stand-ins write what they were asked into files under ``logs`` (see
    :func:`context_requests`)."""
    path = [str(HERE / "cuda_stand_in"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {
        "PYTHONPATH": os.pathsep.join(path),
        "STAND_IN_CUDA_LOG": str(logs / "cuda.log"),
        "STAND_IN_NVML_LOG": str(logs / "nvml.log"),
        "STAND_IN_NVML_GPUS": nvml_gpus(*gpus),
        "LD_LIBRARY_PATH": str(nvml),
        **(extra or {}),
    }


def context_requests(logs: Path) -> list[str]:
    """The calls that would have created a CUDA context, one line each."""
    log = logs / "cuda.log"
    return log.read_text().splitlines() if log.exists() else []


def nvml_calls(logs: Path) -> list[str]:
    """The NVML functions the stand-in answered, in order."""
    log = logs / "nvml.log"
    return log.read_text().splitlines() if log.exists() else []


def proc_listing(directory: Path, *gpus: StandInGpu) -> Path:
    """A directory laid out as the driver's ``/proc/driver/nvidia/gpus``, listing ``gpus``."""
    for gpu in gpus:
        entry = directory / f"0000:{gpu.bus:02x}:00.0"
        entry.mkdir(parents=True)
        (entry / "information").write_text(
            f"Model: \t\t Stand-in GPU {gpu.capability}\nGPU UUID: \t {gpu.uuid}\n"
            f"Bus Location: \t 0000:{gpu.bus:02x}:00.0\nDevice Minor: \t 0\n"
        )
    return directory
