"""The ``flashhub`` command line parsed and run: the table of its commands, which names
each command's module and help line, so that ``flashhub --help`` imports no command
module and ``flashhub get`` only the one it runs.

Each command group is a module of this package (:mod:`.publish`, :mod:`.mirror`,
:mod:`.keys`, :mod:`.lock`, :mod:`.variants`, :mod:`.kernels`, :mod:`.describe_api`,
:mod:`.cache`; :mod:`.kernel_load` is the 0.1.2 script, parsed on its own), whose
``COMMANDS`` maps each command's name to the function adding its options and its
handler. Handlers import what they need (the publisher, the client, torch) when they
run; :mod:`._running` runs them, and :mod:`._exit` lists the exit codes.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Collection, Sequence

from .._constants import __version__
from .._models.record import Record
from ._common import (
    Command,
    Parser,
    verbose_argument,
    verbosity,
)
from ._exit import EXIT_USAGE
from ._running import open_missing_streams, parse, run


class _Listed(Record):
    """A command as ``flashhub --help`` lists it: its module in this package, its help."""

    module: str
    help: str


_COMMANDS = {
    "publish": _Listed("publish", "turn a kernel build into the CDN tree of one version"),
    "mirror": _Listed(
        "mirror",
        "publish a kernel build from the Hugging Face Hub into the CDN tree of one version, "
        "every file verified first",
    ),
    "keygen": _Listed("keys", "create an Ed25519 key pair to sign published kernels with"),
    "sign": _Listed(
        "keys",
        "sign the published documents of a CDN tree (versions.json, variants.json, "
        "metadata.json), adding to the signatures already there",
    ),
    "lock": _Listed(
        "lock", "resolve [tool.flashhub.dependencies] on the CDN and write flashhub.lock"
    ),
    "download": _Listed(
        "lock", "download the kernels flashhub.lock pins into the cache, verified against the lock"
    ),
    "variants": _Listed(
        "variants",
        "judge every published variant of a kernel (or of each version) against this system "
        "(exit 1: none fits)",
    ),
    "info": _Listed(
        "kernels",
        "show a kernel version's variants, files and sizes, and the variant this system gets "
        "(--dep-tree: the kernels it depends on)",
    ),
    "describe-api": _Listed(
        "describe_api",
        "list a kernel's public functions and layers, read from its source without running it",
    ),
    "get": _Listed(
        "kernels", "download and verify one kernel's variant for this system; print its directory"
    ),
    "cache": _Listed("cache", "list, verify, prune or clear the local kernel cache"),
}


def _command(name: str) -> Command:
    module = importlib.import_module(f".{_COMMANDS[name].module}", __package__)
    command: Command = module.COMMANDS[name]
    return command


def build_parser(commands: Collection[str] | None = None) -> Parser:
    """The ``flashhub`` argument parser, one subparser per command; only those in
    ``commands`` (default: all) get their options."""
    parser = Parser(prog="flashhub", description="Publish and manage flashhub kernel packages.")
    parser.add_argument("--version", action="version", version=f"flashhub {__version__}")
    verbose_argument(parser, top=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, listed in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=listed.help, description=listed.help)
        verbose_argument(sub)
        if commands is None or name in commands:
            command = _command(name)
            command.add_arguments(sub)
            sub.set_defaults(run=command.run)
    return parser


def _named_command(argv: Sequence[str]) -> list[str]:
    """The command ``argv`` names, if it names one: its first word that is not an option
    (the options before the command take no value)."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return [word] if word in _COMMANDS else []


def run_command_line(argv: list[str] | None) -> int:
    """The ``flashhub`` command line ``argv`` (default: ``sys.argv[1:]``) parsed and run;
    returns the exit code."""
    open_missing_streams()
    arguments = sys.argv[1:] if argv is None else argv
    parser = build_parser(_named_command(arguments))
    args = parse(parser, arguments)
    if isinstance(args, int):
        return args
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    verbose = verbosity(args)
    if not verbose:
        return run(args.run, args)
    from ._log import logging_to_stderr  # only when asked: logging is no quick import

    with logging_to_stderr(verbose):
        return run(args.run, args)
