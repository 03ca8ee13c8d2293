"""The architecture of the GPU this process runs on (a CUDA compute capability, a ROCm gfx
target), read without creating a CUDA or HIP context.

A build's ``metadata.json`` may list the archs it was compiled for; judging them needs
the device's. Asking torch for it initializes the GPU runtime: about 200 ms and a
context's GPU memory in every process that imports a kernel, even one that never runs
it, and a process forked after that cannot use CUDA at all. So torch is asked only once
it has initialized the runtime itself; otherwise the driver is:

- CUDA: NVML (``libnvidia-ml.so.1``, part of the driver), through :mod:`~.nvml`;
- ROCm: the amdgpu driver's topology in sysfs (``/sys/class/kfd/kfd/topology/nodes``).

Which device is judged: the first of those the process sees, in the runtime's order
(torch's current device until the program picks another). ``CUDA_VISIBLE_DEVICES``
(indices, ``GPU-`` UUIDs or their unique prefixes, and whole ``MIG-`` UUIDs, read up to
the first entry that names no device, as CUDA does) and ``CUDA_DEVICE_ORDER`` are
honoured; CUDA's default order (``FASTEST_FIRST``) is taken to be the highest compute
capability first, then PCI bus order, and ``PCI_BUS_ID`` is PCI bus order. On ROCm,
``ROCR_VISIBLE_DEVICES`` then ``HIP_VISIBLE_DEVICES`` (or ``CUDA_VISIBLE_DEVICES``)
select from the topology's GPUs. Where the visible devices differ, a process that uses
another than the first should be given only the devices it uses.

When no source answers (no driver library, no device visible), the arch is unknown and
the archs builds list are not checked: the build the variant names choose loads, and
``flashhub -v`` says why the device was not judged.
"""

from __future__ import annotations

import contextlib
import os
import sys
from functools import cache

from .. import _constants
from .._models.names import is_digits
from .._models.record import Record
from .._utils.logs import logger
from .archs import gfx_name, parse_cuda_arch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from .system import SystemInfo


GPU_RECORD_NAME = "gpus"  # in the cache's root: see read_record
# The cgroups whose GPUs the record keeps, the latest written: each job of a batch system
# has its own, on each machine that shares the cache.
_CGROUPS_KEPT = 256


class Gpu(Record):
    """One NVIDIA GPU: its UUID (``GPU-...``), PCI location (domain, bus, device) and
    CUDA compute capability."""

    uuid: str
    pci: tuple[int, int, int]
    capability: tuple[int, int]


class GpuRecord(Record):
    """The cache's record of NVML's answers: each GPU's capability, by UUID, and the GPUs
    a process in each cgroup may open, by :func:`cgroup_key`."""

    capabilities: Mapping[str, tuple[int, int]]
    opened: Mapping[str, tuple[str, ...]]


class DeviceArch(Record):
    """What was read of the device: its compute capability (CUDA) or gfx target (ROCm),
    ``None`` when unknown, and where it came from or why it is unknown."""

    capability: tuple[int, int] | None = None
    gfx: str | None = None
    source: str = ""


def cuda_capability() -> DeviceArch:
    """The compute capability of the CUDA device this process runs on (module docstring)."""
    return _reported("CUDA", _read_cuda_capability())


def _read_cuda_capability() -> DeviceArch:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        major, minor = torch.cuda.get_device_capability()
        return DeviceArch((major, minor), source="torch, CUDA being initialized")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    try:
        seen, read_from = _visible_cuda_gpus(visible)
    except OSError as exc:  # NvmlError: caught as its base, so a warm load skips .nvml
        return DeviceArch(source=f"NVML cannot tell: {exc}")
    if not seen:
        return DeviceArch(source=f"{read_from}: no device this process sees{_shown(visible)}")
    source = f"{read_from}, device 0 of {len(seen)} ({seen[0].uuid}){_shown(visible)}"
    return DeviceArch(seen[0].capability, source=source + _differ([g.capability for g in seen]))


def _visible_cuda_gpus(visible: str | None) -> tuple[list[Gpu], str]:
    """The GPUs this process sees under ``CUDA_VISIBLE_DEVICES=visible``, in CUDA's order,
    and where they were read (see :func:`_nvidia_gpus`).

    Raises:
        NvmlError: NVML was needed, and cannot tell.
    """
    migs = tuple(e.strip() for e in (visible or "").split(",") if e.strip().startswith("MIG-"))
    gpus, mig_parents, read_from = _nvidia_gpus(migs)
    ordered = cuda_order(gpus, os.environ.get("CUDA_DEVICE_ORDER"))
    aliases = {mig: ordered.index(gpu) for mig, gpu in mig_parents.items() if gpu in ordered}
    seen = [ordered[i] for i in select_visible([g.uuid for g in ordered], visible, aliases)]
    if unknown := next((mig for mig in migs if mig not in mig_parents), None):
        read_from += (
            f" (which knows no MIG instance {unknown}, so CUDA's list ends there: name a MIG"
            " instance by its whole UUID, as nvidia-smi -L prints it)"
        )
    return seen, read_from


