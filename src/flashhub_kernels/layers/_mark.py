"""The mark that marking a layer class leaves on its ``forward``, and how to read it back.

``_marking`` puts a :class:`LayerMark` on the ``forward`` it gives a marked class;
``_dispatch`` reads it to run that forward and to find the marked modules of a model.
Importing this module imports no torch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from torch import nn

_MARK_ATTR = "__flashhub_layer__"
ModuleT = TypeVar("ModuleT", bound="nn.Module")
Forward = Callable[..., Any]


@dataclass(frozen=True)
class LayerMark:
    """What marking a class recorded: its layer name, original forward and fallback rule."""

    layer_name: str
    owner: type[nn.Module]
    original: Forward
    use_fallback: bool
    # Layer classes already checked against ``owner``; a set add is atomic, and a
    # duplicate check in a race is harmless.
    validated: set[type[nn.Module]] = field(default_factory=set, compare=False, repr=False)


def put_mark(forward: Forward, mark: LayerMark) -> None:
    """Attach ``mark`` to ``forward``, the dispatching forward of a marked class."""
    setattr(forward, _MARK_ATTR, mark)


def mark_of(forward: object) -> LayerMark | None:
    """The mark of a marked class's ``forward``; ``None`` for any other function."""
    mark = getattr(forward, _MARK_ATTR, None)
    return mark if isinstance(mark, LayerMark) else None
