"""A kernel in Hugging Face's zip build layout (row 11), published by flashhub's own
publisher (``flashhub publish --layout zip``), so the layout is the one the client
loads: ``metadata.json`` saying ``"build-layout": "zip"``, and the package's files in
one archive ``<id>.zip`` (stored, not compressed) beside it.

A child imports this package before its measurement, so flashhub is imported inside
:func:`publish_zip` alone, which runs in the benchmark process.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Mapping
from pathlib import Path


def write_build(variant_dir: Path, files: Mapping[str, bytes | Path]) -> None:
    """A variant of a build: ``files`` (content, or a file to hard-link) by relative path."""
    for relpath, content in files.items():
        path = variant_dir / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            os.link(content, path)
        else:
            path.write_bytes(content)


def publish_zip(
    out: Path, prefix: str, repo_id: str, variant: str, files: Mapping[str, bytes | Path]
) -> dict[str, str]:
    """Publish ``files`` (the package ``<py_pkg>/...``) as version 1 of ``repo_id``, in
    the one variant ``variant``, into the CDN tree ``out`` under ``prefix``, laid out as
    a zip build; return the published files (the archive) with their base64 sha256."""
    from flashhub_kernels._publish import publish
    from flashhub_kernels.errors import FileRelativePathWarning

    build_dir = out.parent / "zip-builds" / repo_id
    write_build(build_dir / variant, files)
    with warnings.catch_warnings():
        # Each synthetic module sets HERE = Path(__file__).parent, and reads nothing by it.
        warnings.simplefilter("ignore", FileRelativePathWarning)
        publish(build_dir, repo_id=repo_id, version=1, out=out, prefix=prefix, layout="zip")
    shutil.rmtree(build_dir)
    metadata = out / prefix / repo_id / "v1" / "build" / variant / "metadata.json"
    digests: dict[str, str] = json.loads(metadata.read_text())["digest"]["files"]
    return digests
