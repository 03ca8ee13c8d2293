"""``python -m flashhub_kernels.cli``: the 0.1.2 release's ``flashhub-kernel-load``, which
that release also ran this way (``python -m flashhub_kernels`` is ``flashhub``)."""

import sys

from . import kernel_load_main

if __name__ == "__main__":
    sys.exit(kernel_load_main())
