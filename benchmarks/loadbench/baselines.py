"""The baselines flashhub is measured against, in the same run: curl (one file, or every
file of a variant from one ``-K`` config), a plain ``requests`` download, and the timing
of any command (``python -c pass`` among them). The plain-directory import baselines run
in :mod:`loadbench.probes` beside the flashhub imports they interleave with.
"""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .bench import Bench, settle
from .trees import Kernel
from .usage import PeakRss, cpu_seconds


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> dict[str, float]:
    """Wall and CPU (user + system) milliseconds of one command, which must succeed."""
    cpu = cpu_seconds(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - start
    return {"ms": wall * 1e3, "cpu_ms": (cpu_seconds(resource.RUSAGE_CHILDREN) - cpu) * 1e3}


def time_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> float:
    """Wall milliseconds of one command, which must succeed."""
    return run_command(argv, env)["ms"]


def curl_file(bench: Bench, url: str, size: int) -> float:
    """Milliseconds of ``curl -s -o FILE url`` into a fresh directory (``size`` bytes)."""
    assert bench.curl is not None
    out = bench.fresh_dir("curl") / "weights.bin"
    settle()
    milliseconds = time_command([bench.curl, "-s", "-o", str(out), url])
    if out.stat().st_size != size:
        raise RuntimeError(f"curl wrote {out.stat().st_size} bytes, not {size}")
    bench.discard(out.parent)
    return milliseconds


def curl_config(bench: Bench, kernel: Kernel, parallel: Sequence[str] = ()) -> dict[str, float]:
    """One ``curl -s --create-dirs [parallel] -K config`` process fetching every file of
    ``kernel``'s variant, each to its path in the variant (the config lists a url/output
    pair per file), as a client lays the files out. Wall and CPU milliseconds."""
    assert bench.curl is not None
    out = bench.fresh_dir("curl")
    lines = []
    for relpath, url_path in zip(kernel.files, kernel.file_paths(), strict=True):
        lines += [f'url = "{bench.url(url_path)}"', f'output = "{out / "files" / relpath}"']
    config = out / "curl.config"
    config.write_text("\n".join(lines) + "\n")
    settle()
    result = run_command([bench.curl, "-s", "--create-dirs", *parallel, "-K", str(config)])
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
