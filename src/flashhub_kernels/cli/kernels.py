"""``flashhub info`` and ``get``: what the CDN publishes of one kernel version, or what a
local kernel directory holds (and, with ``--dep-tree``, the kernels it depends on), judged
against this system, and its variant downloaded (for this system or, with ``--system``,
another)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from .._models.kernel_metadata import dependency_label
from .._utils.escaping import escape_controls
from ._common import (
    Command,
    backend_argument,
    backend_cpu_notes,
    count,
    json_argument,
    kernel_arguments,
    kernel_or_path_argument,
    machine,
    newest_version,
    print_json,
    remote_arguments,
    shown,
    shown_choice,
    size,
    system_arguments,
    target_system_of,
    version_argument,
)
from ._exit import EXIT_FAILURE, EXIT_OK

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._loading.dependency_tree import DependencyNode
    from .._loading.local_info import LocalKernelDescription, LocalVariant
    from .._loading.version_info import PublishedVariant
    from .._models.names import RepoInfo


def _options(parser: argparse.ArgumentParser) -> None:
    backend_argument(parser)
    remote_arguments(parser)
    json_argument(parser)


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    kernel_or_path_argument(parser, package_dir=False)
    version_argument(parser)
    _options(parser)
    parser.add_argument(
        "--dep-tree",
        action="store_true",
        help="also show the kernels it depends on (kernel-depends), and theirs, as a tree",
    )


def _choosing_command_arguments(parser: argparse.ArgumentParser) -> None:
    kernel_arguments(parser)
    _options(parser)
    system_arguments(parser)


def _info(args: argparse.Namespace) -> int:
    from .._loading.version_info import describe_kernel

    path = Path(args.kernel).expanduser()
    if path.is_dir():
        return _local_info(args, path)
    version = args.version or newest_version(args.kernel, "info")
    description = describe_kernel(args.kernel, version, backend=args.backend)
    tree = _dependency_tree(description.info, args.backend) if args.dep_tree else None
    if args.json:
        shown_tree = {} if tree is None else {"dependency_tree": tree.to_dict()}
        hugging_face = _hugging_face_keys(description.chosen, description.variants)
        revision = {"revision": description.info.revision}
        print_json({**description.to_dict(), **hugging_face, **revision, **shown_tree})
    else:
        print(f"{description.info} on {description.system}")
        _print_variants(description.chosen, description.variants, args.backend)
        if tree is not None:
            _print_tree(_node_label(tree), tree.depends)
    return _fits(description.chosen)


def _local_info(args: argparse.Namespace, path: Path) -> int:
    """``flashhub info PATH``: the build variants of a local kernel directory."""
    from .._loading.local_info import describe_local_kernel

    if args.version is not None:  # --version latest too: no directory has versions
        raise ValueError(f"--version names a version on the CDN, not of the directory {path}")
    description = describe_local_kernel(path, backend=args.backend)
    depends = _local_dependencies(description, args.backend) if args.dep_tree else None
    if args.json:
        root = {"path": description.path, "variant": description.chosen}
        nodes = [node.to_dict() for node in depends or ()]
        shown_tree = {} if depends is None else {"dependency_tree": {**root, "depends": nodes}}
        hugging_face = _hugging_face_keys(description.chosen, description.variants)
        print_json({**description.to_dict(), **hugging_face, **shown_tree})
    else:
        print(f"{shown(description.path)} on {description.system}")
        _print_variants(description.chosen, description.variants, args.backend)
        if depends is not None:
            label = f"{shown(description.path)} ({shown_choice(description.chosen)})"
            _print_tree(label, depends)
    return _fits(description.chosen)


def _fits(chosen: str | None) -> int:
    """The exit status: 1 when no variant fits this system, as ``variants`` says it."""
    return EXIT_OK if chosen is not None else EXIT_FAILURE


def _hugging_face_keys(
    chosen: str | None, variants: Sequence[PublishedVariant | LocalVariant]
) -> dict[str, object]:
    """The keys of Hugging Face's ``kernels info --json`` that say which build: the variant
    chosen, and the backends the variants are built for (``universal`` for a build of
    none)."""
    from .._variants.grammar import as_variant

    parsed = [as_variant(variant.name) for variant in variants]
    backends = {one.backend or "universal" for one in parsed if one.tier is not None}
    return {"variant": chosen, "backends": sorted(backends)}


def _print_variants(
    chosen: str | None, variants: Sequence[PublishedVariant | LocalVariant], backend: str | None
) -> None:
    """The variant chosen, then each variant: what its ``metadata.json`` says, who signed
    and where it was mirrored from (a published one), why it is rejected (and whether
    ``--backend cpu`` loads it anyway), its files."""
    from .._loading.version_info import PublishedVariant, metadata_lines
    from .._variants.named_system import target_system

    forcible = backend_cpu_notes([variant.name for variant in variants], target_system(backend))
    print(f"chosen variant: {shown_choice(chosen)}")
    for variant in variants:
        mark = "+" if variant.compatible else "-"
        summary = [count(len(variant.files), "file"), size(variant.size)]
        notes = []
        if isinstance(variant, PublishedVariant):
            summary.append(variant.content_hash)
            notes += [variant.signature.describe()] if variant.signature else []
            if variant.mirrored_from:
                notes.append(f"mirrored from {escape_controls(variant.mirrored_from.describe())}")
        print(f"  {mark} {escape_controls(variant.name)}: {', '.join(summary)}")
        for line in [*metadata_lines(variant.metadata), *notes]:
            print(f"      {line}")
        if variant.reason:
            note = forcible.get(variant.name, "")
            print(f"      rejected: {escape_controls(variant.reason)}{note}")
        for path, nbytes in variant.files.items():
            print(f"      {size(nbytes):>10}  {escape_controls(path)}")


def _print_tree(root: str, depends: tuple[DependencyNode, ...]) -> None:
    print("kernel dependencies:")
    print(root)
    _print_dependencies(depends, "")


def _local_dependencies(
    description: LocalKernelDescription, backend: str | None
) -> tuple[DependencyNode, ...]:
    """The kernels the variant a load takes from the directory depends on, as trees."""
    chosen = next((v for v in description.variants if v.compatible), None)
    depends = chosen.metadata.kernel_depends if chosen is not None else ()
    return tuple(_dependency_tree(dep.info, backend) for dep in depends)


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
