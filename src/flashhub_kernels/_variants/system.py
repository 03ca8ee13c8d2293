"""Build variants: the name grammar, system detection, matching and preference order.

Everything here is pure except :func:`detect_system`, which asks torch what it was
built with, and :func:`with_device`, which reads what the GPU is. A variant name describes
one build of a kernel::

    torch213-cxx11-cu126-x86_64-linux      exact build: torch 2.13, C++11 ABI, CUDA 12.6
    torch213-cu126-x86_64-linux            the same build without the ABI tag (newer builders)
    torch212-metal-aarch64-darwin          exact build off Linux (no ABI tag)
    torch-stable-abi210-cpu-x86_64-linux   stable ABI: any torch >= 2.10
    tvm-ffi01-cu128-x86_64-linux           built against tvm-ffi 0.1 (not torch), CUDA 12.8
    torch210-cann81-aarch64-linux          an Ascend NPU build (torch_npu, CANN 8.1)
    torch-cuda                             noarch for one backend (Python + Triton, say)
    torch-neuron, torch-tpu, torch-npu     noarch for AWS Neuron, TPU, Ascend NPU
    torch-universal                        pure Python, fits everything

The name is not all a build's fit: its ``metadata.json`` may list the device archs it
was compiled for (:mod:`._archs`), which :mod:`._variant_choice` checks.
"""

from __future__ import annotations

import sys
from functools import cache

from .._models.record import Record, frozen_error
from .._utils.text import escape_controls
from .archs import gfx_name, is_digits, parse_cuda_arch

TYPE_CHECKING = False  # not typing's: see _record
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence
    from types import ModuleType
    from typing import Literal

    Tier = Literal["stable-abi", "exact", "tvm-ffi", "noarch", "universal"]

# Names that do not parse (tier None) are never accepted; they rank last all the same.
_TIER_RANK: dict[Tier | None, int] = {
    "stable-abi": 0,
    "exact": 1,
    "tvm-ffi": 2,
    "noarch": 3,
    "universal": 4,
    None: 5,
}

# The grammar is checked with str methods, not regular expressions: compiling those cost
# the first kernel import of every process more than all of its parsing.
_TORCH_PREFIX = "torch"
_STABLE_PREFIX = "torch-stable-abi"
_TVM_FFI_PREFIX = "tvm-ffi"
# Backend tags: these words, or a prefix and a count of digits (xpu: any number of them).
_PLAIN_BACKEND_TAGS = ("cpu", "metal", "neuron", "tpu")
_NUMBERED_BACKEND_TAGS: tuple[tuple[str, int, int | None], ...] = (
    ("cu", 2, 3),
    ("rocm", 2, 3),
    ("xpu", 0, None),
    ("cann", 2, 3),
)
_PLATFORM_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # arch and OS: 1 to 32 of these
_PLATFORM_MAX = 32
# Backends of noarch names.
NOARCH_BACKENDS = ("cpu", "cuda", "rocm", "xpu", "metal", "neuron", "tpu", "npu")


def _framework_version(
    token: str, prefix: str, *, zero_major: bool = False
) -> tuple[int, int] | None:
    """``("torch213", "torch")`` -> ``(2, 13)``: after ``prefix``, one digit of major
    (``0`` only if ``zero_major``) and one or two of minor, where ``05`` (the zero-padded
    form of the 0.1.2 release) means 5. ``None`` if ``token`` is not of that form."""
    digits = token[len(prefix) :] if token.startswith(prefix) else ""
    if not (2 <= len(digits) <= 3 and is_digits(digits)):
        return None
    if digits[0] == "0" and not zero_major:
        return None
    return int(digits[0]), int(digits[1:])


def _is_backend_tag(tag: str) -> bool:
    if tag in _PLAIN_BACKEND_TAGS:
        return True
    for prefix, least, most in _NUMBERED_BACKEND_TAGS:
        if tag.startswith(prefix):
            digits = tag[len(prefix) :]
            fits = least <= len(digits) and (most is None or len(digits) <= most)
            return fits and (not digits or is_digits(digits))
    return False


def _is_platform_word(word: str) -> bool:
    return 0 < len(word) <= _PLATFORM_MAX and not word.strip(_PLATFORM_CHARS)


class VariantNameError(ValueError):
    """A string is not a variant name of the grammar above."""


_FIELDS = ("tier", "backend", "backend_tag", "torch", "abi", "arch", "os", "tvm_ffi")


