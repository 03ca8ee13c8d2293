"""Variant names: their grammar, parsed. Pure.

A variant name describes one build of a kernel, in the legacy spelling (packed versions)
or in today's (dotted versions, full backend names, and the least CPython and the Python
ABI of the build's compiled parts; a legacy name stands for ``cpython-3.9-abi3``)::

    torch213-cxx11-cu126-x86_64-linux                    exact build (the ABI tag optional)
    torch-2.13-cuda-12.6-cpython-3.11-abi3-x86_64-linux  the same, today's spelling
    torch-stable-abi210-cpu-x86_64-linux                 stable ABI: any torch >= 2.10
    tvm-ffi01-cu128-x86_64-linux                         built against tvm-ffi 0.1
    sdk-cuda-12.8-cpython-3.12-abi3-x86_64-linux         an SDK (sdk-cpython-..., sdk-cuda, sdk)
    torch-cuda, mlx-metal, torch-universal               noarch: Python (+ Triton) only

docs/kernel-requirements.md lists every form. A build's ``metadata.json`` may also list
the device archs it was compiled for, which :mod:`.compat` checks.
"""

from __future__ import annotations

from .._models.names import is_digits
from .._models.record import frozen_error

TYPE_CHECKING = False  # not typing's: this module is on the warm path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Literal

    Tier = Literal["stable-abi", "exact", "tvm-ffi", "sdk", "noarch", "universal"]

# The grammar is checked with str methods, not regular expressions: compiling those cost
# the first kernel import of every process more than all of its parsing.
_PLAIN_BACKENDS = ("cpu", "metal", "neuron", "tpu")
# Versioned backends: today's name, its legacy tag's prefix, the backend as torch names it.
_VERSIONED: tuple[tuple[str, str, str], ...] = (
    ("cuda", "cu", "cuda"),
    ("rocm", "rocm", "rocm"),
    ("xpu", "xpu", "xpu"),
    ("cann", "cann", "npu"),  # Ascend NPUs: torch_npu's device type
)
_ABI_TAGS = ("cxx11", "cxx98")
PYTHON_ABIS = ("abi3", "abi3t")  # best first; abi3t: CPython >= 3.15, free-threaded or not
_LEGACY_PYTHON = (3, 9)
_WORD_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # arch, OS, noarch backend: 1 to 32


def _is_word(word: str) -> bool:
    return 0 < len(word) <= 32 and not word.strip(_WORD_CHARS)


def _packed(token: str, prefix: str, *, zero_major: bool = False) -> tuple[int, int] | None:
    """``("torch213", "torch")`` -> ``(2, 13)``: after ``prefix``, one digit of major
    (``0`` only if ``zero_major``) and one or two of minor, where ``05`` (the zero-padded
    form of the 0.1.2 release) means 5. ``None`` if ``token`` is not of that form."""
    digits = token[len(prefix) :] if token.startswith(prefix) else ""
    if not (2 <= len(digits) <= 3 and is_digits(digits)):
        return None
    if digits[0] == "0" and not zero_major:
        return None
    return int(digits[0]), int(digits[1:])


def _dotted(token: str) -> tuple[int, int] | None:
    """``"12.8"`` -> ``(12, 8)``; ``None`` unless ``MAJOR.MINOR``, each 1 to 4 digits."""
    major, dot, minor = token.partition(".")
    if dot and all(0 < len(d) <= 4 and is_digits(d) for d in (major, minor)):
        return int(major), int(minor)
    return None


def backend_of_tag(tag: str) -> tuple[str, tuple[int, int] | None] | None:
    """A legacy backend tag's backend and version: ``cu126`` -> ``("cuda", (12, 6))``,
    ``rocm714`` -> ``("rocm", (7, 14))``, ``cann81`` -> ``("npu", (8, 1))``, ``cpu`` ->
    ``("cpu", None)``; ``None`` when ``tag`` is none. The minor is the last digit (but
    in ``rocm714``), as builders pack it."""
    if tag in _PLAIN_BACKENDS:
        return tag, None
    for _name, prefix, backend in _VERSIONED:
        digits = tag[len(prefix) :]
        if not tag.startswith(prefix) or len(digits) > 8 or (digits and not is_digits(digits)):
            continue
        if not digits:  # an xpu torch that reports no version
            return (backend, None) if prefix == "xpu" else None
        if len(digits) >= 2:
            split = 1 if digits == "714" and prefix == "rocm" else len(digits) - 1
            return backend, (int(digits[:split]), int(digits[split:]))
    return None


def tag_version(tag: str) -> tuple[int, int] | None:
    """The version a legacy backend tag packs (``cu126`` -> ``(12, 6)``); ``None`` if none."""
    found = backend_of_tag(tag)
    return found[1] if found else None


