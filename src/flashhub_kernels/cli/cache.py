"""``flashhub cache list|verify|prune|clear``: the local kernel cache, maintained
(``cache ls`` is ``cache list``, as Hugging Face kernels spells it)."""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .._constants import MANIFEST_NAME
from .._utils.escaping import escape_controls
from ._common import (
    Command,
    Handler,
    cache_dir_argument,
    count,
    entries,
    json_argument,
    local_cache,
    print_error,
    print_json,
    project_lockfile,
    shown,
    size,
    verbose_argument,
)
from ._exit import EXIT_FAILURE, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:
    from .._cache.admin import ClearReport
    from .._cache.entries import CacheEntry
    from .._cache.layout import Cache
    from .._cache.listing import CachedVersion
    from .._cache.verify import Verdict


def _cache_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    for name, run, help_text in (
        ("list", _cache_list, "list the cached kernel versions and their variants"),
        ("verify", _cache_verify, "re-hash every cached file against its metadata.json"),
        ("prune", _cache_prune, "remove damaged entries and leftovers of dead downloads"),
        ("clear", _cache_clear, "remove every kernel from the cache"),
    ):
        aliases = ["ls"] if name == "list" else []  # Hugging Face kernels' spelling
        # Its usage names the command "list" either way: its description gives the alias.
        described = f"{help_text} (also: ls)" if aliases else help_text
        action = actions.add_parser(name, aliases=aliases, help=help_text, description=described)
        action.set_defaults(cache_run=run)
        if name == "list":
            action.add_argument(
                "--no-truncate",
                action="store_true",
                help="show each content hash in full (the table shows its first 12 digits)",
            )
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
                "its modification times), recompile their damaged bytecode and give their "
                "files the modes a new download gets",
            )
        if name == "clear":
            action.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        if name in ("prune", "clear"):
            action.add_argument(
                "--force",
                action="store_true",
                help="also remove entries that running processes have imported (breaks them)",
            )
        cache_dir_argument(action)
        verbose_argument(action)
        json_argument(action)


def _cache(args: argparse.Namespace) -> int:
    run: Handler = args.cache_run
    return run(args)


def _readable_cache(*, must_exist: bool) -> Cache:
    """The cache, once this user may list each directory above its entries (else a
    CacheError says which it cannot read, with the chmod that opens it), and, if
    ``must_exist``, once its directory exists (else a CacheError names it): what inspects
    the cache must not pass a mistyped path as an empty cache."""
    from .._cache.entries import check_present, check_readable

    cache = local_cache()
    if must_exist:
        check_present(cache)
    check_readable(cache)
    return cache


def _said_absent(cache: Cache, args: argparse.Namespace) -> bool:
    """Whether the cache's directory does not exist and this printed so: prune and clear,
    with nothing to remove, succeed (with ``--json``, with an empty report)."""
    from .._cache.entries import is_absent

    if args.json or not is_absent(cache):
        return False
    print(f"{shown(cache.root)} does not exist; nothing to remove")
    return True


def _cache_list(args: argparse.Namespace) -> int:
    from .._cache.listing import cached_versions

    cache = _readable_cache(must_exist=True)
    versions = cached_versions(cache)
    if args.json:
        print_json(
            {
                "cache_dir": str(cache.root),
                "entries": [entry.to_dict() for v in versions for entry in v.entries],
                "repos": _repos_document(versions),
            }
        )
    elif not versions:
        print(f"No cached kernel versions found in {shown(cache.root)}.")
    else:
        _print_table(_HEADERS, _version_rows(versions, full_hashes=args.no_truncate))
    return EXIT_OK


_HEADERS = ("ID", "SIZE", "LAST_ACCESSED", "LAST_MODIFIED", "VERSION", "VARIANTS", "CONTENT_HASH")
_SHORT_HASH = len("sha256-") + 12


def _version_rows(versions: list[CachedVersion], *, full_hashes: bool) -> list[list[str]]:
    """A row per version; each further variant of it on a row of its own below, the
    other columns left blank."""
    now = time.time()
    rows = []
    for version in versions:
        for index, entry in enumerate(version.entries):
            content_hash = entry.content_hash or "no receipt"
            variant = [
                escape_controls(entry.variant),
                content_hash if full_hashes else content_hash[:_SHORT_HASH],
            ]
            if index:
                rows.append(["", "", "", "", "", *variant])
                continue
            rows.append(
                [
                    version.info.repo_id,
                    size(version.size),
                    _time_since(version.last_accessed, now),
                    _time_since(version.last_modified, now),
                    f"v{version.info.version}",
                    *variant,
                ]
            )
    return rows


