"""Marking layers whose ``forward`` a kernel may replace.

Marking gives a class a ``forward`` that dispatches each call to the kernel layer the
mapping picks (see ``_dispatch``) and carries a :class:`~._mark.LayerMark`, the record of
the marking. Importing this module imports no torch: a library can import the decorator
before torch, and marking a class (an ``nn.Module``, so torch is loaded by then) loads
the dispatcher.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._mark import Forward, LayerMark, ModuleT, mark_of, put_mark

if TYPE_CHECKING:
    from torch import nn


def replace_kernel_forward_from_hub(
    cls: type[nn.Module], layer_name: str, *, use_fallback: bool = True
) -> None:
    """Mark ``cls`` (a class you cannot edit) so a mapped kernel layer may run its ``forward``.

    Same as decorating it with :func:`use_kernel_forward_from_hub`. Subclasses that do not
    override ``forward`` are marked too. Marking again replaces the earlier mark.

    Args:
        cls: An ``nn.Module`` subclass with a ``forward``.
        layer_name: The name mappings use for this layer, e.g. ``"SiluAndMul"``.
        use_fallback: Run the original ``forward`` when nothing is mapped for the input's
            device and mode. ``False`` raises ``KernelLayerError`` instead.
    """
    from torch import nn

    from ._dispatch import dispatch

    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"only torch.nn.Module subclasses can be marked, got {cls!r}")
    if not isinstance(layer_name, str) or not layer_name:
        raise ValueError(f"layer_name must be a non-empty string, got {layer_name!r}")
    original: Forward = cls.forward
    if original is nn.Module.forward:
        raise TypeError(f"{cls.__qualname__} defines no forward to replace")
    earlier = mark_of(original)
    if earlier is not None:
        original = earlier.original
    mark = LayerMark(layer_name, cls, original, use_fallback)

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return dispatch(mark, self, args, kwargs)

    functools.update_wrapper(forward, original)  # name, docs, and __wrapped__ for inspect
    put_mark(forward, mark)
    cls.forward = forward


def use_kernel_forward_from_hub(
    layer_name: str, *, use_fallback: bool = True
) -> Callable[[type[ModuleT]], type[ModuleT]]:
    """Class decorator: let a mapped kernel layer named ``layer_name`` run this layer's forward.

    Example::

        @use_kernel_forward_from_hub("SiluAndMul")
        class SiluAndMul(nn.Module):
            def forward(self, x: torch.Tensor) -> torch.Tensor:
                d = x.shape[-1] // 2
                return F.silu(x[..., :d]) * x[..., d:]

    The kernel layer is picked by the device of the first tensor argument and the
    module's mode (``TRAINING`` when ``module.training``, else ``INFERENCE``; plus
    ``TORCH_COMPILE`` while ``torch.compile`` traces). See
    :func:`replace_kernel_forward_from_hub` for ``use_fallback``.
    """

    def decorate(cls: type[ModuleT]) -> type[ModuleT]:
        replace_kernel_forward_from_hub(cls, layer_name, use_fallback=use_fallback)
        return cls

    return decorate
