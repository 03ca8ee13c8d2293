"""``flashhub publish``: a kernel build turned into the CDN tree of one version."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol, TypedDict

from .._config import DEFAULT_PREFIX, normalize_prefix
from .._utils.escaping import escape_controls
from ._common import (
    Command,
    count,
    print_json,
    repo_id_arg,
    size,
    usage_checked,
    version_arg,
)
from ._exit import EXIT_OK

if TYPE_CHECKING:
    from .._publish import PublishReport
    from .._publish.report import Finding


def _prefix_arg(value: str) -> str:
    return usage_checked(normalize_prefix, value)


def _publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "build_dir",
        metavar="KERNEL_BUILD_DIR",
        help="a build directory holding <variant>/<py_pkg>/, or a kernel directory holding build/",
    )
    parser.add_argument("--repo-id", required=True, type=repo_id_arg, metavar="ORG/PKG")
    parser.add_argument("--version", required=True, type=version_arg, metavar="N")
    parser.add_argument(
        "--layout",
        choices=("files", "zip"),
        help="zip: put each variant's Python files in one archive, <id>.zip, with its native "
        "libraries beside it, so that a client fetches them in one request "
        "(default: as the build lays them out)",
    )
    output_arguments(parser)


def output_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of where and how a version is published (``publish``, ``mirror``)."""
    parser.add_argument(
        "--out",
        required=True,
        metavar="CDN_ROOT",
        help="root of the CDN tree: a directory, or an object store URL such as "
        "s3://bucket/prefix (needs the s3 extra)",
    )
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
    parser.add_argument(
        "--sign",
        action="append",
        metavar="KEYFILE",
        help="sign metadata.json, variants.json and versions.json with this private key "
        "(from `flashhub keygen`), writing .sig files beside them; repeat it to sign with "
        "several keys, e.g. the old and the new one while keys are rotated",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


class Output(TypedDict):
    """The options of :func:`output_arguments`, as keyword arguments of ``publish`` and
    ``mirror``."""

    out: str
    prefix: str
    force: bool
    sign: list[str] | None


def output_options(args: argparse.Namespace) -> Output:
    """The :class:`Output` that the command line names."""
    return Output(out=args.out, prefix=args.prefix, force=args.force, sign=args.sign)


class _Report(Protocol):
    def to_dict(self) -> dict[str, object]: ...


def print_report(args: argparse.Namespace, report: _Report, text: str) -> int:
    """Print ``report`` as JSON with ``--json``, else ``text``; the command's exit status."""
    if args.json:
        print_json(report.to_dict())
    else:
        print(text)
    return EXIT_OK


@contextmanager
def findings_in_the_report() -> Iterator[None]:
    """Silence the publisher's warnings: the report says them, without a warning's
    source line."""
    import warnings

    from ..errors import (
        FileRelativePathWarning,
        SharedNativeLibraryWarning,
        SourcelessModuleWarning,
        UndeclaredDependencyWarning,
    )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SharedNativeLibraryWarning)
        warnings.simplefilter("ignore", UndeclaredDependencyWarning)
        warnings.simplefilter("ignore", FileRelativePathWarning)
        warnings.simplefilter("ignore", SourcelessModuleWarning)
        yield


def _publish(args: argparse.Namespace) -> int:
    from .._publish import publish

    with findings_in_the_report():
        report = publish(
            args.build_dir,
            repo_id=args.repo_id,
            version=args.version,
            layout=args.layout,
            **output_options(args),
        )
    return print_report(args, report, describe_publish(report))


def describe_publish(report: PublishReport) -> str:
    """What ``flashhub publish`` prints of ``report``."""
    where = f"{report.repo_id}@v{report.version} at {report.version_dir}"
    findings: list[Finding] = [
        *report.shared_natives,
        *report.undeclared_imports,
        *report.file_relative_paths,
        *report.sourceless_modules,
    ]
    warned = [
        f"warning: {escape_controls(finding.describe(report.repo_id, report.version))}"
        for finding in findings
    ]
    if report.noop:
        return "\n".join(
            [f"{where} is already published with identical content; nothing written", *warned]
        )
    lines = [f"{'replaced' if report.replaced else 'published'} {where}"]
    lines += [f"  {v.name}: {count(v.files, 'file')}, {size(v.bytes)}" for v in report.variants]
    lines.append(f"wrote {count(len(report.written), 'file')} ({size(report.bytes_written)})")
    lines.append(f"versions.json: {list(report.versions)}")
    if report.signed_by:
        keys = "key" if len(report.signed_by) == 1 else "keys"
        lines.append(f"signed with {keys} {', '.join(report.signed_by)}")
    return "\n".join(lines + warned)


COMMANDS = {"publish": Command(_publish_arguments, _publish)}
