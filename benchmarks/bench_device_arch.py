"""What judging a build's CUDA archs adds to a warm import, on a machine with a GPU.

    python benchmarks/bench_device_arch.py [--runs 15] [--dir DIR]

Publishes one small pure-Python kernel twice into a ``file://`` mirror, both as this
machine's exact build: ``bench/with-archs``, whose ``metadata.json`` lists the device's
compute capability in ``backend.archs`` (so a load reads what the device is), and
``bench/without-archs``, which lists none. Each is loaded once (cold); then fresh
interpreters with torch imported time, interleaved run by run, the warm import of each
(``FLASHHUB_OFFLINE=1``) and the import of the same package from a plain directory.

Prints the medians, what each kernel adds over the plain import, and whether any import
created a CUDA context (``torch.cuda.is_initialized()``). Target: the kernel with archs
adds no more than the one without (within the spread of the runs), and no import creates
a context. Without a CUDA build of torch and a device it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

SOURCE = 'import torch\n\n\ndef add(a, b):\n    """a + b."""\n    return a + b\n'
PROGRAM = """\
import os, sys, time
import torch
{setup}
start = time.perf_counter()
import {module}
elapsed = time.perf_counter() - start
print(elapsed * 1e3, torch.cuda.is_initialized(), flush=True)
os._exit(0)  # torch's teardown is slow and not measured
"""


def publish_kernels(work: Path, capability: str) -> Path:
    """The two kernels in a mirror under ``work``; returns the mirror's directory."""
    from flashhub_kernels._publish import publish
    from flashhub_kernels._variants.probing import build_variant_name
    from flashhub_kernels._variants.system import detect_system

    variant = build_variant_name(detect_system())
    mirror = work / "mirror"
    for name, archs in (("with-archs", [capability]), ("without-archs", None)):
        build = work / "build" / name
        package = build / variant / name.replace("-", "_")
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(SOURCE)
        if archs:
            document = {"backend": {"type": "cuda", "archs": archs}}
            (build / variant / "metadata.json").write_text(json.dumps(document))
        publish(build, repo_id=f"bench/{name}", version=1, out=mirror)
    return mirror


def run(program: str, env: dict[str, str]) -> tuple[float, bool]:
    """Milliseconds of the timed import in a fresh interpreter, and whether CUDA started."""
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"an import failed:\n{program}\n{done.stderr}")
    ms, initialized = done.stdout.split()
    return float(ms), initialized == "True"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-device-arch-", dir=args.dir))
    try:
        return measure(work, args.runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(work: Path, runs: int) -> int:
    """Publish, load and time the kernels under ``work`` (see the module docstring)."""
    import torch

    from flashhub_kernels._variants.device_arch import cuda_capability

    os.environ["FLASHHUB_CACHE_DIR"] = str(work)  # the GPUs' record too: not the user's cache
    reading = cuda_capability()
    if torch.version.cuda is None or reading.capability is None:
        print(f"nothing to measure: torch {torch.__version__}, device: {reading.source}")
        return 0
    capability = "{}.{}".format(*reading.capability)
    mirror = publish_kernels(work, capability)
    plain = work / "build" / "without-archs" / os.listdir(work / "build" / "without-archs")[0]
    env = {**os.environ, "FLASHHUB_CDN_URL": mirror.as_uri()}
    programs = {
        "with archs": PROGRAM.format(setup="", module="flashhub.bench.with_archs.v1"),
        "without archs": PROGRAM.format(setup="", module="flashhub.bench.without_archs.v1"),
        "plain dir": PROGRAM.format(
            setup=f"sys.path.insert(0, {str(plain)!r})", module="without_archs"
        ),
    }
    for side in ("with archs", "without archs"):
        run(programs[side], env)  # cold: downloads, records the GPU's capability
    env["FLASHHUB_OFFLINE"] = "1"
    times: dict[str, list[float]] = {side: [] for side in programs}
    contexts = 0
    for _ in range(runs):
        for side, program in programs.items():
            ms, initialized = run(program, env)
            times[side].append(ms)
            contexts += initialized
    report(times, contexts, capability, reading.source)
    return 0


def report(times: dict[str, list[float]], contexts: int, capability: str, source: str) -> None:
    """The medians, each kernel's cost over the plain import, and the CUDA contexts made."""
    medians = {side: statistics.median(ms) for side, ms in times.items()}
    print(f"device: capability {capability}, read from {source}")
    for side, ms in times.items():
        print(f"  {side:14} median {medians[side]:7.2f} ms  [{min(ms):.2f}-{max(ms):.2f}]")
    plain = medians["plain dir"]
    with_archs = medians["with archs"] - plain
    without = medians["without archs"] - plain
    print(f"  over the plain import: with archs +{with_archs:.2f} ms, without +{without:.2f} ms")
    print(f"  CUDA contexts created by an import: {contexts} (target 0)")


if __name__ == "__main__":
    sys.exit(main())
