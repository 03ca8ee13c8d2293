"""``flashhub variants``, ``info`` and ``get``: what the CDN publishes of one kernel,
judged against this system (or, with ``--system``, another), and its variant downloaded."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._config import get_config
from .._utils.escaping import escape_controls
from ._common import (
    EXIT_FAILURE,
    EXIT_OK,
    Command,
    backend_argument,
    count,
    json_argument,
    kernel_arguments,
    local_cache,
    machine,
    print_json,
    remote_arguments,
    size,
    system_arguments,
    target_system_of,
)

if TYPE_CHECKING:
    from .._loading.version_info import Signature


def _kernel_command_arguments(parser: argparse.ArgumentParser) -> None:
    kernel_arguments(parser)
    backend_argument(parser)
    remote_arguments(parser)
    json_argument(parser)


def _choosing_command_arguments(parser: argparse.ArgumentParser) -> None:
    _kernel_command_arguments(parser)
    system_arguments(parser)


def _variants(args: argparse.Namespace) -> int:
    from .._loading.api import get_kernel_variants
    from .._variants.verdicts import VariantAccepted, best_variant, format_trace

    system = target_system_of(args).describe()  # a malformed machine: before any request
    version = args.version or _newest_version(args.repo_id, "variants")
    verdicts = get_kernel_variants(args.repo_id, version, backend=args.backend, **machine(args))
    chosen = best_variant(verdicts)
    signatures = _signatures(args.repo_id, version, [r.variant for r in verdicts])
    if args.json:
        variants = [
            {
                "variant": r.variant,
                "compatible": isinstance(r, VariantAccepted),
                "reason": None if isinstance(r, VariantAccepted) else r.reason,
                **(signatures[r.variant].to_dict() if r.variant in signatures else {}),
            }
            for r in verdicts
        ]
        print_json(
            {
                "repo_id": args.repo_id,
                "version": version,
                "system": system,
                "chosen": chosen,
                "variants": variants,
            }
        )
    else:
        print(f"{args.repo_id}@v{version} on {system}:")
        print(format_trace(verdicts))
        for name, signature in signatures.items():
            print(f"  {escape_controls(name)}: {signature.describe()}")
        print(f"chosen: {_chosen(chosen)}")
    return EXIT_OK if chosen else EXIT_FAILURE


def _signatures(repo_id: str, version: int, names: list[str]) -> dict[str, Signature]:
    """Who signed each signed variant; offline, the keys that vouched for cached entries."""
    from .._loading.version_info import cached_signatures, variant_signatures
    from .._models.names import RepoInfo

    info = RepoInfo(repo_id, version)
    if get_config().offline:
        return cached_signatures(local_cache(), info, names)
    return variant_signatures(info, names)


def _chosen(variant: str | None) -> str:
    return escape_controls(variant) if variant else "none (no variant fits this system)"


def _newest_version(repo_id: str, command: str) -> int:
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


def _info(args: argparse.Namespace) -> int:
    from .._loading.version_info import describe_kernel, metadata_lines

    version = args.version or _newest_version(args.repo_id, "info")
    description = describe_kernel(args.repo_id, version, backend=args.backend)
    if args.json:
        print_json(description.to_dict())
        return EXIT_OK
    print(f"{description.info} on {description.system}")
    print(f"chosen variant: {_chosen(description.chosen)}")
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
    return EXIT_OK


def _get(args: argparse.Namespace) -> int:
    from .._loading.api import install_kernel

    target_system_of(args)  # a malformed machine: before any request
    version = args.version or _newest_version(args.repo_id, "get")
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
    "variants": Command(_choosing_command_arguments, _variants),
    "info": Command(_kernel_command_arguments, _info),
    "get": Command(_choosing_command_arguments, _get),
}
