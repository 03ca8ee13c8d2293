"""``flashhub lock`` and ``flashhub download``: a project's kernels locked, and
downloaded as locked."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._config import get_config
from .._utils.escaping import escape_controls
from ._common import (
    Command,
    count,
    json_argument,
    print_json,
    project_argument,
    project_lockfile,
    remote_arguments,
    system_arguments,
    target_system_of,
    usage_checked,
)
from ._exit import EXIT_FAILURE, EXIT_OK
from ._settings import in_command_terms


def _variant_arg(value: str) -> str:
    from .._lockfiles.project import check_lockable_variant

    return usage_checked(check_lockable_variant, value)


def _lock_arguments(parser: argparse.ArgumentParser) -> None:
    project_argument(parser)
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        dest="variants",
        type=_variant_arg,
        metavar="NAME",
        help="for versions without variants.json, also lock this variant (repeatable; "
        "adds to [tool.flashhub] variants), e.g. torch212-cxx11-cu126-x86_64-linux",
    )
    parser.add_argument(
        "--allow-downgrade",
        action="store_true",
        help="accept a lower version than the lock pins, or than this machine has seen "
        "listed in versions.json (refused by default: a CDN replaying an old versions.json "
        "looks like that)",
    )
    remote_arguments(parser)
    json_argument(parser)


def _lock(args: argparse.Namespace) -> int:
    from .._lockfiles.format import LOCKFILE_NAME
    from .._lockfiles.pinning import lock_project

    path = Path(args.project_dir) / LOCKFILE_NAME
    before = _contents(path)
    lock = lock_project(
        args.project_dir, variants=args.variants, allow_downgrade=args.allow_downgrade
    )
    # Offline, lock_project checks the existing lock against the cache and writes nothing;
    # online, it leaves a lock that holds its bytes already as it is.
    written = _contents(path) != before
    if args.json:
        print_json({"lockfile": lock.source, "written": written, **lock.to_json()})
        return EXIT_OK
    for locked in lock.all_kernels():
        wanted = escape_controls(locked.specifier) or "any version"  # the lock's own text
        variants = count(len(locked.variants), "variant")
        probed = ", probed: no variants.json" if locked.probed else ""
        needs = ", ".join(str(dep.info) for dep in locked.dependencies)
        depends = f", depends on {needs}" if needs else ""
        print(f"{locked.repo_id} {wanted}: v{locked.version} ({variants}{probed}{depends})")
    if written:
        print(f"wrote {lock.source}")
    elif get_config().offline:
        print(f"{lock.source} is up to date as far as the cache knows (FLASHHUB_OFFLINE is set)")
    else:
        print(f"{lock.source} is up to date")
    return EXIT_OK


def _contents(path: Path) -> bytes | None:
    """The bytes of the file at ``path``; ``None`` where there is none to read."""
    try:
        return path.read_bytes()
    except OSError:
        return None


def _download_arguments(parser: argparse.ArgumentParser) -> None:
    project_argument(parser)
    parser.add_argument(
        "--all-variants",
        action="store_true",
        help="every locked variant, not only this system's (to bake a cache for several targets)",
    )
    system_arguments(parser)
    remote_arguments(parser)
    json_argument(parser)


def _download(args: argparse.Namespace) -> int:
    from .._lockfiles.predownload import download_locked

    chooses = args.system or args.cuda_capability or args.rocm_arch
    if args.all_variants and chooses:
        raise ValueError(
            "--all-variants downloads every locked variant: it takes no --system, "
            "--cuda-capability or --rocm-arch"
        )
    system = target_system_of(args) if chooses else None
    lock = project_lockfile(args.project_dir)
    results = download_locked(lock, all_variants=args.all_variants, system=system)
    errors = [r.cli_error and in_command_terms(r.cli_error, args) for r in results]
    if args.json:
        documents = [{**r.to_dict(), "error": e} for r, e in zip(results, errors, strict=True)]
        print_json({"lockfile": lock.source, "results": documents})
    for result, error in zip(results, errors, strict=True):
        where = f"{result.repo_id}@v{result.version} {result.variant or '(no variant)'}"
        if error is not None:
            print(f"error: {where}: {error}", file=sys.stderr)
        elif not args.json:
            print(f"{result.status:<10} {where}  {result.path}")
    if get_config().offline and not args.json:
        print(
            f"everything {lock.source} pins is already in the cache "
            "(FLASHHUB_OFFLINE is set: nothing was downloaded)"
        )
    return EXIT_FAILURE if any(r.error is not None for r in results) else EXIT_OK


COMMANDS = {
    "lock": Command(_lock_arguments, _lock),
    "download": Command(_download_arguments, _download),
}
