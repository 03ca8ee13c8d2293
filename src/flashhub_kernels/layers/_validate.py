"""The rules a kernel layer must follow to replace the ``forward`` of another layer.

A kernel layer's ``forward`` runs with the original module as ``self``, so the layer may
not rely on anything the original module lacks: no constructor of its own, no members
that ``nn.Module`` lacks besides the protocol markers (annotations that document the
attributes it reads are fine), and a ``forward`` that takes its arguments the same way as
the one it replaces. Overrides of ``nn.Module``'s own members (``extra_repr``) are allowed,
as Hugging Face kernels allows them: only ``forward`` is ever bound, so they never run.
"""

from __future__ import annotations

import inspect

from torch import nn

from ..errors import LayerValidationError

#: Class attributes a kernel layer may set to say what it supports: ``has_backward``
#: (default ``True``; ``False`` keeps it out of training) and ``can_torch_compile``
#: (default ``False``; ``True`` lets it run under ``torch.compile``).
PROTOCOL_MARKERS = frozenset({"has_backward", "can_torch_compile"})
# What the layer class of a kernel function may define besides (see ``_func_module``).
_FUNC_MODULE_MEMBERS = frozenset({"__copy__", "__deepcopy__"})
# Where a class keeps its annotations, which a layer may declare. Python 3.14 keeps them
# in __annotate_func__ and __annotations_cache__ once read, or, under ``from __future__
# import annotations``, in __annotations__, which nn.Module (no future import) lacks.
_ANNOTATION_MEMBERS = frozenset(
    {"__annotations__", "__annotate__", "__annotate_func__", "__annotations_cache__"}
)
_ALLOWED_MEMBERS = PROTOCOL_MARKERS | _FUNC_MODULE_MEMBERS | _ANNOTATION_MEMBERS


def _name(cls: object) -> str:
    if isinstance(cls, type):
        return f"{cls.__module__}.{cls.__qualname__}"
    return repr(cls)


def _broken(rule: str, cls: object, detail: str, hint: str) -> LayerValidationError:
    return LayerValidationError(
        f"kernel layer {_name(cls)} breaks the rule {rule!r}: {detail}", rule=rule, hint=hint
    )


def as_layer_class(cls: object) -> type[nn.Module]:
    """Return ``cls`` if it is an ``nn.Module`` subclass; raise ``LayerValidationError``."""
    if isinstance(cls, type) and issubclass(cls, nn.Module):
        return cls
    raise _broken(
        "subclass of torch.nn.Module",
        cls,
        "it is not a torch.nn.Module subclass",
        "define the layer as 'class Name(torch.nn.Module)' with a forward method",
    )


def _extra_members(layer: type[nn.Module]) -> list[str]:
    """Members of ``layer`` that ``nn.Module`` lacks, besides the allowed ones."""
    # dir(nn.Module) is read each time: torch.compile adds attributes to nn.Module.
    return sorted(set(dir(layer)) - set(dir(nn.Module)) - _ALLOWED_MEMBERS)


def validate_layer(cls: object, check_cls: type[nn.Module]) -> None:
    """Check that kernel layer ``cls`` may replace the ``forward`` of ``check_cls``.

    Rules, each a :class:`~flashhub_kernels.errors.LayerValidationError` (a ``TypeError``)
    whose message and ``rule`` attribute name the rule broken:

    - ``subclass of torch.nn.Module``;
    - ``no own __init__``: the layer holds no state; it uses the original module's;
    - ``no extra members``: no members that ``nn.Module`` lacks: no helpers, no class
      attributes (annotations are allowed). The markers ``has_backward`` and
      ``can_torch_compile`` are allowed, and ``__copy__`` and ``__deepcopy__``, which the
      layer class of a kernel function may define. Overrides of ``nn.Module``'s own
      members are allowed and never run (only ``forward`` is bound);
    - ``same forward arity`` and ``same forward parameter kinds`` as ``check_cls.forward``
      (positional, keyword-only, ``*args``, ...; names may differ).

    When ``check_cls`` was marked with ``use_kernel_forward_from_hub``, its original
    ``forward`` is the reference.
    """
    layer = as_layer_class(cls)
    if layer.__init__ is not nn.Module.__init__:
        raise _broken(
            "no own __init__",
            layer,
            "it defines __init__",
            "remove __init__; read what forward needs from the attributes of the module "
            "it extends, and declare them as annotations",
        )
    extra = _extra_members(layer)
    if extra:
        raise _broken(
            "no extra members",
            layer,
            f"it defines {', '.join(extra)} besides forward",
            "move helpers to module-level functions and constants out of the class",
        )
    _check_signature(layer, check_cls)


def _check_signature(layer: type[nn.Module], check_cls: type[nn.Module]) -> None:
    # inspect.signature follows __wrapped__, so a marked class yields its original forward.
    params = list(inspect.signature(layer.forward).parameters.values())
    reference = list(inspect.signature(check_cls.forward).parameters.values())
    expected = f"{_name(check_cls)}.forward{inspect.signature(check_cls.forward)}"
    if len(params) != len(reference):
        raise _broken(
            "same forward arity",
            layer,
            f"forward takes {len(params)} parameters, {expected} takes {len(reference)}",
            "give forward the same parameters as the forward it replaces",
        )
    for param, ref in zip(params, reference, strict=True):
        if param.kind != ref.kind:
            raise _broken(
                "same forward parameter kinds",
                layer,
                f"parameter {param.name!r} is {param.kind.description}, but {ref.name!r} of "
                f"{expected} is {ref.kind.description}",
                "declare each parameter the way the forward it replaces does",
            )
