"""The publisher: a kernel build directory turned into the CDN tree of one version."""

from __future__ import annotations

from .publisher import publish
from .report import (
    FileRelativePath,
    PublishReport,
    SharedNativeLibrary,
    SourcelessModule,
    UndeclaredImport,
    VariantReport,
)
from .signatures import KeySource, SignReport, sign_tree

__all__ = [
    "FileRelativePath",
    "KeySource",
    "PublishReport",
    "SharedNativeLibrary",
    "SignReport",
    "SourcelessModule",
    "UndeclaredImport",
    "VariantReport",
    "publish",
    "sign_tree",
]
