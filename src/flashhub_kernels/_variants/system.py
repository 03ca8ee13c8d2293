"""This system: what the installed torch can load, and the device it runs on.

:func:`detect_system` asks torch what it was built with (once per process);
:func:`with_device` reads what the GPU is, and only when a build lists archs, without
creating a CUDA or HIP context (:mod:`.device_arch`).
"""

from __future__ import annotations

import sys
from functools import cache

from .._models.names import is_digits
from .._models.record import Record
from .grammar import backend_tag, tag_version

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from types import ModuleType


class SystemInfo(Record):
    """What a torch runtime can load: this machine's (:func:`detect_system`), or another's
    (:func:`system_from_variant`, for ``flashhub variants --system``).

    Attributes:
        torch, cxx11_abi, backend, backend_tag, arch, os: as in variant names.
        backend_version: the backend's ``(major, minor)`` as detected: ``(7, 10)`` for
            ROCm 7.10, which ``backend_tag`` cannot tell from 71.0 (``rocm710``); ``None``:
            read from ``backend_tag`` (see :attr:`runtime_version`).
        cuda_capability: the CUDA device's compute capability, ``(9, 0)``; ``None`` when
            unknown (then a build's CUDA archs are not checked).
        rocm_arch: the ROCm device's gfx target (``"gfx942"``), likewise.
        free_threaded: a free-threaded Python, which loads no abi3 build unless the build
            declares it (see :mod:`~flashhub_kernels._variants.choice`).
        python: ``(major, minor)`` of CPython, which a build's name may ask a minimum of.
        tvm_ffi: ``(major, minor)`` of the installed tvm-ffi; ``None`` without one.
        macos: ``(major, minor)`` of macOS on a Mac; ``None`` elsewhere or unknown.
        probe_device: read the device's capability or gfx target when a build lists
            archs (:func:`~.device_arch.with_device`). This machine's own record says so; a build
            without archs never needs the reading.
    """

    torch: tuple[int, int]
    cxx11_abi: bool
    backend: str
    backend_tag: str
    arch: str
    os: str
    cuda_capability: tuple[int, int] | None = None
    rocm_arch: str | None = None
    free_threaded: bool = False
    tvm_ffi: tuple[int, int] | None = None
    macos: tuple[int, int] | None = None
    probe_device: bool = False
    python: tuple[int, int] = (sys.version_info.major, sys.version_info.minor)
    backend_version: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """This system in the cache's records: the variant index keeps the variant picked
        for it by this key (every field, so another torch or device is another key)."""
        return repr(self)

    @property
    def abi(self) -> str | None:
        """The C++ ABI tag of this torch's builds: only Linux builds carry one."""
        if self.os != "linux":
            return None
        return "cxx11" if self.cxx11_abi else "cxx98"

    @property
    def runtime_version(self) -> tuple[int, int] | None:
        """The backend's ``(major, minor)`` (CUDA 12.8: ``(12, 8)``); ``None`` for a backend
        without versions (CPU, Metal)."""
        return self.backend_version or tag_version(self.backend_tag)

    @property
    def knows_device(self) -> bool:
        """Whether the device's capability (CUDA) or gfx target (ROCm) is known, or can be
        asked for: then the archs a build lists are checked."""
        if self.backend == "cuda":
            return self.probe_device or self.cuda_capability is not None
        if self.backend == "rocm":
            return self.probe_device or self.rocm_arch is not None
        return False


# Metal builds are compiled for Metal 4 (`-std=metal4.0`), which came with macOS 26.
METAL_MIN_MACOS = (26, 0)


def this_system(backend: str | None = None) -> SystemInfo:
    """This machine, as if its torch ran ``backend`` (``"cpu"`` on a GPU machine) when
    one is given; see :func:`with_backend`."""
    return with_backend(detect_system(), backend)


def with_backend(system: SystemInfo, backend: str | None) -> SystemInfo:
    """``system`` as if its torch ran ``backend`` (``backend="cpu"`` on a GPU machine);
    ``None``: as it is."""
    if backend is None or backend == system.backend:
        return system
    if backend != "cpu":
        from ..errors import BackendUnavailableError

        raise BackendUnavailableError(
            f"cannot select backend {backend!r}: this torch runs {system.backend_tag}; "
            "only 'cpu' can be forced on another backend's machine",
            hint=f"load the kernel without the backend (or with 'cpu'), or run a "
            f"{backend} build of torch",
        )
    return system._replace(backend="cpu", backend_tag="cpu", backend_version=None)


def _normalize_arch(machine: str) -> str:
    machine = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _major_minor(version: str, *, minor_optional: bool = False) -> tuple[int, int] | None:
    """``"2.13.0+cpu"`` -> ``(2, 13)``, ``"8.1.RC1"`` -> ``(8, 1)``; ``None`` if unparsable.
    With ``minor_optional``, ``"26"`` is ``(26, 0)`` (macOS reports a ``.0`` release so)."""
    parts = version.split(".")[:2]
    if minor_optional and len(parts) == 1:
        parts.append("0")
    if len(parts) == 2 and all(is_digits(part) for part in parts):
        return int(parts[0]), int(parts[1])
    return None