def _print_table(headers: tuple[str, ...], rows: list[list[str]]) -> None:
    """Columns as wide as their widest cell, a rule under the headers; SIZE to the right."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=False)]
    right = headers.index("SIZE")
    for row in [list(headers), ["-" * width for width in widths], *rows]:
        cells = [
            cell.rjust(width) if column == right else cell.ljust(width)
            for column, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())


def _repos_document(versions: list[CachedVersion]) -> list[dict[str, object]]:
    """The cache as Hugging Face's ``kernels cache ls --json`` lays it out."""
    repos = []
    for repo_id, group in itertools.groupby(versions, key=lambda version: version.info.repo_id):
        cached = list(group)
        repos.append(
            {
                "repo_id": repo_id,
                "size_on_disk": sum(version.size for version in cached),
                "last_accessed": max(version.last_accessed for version in cached),
                "last_modified": max(version.last_modified for version in cached),
                "versions": [
                    {
                        "version": f"v{version.info.version}",
                        "size_on_disk": version.size,
                        "last_accessed": version.last_accessed,
                        "last_modified": version.last_modified,
                        "variants": [entry.variant for entry in version.entries],
                    }
                    for version in cached
                ],
            }
        )
    return repos


# The units _time_since counts in, and the count at which it moves on to the next one.
_UNITS = (
    ("second", 1, 60),
    ("minute", 60, 60),
    ("hour", 3600, 24),
    ("day", 86400, 7),
    ("week", 7 * 86400, 5),
    ("month", 30 * 86400, 12),
)


def _time_since(then: float, now: float) -> str:
    """``a few seconds ago``, ``5 minutes ago``, ``1 day ago``: how long before ``now``
    ``then`` was, in the largest unit that fits, rounded."""
    seconds = now - then
    if seconds < 20:
        return "a few seconds ago"
    unit, number = "year", round(seconds / (365 * 86400))
    for name, length, rollover in _UNITS:
        if round(seconds / length) < rollover:
            unit, number = name, round(seconds / length)
            break
    return f"{number} {unit}{'' if number == 1 else 's'} ago"


def _cache_verify(args: argparse.Namespace) -> int:
    from .._cache.entries import foreign_dirs, list_entries, untrusted_dirs
    from .._cache.verify import verify_entry

    cache = _readable_cache(must_exist=True)
    untrusted = untrusted_dirs(cache)
    foreign = foreign_dirs(cache)
    checked = [
        (entry, verify_entry(cache, entry, repair=args.repair))
        for entry in list_entries(cache)
        if all(entry.path != path for path, _why in untrusted)
    ]
    if args.json:
        _print_verified_json(cache.root, checked, untrusted, foreign)
    else:
        _print_verified(checked, untrusted, foreign)
    failed = [verdict for _entry, verdict in checked if not verdict.ok]
    if untrusted or failed:
        if not args.json:
            print_error("some cache entries failed verification", _verify_hint(failed, untrusted))
        return EXIT_FAILURE
    return EXIT_OK


def _verify_hint(failed: list[Verdict], untrusted: list[tuple[Path, str]]) -> str:
    """What to do about the entries that failed and the directories a load refuses."""
    hints = []
    if any(verdict.repairable for verdict in failed):
        hints.append(
            "`flashhub cache verify --repair` repairs the entries whose files are intact "
            "(only their modification times, bytecode or modes changed)"
        )
    if failed:
        hints.append("`flashhub cache prune` removes them; they are fetched again on use")
    if untrusted:  # prune leaves them: not this user's to judge, or to remove
        hints.append(
            "a directory a load refuses to trust is left as it is: remove it, or make it "
            "yours and private (chown, chmod go-w)"
        )
    return "; ".join(hints)


def _print_verified_json(
    root: Path,
    checked: list[tuple[CacheEntry, Verdict]],
    untrusted: list[tuple[Path, str]],
    foreign: list[Path],
) -> None:
    print_json(
        {
            "cache_dir": str(root),
            "entries": [
                {
                    **entry.to_dict(),
                    "ok": verdict.ok,
                    "problem": verdict.problem,
                    "repairable": verdict.repairable,
                    "repaired": verdict.repaired,
                    "not_trusted": verdict.not_trusted,
                }
                for entry, verdict in checked
            ],
            "untrusted": [{"path": str(p), "problem": reason} for p, reason in untrusted],
            "not_entries": [str(path) for path in foreign],
        }
    )


