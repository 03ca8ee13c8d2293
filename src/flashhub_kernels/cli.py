"""The ``flashhub`` command line, and the legacy ``flashhub-kernel-load`` script.

A subcommand is a handler function registered with :func:`command`, which also names
the function that adds its arguments. Handlers import what they need (the publisher,
the client, torch) when they run, so ``flashhub --help`` stays fast.

Exit codes: 0 success, 1 failure (a :class:`~flashhub_kernels.errors.FlashhubError`,
printed with its hint and no traceback), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._config import DEFAULT_PREFIX
from ._names import check_version, parse_repo_id
from .errors import FlashhubError

if TYPE_CHECKING:
    from ._publish import PublishReport

Handler = Callable[[argparse.Namespace], int]
ArgumentAdder = Callable[[argparse.ArgumentParser], None]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class _Command:
    help: str
    add_arguments: ArgumentAdder
    run: Handler


_COMMANDS: dict[str, _Command] = {}


def command(name: str, *, help: str, arguments: ArgumentAdder) -> Callable[[Handler], Handler]:
    """Register the decorated handler as ``flashhub <name>``; ``arguments`` adds its options."""

    def register(run: Handler) -> Handler:
        _COMMANDS[name] = _Command(help, arguments, run)
        return run

    return register


# --- argument types: reject bad values as usage errors (exit 2) ------------------------


def _repo_id_arg(value: str) -> str:
    try:
        parse_repo_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _version_arg(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a version number such as 1") from None
    try:
        return check_version(number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _prefix_arg(value: str) -> str:
    from ._config import normalize_prefix

    try:
        return normalize_prefix(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --- flashhub publish ----------------------------------------------------------------


def _publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "build_dir",
        metavar="KERNEL_BUILD_DIR",
        help="a build directory holding <variant>/<py_pkg>/, or a kernel directory holding build/",
    )
    parser.add_argument("--repo-id", required=True, type=_repo_id_arg, metavar="ORG/PKG")
    parser.add_argument("--version", required=True, type=_version_arg, metavar="N")
    parser.add_argument("--out", required=True, metavar="CDN_ROOT", help="root of the CDN tree")
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        type=_prefix_arg,
        metavar="P",
        help=f"path under CDN_ROOT (default: {DEFAULT_PREFIX!r}, as the client expects)",
    )
    parser.add_argument(
        "--force", action="store_true", help="replace the version if it holds different content"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


@command(
    "publish",
    help="turn a kernel build into the CDN tree of one version",
    arguments=_publish_arguments,
)
def _publish(args: argparse.Namespace) -> int:
    from ._publish import publish

    report = publish(
        args.build_dir,
        repo_id=args.repo_id,
        version=args.version,
        out=args.out,
        prefix=args.prefix,
        force=args.force,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(_describe_publish(report))
    return EXIT_OK


def _describe_publish(report: PublishReport) -> str:
    where = f"{report.repo_id}@v{report.version} at {report.version_dir}"
    if report.noop:
        return f"{where} is already published with identical content; nothing written"
    lines = [f"{'replaced' if report.replaced else 'published'} {where}"]
    lines += [f"  {v.name}: {v.files} files, {v.bytes} bytes" for v in report.variants]
    lines.append(f"wrote {len(report.written)} files ({report.bytes_written} bytes)")
    lines.append(f"versions.json: {list(report.versions)}")
    return "\n".join(lines)


# --- running -----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``flashhub`` argument parser, one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="flashhub", description="Publish and manage flashhub kernel packages."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(sub)
        sub.set_defaults(run=cmd.run)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse, turning argparse's ``SystemExit`` (``--help``, usage errors) into a code."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def _usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _run(handler: Handler, args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except FlashhubError as exc:
        _print_error(exc.message, exc.hint)
        return EXIT_FAILURE
    except OSError as exc:
        _print_error(str(exc), None)
        return EXIT_FAILURE


def _print_error(message: str, hint: str | None) -> None:
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"  hint: {hint}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub`` and ``python -m flashhub_kernels``; returns the exit code."""
    parser = build_parser()
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    handler: Handler = args.run
    return _run(handler, args)


# --- flashhub-kernel-load (the 0.1.2 release's script) -------------------------------


def _kernel_load_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flashhub-kernel-load",
        description="Download a kernel from the CDN and import it, or check that it exists.",
    )
    parser.add_argument("repo_id", metavar="REPO", type=_repo_id_arg, help="ORG/PKG")
    parser.add_argument(
        "--version", type=_version_arg, metavar="N", help="required unless --has (newest)"
    )
    parser.add_argument("--cdn-url", help="CDN base URL (default: $FLASHHUB_CDN_URL)")
    parser.add_argument("--prefix", help="path prefix on the CDN (default: $FLASHHUB_CDN_PREFIX)")
    parser.add_argument("--cache-dir", help="local cache root (default: $FLASHHUB_CACHE_DIR)")
    parser.add_argument(
        "--has", action="store_true", help="print True/False; exit 0 if the kernel exists, else 1"
    )
    return parser


def _kernel_load(args: argparse.Namespace) -> int:
    from flashhub_kernels import configure, get_kernel, has_kernel

    settings = {"cdn_url": args.cdn_url, "prefix": args.prefix, "cache_dir": args.cache_dir}
    given = {key: value for key, value in settings.items() if value is not None}
    if given:
        configure(**given)
    if args.has:
        present = has_kernel(args.repo_id, version=args.version)
        print(present)
        return EXIT_OK if present else EXIT_FAILURE
    module = get_kernel(args.repo_id, version=args.version)
    print(module.__name__)
    print(module.__file__)
    return EXIT_OK


def kernel_load_main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub-kernel-load REPO --version N [...]``; returns the exit code."""
    parser = _kernel_load_parser()
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.version is None and not args.has:
        return _usage_error(parser, "--version N is required to load a kernel (or pass --has)")
    try:
        return _run(_kernel_load, args)
    except ValueError as exc:  # a malformed --cdn-url or --prefix
        _print_error(str(exc), "check the --cdn-url, --prefix and --cache-dir values")
        return EXIT_USAGE
