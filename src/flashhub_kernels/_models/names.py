"""Repo ids, versions and module names. Pure functions, no I/O.

A kernel is addressed by a repo id ``<org>/<pkg>`` and a version ``N >= 1``. In Python it
lives at ``flashhub.<org>.<pkg>.v<N>``, where the two name segments are the CDN names with
``-`` turned into ``_``. Going back from a module name is ambiguous (``tensor_tricks`` may
be ``tensor-tricks`` or ``tensor_tricks`` on the CDN), so :func:`cdn_name_candidates`
lists both, dashed form first."""

from __future__ import annotations

from .record import Record

TYPE_CHECKING = False  # not typing's: the import hook imports this module
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Fields = tuple[Any, ...]

ROOT_PACKAGE = "flashhub"
# Where get_local_kernel() names its modules: flashhub._local.<py_pkg>_<path digest>.
LOCAL_ORG = "_local"

# A segment must become a Python identifier once '-' is replaced by '_': a letter or '_',
# then up to 95 letters, digits, '-' and '_' (ASCII). Checked with str methods, not a
# regular expression: compiling one costs more than the import hook's whole check.
_SEGMENT_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_SEGMENT_MAX = 96
BACKENDS = ("cpu", "cuda", "rocm", "xpu", "metal")
_VERSION_MAX_DIGITS = 9
MAX_VERSION = 10**_VERSION_MAX_DIGITS - 1  # the most a module name's v<N> holds


def _is_segment(segment: str) -> bool:
    return (
        0 < len(segment) <= _SEGMENT_MAX
        and not segment.strip(_SEGMENT_CHARS)  # nothing but those characters
        and segment[0] not in "0123456789-"
    )


def is_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits (``str.isdigit`` alone takes ``²``)."""
    return text.isascii() and text.isdigit()


def positive_number(text: str) -> int | None:
    """``"12"`` -> ``12``: one to nine ASCII digits, the first not ``0``; else ``None``."""
    if len(text) <= _VERSION_MAX_DIGITS and is_digits(text):
        return int(text) if text[0] != "0" else None
    return None


def _check_segment(segment: str, what: str, repo_id: str) -> None:
    if not _is_segment(segment):
        raise ValueError(
            f"invalid repo id {repo_id!r}: the {what} {segment!r} must start with a letter or "
            "'_' and hold only letters, digits, '-' and '_' (e.g. 'sdq/audio-codebook-primitives')"
        )


def check_version(version: object) -> int:
    """``version`` if an ``int`` from 1 to :data:`MAX_VERSION`; else a ``ValueError``."""
    if isinstance(version, bool) or not isinstance(version, int):
        from ..errors import ArgumentTypeError  # only for a wrong type: the hook imports this

        raise ArgumentTypeError(f"version must be an int >= 1, got {version!r}")
    if version < 1:
        raise ValueError(f"version must be >= 1, got {version}; versions are numbered from 1")
    if version > MAX_VERSION:
        raise ValueError(f"version must be at most {MAX_VERSION}: a module name holds nine digits")
    return version


class RepoInfo(Record):
    """One version of one kernel repository on the CDN: ``repo_id`` at ``version``, both
    validated on construction, so that it is always safe to turn into URLs, cache paths
    and module names. Immutable, hashable, and ordered by ``(repo_id, version)``."""

    repo_id: str
    version: int

    def __init__(self, repo_id: str, version: int) -> None:
        self._init(repo_id, version)
        parse_repo_id(repo_id)
        check_version(version)

    # Ordered as a dataclass(order=True) is; not by functools, which the hook would import.
    def _compare(self, other: object, op: Callable[[Fields, Fields], bool]) -> bool:
        if isinstance(other, RepoInfo) and other.__class__ is self.__class__:
            return op(self._values(), other._values())
        return NotImplemented  # type: ignore[no-any-return]  # Python then asks `other`

    def __lt__(self, other: object) -> bool:
        return self._compare(other, tuple.__lt__)

    def __le__(self, other: object) -> bool:
        return self._compare(other, tuple.__le__)

    def __gt__(self, other: object) -> bool:
        return self._compare(other, tuple.__gt__)

    def __ge__(self, other: object) -> bool:
        return self._compare(other, tuple.__ge__)

    @property
    def org(self) -> str:
        return self.repo_id.split("/")[0]

    @property
    def name(self) -> str:
        return self.repo_id.split("/")[1]

    @property
    def py_pkg(self) -> str:
        """The Python package directory inside a variant: the name with ``-`` -> ``_``."""
        return self.name.replace("-", "_")

    def module_name(self, backend: str | None = None) -> str:
        """Where the import hook puts this kernel: ``flashhub.<org>.<pkg>.v<N>[_<backend>]``."""
        org, pkg = module_segment(self.org), module_segment(self.name)
        suffix = f"_{check_backend(backend)}" if backend else ""
        return f"{ROOT_PACKAGE}.{org}.{pkg}.v{self.version}{suffix}"

    @property
    def revision(self) -> str:
        """``"v<N>"``: the version as the ``revision=`` argument spells it."""
        return f"v{self.version}"

    @property
    def cdn_path(self) -> str:
        """The version directory relative to ``<cdn_url>/<prefix>``."""
        return f"{self.repo_id}/v{self.version}"

    @property
    def cache_path(self) -> str:
        """The version directory relative to the cache root."""
        return f"kernels/{self.cdn_path}"

    def __str__(self) -> str:
        return f"{self.repo_id}@v{self.version}"


def check_backend(backend: str | None) -> str | None:
    """Return ``backend`` if it is ``None`` or one the variant grammar knows, else raise."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}")
    return backend


