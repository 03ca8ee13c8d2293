"""flashhub-kernels: load verified, variant-matched PyTorch kernels from a static CDN.

Importing this package is cheap: it imports neither torch nor an HTTP library. torch
is imported when a kernel is first resolved, the HTTP client (``http.client``) when
something must be downloaded.
The layer API (``Device``, ``kernelize``, ...) loads on first access; of it, only
``kernelize`` (and marking a class, an ``nn.Module``, or a function) imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._api import (
    get_kernel,
    get_kernel_variants,
    get_loaded_kernels,
    get_local_kernel,
    has_kernel,
)
from ._config import Config, configure, get_config
from ._finder import LoadedKernel, install
from ._lazy import lazy_getattr
from ._names import RepoInfo
from ._variants import VariantAccepted, VariantRejected

if TYPE_CHECKING:
    from ._benchmark import Benchmark
    from ._lock import get_locked_kernel, load_kernel
    from .layers import (
        CUDAProperties,
        Device,
        FuncRepository,
        LayerRepository,
        LocalFuncRepository,
        LocalLayerRepository,
        LockedFuncRepository,
        LockedLayerRepository,
        Mode,
        ROCMProperties,
        kernelize,
        register_kernel_mapping,
        replace_kernel_forward_from_hub,
        use_kernel_forward_from_hub,
        use_kernel_func_from_hub,
        use_kernel_mapping,
    )

__version__ = "0.2.0"

# Names whose modules take a while to import (the lock functions pull in the cache and
# its file locks; kernelize imports torch): loaded on first access (PEP 562).
_LAZY = {
    "Benchmark": "._benchmark",
    "LockedLayerRepository": ".layers",
    "get_locked_kernel": "._lock",
    "install_kernel": "._api",
    "load_kernel": "._lock",
    "CUDAProperties": ".layers",
    "Device": ".layers",
    "FuncRepository": ".layers",
    "LayerRepository": ".layers",
    "LocalFuncRepository": ".layers",
    "LocalLayerRepository": ".layers",
    "LockedFuncRepository": ".layers",
    "Mode": ".layers",
    "ROCMProperties": ".layers",
    "kernelize": ".layers",
    "register_kernel_mapping": ".layers",
    "replace_kernel_forward_from_hub": ".layers",
    "use_kernel_forward_from_hub": ".layers",
    "use_kernel_func_from_hub": ".layers",
    "use_kernel_mapping": ".layers",
}

__all__ = [
    "Benchmark",
    "CUDAProperties",
    "Config",
    "Device",
    "FuncRepository",
    "LayerRepository",
    "LoadedKernel",
    "LocalFuncRepository",
    "LocalLayerRepository",
    "LockedFuncRepository",
    "LockedLayerRepository",
    "Mode",
    "ROCMProperties",
    "RepoInfo",
    "VariantAccepted",
    "VariantRejected",
    "__version__",
    "configure",
    "get_config",
    "get_kernel",
    "get_kernel_variants",
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
]


__getattr__ = lazy_getattr(__name__, _LAZY)


install()