class Variant(str):
    """A variant name: a ``str`` that also carries the fields parsed from it.

    It compares, hashes, sorts, formats and serializes (``json.dumps``) as the plain
    name, so ``variant == "torch-universal"`` holds. ``Variant(name)`` parses ``name``
    and raises :class:`VariantNameError` when it is not a variant name. Immutable.

    Attributes:
        tier: ``"exact"``, ``"stable-abi"``, ``"tvm-ffi"``, ``"noarch"`` or
            ``"universal"``; ``None`` for a published name that does not parse (every
            other field is ``None`` then).
        backend: ``cpu``, ``cuda``, ``rocm``, ``xpu``, ``metal``, ``neuron``, ``tpu`` or
            ``npu``; ``None`` for ``torch-universal``.
        backend_tag: ``cu126``, ``rocm63``, ``xpu20251``, ``cpu``, ``metal``, ``cann81``
            and so on; ``None`` for noarch names.
        torch: ``(major, minor)`` of torch (the minimum for stable-ABI builds); ``None``
            for noarch and tvm-ffi names.
        abi: ``cxx11`` or ``cxx98`` on Linux exact builds that carry the tag, else ``None``.
        arch, os: ``x86_64``, ``linux`` and so on; ``None`` for noarch names.
        tvm_ffi: ``(major, minor)`` of tvm-ffi for tvm-ffi builds, else ``None``.
    """

    __slots__ = _FIELDS
    tier: Tier | None
    backend: str | None
    backend_tag: str | None
    torch: tuple[int, int] | None
    abi: str | None
    arch: str | None
    os: str | None
    tvm_ffi: tuple[int, int] | None

    def __new__(cls, name: str) -> Variant:
        return parse_variant(name)

    @classmethod
    def _make(
        cls,
        name: str,
        tier: Tier | None = None,
        *,
        backend: str | None = None,
        backend_tag: str | None = None,
        torch: tuple[int, int] | None = None,
        abi: str | None = None,
        arch: str | None = None,
        os: str | None = None,
        tvm_ffi: tuple[int, int] | None = None,
    ) -> Variant:
        self = str.__new__(cls, name)
        values = (tier, backend, backend_tag, torch, abi, arch, os, tvm_ffi)
        for field, value in zip(_FIELDS, values, strict=True):
            object.__setattr__(self, field, value)
        return self

    def __setattr__(self, name: str, value: object) -> None:
        raise frozen_error(name)

    def __delattr__(self, name: str) -> None:
        raise frozen_error(name, "delete")

    def __reduce__(self) -> tuple[Callable[[str], Variant], tuple[str]]:
        return as_variant, (str(self),)

    def __repr__(self) -> str:
        return f"Variant({str.__repr__(self)})"

    @property
    def name(self) -> str:
        """The name as a plain ``str``."""
        return str(self)

    @property
    def backend_version(self) -> tuple[int, int] | None:
        """``(12, 6)`` for ``cu126``, ``(6, 3)`` for ``rocm63``; ``None`` otherwise."""
        return backend_version(self.backend_tag) if self.backend_tag else None


