"""``flashhub mirror``: a kernel build on the Hugging Face Hub, verified and published into
the CDN tree of one version."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._utils.escaping import escape_controls
from ._common import (
    Command,
    backend_argument,
    repo_id_arg,
    system_arguments,
    target_system_of,
    version_arg,
)
from .publish import (
    describe_publish,
    findings_in_the_report,
    output_arguments,
    output_options,
    print_report,
)

if TYPE_CHECKING:
    from .._hub.republish import RepublishReport, VariantSelection


def _variants_arg(value: str) -> VariantSelection:
    if value == "auto":
        return "auto"
    if value == "all":
        return "all"
    names = [name.strip() for name in value.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not auto, all, or a comma-separated list of variant names"
        )
    return names


def _mirror_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo_id", type=repo_id_arg, metavar="ORG/PKG")
    parser.add_argument(
        "--version",
        required=True,
        type=version_arg,
        metavar="N",
        help="the version to publish; read from the Hub's branch v<N> unless --revision is given",
    )
    parser.add_argument(
        "--revision", metavar="REV", help="a branch, tag or commit on the Hub to read instead"
    )
    parser.add_argument(
        "--variants",
        default="auto",
        type=_variants_arg,
        metavar="auto|all|NAME,...",
        help="auto (default): the variant this machine (or --system) loads; all: every "
        "variant this client can load; or a comma-separated list of names",
    )
    backend_argument(parser)
    system_arguments(parser)
    output_arguments(parser)


def _mirror(args: argparse.Namespace) -> int:
    from .._hub.republish import republish

    with findings_in_the_report():
        report = republish(
            args.repo_id,
            version=args.version,
            revision=args.revision,
            variants=args.variants,
            system=target_system_of(args),
            **output_options(args),
        )
    return print_report(args, report, _describe_mirror(report))


def _describe_mirror(report: RepublishReport) -> str:
    lines = [f"mirrored from {escape_controls(report.source.describe())}"]
    lines.append(describe_publish(report.published))
    if report.not_mirrored:
        skipped = ", ".join(map(escape_controls, report.not_mirrored))
        lines.append(f"not mirrored (pick them with --variants): {skipped}")
    return "\n".join(lines)


COMMANDS = {"mirror": Command(_mirror_arguments, _mirror)}
