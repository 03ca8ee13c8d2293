"""The ``version=`` and ``revision=`` arguments of the loaders: the one version they name.

``version=1`` and ``revision="v1"`` (or ``"1"``) name version 1; a static CDN publishes
numbered versions only, so a branch or a commit names none. With neither, a call takes
the newest version, which only the repo's ``versions.json`` on the CDN knows
(:func:`newest_version`).
"""

from __future__ import annotations

from .._models.names import MAX_VERSION, check_version, is_digits, parse_repo_id, positive_number

TYPE_CHECKING = False  # not typing's: get_kernel imports this module
if TYPE_CHECKING:
    from .._config import Config


def parse_revision(revision: str) -> int:
    """``"v3"`` or ``"3"`` -> ``3``. Branch names are not revisions on a static CDN."""
    if not isinstance(revision, str):
        from ..errors import ArgumentTypeError  # only for a wrong type: not on every load

        raise ArgumentTypeError(f"revision must be a str such as 'v1', got {revision!r}")
    text = revision.strip()
    digits = text[1:] if text.startswith("v") else text
    number = positive_number(digits)
    if number is None and is_digits(digits) and not digits.startswith("0"):
        raise ValueError(
            f"invalid revision {revision!r}: a version is at most {MAX_VERSION}, the most a "
            "module name holds"
        )
    if number is None:
        raise ValueError(
            f"invalid revision {revision!r}: use a version such as 'v1' or '1' "
            "(the CDN publishes numbered versions, not branches)"
        )
    return number


def requested_version(version: int | None, revision: str | None) -> int:
    """Turn the ``version=`` / ``revision=`` pair of the public API into one version.

    A ``version`` given as a revision's ``str`` (``"1"``, ``"v1"``) is read as one, with a
    ``DeprecationWarning``: the 0.1.2 release took ``version="1"``, and its ``has_kernel``
    and ``get_kernel_variants`` took a revision second, where ``version`` is now."""
    if (version is None) == (revision is None):
        raise ValueError("give exactly one of version= or revision= (e.g. version=1)")
    if isinstance(version, str):
        return _version_given_as_str(version)
    if version is not None:
        return check_version(version)
    assert revision is not None
    return parse_revision(revision)


def _version_given_as_str(version: str) -> int:
    """The version a ``str`` given as ``version=`` names, as a revision."""
    from .._utils.callers import warn_at_caller  # only for this mistake: not on every load

    try:
        number = parse_revision(version)
    except ValueError:
        return check_version(version)  # raises: no version, and no revision either
    warn_at_caller(
        f"version= takes an int: pass version={number} (the str {version!r} is read as "
        f"revision={version!r})",
        DeprecationWarning,
    )
    return number


def cache_only_reason(config: Config, local_files_only: bool = False) -> str | None:
    """Why the cache alone must answer, for an error saying it cannot; ``None``: it need not."""
    if config.offline:
        return "FLASHHUB_OFFLINE is set"
    return "local_files_only=True allows no download" if local_files_only else None


def newest_version(
    config: Config, repo_id: str, *, hint: str, local_files_only: bool = False
) -> int:
    """The newest version the repo's ``versions.json`` lists, for a call that names none.

    Raises:
        ValueError: ``repo_id`` is malformed.
        OfflineError: the cache alone must answer (:func:`cache_only_reason`), and it does
            not record ``versions.json``; ``hint`` says what to do instead.
        KernelNotFoundError, RollbackError: as
            :func:`~flashhub_kernels._network.versions.listed_versions`.
    """
    parse_repo_id(repo_id)
    why = cache_only_reason(config, local_files_only)
    if why is not None:
        from ..errors import OfflineError

        raise OfflineError(
            f"the newest version of {repo_id} cannot be looked up: {why}, and the cache "
            "does not record versions.json",
            hint=hint,
        )
    from .._network.versions import newest_published  # the cold path's modules

    return newest_published(config, repo_id)
