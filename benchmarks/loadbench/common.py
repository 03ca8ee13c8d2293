"""What every part of the benchmark shares: units, the child time-out, the watched
libraries, logging and the environment of a fresh interpreter."""

from __future__ import annotations

import os
import sys

MIB = 1 << 20
CHILD_TIMEOUT_S = 900.0
# Imported by neither ``import flashhub`` nor ``import flashhub_kernels`` (row 6c), nor by
# a warm load (row 3e, where torch, imported before, has already brought http.client in).
HTTP_LIBS = ("requests", "urllib3", "http.client")
LOCK_LIBS = ("filelock",)
# Imported by a load that verifies signatures (row 2c), and by no warm load (row 3f).
CRYPTO_LIBS = ("cryptography",)


def log(message: str) -> None:
    """Progress goes to stderr; the table alone goes to stdout."""
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def environ_without_flashhub() -> dict[str, str]:
    """This process's environment less every ``FLASHHUB_*`` variable, for a fresh interpreter."""
    return {k: v for k, v in os.environ.items() if not k.startswith("FLASHHUB_")}
