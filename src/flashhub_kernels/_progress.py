"""Download progress: a tqdm bar on a terminal, nothing otherwise."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

ByteCounter = Callable[[int], object]

# The bar appears only once a download has run this long, so small kernels stay quiet.
_SHOW_AFTER_SECONDS = 1.0


def _ignore(_n: int) -> None:
    pass


class Progress(NamedTuple):
    """What a download reports, for a bar to show.

    ``advance`` gets the bytes written (negative when a file starts over); ``expect``
    gets bytes to add to the total, as answers announce their length (for files whose
    size the manifest does not state).
    """

    advance: ByteCounter = _ignore
    expect: ByteCounter = _ignore


NO_PROGRESS = Progress()


@contextmanager
def progress_bar(description: str, *, enabled: bool, total: int | None) -> Iterator[Progress]:
    """Yield the :class:`Progress` to report a download to.

    A bar is drawn only when ``enabled`` (``FLASHHUB_DISABLE_PROGRESS_BARS`` unset) and
    stderr is a terminal, and only for downloads slower than a second. It shows the
    bytes, the percentage and the time left once the total is known: ``total`` from the
    manifest's sizes, or the sum of the lengths the answers announce.
    """
    if not (enabled and sys.stderr.isatty()):
        yield NO_PROGRESS
        return
    from tqdm.auto import tqdm

    with tqdm(
        desc=description,
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=_SHOW_AFTER_SECONDS,
        leave=False,
    ) as bar:

        def expect(nbytes: int) -> None:
            # Shown with the next update: refresh() would draw the bar before its delay.
            bar.total = (bar.total or 0) + nbytes

        yield Progress(bar.update, expect if total is None else _ignore)
