"""``flashhub_kernels.layer``: the layer API under the name Hugging Face kernels gives it.

Code written for ``kernels`` imports ``from kernels.layer import ...``; with
``from flashhub_kernels.layer import ...`` it gets the same objects as from
:mod:`flashhub_kernels.layers`. Importing this module imports nothing: each name loads
``flashhub_kernels.layers`` (which imports no torch either) on first access.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not typing's: this module imports nothing until a name is read
if TYPE_CHECKING:
    from typing import Any

    from .layers import *  # noqa: F403
    from .layers import __all__ as __all__


def _layers() -> Any:
    return importlib.import_module(".layers", __package__)


def __getattr__(name: str) -> Any:
    # ``__all__`` too: ``from flashhub_kernels.layer import *`` reads it through here.
    if name != "__all__" and (name.startswith("__") or name not in _layers().__all__):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_layers(), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_layers().__all__})
