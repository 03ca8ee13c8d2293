"""What the ``flashhub`` commands share: option definitions, argument types and output
formatting."""

from __future__ import annotations

import argparse
import json
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypedDict, TypeVar

from .._config import get_config
from .._models.names import check_version, parse_repo_id
from .._models.record import Record
from .._utils.escaping import escape_controls, escape_message, escape_path
from .._utils.urls import redact_text
from ..errors import LockfileError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from .._cache.layout import Cache
    from .._lockfiles.format import Lockfile
    from .._variants.system import SystemInfo

Handler = Callable[[argparse.Namespace], int]
ArgumentAdder = Callable[[argparse.ArgumentParser], None]


class Command(Record):
    """A subcommand: the function adding its options, and its handler."""

    add_arguments: ArgumentAdder
    run: Handler


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors show the arguments typed with their control
    characters escaped and the credentials of their URLs hidden: argparse repeats an
    unrecognized one as it is, so that ``flashhub get org/pkg $'\\e[2J'`` would clear the
    terminal instead of naming it, and ``--cdn-url`` given to a command without it would
    show its password. An unrecognized ``--revision`` (Hugging Face kernels' option), and
    the command ``versions`` (Hugging Face kernels' too), say what to give instead.

    Each parser records itself in the namespace as ``parsed_by``; a subcommand's record
    replaces its parent's, so that it names the innermost command typed, whose usage an
    unrecognized argument is reported with (:func:`._running.parse`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(parsed_by=self)

    def error(self, message: str) -> NoReturn:
        typed = [word.partition("=")[0] for word in message.split()]
        if typed[:1] == ["unrecognized"] and "--revision" in typed:
            message += "; a version is --version N here (Hugging Face's kernels: --revision vN)"
        if message.startswith("argument COMMAND: invalid choice: 'versions'"):
            message += (
                "; to list a kernel's versions, use `flashhub variants --all-versions ORG/PKG` "
                "(Hugging Face's kernels: `kernels versions`)"
            )
        super().error(escape_controls(redact_text(message)))

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """As argparse prints ``--help`` and ``--version``, except that a stdout that cannot
        be written fails (argparse ignores it: ``--help > /dev/full`` succeeded)."""
        if file is sys.stdout and message:
            file.write(message)
        else:
            super()._print_message(message, file)


# --- argument types: reject bad values as usage errors (exit 2) ------------------------


_V = TypeVar("_V")
_T = TypeVar("_T")


def usage_checked(parse: Callable[[_V], _T], value: _V) -> _T:
    """``parse(value)``; the ``ValueError`` it raises becomes a usage error (exit 2)."""
    try:
        return parse(value)
    except ValueError as exc:  # a ConfigError's hint names the variable, not the option
        raise argparse.ArgumentTypeError(getattr(exc, "message", str(exc))) from None


def repo_id_arg(value: str) -> str:
    usage_checked(parse_repo_id, value)
    return value


def version_arg(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a version number such as 1") from None
    return usage_checked(check_version, number)


# --- options shared by several commands -------------------------------------------------


def json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON document instead")


def project_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "project_dir",
        nargs="?",
        default=".",
        type=Path,
        metavar="PROJECT_DIR",
        help="the directory holding pyproject.toml and flashhub.lock (default: .)",
    )


def kernel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo_id", type=repo_id_arg, metavar="ORG/PKG")
    version_argument(parser)


def kernel_or_path_arg(value: str) -> str:
    """A local kernel directory, or a repo id; a path that is no directory is refused."""
    # stat, not Path.is_dir(), which on Python 3.14 reads any OSError as "no directory".
    try:
        if stat.S_ISDIR(Path(value).expanduser().stat().st_mode):
            return value
        exists = True
    except (FileNotFoundError, NotADirectoryError, ValueError):  # ValueError: a NUL
        exists = False
    except OSError as exc:  # a name too long to look up (ENAMETOOLONG), a loop of links
        message = f"{value!r} is not a kernel directory: {exc.strerror}"
        raise argparse.ArgumentTypeError(message) from None
    if exists or value.startswith(("/", ".", "~")):
        raise argparse.ArgumentTypeError(f"{value!r} is not a kernel directory")
    return repo_id_arg(value)


def kernel_or_path_argument(parser: argparse.ArgumentParser, *, package_dir: bool) -> None:
    """The ``kernel`` positional: a kernel on the CDN, or a local kernel directory; with
    ``package_dir``, the package's own directory too."""
    variant = ", a variant or the package itself" if package_dir else " or a variant"
    parser.add_argument(
        "kernel",
        type=kernel_or_path_arg,
        metavar="ORG/PKG|PATH",
        help="a kernel on the CDN, or a local kernel directory (a repo holding "
        f"build/<variant>/, a build directory{variant})",
    )


# What ``--version latest`` parses to: falsy, as the option's default (None) is, so that
# ``args.version or newest_version(...)`` takes the newest; but not None, so that argparse
# sees the option given (a mutually exclusive one is refused beside it).
LATEST = 0


def version_argument(parser: argparse._ActionsContainer) -> None:
    """``--version N``, or ``--version latest`` (:data:`LATEST`): the newest, as when it is
    not given."""
    parser.add_argument(
        "--version",
        type=_version_or_latest,
        metavar="N",
        help="default (or 'latest'): the newest in versions.json",
    )


def _version_or_latest(value: str) -> int:
    return LATEST if value == "latest" else version_arg(value)


def backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=("cpu",),
        help="as if torch ran on the CPU: the CPU builds on a GPU machine (backend='cpu')",
    )


def backend_cpu_notes(names: Iterable[str], system: SystemInfo) -> dict[str, str]:
    """For each build of ``names`` that ``system`` rejects and ``--backend cpu`` loads, the
    note its reason ends with, for a command that has the option: the library's reasons
    leave it out, since not every command (``download``) can force a backend."""
    from .._variants.verdicts import forced_cpu_loads

    return {name: " (--backend cpu loads it anyway)" for name in forced_cpu_loads(names, system)}


def _system_arg(value: str) -> str:
    from .._variants.named_system import system_from_variant

    usage_checked(system_from_variant, value)
    return value


def _capability_arg(value: str) -> str:
    from .._variants.named_system import parse_capability

    usage_checked(parse_capability, value)
    return value


def system_arguments(parser: argparse.ArgumentParser) -> None:
    """``--system``, ``--cuda-capability`` and ``--rocm-arch``: choose for another machine
    (see :func:`target_system_of`)."""
    parser.add_argument(
        "--system",
        type=_system_arg,
        metavar="NAME",
        help="choose for the machine that loads this exact build, not this one, e.g. "
        "torch213-cxx11-cu126-x86_64-linux (its torch, C++ ABI, backend, arch and OS)",
    )
    device = parser.add_mutually_exclusive_group()
    device.add_argument(
        "--cuda-capability",
        type=_capability_arg,
        metavar="X.Y",
        help="the CUDA device's compute capability, e.g. 9.0: builds whose archs lack it "
        "are passed over (default: this machine's device, when a build lists archs)",
    )
    device.add_argument(
        "--rocm-arch",
        metavar="GFX",
        help="the ROCm device's gfx target, e.g. gfx942, likewise",
    )


def target_system_of(args: argparse.Namespace) -> SystemInfo:
    """The machine the options of :func:`system_arguments` (and ``--backend``) name: this
    one unless ``--system``.

    Raises:
        ValueError: a device of another backend than the machine's (a usage error).
    """
    from .._variants.named_system import target_system

    return target_system(getattr(args, "backend", None), **machine(args))


class Machine(TypedDict):
    """The options of :func:`system_arguments`, as the keyword arguments of
    ``get_kernel_variants``, ``install_kernel`` and ``target_system``."""

    system: str | None
    cuda_capability: str | None
    rocm_arch: str | None


def machine(args: argparse.Namespace) -> Machine:
    """The :class:`Machine` that the command line names."""
    return Machine(
        system=args.system, cuda_capability=args.cuda_capability, rocm_arch=args.rocm_arch
    )


def cdn_url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cdn-url",
        metavar="URL",
        help="the CDN's base URL, or several mirrors separated by commas "
        "(default: $FLASHHUB_CDN_URL)",
    )


def cache_dir_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir", metavar="DIR", help="the local cache root (default: $FLASHHUB_CACHE_DIR)"
    )


