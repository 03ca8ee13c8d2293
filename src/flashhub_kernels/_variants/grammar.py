"""Variant names and device arch names: their grammar, parsed. Pure.

A variant name describes one build of a kernel::

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
was compiled for (``9.0a``, ``8.0+PTX``, ``gfx942``), which :mod:`.compat` checks.
"""

from __future__ import annotations

from .._models.record import frozen_error

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal

    Tier = Literal["stable-abi", "exact", "tvm-ffi", "noarch", "universal"]

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


def is_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits (``str.isdigit`` alone takes ``²``)."""
    return text.isascii() and text.isdigit()


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
