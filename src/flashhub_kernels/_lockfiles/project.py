"""What a project's ``pyproject.toml`` asks ``flashhub lock`` for: kernel ranges, variants.

A project declares version ranges in ``[tool.flashhub.dependencies]``::

    [tool.flashhub.dependencies]
    "sdq/audio-codebook-primitives" = ">=1,<3"

and, for versions published without ``variants.json``, the variants to lock besides
those the locking machine can load in ``[tool.flashhub] variants``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._constants import PROJECT_FILE_BYTES, PYPROJECT_NAME
from .._models.manifest import check_variant_segment
from .._models.names import MAX_VERSION, check_version, parse_repo_id
from .._models.record import Record
from .._utils.filesystem import read_regular
from .._utils.pyproject import load_toml, lookup
from .._variants.grammar import parse_variant
from ..errors import LockfileError

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

# How a project names the variants to lock, for the hints of errors about them.
VARIANT_OPTIONS = "`flashhub lock --variant NAME` or [tool.flashhub] variants in pyproject.toml"
_DEPENDENCY_HINT = 'write each entry as "org/pkg" = ">=1,<3" (or an exact version: 2)'
_VARIANTS_HINT = 'write variants as ["torch212-cxx11-cu126-x86_64-linux", ...]'
# Ours, then Hugging Face kernels' table, so that its projects lock unchanged.
DEPENDENCY_TABLES = (("tool", "flashhub", "dependencies"), ("tool", "kernels", "dependencies"))


def check_lockable_variant(name: object) -> str:
    """Return ``name`` if a project may ask to lock it; raise ``ValueError`` otherwise.

    Stricter than :func:`~flashhub_kernels._models.manifest.check_variant_segment`: the
    name must follow the variant grammar, since a name no system can load would only be
    dead weight in a lock.
    """
    checked = check_variant_segment(name)
    parse_variant(checked)  # its VariantNameError is a ValueError
    return checked


def variants_noun(names: Sequence[str]) -> str:
    """``variant a is`` or ``variants a, b are``."""
    if len(names) == 1:
        return f"variant {names[0]} is"
    return f"variants {', '.join(names)} are"


class Project(Record):
    """What a project's ``pyproject.toml`` asks ``flashhub lock`` for.

    ``dependencies`` maps each repo id to its version specifier; ``variants`` are the
    variant names to lock besides the probed ones, for versions without ``variants.json``.
    """

    dependencies: dict[str, str]
    variants: tuple[str, ...] = ()


def read_project(project_dir: Path) -> Project:
    """``[tool.flashhub.dependencies]`` and ``[tool.flashhub] variants`` of the project.

    Without ``[tool.flashhub.dependencies]``, Hugging Face kernels' ``[tool.kernels.dependencies]``
    is read in its place (the same forms).

    A dependency's value is a PEP 440 specifier string (``">=1,<3"``, ``"==2"``, ``""``
    for any) or an integer, which means exactly that version. ``variants`` is a list of
    variant names such as ``"torch212-cxx11-cu126-x86_64-linux"``.
    """
    path = project_dir / PYPROJECT_NAME
    try:
        document = load_toml(read_regular(path, PROJECT_FILE_BYTES))
    except (FileNotFoundError, NotADirectoryError):
        raise LockfileError(
            f"{path.absolute()} does not exist",
            hint=project_dir_hint(project_dir)
            or "pass the project directory that holds pyproject.toml",
        ) from None
    except OSError as exc:
        raise LockfileError(f"cannot read {path}: {exc.strerror}") from None
    except LockfileError:  # no TOML reader (Python 3.10 without tomli): it says so
        raise
    except ValueError as exc:
        raise LockfileError(f"{path} {exc}", hint="fix the file's TOML") from None
    problems: list[tuple[str, str]] = []  # (what is wrong, how to write it)
    project = Project(_dependencies(document, path, problems), _variants(document, problems))
    if problems:
        hints = dict.fromkeys(hint for _, hint in problems)
        listed = "\n  ".join(problem for problem, _ in problems)
        raise LockfileError(
            f"{path}: {listed}" if len(problems) == 1 else f"{path}:\n  {listed}",
            hint="; ".join(hints),
        )
    return project


def project_dir_hint(project_dir: Path) -> str | None:
    """What to pass instead of ``project_dir``, which holds no ``pyproject.toml``: the
    directory of the file given, or the nearest one above that holds it; ``None`` when
    there is neither."""
    given = project_dir.absolute()
    if given.is_file():
        return f"pass the directory that holds {given.name} ({given.parent}), not the file"
    above = next((d for d in given.parents if (d / PYPROJECT_NAME).is_file()), None)
    if above is not None:
        return f"pass the project directory {above}, or run the command there"
    return None


def _dependencies(
    document: dict[str, Any], path: Path, problems: list[tuple[str, str]]
) -> dict[str, str]:
    """The dependency table's valid entries; what is wrong with each other one goes to
    ``problems``, so that one error lists them all."""
    for keys in DEPENDENCY_TABLES:
        table = lookup(document, *keys)
        if table is not None:
            break
    if not isinstance(table, dict) or not table:
        raise LockfileError(
            f"{path} declares no kernels",
            hint='add them under [tool.flashhub.dependencies], e.g. "org/pkg" = ">=1"',
        )
    name = ".".join(keys)
    dependencies = {}
    for repo_id, value in table.items():
        try:
            parse_repo_id(repo_id)
            dependencies[repo_id] = _specifier(value)
        except ValueError as exc:
            problems.append((f"[{name}] {repo_id!r}: {exc}", _DEPENDENCY_HINT))
    problems.extend(_unread(document, keys, table))
    return dependencies


def _unread(
    document: dict[str, Any], read: tuple[str, ...], table: dict[str, Any]
) -> list[tuple[str, str]]:
    """The kernels another dependency table declares than the one ``read`` (``table``),
    which would be locked without a word otherwise: a Hugging Face project that added
    ``[tool.flashhub.dependencies]`` beside its ``[tool.kernels.dependencies]``."""
    unread = []
    for keys in DEPENDENCY_TABLES:
        other = lookup(document, *keys)
        if keys != read and isinstance(other, dict):
            name, hint = ".".join(keys), f"declare it under [{'.'.join(read)}], which is read"
            unread += [
                (f"[{name}] {repo_id!r}: not read, since [{'.'.join(read)}] is there", hint)
                for repo_id in other
                if repo_id not in table
            ]
    return unread


def _variants(document: dict[str, Any], problems: list[tuple[str, str]]) -> tuple[str, ...]:
    """``[tool.flashhub] variants``, valid names only; the others go to ``problems``."""
    names = lookup(document, "tool", "flashhub", "variants")
    if names is None:
        return ()
    if not isinstance(names, list):
        problems.append(("[tool.flashhub] variants must be a list", _VARIANTS_HINT))
        return ()
    checked = []
    for name in names:
        try:
            checked.append(check_lockable_variant(name))
        except ValueError as exc:
            problems.append((f"[tool.flashhub] variants: {exc}", _VARIANTS_HINT))
    return tuple(dict.fromkeys(checked))


def _specifier(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        return f"=={check_version(value)}"
    if not isinstance(value, str):
        raise ValueError(f"the version range must be a string, got {value!r}")
    parse_specifier(value)
    return value


def parse_specifier(text: str) -> SpecifierSet:
    """``text`` as a ``packaging`` ``SpecifierSet``; ``ValueError`` if it is not PEP 440."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    try:
        return SpecifierSet(text)
    except InvalidSpecifier:
        raise ValueError(f"{text!r} is not a version range such as '>=1,<3'") from None


def exact_version(specifier: str) -> int | None:
    """The version ``specifier`` pins when it is one exact version, ``==N`` (what a bare
    ``N`` in ``pyproject.toml`` becomes; ``==N.0`` too), else ``None``: a range, a
    wildcard, or a version that is no kernel version."""
    from packaging.version import Version

    specifiers = list(parse_specifier(specifier))
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        return None
    version = Version(specifiers[0].version)  # valid: the specifier parsed
    if version.epoch or version != Version(version.base_version) or any(version.release[1:]):
        return None  # an epoch, a pre-, post- or dev release, a local version, 1.2
    return version.release[0] if 1 <= version.release[0] <= MAX_VERSION else None