def remote_arguments(parser: argparse.ArgumentParser) -> None:
    """``--cdn-url`` and ``--cache-dir``, for a command that reads the CDN and the cache."""
    cdn_url_argument(parser)
    cache_dir_argument(parser)


# --- output ------------------------------------------------------------------------------


def count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 file``, ``2 files``; ``plural`` for a noun that does not just add an s."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def entries(number: int) -> str:
    return count(number, "entry", "entries")


def print_json(document: object) -> None:
    print(json.dumps(document, indent=2, sort_keys=True))


def size(nbytes: int | None) -> str:
    if nbytes is None:
        return "?"
    if nbytes < 1024:
        return f"{nbytes} B"
    value, unit = nbytes / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def shown(path: Path | str) -> str:
    """A path, whose names another program may have chosen, made safe: its control
    characters escaped, the bytes of a name the file system's encoding cannot read kept
    (written as they are on disk while a command runs)."""
    return escape_path(str(path))


def shown_choice(variant: str | None) -> str:
    """The variant chosen, for ``chosen: ...`` lines: escaped, or why there is none."""
    return escape_controls(variant) if variant else "none (no variant fits this system)"


def print_error(message: str, hint: str | None) -> None:
    print(f"error: {escape_message(message)}", file=sys.stderr)
    if hint:
        print(f"  hint: {escape_message(hint)}", file=sys.stderr)