class SystemInfo(Record):
    """What a torch runtime can load: this machine's (:func:`detect_system`), or another's
    (:func:`system_from_variant`, for ``flashhub variants --system``).

    Attributes:
        torch, cxx11_abi, backend, backend_tag, arch, os: as in variant names.
        cuda_capability: the CUDA device's compute capability, ``(9, 0)``; ``None`` when
            unknown (then a build's CUDA archs are not checked).
        rocm_arch: the ROCm device's gfx target (``"gfx942"``), likewise.
        free_threaded: a free-threaded Python before 3.15, which loads no native build
            unless the build declares it (see :mod:`._variant_choice`).
        tvm_ffi: ``(major, minor)`` of the installed tvm-ffi; ``None`` without one.
        macos: ``(major, minor)`` of macOS on a Mac; ``None`` elsewhere or unknown.
        probe_device: read the device's capability or gfx target when a build lists
            archs (:func:`with_device`). This machine's own record says so; a build
            without archs never needs the reading.
    """

    torch: tuple[int, int]
    cxx11_abi: bool
    backend: str
    backend_tag: str
    arch: str
    os: str
    cuda_capability: tuple[int, int] | None
    rocm_arch: str | None
    free_threaded: bool
    tvm_ffi: tuple[int, int] | None
    macos: tuple[int, int] | None
    probe_device: bool

    def __init__(
        self,
        torch: tuple[int, int],
        cxx11_abi: bool,
        backend: str,
        backend_tag: str,
        arch: str,
        os: str,
        cuda_capability: tuple[int, int] | None = None,
        rocm_arch: str | None = None,
        free_threaded: bool = False,
        tvm_ffi: tuple[int, int] | None = None,
        macos: tuple[int, int] | None = None,
        probe_device: bool = False,
    ) -> None:
        self._init(
            torch,
            cxx11_abi,
            backend,
            backend_tag,
            arch,
            os,
            cuda_capability,
            rocm_arch,
            free_threaded,
            tvm_ffi,
            macos,
            probe_device,
        )

    @property
    def abi(self) -> str:
        return "cxx11" if self.cxx11_abi else "cxx98"

    @property
    def knows_device(self) -> bool:
        """Whether the device's capability (CUDA) or gfx target (ROCm) is known, or can be
        asked for: then the archs a build lists are checked."""
        if self.backend == "cuda":
            return self.probe_device or self.cuda_capability is not None
        if self.backend == "rocm":
            return self.probe_device or self.rocm_arch is not None
        return False

    def describe(self) -> str:
        device = ""
        if self.backend == "cuda" and self.cuda_capability is not None:
            device = ", CUDA capability {}.{}".format(*self.cuda_capability)
        elif self.backend == "rocm" and self.rocm_arch is not None:
            device = f", {self.rocm_arch}"
        python = ", free-threaded Python" if self.free_threaded else ""
        return (
            f"torch {self.torch[0]}.{self.torch[1]} ({self.abi}), {self.backend_tag}, "
            f"{self.arch}-{self.os}{device}{python}"
        )


def backend_version(tag: str) -> tuple[int, int] | None:
    """``cu126`` -> ``(12, 6)``, ``rocm63`` -> ``(6, 3)``, ``cann81`` -> ``(8, 1)``;
    ``None`` for unversioned tags."""
    for prefix in ("cu", "rocm", "cann"):
        digits = tag[len(prefix) :]
        if tag.startswith(prefix) and digits.isdigit():
            return int(digits[:-1]), int(digits[-1])
    return None


def _backend_of(tag: str) -> str:
    if tag.startswith("cu"):
        return "cuda"
    if tag.startswith("rocm"):
        return "rocm"
    if tag.startswith("xpu"):
        return "xpu"
    if tag.startswith("cann"):
        return "npu"  # Ascend NPUs: torch_npu's device type, as noarch names say
    return tag


def parse_variant(name: str) -> Variant:
    """Parse a variant name; raise :class:`VariantNameError` saying what is wrong."""
    if name == "torch-universal":
        return Variant._make(name, "universal")
    if name.startswith("torch-") and name[6:] in NOARCH_BACKENDS:
        return Variant._make(name, "noarch", backend=name[6:])
    parts = name.split("-")
    tier: Tier
    abi = None
    if name.startswith(_STABLE_PREFIX):
        tier, rest = "stable-abi", parts[3:]
        version = _framework_version("-".join(parts[:3]), _STABLE_PREFIX)
    elif name.startswith(_TVM_FFI_PREFIX):
        tier, rest = "tvm-ffi", parts[2:]
        version = _framework_version("-".join(parts[:2]), _TVM_FFI_PREFIX, zero_major=True)
    else:
        tier, rest = "exact", parts[1:]
        version = _framework_version(parts[0], _TORCH_PREFIX)
        abi = rest.pop(0) if rest and rest[0] in ("cxx11", "cxx98") else None
    if version is None or len(rest) != 3:
        raise VariantNameError(
            f"{name!r} is not a variant name: expected e.g. 'torch213-cxx11-cpu-x86_64-linux', "
            "'torch-stable-abi210-cu126-x86_64-linux', 'torch-cuda' or 'torch-universal'"
        )
    tag, arch, os_name = rest
    if not (_is_platform_word(arch) and _is_platform_word(os_name)):
        raise VariantNameError(f"{name!r}: arch and OS must be words such as 'x86_64' and 'linux'")
    if not _is_backend_tag(tag):
        raise VariantNameError(
            f"{name!r}: unknown backend {tag!r} (cpu, cuNNN, rocmNN, xpu, metal, neuron, tpu, "
            "cannNN)"
        )
    return Variant._make(
        name,
        tier,
        backend=_backend_of(tag),
        backend_tag=tag,
        torch=None if tier == "tvm-ffi" else version,
        abi=abi,
        arch=arch,
        os=os_name,
        tvm_ffi=version if tier == "tvm-ffi" else None,
    )


