"""Names a package exports but imports only on first use (PEP 562).

The packages import neither torch nor the lock machinery, and ``flashhub_kernels``
imports nothing but the import hook: the names whose modules do more are listed in a
table and loaded when first read.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs more than this whole module
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``table[name]`` (a module
    relative to ``package``) on first access of ``name``, and keeps the value.

    A name whose module is ``package.<name>`` itself (``"errors": ".errors"``) gives
    that submodule.
    """

    def __getattr__(name: str) -> Any:
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(table[name], package)
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__


def lazy_dir(package: str, names: Iterable[str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` for ``package`` that lists ``names`` before they are loaded."""

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *names})

    return __dir__
