"""Two names of one kernel load: ``v<N>`` and ``v<N>_<backend>`` on a machine where
forcing ``backend`` selects what it would pick anyway. The second name imported gets
the module of the first, not a second copy of the same files (whose native library
torch would refuse to register twice).

The two names may be imported at once, by two threads: the second waits for the first
to finish (its module lock), so that it gets the whole module, never a half-run one nor
a copy; if the first failed, it loads the kernel itself. The finder's loader asks
:func:`twin_module` as the second name's import runs.
"""

from __future__ import annotations

import importlib._bootstrap
import sys

from ._variants.system import this_system

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType

    from ._finder import KernelFinder


def twin_module(
    finder: KernelFinder, fullname: str, others: list[tuple[str, str]]
) -> ModuleType | None:
    """The module of a name in ``others`` that loaded the variant ``fullname`` would, once
    its import (in this thread or another) is over; ``None`` when there is none."""
    for name, forced in others:
        try:
            same = this_system(forced) == this_system()
        except ValueError:  # a backend this machine cannot run: its own load says so
            same = False
        if not same:
            continue
        importlib._bootstrap._lock_unlock_module(name)  # type: ignore[attr-defined]
        module = sys.modules.get(name)
        if module is not None and finder.same_repo(fullname, name):
            return module
    return None
