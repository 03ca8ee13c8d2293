"""``flashhub keygen`` and ``flashhub sign``: signing keys, and signing a published tree."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import Command, count, json_argument, print_json, shown
from ._exit import EXIT_OK


def _keygen_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="KEYFILE",
        help="where to write the private key (mode 0600); the public key goes to KEYFILE.pub",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing key file")
    json_argument(parser)


def _keygen(args: argparse.Namespace) -> int:
    from .._signing.signing_keys import generate_signing_key, write_key_pair
    from ..errors import PublishError

    key = generate_signing_key()
    try:
        public = write_key_pair(key, args.out, force=args.force)
    except OSError as exc:
        raise PublishError.cannot_write(exc, exc.filename or args.out) from None
    if args.json:
        print_json(
            {
                "key_id": key.key_id,
                "public_key": key.public_line,
                "private_key_file": str(args.out),
                "public_key_file": str(public),
            }
        )
        return EXIT_OK
    print(key.public_line)
    print(f"key id: {key.key_id}")
    print(
        f"wrote the private key to {shown(args.out)} (keep it secret) and the public key "
        f"to {shown(public)}",
        file=sys.stderr,
    )
    print(
        "clients trust it with FLASHHUB_TRUSTED_KEYS set to the line above (or to the "
        ".pub file); sign with `flashhub publish --sign KEYFILE` or `flashhub sign`",
        file=sys.stderr,
    )
    return EXIT_OK


def _sign_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "path",
        metavar="PATH",
        help="a CDN tree written by `flashhub publish` (its --out), or a directory below it",
    )
    parser.add_argument(
        "--key", required=True, metavar="KEYFILE", help="the private key from `flashhub keygen`"
    )
    json_argument(parser)


def _sign(args: argparse.Namespace) -> int:
    from .._publish import sign_tree

    report = sign_tree(args.path, args.key)
    if args.json:
        print_json(report.to_dict())
        return EXIT_OK
    for document in report.written:
        print(f"wrote {shown(Path(document))}")
    unchanged = len(report.documents) - len(report.written)
    print(
        f"signed {count(len(report.documents), 'document')} with key {report.key_id} "
        f"({unchanged} already signed by it)"
    )
    return EXIT_OK


COMMANDS = {
    "keygen": Command(_keygen_arguments, _keygen),
    "sign": Command(_sign_arguments, _sign),
}
