"""``flashhub-kernel-load``, the 0.1.2 release's script: download a kernel and import it,
or check that it exists."""

from __future__ import annotations

import argparse

from ._common import (
    Parser,
    cache_dir_argument,
    cdn_url_argument,
    repo_id_arg,
    version_arg,
)
from ._exit import EXIT_OK
from ._running import open_missing_streams, parse, run, usage_error


def _kernel_load_parser() -> Parser:
    parser = Parser(
        prog="flashhub-kernel-load",
        description="Download a kernel from the CDN and import it, or check that it exists.",
    )
    parser.add_argument("repo_id", metavar="REPO", type=repo_id_arg, help="ORG/PKG")
    parser.add_argument(
        "--version", type=version_arg, metavar="N", help="required unless --has (newest)"
    )
    cdn_url_argument(parser)
    parser.add_argument(
        "--prefix",
        dest="cdn_prefix",
        metavar="P",
        help="path prefix on the CDN (default: $FLASHHUB_CDN_PREFIX)",
    )
    cache_dir_argument(parser)
    parser.add_argument(
        "--has", action="store_true", help="print whether the kernel exists (REPO vN: True/False)"
    )
    return parser


def _kernel_load(args: argparse.Namespace) -> int:
    from .._loading.api import get_kernel, has_kernel

    # The 0.1.2 release's output, word for word: scripts written for it parse these lines.
    named = f"{args.repo_id} v{args.version}" if args.version is not None else args.repo_id
    if args.has:
        print(f"{named}:", has_kernel(args.repo_id, version=args.version))
        return EXIT_OK
    module = get_kernel(args.repo_id, version=args.version)
    print(f"loaded {named} as {module.__name__}")
    return EXIT_OK


def kernel_load_main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub-kernel-load REPO --version N [...]``; returns the exit code."""
    open_missing_streams()
    parser = _kernel_load_parser()
    args = parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.version is None and not args.has:
        return usage_error(parser, "--version N is required to load a kernel (or pass --has)")
    # As in 0.1.2, an empty value is the option left out (scripts pass "$PREFIX" unset), as
    # an empty --cache-dir already is.
    for setting in ("cdn_url", "cdn_prefix"):
        if getattr(args, setting) == "":
            setattr(args, setting, None)
    return run(_kernel_load, args)
