"""Names a package exports but imports only on first use (PEP 562): importing the package
imports none of their modules (torch, the lock machinery, ...) until a name is read."""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs more than this whole module
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


def lazy_exports(
    package: str, table: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package``, which exports the names of
    ``table`` but imports each only on first use::

        if not TYPE_CHECKING:  # checkers see the names imported under `if TYPE_CHECKING:`
            __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

    ``__getattr__`` imports ``table[name]`` (a module relative to ``package``) on first access
    of ``name``, and keeps the value; a name whose module is ``package.<name>`` itself
    (``"errors": ".errors"``) gives that submodule. ``__dir__`` lists the names before they
    are loaded. Type checkers must not see it: any name, a misspelt one too, is ``Any`` then.
    """

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(table[name], package)
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *table})

    return __getattr__, __dir__
