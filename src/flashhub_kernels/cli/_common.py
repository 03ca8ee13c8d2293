"""What the ``flashhub`` commands share: exit codes, option definitions and argument
types, output formatting, and running a handler with errors printed, not raised."""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Literal, NoReturn, TextIO, TypedDict, TypeGuard, TypeVar

from .._config import get_config
from .._models.names import check_version, parse_repo_id
from .._models.record import Record
from .._utils.escaping import escape_controls, escape_message
from .._utils.urls import redact_text
from ..errors import ConfigError, FlashhubError, LockfileError
from ._exit import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from ._settings import in_command_terms, settings_applied

if TYPE_CHECKING:
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
    show its password. An unrecognized ``--revision`` (Hugging Face kernels' option) says
    what to give instead."""

    def error(self, message: str) -> NoReturn:
        typed = [word.partition("=")[0] for word in message.split()]
        if typed[:1] == ["unrecognized"] and "--revision" in typed:
            message += "; a version is --version N here (Hugging Face's kernels: --revision vN)"
        super().error(escape_controls(redact_text(message)))


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


def shown(path: Path) -> str:
    """A path from the cache, whose names another program may have chosen, made safe."""
    return escape_controls(str(path))


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
    from .._network.transport import remote
    from .._network.versions import with_version

    config = get_config()
    if config.offline:
        from .._loading.offline import newest_version_error

        raise newest_version_error(
            repo_id,
            hint=f"pass --version N (`flashhub {command} {repo_id} --version 1`), "
            "or unset FLASHHUB_OFFLINE",
        )
    with remote(config) as fetcher:
        return with_version(fetcher, repo_id, None).version


# --- running -------------------------------------------------------------------------------


def open_missing_streams() -> None:
    """Point a missing ``sys.stdin``, ``sys.stdout`` or ``sys.stderr`` at the null device.

    Python sets one to ``None`` when the process starts with its descriptor closed
    (``flashhub get ... 2>&-``, pythonw). ``print(file=None)`` writes to stdout, so the
    errors and warnings would land in the output a script reads (``DIR=$(flashhub get
    ...)``), and flushing a missing stdout, or asking a missing stdin whether it is a
    terminal (``flashhub cache clear <&-``), would end the command in a traceback.
    """
    if sys.stdin is None:
        sys.stdin = _null_stream("r")
    if sys.stdout is None:
        sys.stdout = _null_stream("w")
    if sys.stderr is None:
        sys.stderr = _null_stream("w")


def _null_stream(mode: Literal["r", "w"]) -> TextIO:
    """A stream on the null device that, like Python's own standard streams, never closes
    its descriptor: it stays open until the process exits (so ``-X dev`` has no unclosed
    file to warn of at teardown)."""
    return open(os.open(os.devnull, os.O_RDWR), mode, closefd=False)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse, turning argparse's ``SystemExit`` (``--help``, usage errors) into a code."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def run(handler: Handler, args: argparse.Namespace) -> int:
    """Run ``handler`` with the settings its options give; print any error, with its hint
    and without a traceback, and return the exit code."""
    sigterm = _SigtermInterrupts()
    try:
        with warnings.catch_warnings(), sigterm, _file_names_as_bytes(), settings_applied(args):
            warnings.showwarning = _print_warning  # catch_warnings restores it, for a caller
            code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except KeyboardInterrupt as exc:  # Ctrl-C: what the download says of it, no traceback
        print(escape_message(str(exc) or "interrupted"), file=sys.stderr)
        return EXIT_TERMINATED if sigterm.received else EXIT_INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except FlashhubError as exc:  # ConfigError: a malformed setting, e.g. FLASHHUB_CDN_URL
        hint = exc.cli_hint or exc.hint
        print_error(in_command_terms(exc.message, args), hint and in_command_terms(hint, args))
        return EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILURE
    except ValueError as exc:  # a malformed argument or setting (LOCAL_KERNELS, trusted keys)
        if _unprintable_output(exc):
            print_error(
                f"stdout's encoding ({exc.encoding}) cannot show "
                f"{exc.object[exc.start : exc.end]!r}, which is part of the output",
                "set PYTHONIOENCODING=utf-8, or run in a UTF-8 locale (LC_ALL=C.UTF-8)",
            )
            return EXIT_FAILURE
        print_error(str(exc), None)
        return EXIT_USAGE
    except OSError as exc:
        print_error(str(exc), None)
        return EXIT_FAILURE


class _SigtermInterrupts:
    """For the block, SIGTERM (``docker stop``, Kubernetes) interrupts the command as
    Ctrl-C does, so that a download keeps what arrived for the next run. Python's default
    would end the process at once, keeping nothing; as a container's PID 1, which the
    kernel sends no signal it has no handler for, it would not end it at all.

    Only where SIGTERM has its default action: a program that calls the command keeps its
    own handler, or SIGTERM ignored (a handler set in C, which Python could not put back,
    included). Only the main thread may set a handler: from another one, nothing changes."""

    received = False
    _taken = False

    def __enter__(self) -> None:
        in_main = threading.current_thread() is threading.main_thread()
        if in_main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._interrupt)
            self._taken = True

    def __exit__(self, *exc_info: object) -> None:
        if self._taken:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.received = True
        raise KeyboardInterrupt


@contextmanager
def _file_names_as_bytes() -> Iterator[None]:
    """For the block, a path on stdout is written as the bytes that name it on disk: a name
    that is not valid in the file system's encoding (``b"\\xff"``, a Latin-1 name under a
    UTF-8 locale) reaches Python as lone surrogates, which a strict stdout refuses to
    encode, so ``flashhub get`` could not print the directory it had filled. Python's own
    error handler for them (``surrogateescape``) writes the bytes back, as it does in the C
    locale; a character the encoding cannot hold still fails (:func:`_unprintable_output`)."""
    stdout = sys.stdout
    if not isinstance(stdout, io.TextIOWrapper) or stdout.errors != "strict":
        yield
        return
    stdout.reconfigure(errors="surrogateescape")
    try:
        yield
    finally:  # as the caller had it, for a program that runs a command in its process
        stdout.reconfigure(errors="strict")


def _unprintable_output(exc: ValueError) -> TypeGuard[UnicodeEncodeError]:
    """Whether ``exc`` is stdout's encoding failing on what a command prints: a path or
    a name that an ASCII or Latin-1 stdout cannot hold (``PYTHONIOENCODING=ascii``)."""
    encoding = getattr(sys.stdout, "encoding", None)
    if not isinstance(exc, UnicodeEncodeError) or not encoding:
        return False
    import codecs

    try:
        return codecs.lookup(exc.encoding).name == codecs.lookup(encoding).name
    except LookupError:
        return False


def _print_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Print a warning as the command's other messages are printed (``warning: ...``),
    without the library's file, line and category, which mean nothing to a command, and
    in the command's terms where the warning has them (``cli_message``)."""
    text = getattr(message, "cli_message", None) or str(message)
    print(f"warning: {escape_message(text)}", file=sys.stderr)


def _discard_stdout() -> None:
    """Point stdout at the null device, so that the output still buffered is not flushed
    into the closed pipe at exit (which prints "Exception ignored ... BrokenPipeError")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file: nothing is flushed at exit
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


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
