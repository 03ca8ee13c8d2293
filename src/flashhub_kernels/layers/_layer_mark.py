"""The mark that marking a layer class leaves on its ``forward``, and how to read it back.

``_marking`` puts a :class:`LayerMark` on the ``forward`` it gives a marked class;
``_dispatch`` reads it to run that forward and to find what ``kernelize`` swaps. A module
of a class decorated with ``use_kernelized_func`` holds its own instances of the marked
functions (:func:`kernel_funcs`), and ``kernelize`` notes on each module it binds to a
kernel layer the repository of that layer (:data:`KERNEL_REPO_ATTR`). Importing this
module imports no torch.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from .._models.record import Record

if TYPE_CHECKING:
    from torch import nn

_MARK_ATTR = "__flashhub_layer__"
# Hugging Face kernels' mark: class attributes, the class's forward left as it is.
HUB_NAME_ATTR = "kernel_layer_name"
# Instance attributes, named as Hugging Face kernels names them: the repository of the
# kernel layer kernelize bound (on the module), and a module's own instances of the
# marked functions its class was decorated with, by layer name.
KERNEL_REPO_ATTR = "_kernel_repo"
KERNEL_FUNCS_ATTR = "_kernel_funcs"
ModuleT = TypeVar("ModuleT", bound="nn.Module")
Forward = Callable[..., Any]
Condition = Callable[["nn.Module"], bool]

_numbers = itertools.count()
# Marks by key: what torch.compile hands the choice of a kernel, which takes only
# constants (see _dispatch). A string: torch.compile would make an int that differs
# between compilations of the one marked forward a variable. Weak, so a class that goes
# away takes its mark along.
_marks: weakref.WeakValueDictionary[str, LayerMark] = weakref.WeakValueDictionary()


class LayerMark(Record):
    """What marking a class recorded: its layer name, original forward, fallback rule and
    condition, and a ``key`` that names the mark in :func:`mark_by_key` (a new one when
    none is given)."""

    layer_name: str
    owner: type[nn.Module]
    original: Forward
    use_fallback: bool
    condition: Condition | None
    key: str
    if TYPE_CHECKING:  # not a field, so not compared or shown
        # Layer classes already checked against ``owner``; a set add is atomic, and a
        # duplicate check in a race is harmless.
        validated: set[type[nn.Module]]

    def __init__(
        self,
        layer_name: str,
        owner: type[nn.Module],
        original: Forward,
        use_fallback: bool,
        condition: Condition | None = None,
        key: str | None = None,
    ) -> None:
        key = f"mark-{next(_numbers)}" if key is None else key
        self._init(layer_name, owner, original, use_fallback, condition, key)
        object.__setattr__(self, "validated", set())
        _marks[key] = self

    def applies_to(self, module: nn.Module) -> bool:
        """Whether ``module`` takes a kernel: the condition given at marking holds for it."""
        return self.condition is None or bool(self.condition(module))


def mark_by_key(key: str) -> LayerMark:
    """The mark whose ``key`` is ``key`` (its class still exists: it was just called)."""
    return _marks[key]


def put_mark(forward: Forward, mark: LayerMark) -> None:
    """Attach ``mark`` to ``forward``, the dispatching forward of a marked class."""
    setattr(forward, _MARK_ATTR, mark)


def mark_of(forward: object) -> LayerMark | None:
    """The mark of a marked class's ``forward``; ``None`` for any other function."""
    mark = getattr(forward, _MARK_ATTR, None)
    return mark if isinstance(mark, LayerMark) else None


def kernel_funcs(module: nn.Module) -> dict[str, nn.Module]:
    """The module's own instances of the marked functions of ``use_kernelized_func``."""
    funcs: dict[str, nn.Module] = module.__dict__.get(KERNEL_FUNCS_ATTR, {})
    return funcs


def hub_mark(cls: type[nn.Module]) -> LayerMark | None:
    """The mark that Hugging Face kernels' marking left on ``cls``, as a :class:`LayerMark`
    (new on each call), or ``None`` where it left none.

    Hugging Face kernels marks a class (transformers' layers, where it is installed) with
    the attributes ``kernel_layer_name`` and ``kernel_condition`` and leaves its ``forward``
    as it is, so ``kernelize`` can bind a kernel layer to such a module too. As with a
    class marked here, a subclass that overrides the marked class's ``forward`` is not
    marked.
    """
    marked = next((base for base in cls.__mro__ if HUB_NAME_ATTR in base.__dict__), None)
    if marked is None:
        return None
    layer_name = marked.__dict__[HUB_NAME_ATTR]
    original: Forward | None = getattr(marked, "forward", None)
    if not isinstance(layer_name, str) or original is None or cls.forward is not original:
        return None  # a name of this package's own marking, or forward overridden
    condition = getattr(cls, "kernel_condition", None)
    return LayerMark(layer_name, cls, original, True, condition if callable(condition) else None)


# Set on the __setstate__ that marking gives a class, so that a class is given one once.
_RESTORES_ATTR = "__flashhub_restores__"


def restore_after_setstate(cls: type[nn.Module], restore: Callable[[nn.Module], None]) -> None:
    """Make unpickling (and copying) a module of ``cls`` call ``restore`` on it, after
    the class's own ``__setstate__``: a pickled bound method comes back bound to the
    class's ``forward``, so the ``forward`` that ``kernelize`` bound must be bound again."""
    if getattr(cls.__setstate__, _RESTORES_ATTR, False):
        return  # given already, or inherited from a marked class
    own = cls.__dict__.get("__setstate__")

    def __setstate__(self: nn.Module, state: dict[str, Any]) -> None:
        if own is not None:
            own(self, state)
        else:
            super(cls, self).__setstate__(state)  # type: ignore[misc]
        restore(self)

    setattr(__setstate__, _RESTORES_ATTR, True)
    cls.__setstate__ = __setstate__  # type: ignore[method-assign]
