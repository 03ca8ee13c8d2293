"""Which kernel layer a marked layer runs: the repository the mapping holds for its device
and mode, loaded and checked against both; or the original ``forward``, where the
fallback rule allows what was missing.

A call of a marked layer (``_dispatch.dispatch``) and ``kernelize`` choose alike.
"""

from __future__ import annotations

import os

from torch import nn

from .._config import env_flag
from .._utils.logs import logger
from ..errors import KernelImportError, KernelLayerError, LocalKernelNotFoundError, LockfileError
from ._fallback import KernelizeFallback, fallback_text
from ._layer_mark import LayerMark
from ._mapping import Miss, Mode, current_mapping, mode_text, select_repository
from ._repository import BaseLayerRepository
from ._target import Target
from ._validate import validate_layer


def kernel_mapping_disabled() -> bool:
    """Whether ``DISABLE_KERNEL_MAPPING=1`` turns kernel layers off: any integer but 0, as
    Hugging Face kernels reads it (``2``, ``01``), or true, yes, on.

    Read on every call, so it can be flipped at run time, like the other settings.
    """
    value = os.environ.get("DISABLE_KERNEL_MAPPING", "").strip()
    if value.lstrip("+-").isdigit():
        return int(value) != 0
    return env_flag("DISABLE_KERNEL_MAPPING")


# A kernel layer chosen, and the repository it was loaded from.
Chosen = tuple[type[nn.Module], BaseLayerRepository]


def choose_layer(
    mark: LayerMark,
    target: Target | None,
    mode: Mode,
    fallback: KernelizeFallback,
    unloadable: set[int] | None = None,
) -> Chosen | None:
    """The kernel layer to run for ``target`` and ``mode``, and its repository; ``None``
    for the original.

    As in Hugging Face kernels, what the kernel layer supports is checked against the mode
    asked for, not the mapping key it was found under: a layer without
    ``can_torch_compile`` mapped under ``INFERENCE | TORCH_COMPILE`` serves ``INFERENCE``,
    and falls back (``NO_COMPATIBLE_MODE``) for the mode of its key.

    ``unloadable`` holds the ids of repositories that could not be loaded so far in this
    ``kernelize``, so that each is tried once.
    """
    selected = select_repository(current_mapping().get(mark.layer_name), target, mode)
    if isinstance(selected, Miss):
        _fall_back(mark, target, mode, fallback, selected)
        return None
    repo, _ = selected
    layer = _load(repo, mark, fallback, set() if unloadable is None else unloadable)
    if layer is None:
        return None
    validated(layer, mark)
    lacking = _lacking_support(layer, mode)
    if lacking is None:
        return layer, repo
    detail = (
        f"kernel layer {repo} does not support mode {mode_text(mode)}, as it does not "
        f"support {lacking}"
    )
    _fall_back(mark, target, mode, fallback, Miss(KernelizeFallback.NO_COMPATIBLE_MODE, detail))
    return None


def validated(layer: type[nn.Module], mark: LayerMark) -> None:
    """Check ``layer`` against the class ``mark`` marked, once per pair."""
    if layer not in mark.validated:
        validate_layer(layer, mark.owner)
        mark.validated.add(layer)


def _fall_back(
    mark: LayerMark, target: Target | None, mode: Mode, fallback: KernelizeFallback, miss: Miss
) -> None:
    """Return (to run the original forward) if ``fallback`` allows ``miss``; else raise."""
    if miss.case & fallback:
        return
    where = f"device {str(target)!r}" if target else "an input without tensors"
    raise KernelLayerError(
        f"no kernel layer runs {mark.layer_name!r} on {where} in mode {mode_text(mode)}: "
        f"{miss.detail}, and {fallback_text(fallback)} forbids the original forward "
        f"(KernelizeFallback.{miss.case.name})",
        hint="map a kernel layer that fits with register_kernel_mapping or "
        "use_kernel_mapping, or let the original forward run with use_fallback=True",
    )


def _load(
    repo: BaseLayerRepository, mark: LayerMark, fallback: KernelizeFallback, unloadable: set[int]
) -> type[nn.Module] | None:
    """``repo.load()``; ``None`` if it cannot be loaded and ``fallback`` allows that."""
    if id(repo) in unloadable:
        return None
    try:
        return repo.load()
    except (KernelImportError, LockfileError, LocalKernelNotFoundError) as error:
        if KernelizeFallback.CANNOT_LOAD not in fallback:
            raise
        unloadable.add(id(repo))
        logger.warning(
            "kernel layer %s for %r cannot be loaded, so the original forward runs "
            "(KernelizeFallback.CANNOT_LOAD): %s",
            repo,
            mark.layer_name,
            error,
        )
        return None


def supports_backward(layer: type[nn.Module]) -> bool:
    return bool(getattr(layer, "has_backward", True))


def _supports_compile(layer: type[nn.Module]) -> bool:
    return bool(getattr(layer, "can_torch_compile", False))


def _lacking_support(layer: type[nn.Module], mode: Mode) -> str | None:
    """What ``mode`` needs that ``layer`` does not declare: backward or torch.compile."""
    if Mode.TRAINING in mode and not supports_backward(layer):
        return "backward (has_backward = False)"
    if Mode.TORCH_COMPILE in mode and not _supports_compile(layer):
        return "torch.compile (no can_torch_compile = True)"
    return None
