"""The names of the builds a system loads: its own exact build's, and every name it could
load, best first, to probe a version that publishes no ``variants.json`` for them."""

from __future__ import annotations

UNIVERSAL = "torch-universal"  # a pure-Python build, for every system

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .system import SystemInfo


def candidate_names(system: SystemInfo) -> list[str]:
    """Every variant name ``system`` could load, best first; used to probe a CDN.

    Only needed when a version has no ``variants.json``. Stable-ABI builds are probed
    back to torch 2.9 (the first release with a usable stable ABI) and CUDA builds back
    to minor 0 of the system's major; tvm-ffi builds only where tvm-ffi is installed.
    """
    names: list[str] = []
    major, minor = system.torch
    tags = [system.backend_tag]
    if system.backend == "cuda":
        cuda_major, cuda_minor = system.runtime_version or (0, 0)
        tags = [f"cu{cuda_major}{m}" for m in range(cuda_minor, -1, -1)]
    platform_tail = f"{system.arch}-{system.os}"
    for torch_minor in range(minor, 8, -1) if major == 2 else [minor]:
        names += [f"torch-stable-abi{major}{torch_minor}-{t}-{platform_tail}" for t in tags]
    # Exact builds: untagged names before tagged ones (newer builders leave the C++ ABI tag
    # out), and the zero-padded spelling of the 0.1.2 release before the plain one.
    for tagged in (False, True) if system.os == "linux" else (True,):
        for tag in tags:
            name = build_variant_name(system._replace(backend_tag=tag), abi_tag=tagged)
            if tagged and minor < 10:
                names.append(name.replace(f"torch{major}{minor}", f"torch{major}0{minor}", 1))
            names.append(name)
    if system.tvm_ffi is not None:
        tvm_major, tvm_minor = system.tvm_ffi
        names += [f"tvm-ffi{tvm_major}{tvm_minor}-{t}-{platform_tail}" for t in tags]
    names += [f"torch-{system.backend}", UNIVERSAL]
    return names


def build_variant_name(system: SystemInfo, *, abi_tag: bool = True) -> str:
    """The exact-build variant name a kernel built on ``system`` gets.

    On Linux it carries the C++ ABI tag unless ``abi_tag`` is false (newer builders
    leave it out: ``torch213-cpu-x86_64-linux``).
    """
    abi = f"-{system.abi}" if system.os == "linux" and abi_tag else ""
    major, minor = system.torch
    return f"torch{major}{minor}{abi}-{system.backend_tag}-{system.arch}-{system.os}"