def as_variant(name: str) -> Variant:
    """``name`` parsed; a name that does not parse gets ``tier=None`` and no fields."""
    try:
        return parse_variant(name)
    except VariantNameError:
        return Variant._make(name)


_GPU_TORCH = {"cuda": "CUDA", "rocm": "ROCm"}


def gpu_torch_needed(published: Sequence[str]) -> str | None:
    """``"CUDA"``, ``"ROCm"`` or ``"CUDA or ROCm"`` when every one of ``published`` is a
    build for those backends (so only such a build of torch loads any), else ``None``."""
    backends = {as_variant(name).backend for name in published}
    gpus = sorted({_GPU_TORCH[b] for b in backends if b is not None and b in _GPU_TORCH})
    if not gpus or len(gpus) != len(backends):
        return None
    return " or ".join(gpus)


def build_variant_name(system: SystemInfo, *, abi_tag: bool = True) -> str:
    """The exact-build variant name a kernel built on ``system`` gets.

    On Linux it carries the C++ ABI tag unless ``abi_tag`` is false (newer builders
    leave it out: ``torch213-cpu-x86_64-linux``).
    """
    abi = f"-{system.abi}" if system.os == "linux" and abi_tag else ""
    major, minor = system.torch
    return f"torch{major}{minor}{abi}-{system.backend_tag}-{system.arch}-{system.os}"


def check_compatible(variant: Variant, system: SystemInfo) -> str | None:
    """``None`` if ``variant`` loads on ``system``, else the reason it does not."""
    if variant.tier is None:
        return f"{variant.name!r} is not a variant name"
    if variant.tier == "universal":
        return None
    if variant.backend != system.backend:
        # Only a CPU build can be forced (with_backend): never advise another backend.
        forcible = variant.backend == "cpu"
        return (
            f"built for {variant.backend_tag or variant.backend}, but this system uses "
            f"{system.backend_tag}"
            + (" (pass backend='cpu' to load it anyway)" if forcible else "")
        )
    if variant.tier == "noarch":
        return None
    if (variant.arch, variant.os) != (system.arch, system.os):
        return f"built for {variant.arch}-{variant.os}, this system is {system.arch}-{system.os}"
    if variant.tvm_ffi is not None:
        return _check_tvm_ffi(variant.tvm_ffi, system.tvm_ffi) or _check_backend_version(
            variant, system
        )
    assert variant.torch is not None
    have, want = system.torch, variant.torch
    if variant.tier == "stable-abi" and want > have:
        return f"needs torch >= {want[0]}.{want[1]} (stable ABI), found {have[0]}.{have[1]}"
    if variant.tier == "exact" and want != have:
        return f"built for torch {want[0]}.{want[1]}, found {have[0]}.{have[1]}"
    if variant.abi is not None and variant.abi != system.abi:
        return f"built with the {variant.abi} C++ ABI, this torch uses {system.abi}"
    return _check_backend_version(variant, system)


def _check_tvm_ffi(built: tuple[int, int], have: tuple[int, int] | None) -> str | None:
    if have is None:
        return "built against tvm-ffi {}.{}, which is not installed".format(*built)
    if built != have:
        return "built against tvm-ffi {}.{}, found {}.{}".format(*built, *have)
    return None


# Metal builds are compiled for Metal 4 (`-std=metal4.0`), which came with macOS 26.
METAL_MIN_MACOS = (26, 0)


def _check_backend_version(variant: Variant, system: SystemInfo) -> str | None:
    assert variant.backend_tag is not None
    if variant.backend == "cuda":
        built, have = variant.backend_version, backend_version(system.backend_tag)
        assert built is not None and have is not None
        if built[0] != have[0] or built[1] > have[1]:
            return (
                f"built for CUDA {built[0]}.{built[1]}, this torch has CUDA {have[0]}.{have[1]} "
                "(needs the same major and a minor at or below it)"
            )
        return None
    if variant.backend_tag != system.backend_tag:
        return f"built for {variant.backend_tag}, this system has {system.backend_tag}"
    if variant.backend == "metal" and (system.macos or (0, 0)) < METAL_MIN_MACOS:
        found = "macOS {}.{}".format(*system.macos) if system.macos else "an unknown macOS"
        needed = "{}.{}".format(*METAL_MIN_MACOS)
        return f"Metal builds require macOS {needed} or later, this system runs {found}"
    return None


