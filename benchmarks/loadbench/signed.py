"""Signed kernels (rows 2c and 3f): a key made for the run signs some kernels of the CDN
tree, and the loads that trust it name it in ``FLASHHUB_TRUSTED_KEYS``.

A child imports this package before its measurement, so flashhub (and ``cryptography``)
is imported inside :func:`sign_kernels` alone, which runs in the benchmark process.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

TRUSTED_KEYS_VAR = "FLASHHUB_TRUSTED_KEYS"
NO_SIGNING = "skipped: the signing extra (the cryptography package) is not installed"


def sign_kernels(kernel_dirs: Sequence[Path]) -> str | None:
    """Sign every document (``versions.json``, ``variants.json``, ``metadata.json``) of the
    kernels published at ``kernel_dirs`` (``<cdn>/<prefix>/<org>/<name>``) with a new key,
    kept in memory; return its public line, or None without ``cryptography``."""
    from flashhub_kernels._publish import sign_tree
    from flashhub_kernels._signing.signing_keys import generate_signing_key
    from flashhub_kernels.errors import SignatureError

    try:
        key = generate_signing_key()
    except SignatureError:  # cryptography is missing
        return None
    for kernel_dir in kernel_dirs:
        sign_tree(kernel_dir, key)
    return key.public_line


def trusting(key_line: str | None) -> dict[str, str]:
    """The variable that makes a load trust the run's key (and so verify signatures)."""
    if key_line is None:
        raise RuntimeError(f"a signed load without a signing key ({NO_SIGNING})")
    return {TRUSTED_KEYS_VAR: key_line}