def parse_repo_id(repo_id: str) -> tuple[str, str]:
    """Split and validate ``"<org>/<pkg>"``; raise ``ValueError`` with an example if bad."""
    if not isinstance(repo_id, str):
        from ..errors import ArgumentTypeError  # only for a wrong type: the hook imports this

        raise ArgumentTypeError(f"repo id must be a string like 'org/pkg', got {repo_id!r}")
    parts = repo_id.split("/")
    if len(parts) != 2:
        raise ValueError(
            f"invalid repo id {repo_id!r}: expected exactly '<org>/<pkg>', "
            "e.g. 'sdq/audio-codebook-primitives'"
        )
    _check_segment(parts[0], "org", repo_id)
    _check_segment(parts[1], "package name", repo_id)
    if parts[0] == LOCAL_ORG:
        raise ValueError(f"invalid repo id {repo_id!r}: org {LOCAL_ORG!r} is reserved; use another")
    return parts[0], parts[1]


def module_segment(cdn_name: str) -> str:
    """The identifier a CDN name takes in a module path: ``-`` -> ``_``."""
    return cdn_name.replace("-", "_")


def cdn_name_candidates(segment: str) -> list[str]:
    """CDN names a module segment may stand for, in the order the hook tries them; the
    dashed form is left out when it is no name (``_acme`` would be ``-acme``)."""
    dashed = segment.replace("_", "-")
    return [segment] if dashed == segment or not _is_segment(dashed) else [dashed, segment]


class KernelModuleName(Record):
    """A parsed ``flashhub.<org>.<pkg>[.v<N>]`` module name."""

    org: str
    pkg: str | None = None
    version: int | None = None
    backend: str | None = None


def parse_module_name(fullname: str) -> KernelModuleName | None:
    """Parse a name under ``flashhub.``; ``None`` if the hook does not own it.

    Kernel submodules (five segments or more) are not ours: they are real files in the
    cache, found by the standard path finder through the kernel package's ``__path__``.
    Nor is a segment no CDN name maps to (not ASCII, over 96 characters): importing it
    fails as for any missing module.
    """
    parts = fullname.split(".")
    if parts[0] != ROOT_PACKAGE or not 2 <= len(parts) <= 4:
        return None
    if not all(part.isidentifier() and _is_segment(part) for part in parts[1:3]):
        return None
    if len(parts) == 2:
        return KernelModuleName(parts[1])
    if len(parts) == 3:
        return KernelModuleName(parts[1], parts[2])
    # v<N>, or v<N>_<backend> to force a backend
    number, forced, backend = parts[3][1:].partition("_")
    version = positive_number(number) if parts[3].startswith("v") else None
    if version is None or (forced and backend not in BACKENDS):
        return None
    return KernelModuleName(parts[1], parts[2], version, backend or None)
