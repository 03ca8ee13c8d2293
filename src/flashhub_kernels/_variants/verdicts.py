"""The verdict on each published variant: accepted (best first) or rejected, and why.

What :func:`flashhub_kernels.get_kernel_variants`, ``flashhub variants`` and the
error for a version with no build this system loads show.
"""

from __future__ import annotations

from .._models.record import Record
from .._utils.escaping import escape_controls
from .compat import build_mismatch, check_compatible, compatible, needs_target, preference_key
from .grammar import Variant, VariantNameError, as_variant, parse_variant

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from .compat import TargetOf
    from .system import SystemInfo


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
    """Judge every published variant: accepted ones first, then rejected ones, each in
    preference order."""
    names = list(dict.fromkeys(names))
    accepted = compatible(names, system)
    rejected = [_rejection(name, system) for name in names if name not in accepted]
    rejected.sort(key=lambda verdict: preference_key(verdict.variant))
    return [*map(VariantAccepted, accepted), *rejected]


def _rejection(name: str, system: SystemInfo) -> VariantRejected:
    try:
        variant = parse_variant(name)
    except VariantNameError as exc:
        return VariantRejected(Variant._make(name), str(exc))
    reason = check_compatible(variant, system)
    assert reason is not None, "a variant compatible() passed over has a reason"
    return VariantRejected(variant, reason)


def forced_cpu_loads(names: Iterable[str], system: SystemInfo) -> set[str]:
    """The builds of ``names`` that ``system`` rejects and a load forcing the CPU backend
    (``backend='cpu'``) takes: what a caller offering that choice may advise."""
    from .system import with_backend

    forced = compatible(names, with_backend(system, "cpu"))
    return {str(variant) for variant in forced if check_compatible(variant, system) is not None}


def judge_builds(
    verdicts: Sequence[VariantVerdict],
    system: SystemInfo,
    target_of: TargetOf,
    *,
    first_fit: bool = True,
) -> list[VariantVerdict]:
    """``verdicts`` (from :func:`judge_variants`), each accepted variant whose fit depends
    on its ``metadata.json`` judged by what ``target_of`` reads of it, in preference order.

    With ``first_fit``, metadata is read only up to the first variant that fits: those
    after it stay accepted as their names are. A variant whose metadata cannot be read
    (``None``) is judged by its name. Passed-over variants come first among the rejected.
    """
    accepted: list[VariantVerdict] = []
    rejected: list[VariantVerdict] = []
    for verdict in verdicts:
        if not isinstance(verdict, VariantAccepted):
            rejected.append(verdict)
            continue
        variant = verdict.variant
        if not (first_fit and accepted) and needs_target(variant, system):
            target = target_of(variant)
            reason = None if target is None else build_mismatch(variant, target, system)
            if reason is not None:
                rejected.append(VariantRejected(variant, reason))
                continue
        accepted.append(verdict)
    return [*accepted, *rejected]


def best_variant(verdicts: Sequence[VariantVerdict]) -> str | None:
    """The preferred accepted variant of a :func:`judge_variants` result, if any."""
    first = verdicts[0] if verdicts else None
    # A plain str: it is recorded in receipts and in LoadedKernel.
    return str(first.variant) if isinstance(first, VariantAccepted) else None


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


def describe_system(system: SystemInfo) -> str:
    """``system`` in a few words, for messages: torch, C++ ABI, backend, platform, device
    (read if it is to be, as judging a build that lists archs reads it)."""
    from .device_arch import with_device

    system = with_device(system)
    device = ""
    if system.backend == "cuda" and system.cuda_capability is not None:
        device = ", CUDA capability {}.{}".format(*system.cuda_capability)
    elif system.backend == "rocm" and system.rocm_arch is not None:
        device = f", {system.rocm_arch}"
    python = ", free-threaded Python" if system.free_threaded else ""
    abi = f" ({system.abi})" if system.abi else ""
    return (
        f"torch {system.torch[0]}.{system.torch[1]}{abi}, {system.backend_tag}, "
        f"{system.arch}-{system.os}{device}{python}"
    )
