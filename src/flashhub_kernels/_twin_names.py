"""Two names of one kernel load: ``v<N>`` and ``v<N>_<backend>`` on a machine where
forcing ``backend`` selects what it would pick anyway. The second name imported gets
the module of the first, not a second copy of the same files (whose native library
torch would refuse to register twice).

The two names may be imported at once, by two threads: the second waits for the first
to finish (its module lock), so that it gets the whole module, never a half-run one nor
a copy; if the first failed, it loads the kernel itself.
"""

from __future__ import annotations

import importlib._abc
import importlib._bootstrap
import sys

from ._variants.system import this_system

TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from types import ModuleType

    from ._finder import KernelFinder


class TwinLoader(importlib._abc.Loader):
    """Gives its module the module imported under one of its ``others`` names (see
    :func:`~flashhub_kernels._finder.twin_names`) that loads the same variant; else
    hands the load to ``own``, the kernel's own loader.

    The decision is made here, not in ``find_spec``: waiting for another thread's import
    while holding the global import lock would stop that import too. The wait is done
    under this name's import lock, so that a child forked meanwhile drops it.
    """

    def __init__(
        self, finder: KernelFinder, others: list[tuple[str, str]], own: importlib._abc.Loader
    ) -> None:
        self._finder, self._others, self._own = finder, others, own
        self._spec: importlib.machinery.ModuleSpec | None = None  # the twin's own spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module = twin_module(self._finder, spec.name, self._others)
        if module is not None:
            self._spec = module.__spec__
            return module
        spec.loader = self._own  # the import system runs its exec_module next
        return self._own.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set it to the new name's spec


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