def _nvidia_gpus(migs: tuple[str, ...]) -> tuple[list[Gpu], dict[str, Gpu], str]:
    """This machine's GPUs that this process may open, the GPU of each of ``migs`` (MIG
    instances), and where they were read: the cache's record when it knows which of the
    GPUs the driver lists this process's cgroup may open, and each one's capability, else
    NVML (whose answer is recorded then).

    Raises:
        NvmlError: NVML was needed, and cannot tell.
    """
    from .._config import cache_root

    record, cgroup = cache_root() / GPU_RECORD_NAME, cgroup_key()
    known = None if migs else recorded_gpus(_constants.PROC_GPUS, read_record(record), cgroup)
    if known:
        return known, {}, f"{record} (NVML's earlier answer)"
    from .nvml import read_gpus

    facts, mig_facts = read_gpus(migs)
    gpus = [Gpu(*gpu) for gpu in facts]
    write_record(record, gpus, cgroup)
    return gpus, {mig: Gpu(*gpu) for mig, gpu in mig_facts.items()}, "NVML"


def cgroup_key() -> str | None:
    """This process's cgroup on this boot (:func:`~.._constants.gpu_access`), as the record
    names it; ``None`` where the cgroup cannot be read."""
    access = _constants.gpu_access()
    if access[1] is None:
        return None
    import hashlib

    return "cgroup-" + hashlib.blake2b(repr(access).encode(), digest_size=8).hexdigest()


def recorded_gpus(listing: str, record: GpuRecord, cgroup: str | None) -> list[Gpu] | None:
    """The GPUs the driver lists in ``listing`` (``/proc/driver/nvidia/gpus``: a directory
    per GPU, named by its PCI address) that ``record`` says a process in ``cgroup`` may
    open (every one where ``cgroup`` is ``None``: it could not be read), with their
    capabilities as recorded; ``None`` when there are none, or the record does not know
    the cgroup, or the capability of one, or one the cgroup may open is not listed.

    The driver lists every GPU of the machine, whichever a process may open.
    """
    opened = record.opened.get(cgroup) if cgroup else None
    if cgroup and opened is None:
        return None
    try:
        addresses = sorted(os.listdir(listing))
    except OSError:
        return None
    gpus = []
    for address in addresses:
        uuid = _listed_uuid(os.path.join(listing, address, "information"))
        pci = _pci_location(address)
        if uuid is None or pci is None:
            return None
        if opened is not None and uuid not in opened:
            continue
        if uuid not in record.capabilities:
            return None
        gpus.append(Gpu(uuid, pci, record.capabilities[uuid]))
    if opened is not None and len(gpus) < len(opened):
        return None
    return gpus or None