def preference_key(variant: Variant) -> tuple[int, int, int, bool, str]:
    """Sort key: stable ABI (newest torch first), exact builds, noarch, universal.

    Within a tier the newest backend version (highest CUDA minor) comes first, and of
    two names for the same build the one without a C++ ABI tag (what newer builders
    write) before the tagged one.
    """
    torch_minor = variant.torch[1] if variant.torch else 0
    backend_minor = (variant.backend_version or (0, 0))[1]
    tagged = variant.abi is not None
    return (_TIER_RANK[variant.tier], -torch_minor, -backend_minor, tagged, variant.name)


class VariantAccepted(Record):
    """A published variant this system can load.

    ``variant`` is the variant's name, a :class:`Variant`: a ``str`` with the parsed
    fields (``variant.backend``, ``variant.torch``, ...).
    """

    variant: Variant

    def __init__(self, variant: Variant) -> None:
        self._init(_coerce(variant))

    @property
    def variant_str(self) -> str:
        """The name as a plain ``str``; ``variant`` is one too."""
        return str(self.variant)


class VariantRejected(Record):
    """A published variant this system cannot load, and why.

    ``variant`` is as for :class:`VariantAccepted`; for a name that does not parse its
    ``tier`` and other fields are ``None``.
    """

    variant: Variant
    reason: str

    def __init__(self, variant: Variant, reason: str) -> None:
        self._init(_coerce(variant), reason)

    @property
    def variant_str(self) -> str:
        """The name as a plain ``str``; ``variant`` is one too."""
        return str(self.variant)


def _coerce(variant: str) -> Variant:
    # Code written for 0.1.2 builds these records from plain names.
    return variant if isinstance(variant, Variant) else as_variant(variant)


VariantVerdict = VariantAccepted | VariantRejected


def judge_variants(names: Iterable[str], system: SystemInfo) -> list[VariantVerdict]:
    """Judge every published variant: accepted ones first, in preference order."""
    accepted: list[VariantAccepted] = []
    rejected: list[VariantRejected] = []
    for name in dict.fromkeys(names):
        try:
            variant = parse_variant(name)
        except VariantNameError as exc:
            rejected.append(VariantRejected(Variant._make(name), str(exc)))
            continue
        reason = check_compatible(variant, system)
        if reason is None:
            accepted.append(VariantAccepted(variant))
        else:
            rejected.append(VariantRejected(variant, reason))
    accepted.sort(key=lambda a: preference_key(a.variant))
    return [*accepted, *rejected]


def format_trace(verdicts: Iterable[VariantVerdict]) -> str:
    """One line per variant, for error messages and ``flashhub variants``.

    Names come from the CDN: their control characters, newlines included, are escaped.
    """
    lines = []
    for res in verdicts:
        name = escape_controls(res.variant)
        if isinstance(res, VariantAccepted):
            lines.append(f"  + {name}: compatible")
        else:
            lines.append(f"  - {name}: {escape_controls(res.reason)}")
    return "\n".join(lines) or "  (no variants are published)"


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
        cuda_major, cuda_minor = backend_version(system.backend_tag) or (0, 0)
        tags = [f"cu{cuda_major}{m}" for m in range(cuda_minor, -1, -1)]
    platform_tail = f"{system.arch}-{system.os}"
    for torch_minor in range(minor, 8, -1) if major == 2 else [minor]:
        names += [f"torch-stable-abi{major}{torch_minor}-{t}-{platform_tail}" for t in tags]
    for tag in tags:
        exact = system._replace(backend_tag=tag)
        if system.os == "linux":
            names.append(build_variant_name(exact, abi_tag=False))
        names.append(build_variant_name(exact))
        if minor < 10:  # the zero-padded spelling of the 0.1.2 release
            names.append(
                build_variant_name(exact).replace(
                    f"torch{major}{minor}", f"torch{major}0{minor}", 1
                )
            )
    if system.tvm_ffi is not None:
        tvm_major, tvm_minor = system.tvm_ffi
        names += [f"tvm-ffi{tvm_major}{tvm_minor}-{t}-{platform_tail}" for t in tags]
    names += [f"torch-{system.backend}", "torch-universal"]
    return names


