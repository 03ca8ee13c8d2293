"""flashhub-kernels: load verified, variant-matched PyTorch kernels from a static CDN.

Importing this package is cheap: it installs the import hook and imports nothing else (no
torch, no HTTP library, not even ``typing``). The names below load on first access (PEP 562).
torch is imported when a kernel is first resolved, the HTTP client (``http.client``) when
something must be downloaded. Of the layer API (``Device``, ``kernelize``, ...), only
``kernelize`` (and marking a class, an ``nn.Module``, or a function) imports torch.
"""

from __future__ import annotations

from ._finder import install
from ._lazy import lazy_exports

TYPE_CHECKING = False  # not typing's: importing typing would cost more than this package
if TYPE_CHECKING:
    from . import errors as errors
    from ._benchmark import Benchmark
    from ._config import Config, get_config
    from ._loading.api import (
        configure,
        get_kernel,
        get_kernel_variants,
        get_local_kernel,
        has_kernel,
        install_kernel,
    )
    from ._loading.kernel_deps import get_kernel_dep
    from ._loading.loaded import LoadedKernel, get_loaded_kernels
    from ._loading.metadata import Metadata
    from ._lockfiles.locked_loading import get_locked_kernel, load_kernel
    from ._models.names import RepoInfo
    from ._variants.verdicts import VariantAccepted, VariantRejected
    from .layers import (
        CUDAProperties,
        Device,
        FuncRepository,
        KernelizedFunc,
        KernelizedLayer,
        KernelizedLayers,
        KernelizeFallback,
        LayerRepository,
        LocalFuncRepository,
        LocalLayerRepository,
        LockedFuncRepository,
        LockedLayerRepository,
        Mode,
        ROCMProperties,
        get_kernelized_layers,
        kernelize,
        register_kernel_mapping,
        replace_kernel_forward_from_hub,
        use_kernel_forward_from_hub,
        use_kernel_func_from_hub,
        use_kernel_mapping,
        use_kernelized_func,
    )

# Every public name but install: the hook is all that importing the package does. The
# modules load on first access (PEP 562): the API and the settings with the variant
# grammar, the lock functions with the cache and its file locks; kernelize imports torch.
_LAZY = {
    "__version__": "._constants",
    "Benchmark": "._benchmark",
    "Config": "._config",
    "get_config": "._config",
    "RepoInfo": "._models.names",
    "VariantAccepted": "._variants.verdicts",
    "VariantRejected": "._variants.verdicts",
    "errors": ".errors",
    "configure": "._loading.api",
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

__all__ = [
    "Benchmark",
    "CUDAProperties",
    "Config",
    "Device",
    "FuncRepository",
    "KernelizeFallback",
    "KernelizedFunc",
    "KernelizedLayer",
    "KernelizedLayers",
    "LayerRepository",
    "LoadedKernel",
    "LocalFuncRepository",
    "LocalLayerRepository",
    "LockedFuncRepository",
    "LockedLayerRepository",
    "Metadata",
    "Mode",
    "ROCMProperties",
    "RepoInfo",
    "VariantAccepted",
    "VariantRejected",
    "__version__",
    "configure",
    "get_config",
    "get_kernel",
    "get_kernel_dep",
    "get_kernel_variants",
    "get_kernelized_layers",
    "get_loaded_kernels",
    "get_local_kernel",
    "get_locked_kernel",
    "has_kernel",
    "install_kernel",
    "kernelize",
    "load_kernel",
    "register_kernel_mapping",
    "replace_kernel_forward_from_hub",
    "use_kernel_forward_from_hub",
    "use_kernel_func_from_hub",
    "use_kernel_mapping",
    "use_kernelized_func",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


install()