# --- what several commands read ------------------------------------------------------------


def project_lockfile(project_dir: Path) -> Lockfile:
    from .._constants import PYPROJECT_NAME
    from .._lockfiles.format import LOCKFILE_NAME, read_lockfile
    from .._lockfiles.project import project_dir_hint

    path = project_dir / LOCKFILE_NAME
    if not path.exists() and not (project_dir / PYPROJECT_NAME).is_file():
        hint = project_dir_hint(project_dir)
        if hint is not None:
            raise LockfileError(f"{path.absolute()} does not exist", hint=hint)
    return read_lockfile(path)


def local_cache() -> Cache:
    from .._cache.layout import Cache

    return Cache.from_config(get_config())


def newest_version(repo_id: str, command: str) -> int:
    """The newest version in the repo's ``versions.json``, for ``flashhub <command>``."""
    from .._loading import version_arguments

    config = get_config()
    # Offline, the hint names the newest version the cache holds: read only then.
    option = _cached_version_option(repo_id, command) if config.offline else ""
    hint = f"pass {option}, or unset FLASHHUB_OFFLINE"
    return version_arguments.newest_version(config, repo_id, hint=hint)


def _cached_version_option(repo_id: str, command: str) -> str:
    """``--version N``, with the newest version of ``repo_id`` the cache holds, if any."""
    from .._cache.listing import cached_versions

    held = [v.info.version for v in cached_versions(local_cache()) if v.info.repo_id == repo_id]
    if not held:
        return "--version N"
    return f"--version N (`flashhub {command} {repo_id} --version {max(held)}`: the newest cached)"


def verbose_argument(parser: argparse.ArgumentParser, *, top: bool = False) -> None:
    """``-v``/``--verbose``, counted, before the command (``top``) or after it: each is
    counted apart (a subcommand's parser starts its namespace afresh), and added up."""
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        dest="verbose" if top else "verbose_after",
        default=0 if top else argparse.SUPPRESS,
        help="say what happens on stderr: -v each step of a load (variant, downloads, "
        "retries, lock waits), -vv also each HTTP connection",
    )


def verbosity(args: argparse.Namespace) -> int:
    """How many ``-v`` were given, before and after the command."""
    return int(getattr(args, "verbose", 0)) + int(getattr(args, "verbose_after", 0))