def _listed_uuid(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "GPU UUID":
            return value.strip()
    return None


def _pci_location(address: str) -> tuple[int, int, int] | None:
    """``"0000:3b:00.0"`` -> ``(0, 0x3b, 0)``: PCI domain, bus and device."""
    parts = address.split(".", 1)[0].split(":")
    try:
        domain, bus, device = (int(part, 16) for part in parts)
    except ValueError:
        return None
    return domain, bus, device


def read_record(path: Path) -> GpuRecord:
    """What :func:`write_record` wrote: a line per GPU, ``<UUID> <major>.<minor>``, and a
    line per cgroup, ``<cgroup key> <UUID>,<UUID>...`` (which a version that keeps no
    cgroups skips); empty where there is none.

    A GPU's capability never changes and its UUID names it on every machine, and a
    cgroup's key is its boot's too, so one record serves a cache that several machines
    share. One that is not a regular file (a pipe would wait for a writer) is none.
    """
    from .._cache.trust import distrust_record
    from .._config import env_flag
    from .._utils.filesystem import read_regular

    try:  # another user's, in a root others may write (sticky): theirs to choose
        if distrust_record(os.lstat(path), shared=env_flag("FLASHHUB_CACHE_SHARED")):
            return GpuRecord({}, {})
        lines = read_regular(path).decode("utf-8", errors="replace").splitlines()
    except OSError:
        return GpuRecord({}, {})
    capabilities, opened = {}, {}
    for key, _, value in (line.partition(" ") for line in lines):
        if key.startswith("cgroup-"):
            opened[key] = tuple(value.split(","))
        elif (parsed := parse_cuda_arch(value)) and parsed[2:] == ("", False):  # MAJOR.MINOR
            capabilities[key] = parsed[:2]
    return GpuRecord(capabilities, opened)


def write_record(path: Path, gpus: Sequence[Gpu], cgroup: str | None) -> None:
    """Add ``gpus`` to the record at ``path``, as the GPUs a process in ``cgroup`` may open
    (the latest cgroups written kept); a cache that cannot be written keeps none."""
    known = read_record(path)
    opened = dict(known.opened)
    if cgroup and gpus:
        opened.pop(cgroup, None)  # written last
        opened[cgroup] = tuple(gpu.uuid for gpu in gpus)
    capabilities = {**known.capabilities, **{gpu.uuid: gpu.capability for gpu in gpus}}
    record = GpuRecord(capabilities, dict(list(opened.items())[-_CGROUPS_KEPT:]))
    if record == known:
        return
    from .._utils.filesystem import write_atomic

    lines = [f"{uuid} {major}.{minor}\n" for uuid, (major, minor) in capabilities.items()]
    lines += [f"{key} {','.join(uuids)}\n" for key, uuids in record.opened.items()]
    with contextlib.suppress(OSError):
        write_atomic(path, "".join(lines).encode("ascii", "replace"), mode=0o600, durable=False)


def cuda_order(gpus: Sequence[Gpu], order: str | None) -> list[Gpu]:
    """``gpus`` in the order CUDA numbers them under ``CUDA_DEVICE_ORDER=order``."""
    if order == "PCI_BUS_ID":
        return sorted(gpus, key=lambda g: g.pci)
    return sorted(gpus, key=lambda g: ((-g.capability[0], -g.capability[1]), g.pci))


def select_visible(
    uuids: Sequence[str], spec: str | None, aliases: Mapping[str, int] | None = None
) -> list[int]:
    """The positions in ``uuids`` (the devices in the runtime's order) that a
    ``*_VISIBLE_DEVICES`` value ``spec`` leaves visible, in its order.

    ``None`` (unset) leaves every device. An entry is an index into ``uuids``, a UUID or
    a prefix of exactly one, or a key of ``aliases`` (a MIG instance: the position of
    its GPU); the first entry that is none of these ends the list, as it does for CUDA
    (so ``""`` and ``"-1"`` leave none).
    """
    if spec is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in (e.strip() for e in spec.split(",")):
        position = _position(entry, uuids, aliases or {})
        if position is None:
            break
        chosen.append(position)
    return chosen


def _position(entry: str, uuids: Sequence[str], aliases: Mapping[str, int]) -> int | None:
    if is_digits(entry):
        return int(entry) if int(entry) < len(uuids) else None
    if entry in aliases:
        return aliases[entry]
    matches = [i for i, uuid in enumerate(uuids) if entry and uuid.startswith(entry)]
    return matches[0] if len(matches) == 1 else None


def rocm_gfx() -> DeviceArch:
    """The gfx target of the ROCm device this process runs on (module docstring)."""
    return _reported("ROCm", _read_rocm_gfx())


def _read_rocm_gfx() -> DeviceArch:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        return DeviceArch(gfx=str(properties.gcnArchName), source="torch, HIP being initialized")
    seen = _visible_rocm_gpus()
    if not seen:
        return DeviceArch(source=f"{_constants.KFD_NODES} lists no device this process sees")
    gfx = [target for _, target in seen]
    source = f"{_constants.KFD_NODES}, device 0 of {len(gfx)}{_differ(gfx)}"
    return DeviceArch(gfx=gfx[0], source=source)


def _visible_rocm_gpus() -> list[tuple[str, str]]:
    """``(uuid, gfx target)`` of the ROCm GPUs this process sees, in HIP's order."""
    seen = kfd_gpus(_constants.KFD_NODES)
    seen = [
        seen[i]
        for i in select_visible([u for u, _ in seen], os.environ.get("ROCR_VISIBLE_DEVICES"))
    ]
    hip = os.environ.get("HIP_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    return [seen[i] for i in select_visible([u for u, _ in seen], hip)]


def kfd_gpus(nodes: str) -> list[tuple[str, str]]:
    """``(uuid, gfx target)`` of each GPU in the amdgpu topology at ``nodes``, in its
    order (CPU nodes, whose ``gfx_target_version`` is 0, left out)."""
    try:
        names = sorted((n for n in os.listdir(nodes) if is_digits(n)), key=int)
    except OSError:
        return []
    gpus = []
    for name in names:
        properties = _kfd_properties(os.path.join(nodes, name, "properties"))
        version = properties.get("gfx_target_version", 0)
        if version:
            gpus.append((f"GPU-{properties.get('unique_id', 0):016x}", gfx_target(version)))
    return gpus


def _kfd_properties(path: str) -> dict[str, int]:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            lines = file.read().splitlines()
    except OSError:
        return {}
    pairs = (line.split() for line in lines)
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2 and is_digits(p[1])}


def gfx_target(version: int) -> str:
    """KFD's ``gfx_target_version`` as a target name: ``90010`` -> ``gfx90a``, ``90402`` ->
    ``gfx942``, ``110000`` -> ``gfx1100``."""
    major, minor, stepping = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor:x}{stepping:x}"