def _print_verified(
    checked: list[tuple[CacheEntry, Verdict]],
    untrusted: list[tuple[Path, str]],
    foreign: list[Path],
) -> None:
    for path, reason in untrusted:
        print(f"{shown(path)}: {reason} (FAILED: a load refuses to trust it)")
    for path in foreign:
        print(
            f"{shown(path)}: not a cache entry (no variant's name, no {MANIFEST_NAME}): left alone"
        )
    for entry, verdict in checked:
        if verdict.repaired:
            outcome = f"repaired ({verdict.problem})"
        elif verdict.ok and verdict.not_trusted:
            outcome = f"intact, not trusted: {verdict.not_trusted}; left for those who trust it"
        else:
            outcome = "ok" if verdict.ok else f"FAILED: {verdict.problem}"
        vouched = verdict.ok and not verdict.not_trusted
        signed = f", signed by {entry.signer}" if entry.signer and vouched else ""
        print(f"{entry.info} {escape_controls(entry.variant)}: {outcome}{signed}")
    refused = count(len(untrusted), "untrusted directory", "untrusted directories")
    not_trusted = sum(1 for _entry, verdict in checked if verdict.ok and verdict.not_trusted)
    also = f" ({not_trusted} intact but not trusted)" if not_trusted else ""
    print(f"{entries(len(checked))} checked{also}, {refused}")


def _cache_prune(args: argparse.Namespace) -> int:
    from .._cache.admin import prune

    lock = project_lockfile(args.keep_locked) if args.keep_locked is not None else None
    cache = _readable_cache(must_exist=False)
    if _said_absent(cache, args):
        return EXIT_OK
    report = prune(cache, keep_locked=lock, force=args.force)
    if args.json:
        print_json(report.to_dict())
        return EXIT_OK
    for entry, why in report.removed:
        print(f"removed {entry.info} {escape_controls(entry.variant)}: {why}")
    for path in [*report.stale, *report.stale_files]:
        print(f"removed leftover {shown(path)}")
    _report_skipped(report.busy, report.in_use)
    print(f"{entries(len(report.removed))} removed, {size(report.bytes_freed)} freed")
    return EXIT_OK


def _report_skipped(busy: list[Path], in_use: list[Path]) -> None:
    for path in busy:
        print(f"skipped {shown(path)}: a download is in progress there; run this again later")
    for path in in_use:
        print(
            f"skipped {shown(path)}: in use by a running process that imported it; run this "
            "again once it has exited, or pass --force to remove it anyway (breaking it)"
        )


def _cache_clear(args: argparse.Namespace) -> int:
    from .._cache.admin import ClearReport, clear
    from .._cache.entries import list_entries

    cache = _readable_cache(must_exist=False)
    if _said_absent(cache, args):
        return EXIT_OK
    cached = len(list_entries(cache))
    if cached and not args.yes:  # with no kernel cached there is nothing to confirm
        if not sys.stdin.isatty():
            print(
                "flashhub cache clear: error: pass --yes to clear the cache without a prompt",
                file=sys.stderr,
            )
            return EXIT_USAGE
        what = count(cached, "cached kernel variant")
        if not _confirmed(f"remove {what} from {cache.root}? [y/N] "):
            if args.json:
                _print_cleared_json(cache, ClearReport([], [], []))
            else:
                print("nothing removed")
            return EXIT_OK
    report = clear(cache, force=args.force)
    if args.json:
        _print_cleared_json(cache, report)
    else:
        _report_skipped(report.busy, report.in_use)
        if cached or report.removed:
            print(f"removed {entries(len(report.removed))} from {cache.root}")
        else:
            print(f"no kernels are cached in {cache.root}; nothing to remove")
    return EXIT_OK


def _print_cleared_json(cache: Cache, report: ClearReport) -> None:
    print_json(
        {
            "cache_dir": str(cache.root),
            "removed": [e.to_dict() for e in report.removed],
            "skipped_busy": [str(path) for path in report.busy],
            "skipped_in_use": [str(path) for path in report.in_use],
        }
    )


def _confirmed(question: str) -> bool:
    """Whether the user at the terminal answers ``question`` yes. Asked on stderr, as
    stdout may be a pipe or a ``--json`` document; end of input (Ctrl-D) is a no."""
    try:
        print(question, end="", file=sys.stderr, flush=True)
        answer = sys.stdin.readline()
    except KeyboardInterrupt:
        print(file=sys.stderr)  # the terminal's line, left open by Ctrl-C
        raise
    if not answer:
        print(file=sys.stderr)  # likewise by Ctrl-D
    return answer.strip().lower() in ("y", "yes")


COMMANDS = {"cache": Command(_cache_arguments, _cache)}
