"""Download progress: a tqdm bar on a terminal, nothing otherwise."""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from .._models.record import Record
from .._utils.threads import started

ByteCounter = Callable[[int], object]

# The bar appears only once a download has run this long, so small kernels stay quiet.
_SHOW_AFTER_SECONDS = 1.0


def _ignore(_n: int) -> None:
    pass


class Progress(Record):
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
    if not (enabled and _on_a_terminal(sys.stderr)):
        yield NO_PROGRESS
        return
    with _bar_class()(
        desc=description,
        total=total,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        delay=_SHOW_AFTER_SECONDS,
        leave=False,
        dynamic_ncols=True,  # a bar wider than a narrowed window wraps at every redraw
    ) as bar:

        def expect(nbytes: int) -> None:
            # Shown with the next update: refresh() would draw the bar before its delay.
            bar.total = (bar.total or 0) + nbytes

        done = threading.Event()
        drawing = threading.Thread(
            target=_keep_drawn, args=(bar, done), name="flashhub-progress", daemon=True
        )
        drawn = started(drawing)  # else the bar is drawn on updates only
        try:
            yield Progress(bar.update, expect if total is None else _ignore)
        finally:
            done.set()
            if drawn:
                drawing.join()  # before the bar closes: one drawn after would stay on screen


@functools.cache
def _bar_class() -> type[Any]:
    """``tqdm.auto``'s bar without tqdm's monitor thread, which would outlive the load (a
    fork would then copy a process with a thread): :func:`_keep_drawn` draws the bar.

    Its lock is a thread's, where the program made no tqdm lock: tqdm's own is also a
    ``multiprocessing`` lock, whose making fixes the start method, and the program's
    ``set_start_method("spawn")`` then fails ("context has already been set")."""
    from tqdm.auto import tqdm

    class Bar(tqdm):  # type: ignore[type-arg]
        monitor_interval = 0

    if not hasattr(Bar, "_lock"):
        Bar.set_lock(threading.RLock())
    return Bar


def _keep_drawn(bar: Any, done: threading.Event) -> None:
    """Draw ``bar`` once its delay has passed, and again every second, until ``done``.
    tqdm draws a bar on an update only: a download that stalls (a CDN that sends nothing
    until the read timeout) would leave the terminal blank, or the bar's clock stopped."""
    # update(0) draws only past the delay by tqdm's clock (the wall clock): a tenth of a
    # second more, so that it has passed by that clock too.
    seconds = _SHOW_AFTER_SECONDS + 0.1
    with contextlib.suppress(OSError, ValueError):  # the terminal is gone: nothing to draw on
        while not done.wait(seconds):
            if _drawn(bar):
                bar.refresh()
            else:
                bar.update(0)  # the first time: marks it drawn, so that closing clears it
            seconds = 1.0


def _on_a_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal. ``sys.stderr`` is ``None`` when the process
    started without one (``2>&-``, pythonw, some services), and may have been closed."""
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, OSError, ValueError):  # closed, or an object without isatty()
        return False


def write_beside_bars(line: str, stream: TextIO) -> None:
    """Write ``line`` and a newline to ``stream`` (stderr) so that it does not run into
    a progress bar: the bars on the terminal are cleared first and drawn again below it.

    ``tqdm.write`` would also draw the bars still within their delay, making every
    download show one.
    """
    auto = sys.modules.get("tqdm.auto")  # imported by progress_bar(): else there is no bar
    if auto is None:
        stream.write(line + "\n")
        stream.flush()
        return
    bars = _bar_class()
    with bars.get_lock():
        drawn = [bar for bar in list(getattr(bars, "_instances", ())) if _drawn(bar)]
        for bar in drawn:
            bar.clear(nolock=True)
        stream.write(line + "\n")
        stream.flush()
        for bar in drawn:
            bar.refresh(nolock=True)


def _drawn(bar: Any) -> bool:
    """Whether a bar is on the screen: it is drawn once its delay has passed."""
    return bool(bar.last_print_t >= bar.start_t + bar.delay) and not bar.disable
