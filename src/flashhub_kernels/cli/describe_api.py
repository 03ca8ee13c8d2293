"""``flashhub describe-api``: a kernel's public functions and layers, read from the
source of the variant this system loads (downloaded and verified into the cache when it
is not there yet) or of a local kernel directory, without running any of it."""

from __future__ import annotations

import argparse
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .._utils.escaping import escape_controls
from ._common import (
    Command,
    backend_argument,
    json_argument,
    kernel_or_path_argument,
    newest_version,
    print_json,
    remote_arguments,
    shown as shown_path,
    version_argument,
)
from ._exit import EXIT_OK

if TYPE_CHECKING:
    from .._loading.api_description import KernelApi


def _describe_api_arguments(parser: argparse.ArgumentParser) -> None:
    kernel_or_path_argument(parser, package_dir=True)
    version_argument(parser)
    backend_argument(parser)
    remote_arguments(parser)
    json_argument(parser)
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="taken as Hugging Face kernels takes it, and changes nothing: your CDN and the "
        "signatures you require decide what loads",
    )


def _describe_api(args: argparse.Namespace) -> int:
    from .._loading.api_description import describe_package

    package, source = _package(args)
    with _sources(package) as directory:
        api = describe_package(directory)
    if args.json:
        print_json(
            {
                **source,
                "functions": [function.to_dict() for function in api.functions],
                "layers": [layer.to_dict() for layer in api.layers],
            }
        )
    else:
        _print_api(source, api)
    return EXIT_OK


def _package(args: argparse.Namespace) -> tuple[Path, dict[str, object]]:
    """The package directory to read, and where it came from (for the output)."""
    path = Path(args.kernel).expanduser()
    if path.is_dir():
        from .._loading.local import find_local_package

        if args.version is not None:  # --version latest too: no directory has versions
            raise ValueError(f"--version names a version on the CDN, not of the directory {path}")
        found = find_local_package(path.resolve(), args.backend)
        return found.package_dir, {"path": str(path), "variant": found.variant}
    from .._cache.receipt import cached_kernel, read_receipt
    from .._loading.api import install_kernel
    from .._models.names import RepoInfo

    version = args.version or newest_version(args.kernel, "describe-api")
    entry = install_kernel(args.kernel, version=version, backend=args.backend)
    info = RepoInfo(args.kernel, version)
    receipt = read_receipt(entry)
    assert receipt is not None, "install_kernel gives verified entries"
    source = {
        "repo_id": info.repo_id,
        "version": version,
        "revision": info.revision,
        "variant": entry.name,
    }
    return cached_kernel(entry, info, entry.name, receipt).package_dir, source  # an archive too


@contextmanager
def _sources(package: Path) -> Iterator[Path]:
    """The directory of ``package``'s Python files: itself, or for a zip build's archive a
    temporary copy of those it holds (``extract`` keeps each inside the copy)."""
    if package.suffix != ".zip":
        yield package
        return
    with tempfile.TemporaryDirectory(prefix="flashhub-describe-") as copy:
        with zipfile.ZipFile(package) as archive:
            for name in archive.namelist():
                if name.endswith(".py"):
                    archive.extract(name, copy)
        yield Path(copy)


def _print_api(source: dict[str, object], api: KernelApi) -> None:
    shown = escape_controls  # the source is the kernel's: its docstrings may hold anything
    if "repo_id" in source:
        print(f"Repository: {source['repo_id']}")
        print(f"Version: {source['version']}")
    else:
        print(f"Path: {shown_path(str(source['path']))}")
    print(f"Variant: {shown(str(source['variant'] or '-'))}")
    print("\nFunctions:")
    for function in api.functions:
        print(f"  {function.name}{shown(function.signature)}")
        if function.doc:
            print(f"      {shown(function.doc)}")
    if not api.functions:
        print("  (none)")
    print("\nLayers:")
    for layer in api.layers:
        flags = "  ".join(
            f"{name}={'unknown' if value is None else value}"
            for name, value in (
                ("has_backward", layer.has_backward),
                ("can_torch_compile", layer.can_torch_compile),
            )
        )
        print(f"  {layer.name}  {flags}")
        print(f"      forward{shown(layer.signature)}")
        if layer.doc:
            print(f"      {shown(layer.doc)}")
    if not api.layers:
        print("  (none)")


COMMANDS = {"describe-api": Command(_describe_api_arguments, _describe_api)}
