"""What a thread of the program's own does once Ctrl-C has ended the main thread.

The interpreter then waits for the program's other threads (not daemon threads) before
it exits. A load in one of them stops, as Ctrl-C stops a load in the main thread,
rather than keep the process alive to its end. This module imports nothing that the
end of the main thread refuses (``concurrent.futures`` registers with ``threading``,
which refuses then): a load first begun at that moment imports it.
"""

from __future__ import annotations

import sys
import threading


def stop_after_ctrl_c(doing: str) -> None:
    """Raise ``KeyboardInterrupt`` once Ctrl-C has ended the program's main thread,
    saying that this thread stopped ``doing`` (``"downloading"``, say).

    The interpreter then waits for the program's other threads before it exits: a
    download, or a wait for another process's download, in one of them (not a daemon
    thread) would keep the process alive to its end; each calls this as it goes, and so
    stops as Ctrl-C stops it. A main thread that ended otherwise leaves its threads to
    finish their work."""
    if not threading.main_thread().is_alive() and _ended_by_ctrl_c():
        # `from None`: whatever was being handled did not cause it.
        raise KeyboardInterrupt(f"Ctrl-C ended the program; this thread stopped {doing}") from None


_TORCH_IMPORT = threading.Lock()


def import_torch() -> None:
    """Import torch for the process's first load, one thread at a time, unless Ctrl-C
    ended the program (:func:`stop_after_ctrl_c`).

    Threads that import it at once may find it half imported: importlib hands a thread
    the half-made module rather than wait where waiting could deadlock. Once the main
    thread has ended, torch's import fails half way (it registers with ``threading``,
    which refuses then), and a thread that went on with it would crash the interpreter
    as it tears the half-made torch down."""
    with _TORCH_IMPORT:
        stop_after_ctrl_c("importing torch")
        import torch  # noqa: F401


def _ended_by_ctrl_c() -> bool:
    """Whether the main thread, now ended, ended with the ``KeyboardInterrupt`` that the
    interpreter printed last. An interactive session (``sys.ps1`` is set: the REPL,
    ``python -i``) prints one for each Ctrl-C and goes on: it ends by ``exit()`` or at
    the end of its input, however it was interrupted before."""
    return isinstance(getattr(sys, "last_value", None), KeyboardInterrupt) and not hasattr(
        sys, "ps1"
    )
