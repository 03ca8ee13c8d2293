"""The measuring harness that every row uses: :class:`Bench` holds the trees, the server
and the fork server, hands out fresh directories and caches, and takes the rounds."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from .children import Children
from .common import MIB, log
from .fresh import fresh_breakdown, fresh_floor, fresh_load, this_client
from .peer import HfVenv
from .probes import child_first_import, child_get_kernel
from .servers import CdnServer
from .signed import trusting
from .trees import PREFIX, WARM_PACKAGE, Kernel, Trees

T = TypeVar("T")


# Files at least this large are deleted as soon as a measurement is done with them (see
# Bench.discard): there are few of them, and they hold the disk space.
DELETED_AT_ONCE_BYTES = MIB


def settle() -> None:
    """Flush dirty pages of earlier runs so their writeback does not land in this one."""
    os.sync()


@dataclass
class Bench:
    args: argparse.Namespace
    trees: Trees
    server: CdnServer
    children: Children
    scratch: Path
    curl: str | None
    peer: HfVenv | str = "not set up"  # HF kernels for rows 9, or why they are skipped
    client: Path = field(default_factory=this_client)  # where this flashhub is imported from
    _serial: int = 0
    _warm_caches: dict[bool, Path] = field(default_factory=dict)  # signed -> cache
    link_server: CdnServer | None = None  # the same tree over a slow link (rows 10)

    def env(self, cache_dir: Path, *, signed: bool = False) -> dict[str, str]:
        """The ``FLASHHUB_*`` variables of a load from this server into ``cache_dir``;
        ``signed``: trusting the run's key, so signatures are verified (rows 2c, 3f)."""
        env = {
            "FLASHHUB_CDN_URL": self.server.url,
            "FLASHHUB_CDN_PREFIX": PREFIX,
            "FLASHHUB_CACHE_DIR": str(cache_dir),
            "FLASHHUB_DISABLE_PROGRESS_BARS": "1",
        }
        return (env | trusting(self.trees.trusted_key)) if signed else env

    def fresh_dir(self, what: str) -> Path:
        self._serial += 1
        path = self.scratch / f"{what}-{self._serial}"
        path.mkdir(parents=True)
        return path

    def discard(self, path: Path) -> None:
        """Put the directory a measurement wrote out of the way; its small files are
        deleted only when the benchmark ends.

        ext4 without a journal does not reuse an inode freed in the last minute (more
        than a second ago): creating a file steps over each of them, reading its inode's
        table block (``recently_deleted`` and ``find_inode_bit`` in a kernel profile of
        a cold load). On this VM every 200 files deleted that way added about 35-40 us
        to each file created after, 400 us after 2400 of them, so deleting each load's
        files made the loads after it slower by an amount that depended on what the
        rows before had deleted. The large files go at once: they are few, and they
        hold the disk space.
        """
        for file in path.rglob("*"):
            if file.is_file() and file.stat().st_size >= DELETED_AT_ONCE_BYTES:
                file.unlink()
        discarded = self.scratch / "discarded"
        discarded.mkdir(exist_ok=True)
        path.rename(discarded / path.name)

    def over_link(self) -> Bench:
        """This bench with the slow link's server in place of the loopback one: its cold
        loads, breakdowns, curl runs and GET counts go there; its directories under a
        scratch directory of their own."""
        assert self.link_server is not None, "no slow-link server"
        self._serial += 1
        scratch = self.scratch / f"link-{self._serial}"
        return replace(self, server=self.link_server, scratch=scratch, link_server=None)

    def url(self, url_path: str) -> str:
        return self.server.url + url_path

    def cold_load(
        self, kernel: Kernel, *, signed: bool = False, release: bool = False
    ) -> dict[str, Any]:
        """``get_kernel`` in a fresh interpreter with torch imported and a fresh, empty
        cache (see :mod:`loadbench.fresh`); with the GETs it made. ``release``: the
        release of ``--release-dir`` loads instead of this client."""
        cache = self.fresh_dir("cache")
        client = self.args.release_dir if release else self.client
        settle()
        self.server.reset()
        result = fresh_load(self.env(cache, signed=signed), kernel.repo_id, client)
        result["requests"] = sum(self.server.gets().values())
        self.discard(cache)
        return result

    def requests_floor(self, kernel: Kernel) -> dict[str, Any]:
        """The least any client built on ``requests`` does for a cold load of ``kernel``,
        in a fresh interpreter timed like :meth:`cold_load` (see :mod:`loadbench.fresh`)."""
        out = self.fresh_dir("floor")
        settle()
        result = fresh_floor(self.url(kernel.variant_path), out)
        self.discard(out)
        return result

    def breakdown(self, kernel: Kernel) -> dict[str, float]:
        """Milliseconds per phase of a cold load like :meth:`cold_load`'s (not timed
        alongside it: the spans cost a little; see :mod:`loadbench.spans`)."""
        cache = self.fresh_dir("cache")
        settle()
        phases = fresh_breakdown(self.env(cache), kernel.repo_id, self.client)
        self.discard(cache)
        return phases

    def warm_cache(self, *, signed: bool = False) -> Path:
        """A cache holding the warm kernel (rows 3 and 8), filled on the first call by a
        cold load; both copies of its package, the cache's and the plain directory's, have
        their bytecode compiled by then. ``signed``: another cache, filled by a cold load
        that trusted the run's key and so verified the kernel's signatures (row 3f)."""
        if signed not in self._warm_caches:
            log("warm kernel: filling a cache" + (", key trusted" if signed else ""))
            cache = self.fresh_dir("warm-cache")
            env = self.env(cache, signed=signed)
            self.children.run(child_get_kernel, env, self.trees.warm.repo_id)
            if not self._warm_caches:
                self.children.run(child_first_import, env, WARM_PACKAGE, str(self.trees.plain_dir))
            self._warm_caches[signed] = cache
        return self._warm_caches[signed]

    def rounds(
        self,
        label: str,
        measurements: Mapping[str, Callable[[], T]],
        runs: int | None = None,
        *,
        warm_up: bool = True,
    ) -> dict[str, list[T]]:
        """Take every measurement once per run, after one untimed warm-up round (unless
        ``warm_up`` is False: earlier rows have run the very same code and files; or
        ``--no-warm-up``).

        Each run starts at a different measurement, so no side always goes first.
        """
        runs = runs or self.args.runs
        warm_up = warm_up and self.args.warm_up
        names = list(measurements)
        results: dict[str, list[T]] = {name: [] for name in names}
        for run in range(-1 if warm_up else 0, runs):
            log(f"{label}: " + ("warm-up" if run < 0 else f"run {run + 1}/{runs}"))
            shift = run % len(names)
            for name in names[shift:] + names[:shift]:
                value = measurements[name]()
                if run >= 0:
                    results[name].append(value)
        return results
