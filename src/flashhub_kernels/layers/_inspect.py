"""What ``kernelize`` bound in a model: :func:`get_kernelized_layers`.

The types are Hugging Face kernels' (frozen dataclasses, with its field names and order).
Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ._layer_mark import KERNEL_REPO_ATTR, kernel_funcs

if TYPE_CHECKING:
    from torch import nn

    from ._repository import BaseLayerRepository


@dataclass(frozen=True)
class KernelizedLayer:
    """A kernelized layer and the repository its kernel layer was loaded from.

    Attributes:
        module: The kernelized layer, a module of the model.
        repo: The repository of the kernel layer whose ``forward`` it runs.
    """

    module: nn.Module
    repo: BaseLayerRepository


@dataclass(frozen=True)
class KernelizedFunc:
    """A kernelized function and the repository its kernel layer was loaded from.

    Attributes:
        module: The module's own instance of the marked function (see
            ``use_kernelized_func``), which runs the kernel layer.
        repo: The repository of the kernel layer whose ``forward`` it runs.
    """

    module: nn.Module
    repo: BaseLayerRepository


@dataclass(frozen=True)
class KernelizedLayers:
    """The kernel layers a kernelized model runs, as :func:`get_kernelized_layers` finds them.

    Attributes:
        layers: Each kernelized layer by its name in ``model.named_modules()``.
        funcs: Each kernelized function by ``(name of the module that holds it, the
            function's layer name)``.
    """

    layers: dict[str, KernelizedLayer] = field(default_factory=dict)
    funcs: dict[tuple[str, str], KernelizedFunc] = field(default_factory=dict)


def get_kernelized_layers(model: nn.Module) -> KernelizedLayers:
    """The layers and functions of ``model`` that ``kernelize`` bound to a kernel layer,
    each with the repository of that layer.

    Modules for which ``kernelize`` kept the original ``forward`` (nothing mapped, a
    fallback) are not listed, nor are marked layers that were never kernelized, which pick
    a kernel layer on each call. Example::

        model = kernelize(model, mode=Mode.INFERENCE)
        found = get_kernelized_layers(model)
        found.layers  # {"mlp.act": KernelizedLayer(module=..., repo=LayerRepository(...))}
        found.funcs  # {("mlp", "silu_and_mul"): KernelizedFunc(module=..., repo=...)}
    """
    if not callable(getattr(model, "named_modules", None)):  # no torch imported to ask
        raise TypeError(
            f"get_kernelized_layers takes a torch.nn.Module, got {type(model).__name__}"
        )
    found = KernelizedLayers()
    for name, module in model.named_modules():
        repo = module.__dict__.get(KERNEL_REPO_ATTR)
        if repo is not None:
            found.layers[name] = KernelizedLayer(module, repo)
        for func_name, func in kernel_funcs(module).items():
            repo = func.__dict__.get(KERNEL_REPO_ATTR)
            if repo is not None:
                found.funcs[(name, func_name)] = KernelizedFunc(func, repo)
    return found
