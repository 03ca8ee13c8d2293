"""The ``flashhub`` command line, and the legacy ``flashhub-kernel-load`` script.

A subcommand is a handler function registered with :func:`command`, which also names
the function that adds its arguments. Handlers import what they need (the publisher,
the client, torch) when they run, so ``flashhub --help`` stays fast.

Exit codes: 0 success, 1 failure (a :class:`~flashhub_kernels.errors.FlashhubError`,
printed with its hint and no traceback), 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._config import DEFAULT_PREFIX, get_config, normalize_prefix
from ._names import check_version, parse_repo_id
from ._text import escape_controls, escape_message
from .errors import ConfigError, FlashhubError

if TYPE_CHECKING:
    from ._cache import Cache
    from ._info import Signature
    from ._lockfile import Lockfile
    from ._publish import PublishReport

Handler = Callable[[argparse.Namespace], int]
ArgumentAdder = Callable[[argparse.ArgumentParser], None]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


@dataclass(frozen=True)
class _Command:
    help: str
    add_arguments: ArgumentAdder
    run: Handler


_COMMANDS: dict[str, _Command] = {}


def command(name: str, *, help: str, arguments: ArgumentAdder) -> Callable[[Handler], Handler]:
    """Register the decorated handler as ``flashhub <name>``; ``arguments`` adds its options."""

    def register(run: Handler) -> Handler:
        _COMMANDS[name] = _Command(help, arguments, run)
        return run

    return register


# --- argument types: reject bad values as usage errors (exit 2) ------------------------


def _repo_id_arg(value: str) -> str:
    try:
        parse_repo_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def _version_arg(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a version number such as 1") from None
    try:
        return check_version(number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _prefix_arg(value: str) -> str:

    try:
        return normalize_prefix(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --- flashhub publish ----------------------------------------------------------------


def _publish_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "build_dir",
        metavar="KERNEL_BUILD_DIR",
        help="a build directory holding <variant>/<py_pkg>/, or a kernel directory holding build/",
    )
    parser.add_argument("--repo-id", required=True, type=_repo_id_arg, metavar="ORG/PKG")
    parser.add_argument("--version", required=True, type=_version_arg, metavar="N")
    parser.add_argument("--out", required=True, metavar="CDN_ROOT", help="root of the CDN tree")
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


@command(
    "publish",
    help="turn a kernel build into the CDN tree of one version",
    arguments=_publish_arguments,
)
def _publish(args: argparse.Namespace) -> int:
    import warnings

    from ._publish import publish
    from .errors import SharedNativeLibraryWarning

    with warnings.catch_warnings():  # the report says it, without a warning's source line
        warnings.simplefilter("ignore", SharedNativeLibraryWarning)
        report = publish(
            args.build_dir,
            repo_id=args.repo_id,
            version=args.version,
            out=args.out,
            prefix=args.prefix,
            force=args.force,
            sign=args.sign,
        )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        print(_describe_publish(report))
    return EXIT_OK


def _describe_publish(report: PublishReport) -> str:
    where = f"{report.repo_id}@v{report.version} at {report.version_dir}"
    shared = [
        f"warning: {escape_controls(library.describe(report.repo_id, report.version))}"
        for library in report.shared_natives
    ]
    if report.noop:
        return "\n".join(
            [f"{where} is already published with identical content; nothing written", *shared]
        )
    lines = [f"{'replaced' if report.replaced else 'published'} {where}"]
    lines += [f"  {v.name}: {_count(v.files, 'file')}, {_size(v.bytes)}" for v in report.variants]
    lines.append(f"wrote {_count(len(report.written), 'file')} ({_size(report.bytes_written)})")
    lines.append(f"versions.json: {list(report.versions)}")
    if report.signed_by:
        keys = "key" if len(report.signed_by) == 1 else "keys"
        lines.append(f"signed with {keys} {', '.join(report.signed_by)}")
    return "\n".join(lines + shared)


# --- flashhub keygen / sign ----------------------------------------------------------


def _keygen_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="KEYFILE",
        help="where to write the private key (mode 0600); the public key goes to KEYFILE.pub",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing key file")
    _json_argument(parser)


@command(
    "keygen",
    help="create an Ed25519 key pair to sign published kernels with",
    arguments=_keygen_arguments,
)
def _keygen(args: argparse.Namespace) -> int:
    from ._signing import generate_signing_key, write_key_pair

    key = generate_signing_key()
    public = write_key_pair(key, args.out, force=args.force)
    if args.json:
        _print_json(
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
        f"wrote the private key to {_shown(args.out)} (keep it secret) and the public key "
        f"to {_shown(public)}",
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
        type=Path,
        metavar="PATH",
        help="a CDN tree written by `flashhub publish` (its --out), or a directory below it",
    )
    parser.add_argument(
        "--key", required=True, metavar="KEYFILE", help="the private key from `flashhub keygen`"
    )
    _json_argument(parser)


@command(
    "sign",
    help="sign the published documents of a CDN tree (versions.json, variants.json, "
    "metadata.json), adding to the signatures already there",
    arguments=_sign_arguments,
)
def _sign(args: argparse.Namespace) -> int:
    from ._publish import sign_tree

    report = sign_tree(args.path, args.key)
    if args.json:
        _print_json(report.to_dict())
        return EXIT_OK
    for document in report.written:
        print(f"wrote {_shown(Path(document))}")
    unchanged = len(report.documents) - len(report.written)
    print(
        f"signed {_count(len(report.documents), 'document')} with key {report.key_id} "
        f"({unchanged} already signed by it)"
    )
    return EXIT_OK


# --- shared by the lock, download, inspection and cache commands -----------------------


def _json_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON document instead")


def _project_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "project_dir",
        nargs="?",
        default=".",
        type=Path,
        metavar="PROJECT_DIR",
        help="the directory holding pyproject.toml and flashhub.lock (default: .)",
    )


def _kernel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("repo_id", type=_repo_id_arg, metavar="ORG/PKG")
    parser.add_argument(
        "--version", type=_version_arg, metavar="N", help="default: the newest in versions.json"
    )


def _backend_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=("cpu",),
        help="as if torch ran on the CPU: the CPU builds on a GPU machine (backend='cpu')",
    )


def _count(number: int, noun: str, plural: str | None = None) -> str:
    """``1 file``, ``2 files``; ``plural`` for a noun that does not just add an s."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


