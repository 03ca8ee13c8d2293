"""``flashhub variants``: every published variant of a kernel version, or of each of its
versions (``--all-versions``), judged against this system (or, with ``--system``,
another), with who signed it and the variant a load would take."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .._config import get_config
from .._models.names import RepoInfo
from .._models.record import Record
from .._utils.escaping import escape_controls
from .._variants.verdicts import describe_system
from ._common import (
    Command,
    backend_argument,
    backend_cpu_notes,
    json_argument,
    local_cache,
    machine,
    newest_version,
    print_json,
    remote_arguments,
    repo_id_arg,
    shown_choice,
    system_arguments,
    target_system_of,
    version_argument,
)
from ._exit import EXIT_FAILURE, EXIT_OK

if TYPE_CHECKING:
    from .._loading.version_info import Signature
    from .._variants.system import SystemInfo
    from .._variants.verdicts import VariantVerdict


def _variants_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo_id", type=repo_id_arg, metavar="ORG/PKG")
    which = parser.add_mutually_exclusive_group()
    version_argument(which)
    which.add_argument(
        "--all-versions",
        action="store_true",
        help="every version versions.json lists, oldest first (offline: those the cache records)",
    )
    parser.add_argument(
        "--only-compatible",
        action="store_true",
        help="list only the variants the machine can load",
    )
    backend_argument(parser)
    remote_arguments(parser)
    json_argument(parser)
    system_arguments(parser)


class _Judged(Record):
    """One version's variants as judged (``problem``: why none could be listed), the one
    chosen, and who signed them."""

    version: int
    verdicts: list[VariantVerdict]
    chosen: str | None
    signatures: dict[str, Signature]
    problem: str | None = None


def _variants(args: argparse.Namespace) -> int:
    target = target_system_of(args)  # a malformed machine: before any request
    system = describe_system(target)
    if args.all_versions:
        judged = [_judge(args, version, keep_going=True) for version in _all_versions(args.repo_id)]
    else:
        judged = [_judge(args, args.version or newest_version(args.repo_id, "variants"))]
    if args.json:
        versions = [_document(one, args.only_compatible) for one in judged]
        head = {"repo_id": args.repo_id, "system": system, "revisions": _revisions(versions)}
        print_json({**head, "versions": versions} if args.all_versions else {**head, **versions[0]})
    else:
        for index, one in enumerate(judged):
            if index:
                print()
            _print_version(args.repo_id, system, _noted(one, target), args.only_compatible)
    return EXIT_OK if any(one.chosen for one in judged) else EXIT_FAILURE


def _judge(args: argparse.Namespace, version: int, *, keep_going: bool = False) -> _Judged:
    """Judge ``version``'s variants. With ``keep_going``, a version whose variants cannot
    be listed for this machine (no ``variants.json``, and none of its builds published)
    is judged to have none, saying why, instead of failing the command."""
    from .._loading.api import get_kernel_variants
    from .._variants.verdicts import best_variant
    from ..errors import NoCompatibleVariantError

    try:
        verdicts = get_kernel_variants(args.repo_id, version, backend=args.backend, **machine(args))
    except NoCompatibleVariantError as exc:
        if not keep_going:
            raise
        return _Judged(version, [], None, {}, exc.message)
    signatures = _signatures(RepoInfo(args.repo_id, version), [r.variant for r in verdicts])
    return _Judged(version, verdicts, best_variant(verdicts), signatures)


def _shown(judged: _Judged, only_compatible: bool) -> list[VariantVerdict]:
    from .._variants.verdicts import VariantAccepted

    if not only_compatible:
        return judged.verdicts
    return [r for r in judged.verdicts if isinstance(r, VariantAccepted)]


def _document(judged: _Judged, only_compatible: bool) -> dict[str, object]:
    from .._variants.verdicts import VariantAccepted

    signatures = judged.signatures
    variants = [
        {
            "variant": r.variant,
            "compatible": isinstance(r, VariantAccepted),
            "preferred": r.variant == judged.chosen,
            "reason": None if isinstance(r, VariantAccepted) else r.reason,
            **(signatures[r.variant].to_dict() if r.variant in signatures else {}),
        }
        for r in _shown(judged, only_compatible)
    ]
    problem = {} if judged.problem is None else {"problem": judged.problem}
    return {"version": judged.version, "chosen": judged.chosen, "variants": variants, **problem}


def _revisions(versions: list[dict[str, object]]) -> list[dict[str, object]]:
    """The judged versions as Hugging Face's ``kernels variants --json`` lists them."""
    return [
        {"version": one["version"], "revision": f"v{one['version']}", "variants": one["variants"]}
        for one in versions
    ]


def _noted(judged: _Judged, system: SystemInfo) -> _Judged:
    """``judged``, each rejected build that ``--backend cpu`` loads saying so."""
    from .._variants.verdicts import VariantRejected

    notes = backend_cpu_notes([r.variant for r in judged.verdicts], system)
    verdicts = [
        VariantRejected(r.variant, r.reason + notes[r.variant])
        if isinstance(r, VariantRejected) and r.variant in notes
        else r
        for r in judged.verdicts
    ]
    return judged._replace(verdicts=verdicts)


def _print_version(repo_id: str, system: str, judged: _Judged, only_compatible: bool) -> None:
    from .._variants.verdicts import format_trace

    print(f"{repo_id}@v{judged.version} on {system}:")
    shown = _shown(judged, only_compatible)
    if judged.problem is not None:
        print(f"  ({judged.problem})")
    elif shown or not only_compatible:
        print(format_trace(shown))
    else:
        print("  (no compatible variants)")
    for name, signature in judged.signatures.items():
        if any(r.variant == name for r in shown):
            print(f"  {escape_controls(name)}: {signature.describe()}")
    print(f"chosen: {shown_choice(judged.chosen)}")


def _all_versions(repo_id: str) -> list[int]:
    """Every version ``versions.json`` lists; offline, those whose variant list the cache
    records."""
    config = get_config()
    if config.offline:
        from .._loading.offline import indexed_versions
        from ..errors import OfflineError

        versions = indexed_versions(local_cache(), repo_id)
        if not versions:
            raise OfflineError(
                f"the cache records no version of {repo_id}, and FLASHHUB_OFFLINE is set",
                hint=f"run `flashhub get {repo_id}` with network access first (it records the "
                "version's variants in the cache), or unset FLASHHUB_OFFLINE",
            )
        return versions
    from .._network.transport import remote
    from .._network.versions import listed_versions

    with remote(config) as fetcher:
        return listed_versions(fetcher, repo_id)


def _signatures(info: RepoInfo, names: list[str]) -> dict[str, Signature]:
    """Who signed each signed variant; offline, the keys that vouched for cached entries."""
    from .._loading.version_info import cached_signatures, variant_signatures

    if get_config().offline:
        return cached_signatures(local_cache(), info, names)
    return variant_signatures(info, names)


COMMANDS = {"variants": Command(_variants_arguments, _variants)}
