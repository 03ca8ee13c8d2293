"""A GPU machine, for tests on a machine without one: a stand-in for the driver's NVML
(``nvml_stand_in.c``, compiled by :func:`build_nvml`) and a CUDA build of torch whose
device must not be initialized (``cuda_stand_in/sitecustomize.py``), both given to a
child process by :func:`gpu_machine_env`, or to a child forked with torch imported by
:func:`forked_onto_gpu_machine`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
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
    soname = f"-Wl,-soname,{library.name}"  # as the driver's: found by name once loaded
    command = ["gcc", "-shared", "-fPIC", "-O1", soname, "-o", str(library), str(source)]
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


# Run first in a child forked from a process that imported torch: what a start with
# gpu_machine_env's PYTHONPATH and LD_LIBRARY_PATH gives. The CUDA stand-in patches torch,
# and the stand-in NVML, loaded by its path before any other, is what a load by name finds.
_STAND_INS = """
def _stand_ins(nvml, cuda):
    import ctypes, importlib.util, sys
    ctypes.CDLL(nvml)
    spec = importlib.util.spec_from_file_location("cuda_stand_in", cuda)
    sys.modules["cuda_stand_in"] = module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
_stand_ins({nvml!r}, {cuda!r})
del _stand_ins
"""


def forked_onto_gpu_machine(code: str, env: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """``code`` and ``env`` (of :func:`gpu_machine_env`) for a child forked with torch
    imported (``support.preloaded``) rather than started in ``env``: the code, which sets
    up both stand-ins first, and the environment, without what only a start reads."""
    nvml = Path(env["LD_LIBRARY_PATH"]) / "libnvidia-ml.so.1"
    cuda = HERE / "cuda_stand_in" / "sitecustomize.py"
    rest = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    return _STAND_INS.format(nvml=str(nvml), cuda=str(cuda)) + code, rest


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
