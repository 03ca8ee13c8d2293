"""The baselines flashhub is measured against, in the same run: curl (one file, or every
file of a variant from one ``-K`` config), plain or followed by ``sha256sum -c`` (a
download verified by hand), a plain ``requests`` download, and the timing of any command
(``python -c pass`` among them). The plain-directory import baselines run
in :mod:`loadbench.probes` beside the flashhub imports they interleave with.
"""

from __future__ import annotations

import base64
import resource
import shlex
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .bench import Bench, settle
from .trees import Kernel
from .usage import PeakRss, cpu_seconds

# Checks every file listed in SUMS (written beforehand) and prints only what fails.
SHA256_CHECK = "sha256sum -c --quiet SUMS"


def run_command(
    argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> dict[str, float]:
    """Wall and CPU (user + system) milliseconds of one command, which must succeed."""
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd
    )
    wall = time.perf_counter() - start
    return {"ms": wall * 1e3, "cpu_ms": (cpu_seconds(resource.RUSAGE_CHILDREN) - cpu) * 1e3}


def time_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    """Wall milliseconds of one command, which must succeed."""
    return run_command(argv, env)["ms"]


def _curl(out: Path, argv: Sequence[str], sums: Mapping[str, str] | None) -> dict[str, float]:
    """Wall and CPU milliseconds of ``argv`` (curl) run in ``out``; with ``sums`` (path as
    curl writes it -> base64 sha256), of one shell command, ``curl ... && sha256sum -c``
    over a SUMS file of those paths and hex digests, written before and not timed."""
    if sums is not None:
        lines = [f"{base64.b64decode(digest).hex()}  {path}\n" for path, digest in sums.items()]
        (out / "SUMS").write_text("".join(lines))
        argv = ["sh", "-c", f"{shlex.join(argv)} && {SHA256_CHECK}"]
    settle()
    return run_command(argv, cwd=out)


def curl_file(bench: Bench, url: str, size: int, *, sha256: str | None = None) -> float:
    """Milliseconds of ``curl -s -o FILE url`` into a fresh directory (``size`` bytes);
    with ``sha256`` (the file's base64 digest), then ``sha256sum -c`` of the file."""
    assert bench.curl is not None
    out = bench.fresh_dir("curl")
    file = "weights.bin"
    sums = None if sha256 is None else {file: sha256}
    milliseconds = _curl(out, [bench.curl, "-s", "-o", file, url], sums)["ms"]
    if (out / file).stat().st_size != size:
        raise RuntimeError(f"curl wrote {(out / file).stat().st_size} bytes, not {size}")
    bench.discard(out)
    return milliseconds


def curl_config(
    bench: Bench, kernel: Kernel, parallel: Sequence[str] = (), *, verify: bool = False
) -> dict[str, float]:
    """One ``curl -s --create-dirs [parallel] -K config`` process fetching every file of
    ``kernel``'s variant, each to its path in the variant (the config lists a url/output
    pair per file), as a client lays the files out; ``verify``: then ``sha256sum -c`` of
    every file, in the same timed command. Wall and CPU milliseconds."""
    assert bench.curl is not None
    out = bench.fresh_dir("curl")
    lines = []
    for relpath, url_path in zip(kernel.files, kernel.file_paths(), strict=True):
        lines += [f'url = "{bench.url(url_path)}"', f'output = "files/{relpath}"']
    config = out / "curl.config"
    config.write_text("\n".join(lines) + "\n")
    sums = {f"files/{relpath}": digest for relpath, digest in kernel.files.items()}
    argv = [bench.curl, "-s", "--create-dirs", *parallel, "-K", config.name]
    result = _curl(out, argv, sums if verify else None)
    fetched = [path for path in (out / "files").rglob("*") if path.is_file()]
    if len(fetched) != len(kernel.files):
        raise RuntimeError(f"curl -K fetched {len(fetched)} files, not {len(kernel.files)}")
    written = sum(path.stat().st_size for path in fetched)
    expected = sum(bench.server.size(path) for path in kernel.file_paths())
    if written != expected:
        raise RuntimeError(f"curl -K wrote {written} bytes, not {expected}")
    bench.discard(out)
    return result


def child_requests_download(url: str, dest: str) -> dict[str, Any]:
    """In a child: stream ``url`` to a file in 1 MiB chunks with plain ``requests``, no hashing."""
    import requests

    rss = PeakRss()
    start = time.perf_counter()
    with requests.get(url, stream=True, timeout=60) as response, open(dest, "wb") as file:
        response.raise_for_status()
        for chunk in response.iter_content(1 << 20):
            file.write(chunk)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, **rss.result()}


def requests_download(bench: Bench, url: str) -> dict[str, Any]:
    """The plain-``requests`` baseline of row 1: :func:`child_requests_download` in a fresh
    child, into a fresh directory."""
    out = bench.fresh_dir("requests") / "weights.bin"
    settle()
    result: dict[str, Any] = bench.children.run(child_requests_download, url, str(out))
    bench.discard(out.parent)
    return result