def backend_tag(backend: str, version: tuple[int, int]) -> str:
    """The legacy tag of a versioned backend: ``("cuda", (12, 8))`` -> ``cu128``."""
    prefix = next(p for name, p, b in _VERSIONED if backend in (name, b))
    return f"{prefix}{version[0]}{version[1]}"


class VariantNameError(ValueError):
    """A string is not a variant name of the grammar above."""


_FIELDS = ["tier", "framework", "backend", "backend_tag", "backend_version", "torch", "abi"]
_FIELDS += ["arch", "os", "tvm_ffi", "python", "python_abi"]


class Variant(str):
    """A variant name: a ``str`` that also carries the fields parsed from it.

    It compares, hashes, sorts, formats and serializes (``json.dumps``) as the plain
    name, so ``variant == "torch-universal"`` holds. ``Variant(name)`` parses ``name``
    and raises :class:`VariantNameError` when it is not a variant name. Immutable.

    Attributes:
        tier: ``"exact"``, ``"stable-abi"``, ``"tvm-ffi"``, ``"sdk"``, ``"noarch"`` or
            ``"universal"``; ``None`` for a published name that does not parse (every
            other field is ``None`` then).
        framework: ``torch``, ``tvm-ffi``, ``mlx`` (noarch only) or ``sdk``.
        backend: ``cpu``, ``cuda``, ``rocm``, ``npu`` (CANN)...; ``None`` for
            ``torch-universal`` and SDKs for any backend.
        backend_tag, backend_version: the backend's legacy tag (``cu126``) and
            ``(major, minor)``, whichever spelling the name uses.
        torch: ``(major, minor)`` of torch (the minimum for stable-ABI builds).
        abi: ``cxx11`` or ``cxx98`` on exact builds that carry the tag, else ``None``.
        arch, os: ``x86_64``, ``linux`` and so on; ``None`` without compiled parts.
        tvm_ffi: ``(major, minor)`` of tvm-ffi for tvm-ffi builds.
        python, python_abi: the least CPython the compiled parts load on and their ABI
            (``(3, 9)`` and ``abi3`` for a legacy name); ``None`` without compiled parts.
    """

    __slots__ = _FIELDS
    tier: Tier | None
    framework: str | None
    backend: str | None
    backend_tag: str | None
    backend_version: tuple[int, int] | None
    torch: tuple[int, int] | None
    abi: str | None
    arch: str | None
    os: str | None
    tvm_ffi: tuple[int, int] | None
    python: tuple[int, int] | None
    python_abi: str | None

    def __new__(cls, name: str) -> Variant:
        return parse_variant(name)

    @classmethod
    def _make(cls, name: str, tier: Tier | None = None, **fields: object) -> Variant:
        self = str.__new__(cls, name)
        for field in _FIELDS:
            object.__setattr__(self, field, tier if field == "tier" else fields.pop(field, None))
        assert not fields, fields
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
    def variant_str(self) -> str:
        """The name as a plain ``str``, under Hugging Face kernels' name for it."""
        return str(self)


def parse_variant(name: str) -> Variant:
    """Parse a variant name; raise :class:`VariantNameError` saying what is wrong."""
    parts = name.split("-")
    noarch = parts[0] in ("torch", "mlx") and len(parts) > 1 and not parts[1][:1].isdigit()
    if noarch and parts[1] != "stable":
        backend = "-".join(parts[1:])
        if backend == "universal":  # torch-universal, or mlx-universal with MLX installed
            return Variant._make(name, "universal", framework=parts[0])
        if not _is_word(backend):
            raise _not_a_name(name, f"{backend!r} is no backend such as 'cuda'")
        return Variant._make(name, "noarch", framework=parts[0], backend=_torch_backend(backend))
    if parts[0] == "sdk":
        return _parse_compiled(name, "sdk", None, parts[1:], legacy=False)
    tier, version, count, legacy = _framework(parts)
    if version is None:
        raise _not_a_name(
            name,
            "expected e.g. 'torch213-cxx11-cpu-x86_64-linux', 'torch-2.13-cpu-cpython-3.11-"
            "abi3-x86_64-linux', 'torch-stable-abi210-cu126-x86_64-linux', 'torch-cuda' or "
            "'torch-universal'",
        )
    return _parse_compiled(name, tier, version, parts[count:], legacy=legacy)


def is_variant_name(name: str) -> bool:
    """Whether ``name`` is a variant name this client can load."""
    try:
        parse_variant(name)
    except VariantNameError:
        return False
    return True


