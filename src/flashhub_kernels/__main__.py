"""``python -m flashhub_kernels``: the ``flashhub`` command line."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
