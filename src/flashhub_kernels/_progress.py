"""Download progress: a tqdm bar on a terminal, nothing otherwise."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

ByteCounter = Callable[[int], object]

# The bar appears only once a download has run this long, so small kernels stay quiet.
_SHOW_AFTER_SECONDS = 1.0


@contextmanager
def progress_bar(description: str, *, enabled: bool) -> Iterator[ByteCounter]:
    """Yield a function to report received bytes to.

    A bar is drawn only when ``enabled`` (``FLASHHUB_DISABLE_PROGRESS_BARS`` unset) and
    stderr is a terminal, and only for downloads slower than a second.
    """
    if not (enabled and sys.stderr.isatty()):
        yield lambda _n: None
        return
    from tqdm.auto import tqdm

    with tqdm(
        desc=description,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=_SHOW_AFTER_SECONDS,
        leave=False,
    ) as bar:
        yield bar.update