@cache
def detect_system() -> SystemInfo:
    """Ask the installed torch what it can load. Imports torch (once per process).

    The device itself is asked about only when a build lists archs
    (:func:`~.device_arch.with_device`).
    """
    import platform

    import torch

    version = _major_minor(torch.__version__)  # "2.13.0+cpu", "2.14.0a0+git1234"
    if version is None:
        raise RuntimeError(f"cannot parse the torch version {torch.__version__!r}")
    backend, tag, backend_version = _detect_backend(torch)
    os_name = platform.system().lower()  # "linux", "darwin", "windows"; as kernels asks it
    mac = None
    if os_name == "darwin":
        mac = _major_minor(platform.mac_ver()[0], minor_optional=True)
    return SystemInfo(
        torch=version,
        cxx11_abi=bool(torch.compiled_with_cxx11_abi()),
        backend=backend,
        backend_tag=tag,
        backend_version=backend_version,
        arch=_normalize_arch(platform.machine()),
        os=os_name,
        free_threaded=_free_threaded(),
        tvm_ffi=_tvm_ffi_version(),
        macos=mac,
        probe_device=True,
    )


def _detect_backend(torch: ModuleType) -> tuple[str, str, tuple[int, int] | None]:
    """The backend that ``torch`` runs, its variant tag and its version:
    ``("cuda", "cu126", (12, 6))``.

    TPU and Neuron come first: their extensions (``torch.backends.tpu``, ``torch.neuron``)
    load into a torch built for another backend, CUDA's say.
    """
    if hasattr(torch.backends, "tpu"):
        return "tpu", "tpu", None
    if hasattr(torch, "neuron"):
        return "neuron", "neuron", None
    if torch.version.cuda:
        return _versioned("cuda", _major_minor(torch.version.cuda))
    if rocm := getattr(torch.version, "rocm", None) or getattr(torch.version, "hip", None):
        return _versioned("rocm", _major_minor(str(rocm).split("-")[0]))  # "7.14.0-abc"
    if torch.backends.mps.is_available():
        return "metal", "metal", None
    if getattr(torch.version, "xpu", None):  # "20250101": oneAPI 2025.1, as builds name it
        digits = "".join(c for c in str(torch.version.xpu) if c.isascii() and c.isdigit())
        return "xpu", "xpu" + digits[:4] + digits[5:6], None
    privateuse = getattr(torch._C, "_get_privateuse1_backend_name", None)
    if privateuse is not None and privateuse() == "npu":  # torch_npu is imported
        return _versioned("npu", _cann_version())
    return "cpu", "cpu", None


def _versioned(
    backend: str, version: tuple[int, int] | None
) -> tuple[str, str, tuple[int, int] | None]:
    """A versioned backend, its tag (``cu126``; a bare ``cann`` when the version is unknown)
    and its version."""
    if version is None:
        return backend, "cann" if backend == "npu" else backend, None
    return backend, backend_tag(backend, version), version


def _cann_version() -> tuple[int, int] | None:
    """CANN's version as torch_npu reports it; ``None`` when it does not."""
    try:
        from torch_npu.utils.collect_env import (  # type: ignore[import-not-found]
            get_cann_version,
        )

        return _major_minor(str(get_cann_version()))
    except Exception:  # an old or broken torch_npu: the noarch torch-npu still fits
        return None


def _free_threaded() -> bool:
    """A free-threaded build of Python (``python3.13t``): it loads no abi3 library, the ABI
    torch kernels are built for, whether or not the GIL has been switched back on at run
    time (only abi3t ones, from 3.15). A GIL that is off (``sys._is_gil_enabled()``) says
    so too."""
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        return True
    return free_threaded_build()


def free_threaded_build() -> bool:
    """Whether this Python is a free-threaded build (``Py_GIL_DISABLED``), whatever its GIL
    does at run time. No such build predates 3.13: earlier versions skip the import of
    ``sysconfig`` (most of a millisecond of every first load)."""
    if sys.version_info < (3, 13):
        return False
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@cache
def mlx_installed() -> bool:
    """Whether MLX can be imported, which ``mlx-<backend>`` builds need."""
    import importlib.util

    return importlib.util.find_spec("mlx") is not None


def _tvm_ffi_version() -> tuple[int, int] | None:
    """The installed tvm-ffi's major and minor; without one, only its spec was looked up."""
    import importlib.util

    if importlib.util.find_spec("tvm_ffi") is None:
        return None
    import tvm_ffi  # type: ignore[import-not-found]

    return _major_minor(str(getattr(tvm_ffi, "__version__", "")))
