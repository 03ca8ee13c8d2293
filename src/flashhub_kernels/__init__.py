"""flashhub-kernels: load verified, variant-matched PyTorch kernels from a static CDN.

Importing this package is cheap: it installs the import hook and imports nothing else (no
torch, no HTTP library, not even ``typing``). The names below load on first access (PEP 562).
torch is imported when a kernel is first resolved, the HTTP library (``requests``) when
something must be downloaded. Of the layer API (``Device``, ``kernelize``, ...), only
``kernelize`` (and marking a class, an ``nn.Module``, or a function) imports torch.
"""

from __future__ import annotations

from ._finder import install
from ._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing would cost more than this package
if TYPE_CHECKING:  # each name re-exported as itself, for type checkers (see lazy_exports)
    from . import errors as errors
    from ._config import Config as Config, get_config as get_config
    from ._constants import __version__ as __version__
    from ._loading.api import (
        get_kernel as get_kernel,
        get_kernel_variants as get_kernel_variants,
        get_local_kernel as get_local_kernel,
        has_kernel as has_kernel,
        install_kernel as install_kernel,
    )
    from ._loading.kernel_deps import get_kernel_dep as get_kernel_dep
    from ._loading.loaded import (
        LoadedKernel as LoadedKernel,
        get_loaded_kernels as get_loaded_kernels,
    )
    from ._loading.metadata import Metadata as Metadata
    from ._loading.settings import configure as configure
    from ._lockfiles.locked_loading import (
        get_locked_kernel as get_locked_kernel,
        load_kernel as load_kernel,
    )
    from ._models.names import RepoInfo as RepoInfo
    from ._variants.verdicts import (
        VariantAccepted as VariantAccepted,
        VariantRejected as VariantRejected,
    )
    from .benchmark import Benchmark as Benchmark
    from .layers import (
        CUDAProperties as CUDAProperties,
        Device as Device,
        FuncRepository as FuncRepository,
        KernelizedFunc as KernelizedFunc,
        KernelizedLayer as KernelizedLayer,
        KernelizedLayers as KernelizedLayers,
        KernelizeFallback as KernelizeFallback,
        LayerRepository as LayerRepository,
        LocalFuncRepository as LocalFuncRepository,
        LocalLayerRepository as LocalLayerRepository,
        LockedFuncRepository as LockedFuncRepository,
        LockedLayerRepository as LockedLayerRepository,
        Mode as Mode,
        ROCMProperties as ROCMProperties,
        get_kernelized_layers as get_kernelized_layers,
        kernelize as kernelize,
        register_kernel_mapping as register_kernel_mapping,
        replace_kernel_forward_from_hub as replace_kernel_forward_from_hub,
        use_kernel_forward_from_hub as use_kernel_forward_from_hub,
        use_kernel_func_from_hub as use_kernel_func_from_hub,
        use_kernel_mapping as use_kernel_mapping,
        use_kernelized_func as use_kernelized_func,
    )
# Every public name but install, by its module: the API's loads the settings with the
# variant grammar, the lock functions' the cache and its file locks; kernelize torch.
_LAZY = {
    "__version__": "._constants",
    "Benchmark": ".benchmark",
    "Config": "._config",
    "get_config": "._config",
    "RepoInfo": "._models.names",
    "VariantAccepted": "._variants.verdicts",
    "VariantRejected": "._variants.verdicts",
    "errors": ".errors",
    "configure": "._loading.settings",
    "get_kernel": "._loading.api",
    "get_kernel_variants": "._loading.api",
    "LoadedKernel": "._loading.loaded",
    "get_loaded_kernels": "._loading.loaded",
    "get_local_kernel": "._loading.api",
    "has_kernel": "._loading.api",
    "install_kernel": "._loading.api",
    "get_kernel_dep": "._loading.kernel_deps",
    "Metadata": "._loading.metadata",
    "get_locked_kernel": "._lockfiles.locked_loading",
    "load_kernel": "._lockfiles.locked_loading",
    "CUDAProperties": ".layers",
    "Device": ".layers",
    "FuncRepository": ".layers",
    "KernelizeFallback": ".layers",
    "KernelizedFunc": ".layers",
    "KernelizedLayer": ".layers",
    "KernelizedLayers": ".layers",
    "LayerRepository": ".layers",
    "LocalFuncRepository": ".layers",
    "LocalLayerRepository": ".layers",
    "LockedFuncRepository": ".layers",
    "LockedLayerRepository": ".layers",
    "Mode": ".layers",
    "ROCMProperties": ".layers",
    "get_kernelized_layers": ".layers",
    "kernelize": ".layers",
    "register_kernel_mapping": ".layers",
    "replace_kernel_forward_from_hub": ".layers",
    "use_kernel_forward_from_hub": ".layers",
    "use_kernel_func_from_hub": ".layers",
    "use_kernel_mapping": ".layers",
    "use_kernelized_func": ".layers",
}

__all__ = sorted(_LAZY)  # every public name; install is the hook's own

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)

install()