def _entries(number: int) -> str:
    return _count(number, "entry", "entries")


def _print_json(document: object) -> None:
    print(json.dumps(document, indent=2, sort_keys=True))


def _size(size: int | None) -> str:
    if size is None:
        return "?"
    if size < 1024:
        return f"{size} B"
    value, unit = size / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"


def _project_lockfile(project_dir: Path) -> Lockfile:
    from ._lockfile import LOCKFILE_NAME, read_lockfile

    return read_lockfile(project_dir / LOCKFILE_NAME)


def _local_cache() -> Cache:
    from ._cache import Cache

    config = get_config()
    return Cache.from_config(config)


# --- flashhub lock -------------------------------------------------------------------


def _variant_arg(value: str) -> str:
    from ._lockfile import check_lockable_variant

    try:
        return check_lockable_variant(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _lock_arguments(parser: argparse.ArgumentParser) -> None:
    _project_argument(parser)
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
    _json_argument(parser)


@command(
    "lock",
    help="resolve [tool.flashhub.dependencies] on the CDN and write flashhub.lock",
    arguments=_lock_arguments,
)
def _lock(args: argparse.Namespace) -> int:
    from ._lock import lock_project

    # Offline, lock_project checks the existing lock against the cache and writes nothing.
    written = not get_config().offline
    lock = lock_project(
        args.project_dir, variants=args.variants, allow_downgrade=args.allow_downgrade
    )
    if args.json:
        _print_json({"lockfile": lock.source, "written": written, **lock.to_json()})
        return EXIT_OK
    for repo_id, locked in sorted(lock.kernels.items()):
        wanted = locked.specifier or "any version"
        variants = _count(len(locked.variants), "variant")
        probed = ", probed: no variants.json" if locked.probed else ""
        print(f"{repo_id} {wanted}: v{locked.version} ({variants}{probed})")
    if written:
        print(f"wrote {lock.source}")
    else:
        print(f"{lock.source} is up to date as far as the cache knows (FLASHHUB_OFFLINE is set)")
    return EXIT_OK


# --- flashhub download ---------------------------------------------------------------


def _download_arguments(parser: argparse.ArgumentParser) -> None:
    _project_argument(parser)
    parser.add_argument(
        "--all-variants",
        action="store_true",
        help="every locked variant, not only this system's (to bake a cache for several targets)",
    )
    _json_argument(parser)


@command(
    "download",
    help="download the kernels flashhub.lock pins into the cache, verified against the lock",
    arguments=_download_arguments,
)
def _download(args: argparse.Namespace) -> int:
    from ._lock import download_locked

    lock = _project_lockfile(args.project_dir)
    results = download_locked(lock, all_variants=args.all_variants)
    if args.json:
        _print_json({"lockfile": lock.source, "results": [r.to_dict() for r in results]})
    for result in results:
        where = f"{result.repo_id}@v{result.version} {result.variant or '(no variant)'}"
        if result.error is not None:
            print(f"error: {where}: {result.error}", file=sys.stderr)
        elif not args.json:
            print(f"{result.status:<10} {where}  {result.path}")
    return EXIT_FAILURE if any(r.error is not None for r in results) else EXIT_OK


# --- flashhub variants / info / get ---------------------------------------------------


def _variants_arguments(parser: argparse.ArgumentParser) -> None:
    _kernel_arguments(parser)
    _backend_argument(parser)
    _json_argument(parser)


@command(
    "variants",
    help="judge every published variant of a kernel against this system (exit 1: none fits)",
    arguments=_variants_arguments,
)
def _variants(args: argparse.Namespace) -> int:
    from ._api import get_kernel_variants
    from ._variant_choice import best_variant, target_system
    from ._variants import VariantAccepted, format_trace

    version = args.version or _newest_version(args.repo_id, "variants")
    verdicts = get_kernel_variants(args.repo_id, version, backend=args.backend)
    chosen = best_variant(verdicts)
    system = target_system(args.backend).describe()
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
        _print_json(
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
    from ._info import cached_signatures, variant_signatures
    from ._names import RepoInfo

    info = RepoInfo(repo_id, version)
    if get_config().offline:
        return cached_signatures(_local_cache(), info, names)
    return variant_signatures(info, names)


def _chosen(variant: str | None) -> str:
    return escape_controls(variant) if variant else "none (no variant fits this system)"


def _newest_version(repo_id: str, command: str) -> int:
    """The newest version in the repo's ``versions.json``, for ``flashhub <command>``."""
    from ._download import remote, with_version

    config = get_config()
    if config.offline:
        from ._offline import newest_version_error

        raise newest_version_error(
            repo_id,
            hint=f"pass --version N (`flashhub {command} {repo_id} --version 1`), "
            "or unset FLASHHUB_OFFLINE",
        )
    with remote(config) as fetcher:
        return with_version(fetcher, repo_id, None).version


def _info_arguments(parser: argparse.ArgumentParser) -> None:
    _kernel_arguments(parser)
    _backend_argument(parser)
    _json_argument(parser)


@command(
    "info",
    help="show a kernel version's variants, files and sizes, and the variant this system gets",
    arguments=_info_arguments,
)
def _info(args: argparse.Namespace) -> int:
    from ._info import describe_kernel

    version = args.version or _newest_version(args.repo_id, "info")
    description = describe_kernel(args.repo_id, version, backend=args.backend)
    if args.json:
        _print_json(description.to_dict())
        return EXIT_OK
    print(f"{description.info} on {description.system}")
    print(f"chosen variant: {_chosen(description.chosen)}")
    for variant in description.variants:
        mark = "+" if variant.compatible else "-"
        print(
            f"  {mark} {escape_controls(variant.name)}: {_count(len(variant.files), 'file')}, "
            f"{_size(variant.size)}, {variant.content_hash}"
        )
        if variant.signature:
            print(f"      {variant.signature.describe()}")
        if variant.reason:
            print(f"      rejected: {escape_controls(variant.reason)}")
        for path, size in variant.files.items():
            print(f"      {_size(size):>10}  {escape_controls(path)}")
    return EXIT_OK


def _get_arguments(parser: argparse.ArgumentParser) -> None:
    _kernel_arguments(parser)
    _backend_argument(parser)
    _json_argument(parser)


@command(
    "get",
    help="download and verify one kernel's variant for this system; print its directory",
    arguments=_get_arguments,
)
def _get(args: argparse.Namespace) -> int:
    from ._api import install_kernel

    version = args.version or _newest_version(args.repo_id, "get")
    path = install_kernel(args.repo_id, version=version, backend=args.backend)
    if args.json:
        _print_json(
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


# --- flashhub cache ------------------------------------------------------------------


def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    for name, run, help_text in (
        ("list", _cache_list, "list the cached kernel variants"),
        ("verify", _cache_verify, "re-hash every cached file against its metadata.json"),
        ("prune", _cache_prune, "remove damaged entries and leftovers of dead downloads"),
        ("clear", _cache_clear, "remove every kernel from the cache"),
    ):
        action = actions.add_parser(name, help=help_text, description=help_text)
        action.set_defaults(cache_run=run)
        if name == "prune":
            action.add_argument(
                "--keep-locked",
                type=Path,
                metavar="PROJECT_DIR",
                help="also remove every entry that PROJECT_DIR/flashhub.lock does not pin",
            )
        if name == "verify":
            action.add_argument(
                "--repair",
                action="store_true",
                help="offline, re-stamp entries whose files re-hash right (a copy that lost "
                "its modification times) and recompile their damaged bytecode",
            )
        if name == "clear":
            action.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        if name in ("prune", "clear"):
            action.add_argument(
                "--force",
                action="store_true",
                help="also remove entries that running processes have imported (breaks them)",
            )
        _json_argument(action)


@command(
    "cache", help="list, verify, prune or clear the local kernel cache", arguments=_cache_arguments
)
def _cache(args: argparse.Namespace) -> int:
    run: Handler = args.cache_run
    return run(args)


def _cache_list(args: argparse.Namespace) -> int:
    from ._cache_admin import list_entries

    cache = _local_cache()
    entries = list_entries(cache)
    if args.json:
        _print_json({"cache_dir": str(cache.root), "entries": [e.to_dict() for e in entries]})
        return EXIT_OK
    print(f"cache: {cache.root}")
    for entry in entries:
        print(
            f"  {entry.info} {escape_controls(entry.variant)}: {_count(entry.files, 'file')}, "
            f"{_size(entry.size)}, {escape_controls(entry.content_hash or 'no receipt')}"
        )
    if not entries:
        print("  (empty)")
    return EXIT_OK


def _cache_verify(args: argparse.Namespace) -> int:
    from ._cache_admin import list_entries, untrusted_dirs, verify_entry

    cache = _local_cache()
    untrusted = untrusted_dirs(cache)
    checked = [
        (entry, verify_entry(cache, entry, repair=args.repair))
        for entry in list_entries(cache)
        if all(entry.path != path for path, _why in untrusted)
    ]
    if args.json:
        _print_json(
            {
                "cache_dir": str(cache.root),
                "entries": [
                    {
                        **entry.to_dict(),
                        "ok": verdict.ok,
                        "problem": verdict.problem,
                        "repairable": verdict.repairable,
                        "repaired": verdict.repaired,
                    }
                    for entry, verdict in checked
                ],
                "untrusted": [{"path": str(p), "problem": reason} for p, reason in untrusted],
            }
        )
    else:
        for path, reason in untrusted:
            print(f"{_shown(path)}: {reason} (FAILED: a load refuses to trust it)")
        for entry, verdict in checked:
            if verdict.repaired:
                outcome = f"repaired ({verdict.problem})"
            else:
                outcome = "ok" if verdict.ok else f"FAILED: {verdict.problem}"
            signed = f", signed by {entry.signer}" if entry.signer and verdict.ok else ""
            print(f"{entry.info} {entry.variant}: {outcome}{signed}")
        refused = _count(len(untrusted), "untrusted directory", "untrusted directories")
        print(f"{_entries(len(checked))} checked, {refused}")
    failed = [verdict for _entry, verdict in checked if not verdict.ok]
    if untrusted or failed:
        if not args.json:
            hint = "`flashhub cache prune` removes them; they are fetched again on use"
            if any(verdict.repairable for verdict in failed):
                hint = (
                    "`flashhub cache verify --repair` repairs the entries whose files are "
                    "intact (only their modification times or bytecode changed); " + hint
                )
            _print_error("some cache entries failed verification", hint)
        return EXIT_FAILURE
    return EXIT_OK


def _cache_prune(args: argparse.Namespace) -> int:
    from ._cache_admin import prune

    lock = _project_lockfile(args.keep_locked) if args.keep_locked is not None else None
    report = prune(_local_cache(), keep_locked=lock, force=args.force)
    if args.json:
        _print_json(report.to_dict())
        return EXIT_OK
    for entry, why in report.removed:
        print(f"removed {entry.info} {entry.variant}: {why}")
    for path in report.stale:
        print(f"removed leftover {_shown(path)}")
    _report_skipped(report.busy, report.in_use)
    print(f"{_entries(len(report.removed))} removed, {_size(report.bytes_freed)} freed")
    return EXIT_OK


def _shown(path: Path) -> str:
    """A path from the cache, whose names another program may have chosen, made safe."""
    return escape_controls(str(path))


def _report_skipped(busy: list[Path], in_use: list[Path]) -> None:
    for path in busy:
        print(f"skipped {_shown(path)}: a download is in progress there; run this again later")
    for path in in_use:
        print(
            f"skipped {_shown(path)}: in use by a running process that imported it; run this "
            "again once it has exited, or pass --force to remove it anyway (breaking it)"
        )


def _cache_clear(args: argparse.Namespace) -> int:
    from ._cache_admin import clear, list_entries

    cache = _local_cache()
    count = len(list_entries(cache))
    if count and not args.yes:  # with no kernel cached there is nothing to confirm
        if not sys.stdin.isatty():
            print(
                "flashhub cache clear: error: pass --yes to clear the cache without a prompt",
                file=sys.stderr,
            )
            return EXIT_USAGE
        what = _count(count, "cached kernel variant")
        answer = input(f"remove {what} from {cache.root}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return EXIT_OK
    report = clear(cache, force=args.force)
    if args.json:
        _print_json(
            {
                "cache_dir": str(cache.root),
                "removed": [e.to_dict() for e in report.removed],
                "skipped_busy": [str(path) for path in report.busy],
                "skipped_in_use": [str(path) for path in report.in_use],
            }
        )
    else:
        _report_skipped(report.busy, report.in_use)
        if count or report.removed:
            print(f"removed {_entries(len(report.removed))} from {cache.root}")
        else:
            print(f"no kernels are cached in {cache.root}; nothing to remove")
    return EXIT_OK


# --- running -----------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The ``flashhub`` argument parser, one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="flashhub", description="Publish and manage flashhub kernel packages."
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="say what happens on stderr: -v each step of a load (variant, downloads, "
        "retries, lock waits), -vv also each HTTP connection",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(sub)
        sub.set_defaults(run=cmd.run)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | int:
    """Parse, turning argparse's ``SystemExit`` (``--help``, usage errors) into a code."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def _usage_error(parser: argparse.ArgumentParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _run(handler: Handler, args: argparse.Namespace) -> int:
    try:
        return handler(args)
    except ConfigError as exc:  # a malformed setting, e.g. FLASHHUB_CDN_URL
        _print_error(exc.message, exc.cli_hint or exc.hint)
        return EXIT_USAGE
    except FlashhubError as exc:
        _print_error(exc.message, exc.cli_hint or exc.hint)  # the options, not version=
        return EXIT_FAILURE
    except ValueError as exc:  # a malformed argument or setting (LOCAL_KERNELS, trusted keys)
        _print_error(str(exc), None)
        return EXIT_USAGE
    except OSError as exc:
        _print_error(str(exc), None)
        return EXIT_FAILURE


def _print_error(message: str, hint: str | None) -> None:
    print(f"error: {escape_message(message)}", file=sys.stderr)
    if hint:
        print(f"  hint: {escape_message(hint)}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub`` and ``python -m flashhub_kernels``; returns the exit code."""
    parser = build_parser()
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    handler: Handler = args.run
    with _logging_to_stderr(args.verbose):
        return _run(handler, args)


@contextmanager
def _logging_to_stderr(verbosity: int) -> Iterator[None]:
    """Show the library's log (silent by default) on stderr for ``-v`` / ``-vv``."""
    if not verbosity:
        yield
        return
    import logging  # only when asked: `flashhub --help` stays quick

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    loggers = [logging.getLogger("flashhub_kernels")]
    if verbosity > 1:
        loggers.append(logging.getLogger("urllib3"))  # connections, retries
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeHandler(handler)
            logger.setLevel(logging.NOTSET)


# --- flashhub-kernel-load (the 0.1.2 release's script) -------------------------------


def _kernel_load_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flashhub-kernel-load",
        description="Download a kernel from the CDN and import it, or check that it exists.",
    )
    parser.add_argument("repo_id", metavar="REPO", type=_repo_id_arg, help="ORG/PKG")
    parser.add_argument(
        "--version", type=_version_arg, metavar="N", help="required unless --has (newest)"
    )
    parser.add_argument("--cdn-url", help="CDN base URL (default: $FLASHHUB_CDN_URL)")
    parser.add_argument("--prefix", help="path prefix on the CDN (default: $FLASHHUB_CDN_PREFIX)")
    parser.add_argument("--cache-dir", help="local cache root (default: $FLASHHUB_CACHE_DIR)")
    parser.add_argument(
        "--has", action="store_true", help="print True/False; exit 0 if the kernel exists, else 1"
    )
    return parser


def _kernel_load(args: argparse.Namespace) -> int:
    from flashhub_kernels import configure, get_kernel, has_kernel

    settings = {"cdn_url": args.cdn_url, "prefix": args.prefix, "cache_dir": args.cache_dir}
    given = {key: value for key, value in settings.items() if value is not None}
    if given:
        configure(**given)
    if args.has:
        present = has_kernel(args.repo_id, version=args.version)
        print(present)
        return EXIT_OK if present else EXIT_FAILURE
    module = get_kernel(args.repo_id, version=args.version)
    print(module.__name__)
    print(module.__file__)
    return EXIT_OK


def kernel_load_main(argv: list[str] | None = None) -> int:
    """Entry point of ``flashhub-kernel-load REPO --version N [...]``; returns the exit code."""
    parser = _kernel_load_parser()
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.version is None and not args.has:
        return _usage_error(parser, "--version N is required to load a kernel (or pass --has)")
    try:
        return _run(_kernel_load, args)
    except ValueError as exc:  # a malformed --cdn-url or --prefix
        _print_error(str(exc), "check the --cdn-url, --prefix and --cache-dir values")
        return EXIT_USAGE