def _framework(parts: list[str]) -> tuple[Tier, tuple[int, int] | None, int, bool]:
    """The framework the name starts with: its tier, version, how many parts it takes,
    and whether it is spelled the legacy way."""
    if parts[:3] == ["torch", "stable", "abi"] and len(parts) > 3:
        return "stable-abi", _dotted(parts[3]), 4, False
    if parts[:2] == ["torch", "stable"] and len(parts) > 2:
        return "stable-abi", _packed(parts[2], "abi"), 3, True
    if parts[:2] == ["tvm", "ffi"] and len(parts) > 2:
        return "tvm-ffi", _dotted(parts[2]), 3, False
    if parts[0] == "tvm" and len(parts) > 1:
        return "tvm-ffi", _packed(parts[1], "ffi", zero_major=True), 2, True
    legacy = parts[0] != "torch"
    version = _packed(parts[0], "torch") if legacy else _dotted(parts[1] if parts[1:] else "")
    return "exact", version, 1 if legacy else 2, legacy


def _parse_compiled(
    name: str, tier: Tier, version: tuple[int, int] | None, rest: list[str], *, legacy: bool
) -> Variant:
    """The rest of a build with a framework ``version`` (``None``: an SDK): the C++ ABI
    tag, the backend, the CPython version and ABI, the arch and the OS."""
    abi = rest.pop(0) if tier == "exact" and rest[:1] and rest[0] in _ABI_TAGS else None
    fields = {"framework": tier if tier in ("sdk", "tvm-ffi") else "torch"}
    if tier == "sdk" and "cpython" not in rest:  # `sdk`, `sdk-<backend>`: no compiled parts
        if len(rest) > 1 or not all(_is_word(word) for word in rest):
            raise _not_a_name(name, "an SDK without compiled parts is 'sdk-<backend>'")
        backend = _torch_backend(rest[0]) if rest else None
        return Variant._make(name, "sdk", backend=backend, **fields)
    python = (_LEGACY_PYTHON, "abi3")
    if not legacy:
        marker = rest.index("cpython") if "cpython" in rest else len(rest)
        python = _python(rest[marker:-2]) or ((0, 0), "")
        if not python[1]:
            raise _not_a_name(
                name, "expected 'cpython-<X.Y>-abi3' (or abi3t, from 3.15) before the arch and OS"
            )
        rest = rest[:marker] + rest[-2:]
    if not (len(rest) >= 2 and _is_word(rest[-2]) and _is_word(rest[-1])):
        raise _not_a_name(name, "it must end with the arch and OS, such as 'x86_64-linux'")
    found = _backend(rest[:-2], legacy=legacy, sdk=tier == "sdk")
    if found is None:
        raise _not_a_name(
            name,
            f"unknown backend {'-'.join(rest[:-2])!r} (cpu, cuda-X.Y or cuXY, rocm-X.Y or "
            "rocmXY, xpu, metal, neuron, tpu, cann-X.Y or cannXY)",
        )
    kind, backend_version, tag = found
    return Variant._make(
        name,
        tier,
        backend=kind,
        backend_tag=tag,
        backend_version=backend_version,
        torch=version if fields["framework"] == "torch" else None,
        tvm_ffi=version if tier == "tvm-ffi" else None,
        abi=abi,
        arch=rest[-2],
        os=rest[-1],
        python=python[0],
        python_abi=python[1],
        **fields,
    )


def _python(words: list[str]) -> tuple[tuple[int, int], str] | None:
    """``["cpython", "3.12", "abi3"]`` -> ``((3, 12), "abi3")``; ``None`` if malformed."""
    version = _dotted(words[1]) if len(words) == 3 and words[0] == "cpython" else None
    if version is None or words[2] not in PYTHON_ABIS:
        return None
    return None if words[2] == "abi3t" and version < (3, 15) else (version, words[2])


def _backend(
    words: list[str], *, legacy: bool, sdk: bool
) -> tuple[str | None, tuple[int, int] | None, str | None] | None:
    """The backend, its version and legacy tag from the words a name spells it with:
    ``["cu126"]`` (legacy), ``["cuda", "12.6"]``, ``["cpu"]``; ``[]`` for an SDK's any
    backend. ``None`` if the words are no backend."""
    if legacy:
        found = backend_of_tag(words[0]) if len(words) == 1 else None
        return (*found, words[0]) if found else None
    if not words:
        return (None, None, None) if sdk else None
    if words[0] in _PLAIN_BACKENDS and len(words) == 1:
        return words[0], None, words[0]
    version = _dotted(words[1]) if len(words) == 2 else None
    for word, _prefix, backend in _VERSIONED:
        if word == words[0] and version is not None:
            return backend, version, backend_tag(backend, version)
    return None


def _not_a_name(name: str, why: str) -> VariantNameError:
    return VariantNameError(f"{name!r} is not a variant name: {why}")


def _torch_backend(word: str) -> str:
    """A noarch backend as torch names it: ``cann`` (Ascend) is ``npu``."""
    return "npu" if word == "cann" else word


def as_variant(name: str) -> Variant:
    """``name`` parsed; a name that does not parse gets ``tier=None`` and no fields."""
    try:
        return parse_variant(name)
    except VariantNameError:
        return Variant._make(name)
