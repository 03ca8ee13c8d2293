"""Constants several modules share, at the bottom of the import graph (it imports nothing
of this project): the version, the Hugging Face kernels API level, the environment
variables and file names, and where the cache is by default."""

import os

__version__ = "0.2.0"

# The Hugging Face kernels release whose API this client implements: a kernel whose
# ``metadata.json`` asks for a newer one (``kernels-minver``) is refused.
HF_KERNELS_API = "0.19.1"

# Read by the settings (:mod:`flashhub_kernels._config`), named by their messages.
TRUSTED_KEYS_VAR = "FLASHHUB_TRUSTED_KEYS"
PYPROJECT_NAME = "pyproject.toml"  # in the current directory: may list trusted keys
PROJECT_FILE_BYTES = 16 << 20  # the most read of a project's pyproject.toml or lock file
REQUIRE_SIGNATURES_VAR = "FLASHHUB_REQUIRE_SIGNATURES"
LOCAL_KERNELS_VAR = "LOCAL_KERNELS"

# A variant's manifest, its signatures (a document's beside it, with this suffix), and
# the receipt the cache writes beside an entry's files once it is verified.
MANIFEST_NAME = "metadata.json"
SIG_SUFFIX = ".sig"
MANIFEST_SIGNATURE_NAME = MANIFEST_NAME + SIG_SUFFIX
RECEIPT_NAME = ".flashhub-receipt.json"
# The cache's record of a version's variants, in its version directory.
INDEX_NAME = "variants-index.json"
# Where the drivers list the GPUs, read at each use (tests point them elsewhere): NVIDIA's,
# a directory per GPU named by its PCI address; amdgpu's topology, a directory per node.
PROC_GPUS = "/proc/driver/nvidia/gpus"
KFD_NODES = "/sys/class/kfd/kfd/topology/nodes"
# They list every GPU: which this process may open is its cgroup's to say, on this boot.
BOOT_ID = "/proc/sys/kernel/random/boot_id"
PROC_CGROUP = "/proc/self/cgroup"
CGROUP_NAMESPACE = "/proc/self/ns/cgroup"  # a link: where it leads names the namespace


def gpu_access() -> list[str | None]:
    """This boot's id, this process's cgroup and its cgroup namespace (``None``: unreadable)."""
    return [_proc_text(BOOT_ID), _proc_text(PROC_CGROUP), _proc_text(CGROUP_NAMESPACE, link=True)]


def _proc_text(path: str, *, link: bool = False) -> str | None:
    try:
        if link:
            return os.readlink(path)
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return None


def default_cache_dir() -> str:
    """``$FLASHHUB_CACHE_DIR``, else ``$XDG_CACHE_HOME/flashhub`` (if absolute, as XDG says),
    else ``~/.cache/flashhub``; blanks dropped (read when called: a launcher may set them)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    path = os.environ.get("FLASHHUB_CACHE_DIR", "").strip() or os.path.join(
        xdg if os.path.isabs(xdg) else os.path.join("~", ".cache"), "flashhub"
    )
    return os.path.abspath(os.path.expanduser(path))
