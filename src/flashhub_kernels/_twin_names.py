"""Two names of one kernel load: ``v<N>`` and ``v<N>_<backend>`` on a machine where
forcing ``backend`` selects what it would pick anyway. The second name imported gets
the module of the first, not a second copy of the same files (whose native library
torch would refuse to register twice)."""

from __future__ import annotations

import importlib._abc
import sys

from ._variants.system import this_system

TYPE_CHECKING = False
if TYPE_CHECKING:
    import importlib.machinery
    from types import ModuleType

    from ._finder import KernelFinder


class _TwinLoader(importlib._abc.Loader):
    """Gives a name the module already imported under its twin."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system set it to the new name's spec


def twin_loader(
    finder: KernelFinder, fullname: str, others: list[tuple[str, str]]
) -> importlib._abc.Loader | None:
    """A loader of the module imported already under one of the ``others`` names of
    ``fullname`` (see :func:`~flashhub_kernels._finder.twin_names`) that loads the same
    variant; ``None`` when there is none.

    Only a name already in ``sys.modules`` is considered, so the system was detected by
    its load and asking again costs nothing.
    """
    for name, forced in others:
        module = sys.modules.get(name)
        if module is None or not finder.same_repo(fullname, name):
            continue
        try:
            same = this_system(forced) == this_system()
        except ValueError:  # a backend this machine cannot run: its own load says so
            same = False
        if same:
            return _TwinLoader(module)
    return None