def system_from_variant(
    name: str, *, cuda_capability: str | None = None, rocm_arch: str | None = None
) -> SystemInfo:
    """The machine that loads the exact build ``name`` (``torch213-cxx11-cu126-x86_64-linux``):
    its torch, C++ ABI (``cxx11`` when the name carries no tag), backend, arch and OS.

    ``cuda_capability`` (``"9.0"``) or ``rocm_arch`` (``"gfx942"``) name its device, so
    that the archs builds list are checked. A Metal machine is taken to run a macOS that
    loads Metal builds.

    Raises:
        VariantNameError: ``name`` is not the name of an exact build.
        ValueError: the capability or gfx target is malformed, or not of ``name``'s backend.
    """
    variant = parse_variant(name)
    if variant.tier != "exact":
        raise VariantNameError(
            f"{name!r} does not name one machine: give the exact build it loads, "
            "e.g. torch213-cxx11-cu126-x86_64-linux"
        )
    assert variant.backend and variant.backend_tag and variant.torch
    assert variant.arch and variant.os
    system = SystemInfo(
        variant.torch,
        variant.abi != "cxx98",
        variant.backend,
        variant.backend_tag,
        variant.arch,
        variant.os,
        macos=METAL_MIN_MACOS if variant.backend == "metal" else None,
    )
    return with_device_named(system, cuda_capability=cuda_capability, rocm_arch=rocm_arch)


def with_device_named(
    system: SystemInfo, *, cuda_capability: str | None = None, rocm_arch: str | None = None
) -> SystemInfo:
    """``system`` with the device named: ``cuda_capability="9.0"`` or ``rocm_arch="gfx942"``
    (feature flags such as ``:xnack-`` are dropped).

    Raises:
        ValueError: the value is malformed, or ``system`` runs another backend.
    """
    if cuda_capability is not None:
        if system.backend != "cuda":
            raise ValueError(f"a CUDA capability was given, but {system.describe()} runs no CUDA")
        return system._replace(
            cuda_capability=parse_capability(cuda_capability), probe_device=False
        )
    if rocm_arch is not None:
        if system.backend != "rocm":
            raise ValueError(f"a ROCm arch was given, but {system.describe()} runs no ROCm")
        gfx = gfx_name(rocm_arch)
        if not (gfx.startswith("gfx") and len(gfx) > 3 and gfx.isascii() and gfx.isalnum()):
            raise ValueError(f"{rocm_arch!r} is not a ROCm gfx target such as 'gfx942'")
        return system._replace(rocm_arch=gfx, probe_device=False)
    return system


def parse_capability(text: str) -> tuple[int, int]:
    """``"9.0"`` -> ``(9, 0)``; :class:`ValueError` for anything but ``MAJOR.MINOR``."""
    parsed = parse_cuda_arch(text)
    if parsed is None or parsed[2:] != ("", False):
        raise ValueError(f"{text!r} is not a CUDA compute capability such as '9.0'")
    return parsed[0], parsed[1]


def with_backend(system: SystemInfo, backend: str) -> SystemInfo:
    """``system`` as if its torch ran ``backend`` (``backend="cpu"`` on a GPU machine)."""
    if backend == system.backend:
        return system
    if backend != "cpu":
        raise ValueError(
            f"cannot select backend {backend!r}: this torch runs {system.backend_tag}; "
            "only 'cpu' can be forced on another backend's machine"
        )
    return system._replace(backend="cpu", backend_tag="cpu")


def with_device(system: SystemInfo) -> SystemInfo:
    """``system``, with its device's capability or gfx target read if ``probe_device``
    (once per process), without creating a CUDA or HIP context (:mod:`._device_arch`)."""
    return _probed(system) if system.probe_device else system


@cache
def _probed(system: SystemInfo) -> SystemInfo:
    from .device_arch import cuda_capability, rocm_gfx

    capability, gfx = system.cuda_capability, system.rocm_arch
    if system.backend == "cuda" and capability is None:
        capability = cuda_capability().capability
    if system.backend == "rocm" and gfx is None:
        read = rocm_gfx().gfx
        gfx = gfx_name(read) if read else None
    return system._replace(cuda_capability=capability, rocm_arch=gfx, probe_device=False)


def _normalize_arch(machine: str) -> str:
    machine = machine.lower()
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _normalize_os(platform_name: str) -> str:
    if platform_name.startswith("linux"):
        return "linux"
    return {"darwin": "darwin", "win32": "windows"}.get(platform_name, platform_name)


