"""The NVIDIA GPUs of this machine, read from the driver's NVML (``libnvidia-ml.so.1``).

NVML answers without a CUDA context: asking the CUDA runtime (as
``torch.cuda.get_device_capability()`` does) creates one, which costs about 200 ms and
some GPU memory, and breaks a process forked afterwards. The library ships with the
driver, and is reached through ``ctypes``.
"""

from __future__ import annotations

import ctypes

TYPE_CHECKING = False
if TYPE_CHECKING:
    # One GPU: its UUID ("GPU-..."), PCI location (domain, bus, device) and CUDA compute
    # capability (major, minor).
    GpuFacts = tuple[str, tuple[int, int, int], tuple[int, int]]

LIBRARY = "libnvidia-ml.so.1"
_SUCCESS = 0
# A GPU this process may not open (a container's device cgroup): CUDA does not list it.
_NO_PERMISSION = 4
# What nvmlDeviceGetHandleByUUID answers for a UUID that names no device.
_NAMES_NONE = (2, 6)  # NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_FOUND
_UUID_BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE
_FUNCTIONS = (
    "nvmlInit_v2",
    "nvmlShutdown",
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByUUID",
    "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetCudaComputeCapability",
)


class NvmlError(OSError):
    """NVML is missing, or answered with an error."""


class _PciInfo(ctypes.Structure):
    # nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it.
    _fields_ = [
        ("bus_id_legacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pci_device_id", ctypes.c_uint),
        ("pci_subsystem_id", ctypes.c_uint),
        ("bus_id", ctypes.c_char * 32),
    ]


def read_gpus(mig_uuids: tuple[str, ...] = ()) -> tuple[list[GpuFacts], dict[str, GpuFacts]]:
    """Every GPU NVML sees that this process may open, as CUDA lists them, and the GPU
    each of ``mig_uuids`` (MIG instances, in ``CUDA_VISIBLE_DEVICES``'s order) is part of,
    up to the first that names no instance, where CUDA's list ends: for each, its UUID,
    PCI location and compute capability.

    Raises:
        NvmlError: the library cannot be loaded or initialized, or a query fails.
    """
    nvml = _load()
    _check(nvml.nvmlInit_v2(), "nvmlInit_v2")
    try:
        count = ctypes.c_uint()
        _check(nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)), "nvmlDeviceGetCount_v2")
        handles = (_handle_by_index(nvml, index) for index in range(count.value))
        gpus = [_gpu(nvml, handle) for handle in handles if handle is not None]
        parents = {}
        for uuid in mig_uuids:
            parent = _mig_parent(nvml, uuid)
            if parent is None:
                break
            parents[uuid] = _gpu(nvml, parent)
        return gpus, parents
    finally:
        nvml.nvmlShutdown()


def _load() -> ctypes.CDLL:
    try:
        nvml = ctypes.CDLL(LIBRARY)
    except OSError as exc:
        raise NvmlError(f"{LIBRARY} could not be loaded ({exc})") from None
    missing = [name for name in _FUNCTIONS if not hasattr(nvml, name)]
    if missing:  # a driver older than these calls, or not NVML at all
        raise NvmlError(f"{LIBRARY} has no {', '.join(missing)}")
    return nvml


def _check(code: int, call: str) -> None:
    if code != _SUCCESS:
        raise NvmlError(f"{call} failed with NVML error {code}")


def _handle_by_index(nvml: ctypes.CDLL, index: int) -> ctypes.c_void_p | None:
    """The GPU ``index``; ``None`` for one this process may not open."""
    handle = ctypes.c_void_p()
    code = nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index), ctypes.byref(handle))
    if code == _NO_PERMISSION:
        return None
    _check(code, "nvmlDeviceGetHandleByIndex_v2")
    return handle


def _mig_parent(nvml: ctypes.CDLL, uuid: str) -> ctypes.c_void_p | None:
    """The GPU that the MIG instance ``uuid`` is part of; ``None`` where NVML knows no
    device by that UUID (a prefix of one, or a typo)."""
    mig = ctypes.c_void_p()
    code = nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(mig))
    if code in _NAMES_NONE:
        return None
    _check(code, f"nvmlDeviceGetHandleByUUID for {uuid}")
    parent = ctypes.c_void_p()
    code = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, ctypes.byref(parent))
    _check(code, f"nvmlDeviceGetDeviceHandleFromMigDeviceHandle for {uuid}")
    return parent


def _gpu(nvml: ctypes.CDLL, handle: ctypes.c_void_p) -> GpuFacts:
    uuid = ctypes.create_string_buffer(_UUID_BUFFER)
    _check(nvml.nvmlDeviceGetUUID(handle, uuid, ctypes.c_uint(_UUID_BUFFER)), "nvmlDeviceGetUUID")
    pci = _PciInfo()
    _check(nvml.nvmlDeviceGetPciInfo_v3(handle, ctypes.byref(pci)), "nvmlDeviceGetPciInfo_v3")
    major, minor = ctypes.c_int(), ctypes.c_int()
    code = nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor))
    _check(code, "nvmlDeviceGetCudaComputeCapability")
    return (
        uuid.value.decode("ascii", "replace"),
        (pci.domain, pci.bus, pci.device),
        (major.value, minor.value),
    )