def gpu_capability(backend: str, index: int | None) -> int | None:
    """``major * 10 + minor`` of the ``backend`` (``cuda`` or ``rocm``) device ``index``
    (``None``: torch's current device), as ``torch.cuda.get_device_capability`` gives
    it, without creating a CUDA or HIP context; ``None`` when unknown.

    Torch is asked once it has initialized the runtime; otherwise the driver is (module
    docstring), for the ``index``-th device this process sees.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        major, minor = torch.cuda.get_device_capability(index)
        return int(major) * 10 + int(minor)
    position = index or 0
    capabilities = _driver_capabilities(backend, _visible_selection(backend))
    return capabilities[position] if position < len(capabilities) else None


# What selects the visible devices, and their order, for CUDA and for ROCm.
_VISIBLE_VARIABLES = (
    ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"),
    ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
)


def _visible_selection(backend: str) -> tuple[str | None, ...]:
    """The values of the variables that select and order ``backend``'s visible devices."""
    return tuple(os.environ.get(name) for name in _VISIBLE_VARIABLES[backend == "rocm"])


@cache
def _driver_capabilities(backend: str, visible: tuple[str | None, ...]) -> tuple[int, ...]:
    """The capabilities of the devices the process sees, read from the driver; once per
    ``visible`` (the values of the variables that select them): a GPU's never changes."""
    if backend == "rocm":
        return tuple(gfx_capability(target) for _, target in _visible_rocm_gpus())
    try:
        gpus, _ = _visible_cuda_gpus(visible[0])
    except OSError:  # NvmlError: no driver library, or it cannot tell
        return ()
    return tuple(major * 10 + minor for major, minor in (gpu.capability for gpu in gpus))


def gfx_capability(target: str) -> int:
    """The capability HIP gives a gfx target, ``major * 10 + minor``: ``gfx942`` -> 94,
    ``gfx90a`` -> 90, ``gfx1100`` -> 110 (the stepping, its last digit, left out)."""
    return int(target[3:-2]) * 10 + int(target[-2], 16)


def _reported(runtime: str, reading: DeviceArch) -> DeviceArch:
    arch = reading.capability or reading.gfx
    if arch is None:
        logger.info(
            "the %s device's arch is unknown, so the archs builds list are not checked: %s",
            runtime,
            reading.source,
        )
    else:
        logger.info(
            "the %s device's arch is %s, read from %s", runtime, _arch_text(arch), reading.source
        )
    return reading


def _arch_text(arch: tuple[int, int] | str) -> str:
    return arch if isinstance(arch, str) else "{}.{}".format(*arch)


def _shown(visible: str | None) -> str:
    return "" if visible is None else f" (CUDA_VISIBLE_DEVICES={visible!r})"


def _differ(archs: Sequence[tuple[int, int] | str]) -> str:
    """A warning, for ``flashhub -v``, when the visible devices are not all alike."""
    if len(set(archs)) < 2:
        return ""
    listed = ", ".join(_arch_text(arch) for arch in archs)
    return (
        f"; the visible devices differ ({listed}): builds are judged for device 0, so a "
        "process that runs on another should see only the devices it uses"
    )


def with_device(system: SystemInfo) -> SystemInfo:
    """``system``, with its device's capability or gfx target read if ``probe_device``
    (once per process and choice of device), without creating a CUDA or HIP context."""
    return _probed(system, _device_chosen_by(system.backend)) if system.probe_device else system


def _device_chosen_by(backend: str) -> tuple[str | int | None, ...]:
    """What decides which device the process uses: torch's current one once the runtime
    is initialized, else the variables that select and order the visible devices (a
    program may set them before it first uses the GPU, after a first load)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return ("torch", int(torch.cuda.current_device()))
    return _visible_selection(backend)


@cache
def _probed(system: SystemInfo, chosen_by: tuple[str | int | None, ...]) -> SystemInfo:
    """:func:`with_device`'s reading, for the device ``chosen_by`` selects."""
    capability, gfx = system.cuda_capability, system.rocm_arch
    if system.backend == "cuda" and capability is None:
        capability = cuda_capability().capability
    if system.backend == "rocm" and gfx is None:
        read = rocm_gfx().gfx
        gfx = gfx_name(read) if read else None
    return system._replace(cuda_capability=capability, rocm_arch=gfx, probe_device=False)