def _major_minor(version: str) -> tuple[int, int] | None:
    """``"2.13.0+cpu"`` -> ``(2, 13)``, ``"8.1.RC1"`` -> ``(8, 1)``; ``None`` if unparsable."""
    parts = version.split(".")[:2]
    if len(parts) == 2 and all(is_digits(part) for part in parts):
        return int(parts[0]), int(parts[1])
    return None


@cache
def detect_system() -> SystemInfo:
    """Ask the installed torch what it can load. Imports torch (once per process).

    The device itself is asked about only when a build lists archs (:func:`with_device`).
    """
    import platform

    import torch

    version = _major_minor(torch.__version__)  # "2.13.0+cpu", "2.14.0a0+git1234"
    if version is None:
        raise RuntimeError(f"cannot parse the torch version {torch.__version__!r}")
    backend, tag = _detect_backend(torch)
    mac = _major_minor(platform.mac_ver()[0]) if sys.platform == "darwin" else None
    return SystemInfo(
        torch=version,
        cxx11_abi=bool(torch.compiled_with_cxx11_abi()),
        backend=backend,
        backend_tag=tag,
        arch=_normalize_arch(platform.machine()),
        os=_normalize_os(sys.platform),
        free_threaded=_free_threaded(),
        tvm_ffi=_tvm_ffi_version(),
        macos=mac,
        probe_device=True,
    )


def _detect_backend(torch: ModuleType) -> tuple[str, str]:
    """The backend and its variant tag (``("cuda", "cu126")``) that ``torch`` runs.

    TPU and Neuron come first: their extensions (``torch.backends.tpu``, ``torch.neuron``)
    load into a torch built for another backend, CUDA's say.
    """
    if hasattr(torch.backends, "tpu"):
        return "tpu", "tpu"
    if hasattr(torch, "neuron"):
        return "neuron", "neuron"
    if torch.version.cuda:
        cuda_major, cuda_minor = torch.version.cuda.split(".")[:2]
        return "cuda", f"cu{cuda_major}{cuda_minor}"
    if getattr(torch.version, "hip", None):
        hip_major, hip_minor = str(torch.version.hip).split(".")[:2]
        return "rocm", f"rocm{hip_major}{hip_minor}"
    if getattr(torch.version, "xpu", None):
        digits = "".join(c for c in str(torch.version.xpu) if c.isascii() and c.isdigit())
        return "xpu", "xpu" + digits[:5]
    if sys.platform == "darwin" and torch.backends.mps.is_available():
        return "metal", "metal"
    privateuse = getattr(torch._C, "_get_privateuse1_backend_name", None)
    if privateuse is not None and privateuse() == "npu":  # torch_npu is imported
        return "npu", _cann_tag()
    return "cpu", "cpu"


def _cann_tag() -> str:
    """``cann81`` for CANN 8.1, as torch_npu reports it; ``cann`` when it does not."""
    try:
        from torch_npu.utils.collect_env import (  # type: ignore[import-not-found]
            get_cann_version,
        )

        version = _major_minor(str(get_cann_version()))
    except Exception:  # an old or broken torch_npu: the noarch torch-npu still fits
        version = None
    return f"cann{version[0]}{version[1]}" if version else "cann"


def _free_threaded() -> bool:
    """A free-threaded build of Python before 3.15 (``python3.13t``): its ABI loads none
    of the native libraries torch kernels are built as, whether or not the GIL has been
    switched back on at run time. A GIL that is off (``sys._is_gil_enabled()``) says so too.
    No such build predates 3.13: earlier versions skip the import of ``sysconfig``
    (most of a millisecond of every first load)."""
    if sys.version_info >= (3, 15):
        return False
    gil_enabled = getattr(sys, "_is_gil_enabled", None)
    if gil_enabled is not None and not gil_enabled():
        return True
    if sys.version_info < (3, 13):
        return False
    import sysconfig

    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def _tvm_ffi_version() -> tuple[int, int] | None:
    """The installed tvm-ffi's major and minor; without one, only its spec was looked up."""
    import importlib.util

    if importlib.util.find_spec("tvm_ffi") is None:
        return None
    import tvm_ffi  # type: ignore[import-not-found]

    return _major_minor(str(getattr(tvm_ffi, "__version__", "")))
