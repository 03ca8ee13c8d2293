"""``flashhub info`` and ``get``: what the CDN publishes of one kernel version (and, with
``--dep-tree``, the kernels it depends on), judged against this system, and its variant
downloaded (for this system or, with ``--system``, another)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._models.kernel_metadata import dependency_label
from .._utils.escaping import escape_controls
from ._common import (
    EXIT_OK,
    Command,
    backend_argument,
    count,
    json_argument,
    kernel_arguments,
    machine,
    newest_version,
    print_json,
    remote_arguments,
    shown_choice,
    size,
    system_arguments,
    target_system_of,
)

if TYPE_CHECKING:
    from .._loading.dependency_tree import DependencyNode
    from .._models.names import RepoInfo


def _kernel_command_arguments(parser: argparse.ArgumentParser) -> None:
    kernel_arguments(parser)
    backend_argument(parser)
    remote_arguments(parser)
    json_argument(parser)


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    _kernel_command_arguments(parser)
    parser.add_argument(
        "--dep-tree",
        action="store_true",
        help="also show the kernels it depends on (kernel-depends), and theirs, as a tree",
    )


def _choosing_command_arguments(parser: argparse.ArgumentParser) -> None:
    _kernel_command_arguments(parser)
    system_arguments(parser)


def _info(args: argparse.Namespace) -> int:
    from .._loading.version_info import describe_kernel, metadata_lines

    version = args.version or newest_version(args.repo_id, "info")
    description = describe_kernel(args.repo_id, version, backend=args.backend)
    tree = _dependency_tree(description.info, args.backend) if args.dep_tree else None
    if args.json:
        shown_tree = {} if tree is None else {"dependency_tree": tree.to_dict()}
        print_json({**description.to_dict(), **shown_tree})
        return EXIT_OK
    print(f"{description.info} on {description.system}")
    print(f"chosen variant: {shown_choice(description.chosen)}")
    for variant in description.variants:
        mark = "+" if variant.compatible else "-"
        print(
            f"  {mark} {escape_controls(variant.name)}: {count(len(variant.files), 'file')}, "
            f"{size(variant.size)}, {variant.content_hash}"
        )
        for line in metadata_lines(variant.metadata):
            print(f"      {line}")
        if variant.signature:
            print(f"      {variant.signature.describe()}")
        if variant.mirrored_from:
            print(f"      mirrored from {escape_controls(variant.mirrored_from.describe())}")
        if variant.reason:
            print(f"      rejected: {escape_controls(variant.reason)}")
        for path, nbytes in variant.files.items():
            print(f"      {size(nbytes):>10}  {escape_controls(path)}")
    if tree is not None:
        print("kernel dependencies:")
        print(_node_label(tree))
        _print_dependencies(tree.depends, "")
    return EXIT_OK


def _dependency_tree(info: RepoInfo, backend: str | None) -> DependencyNode:
    from .._loading.dependency_tree import dependency_tree

    return dependency_tree(info, backend=backend)


def _print_dependencies(nodes: tuple[DependencyNode, ...], indent: str) -> None:
    """``nodes`` as the branches of a tree drawn in ASCII, each one's own below it."""
    for index, node in enumerate(nodes):
        last = index == len(nodes) - 1
        print(f"{indent}{'`-- ' if last else '|-- '}{_node_label(node)}")
        _print_dependencies(node.depends, indent + ("    " if last else "|   "))


def _node_label(node: DependencyNode) -> str:
    """``org/pkg v1 (variant)``, or why its dependencies are unknown."""
    variant = escape_controls(node.variant) if node.variant else "no variant fits this system"
    return f"{dependency_label(node.info)} ({variant})"


def _get(args: argparse.Namespace) -> int:
    from .._loading.api import install_kernel

    target_system_of(args)  # a malformed machine: before any request
    version = args.version or newest_version(args.repo_id, "get")
    path = install_kernel(args.repo_id, version=version, backend=args.backend, **machine(args))
    if args.json:
        print_json(
            {
                "repo_id": args.repo_id,
                "version": version,
                "variant": path.name,
                "path": str(path),
            }
        )
    else:
        print(path)
    return EXIT_OK


COMMANDS = {
    "info": Command(_info_arguments, _info),
    "get": Command(_choosing_command_arguments, _get),
}
