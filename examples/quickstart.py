"""The whole story, offline: build, publish to a local mirror, import through the hook.

1. Build the example kernels (a native C++ CPU op, a pure-torch variant, two versions of
   another native kernel) with ``torch.utils.cpp_extension``; rebuilds are cached. On a
   CUDA build of torch with nvcc, the native op's CUDA variant too (no GPU needed).
2. Publish them into a CDN tree on disk (``flashhub publish --sign``), left in place,
   signed with a publisher key made for this demo (``flashhub keygen``).
3. Serve that tree from a loopback HTTP server and use it as the CDN. The client trusts
   the publisher's key (``FLASHHUB_TRUSTED_KEYS``), so every load checks signatures.
4. ``import flashhub.sdq.audio_codebook_primitives.v1`` cold (download + verify), run
   the op against the reference (on the GPU when there is one), and load v1 and v2 of
   ``acme/tensor-tricks`` side by side: a CPU-only kernel, which a CUDA torch loads
   with ``backend="cpu"`` (``...v1_cpu``). Each load says which variant it took and why.
5. Time the import in fresh processes (torch already imported): cold, each with an
   empty cache, and warm, counting the requests the warm ones make (none). Medians of
   a few runs, so one slow start does not make "warm" look slower than "cold".
6. Print the lines that load the example kernel in your own shell, from the mirror.

Run: ``python examples/quickstart.py``. Nothing here needs the internet.
"""

from __future__ import annotations

import functools
import importlib
import os
import shlex
import shutil
import subprocess
import sys
import threading
import warnings
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "kernels"))

from _buildlib import BuildError, BuiltKernel, cuda_arch_list, cuda_backend  # noqa: E402
from build_all import build_all  # noqa: E402
from flashhub_kernels._constants import default_cache_dir  # noqa: E402
from flashhub_kernels._publish import publish  # noqa: E402
from flashhub_kernels._signing.signing_keys import (  # noqa: E402
    SigningKey,
    generate_signing_key,
    load_signing_key,
    write_key_pair,
)

WORKDIR = Path(default_cache_dir()).parent / "flashhub-quickstart"
MIRROR = WORKDIR / "mirror"
CACHE = WORKDIR / "cache"
PUBLISHER_KEY = WORKDIR / "publisher.key"

TRICKS = "acme/tensor-tricks"
RUNS = 3
TIMED_IMPORT = """
import time, torch
start = time.perf_counter()
import flashhub.sdq.audio_codebook_primitives.v1 as k
print(f"{(time.perf_counter() - start) * 1e3:.2f}")
"""


class _CountingHandler(SimpleHTTPRequestHandler):
    requests_served = 0

    def do_GET(self) -> None:
        type(self).requests_served += 1
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


def publisher_key() -> SigningKey:
    """The demo publisher's signing key, made on the first run (``flashhub keygen``)."""
    if PUBLISHER_KEY.exists():
        return load_signing_key(PUBLISHER_KEY)
    WORKDIR.mkdir(parents=True, exist_ok=True)
    key = generate_signing_key()
    write_key_pair(key, PUBLISHER_KEY)
    return key


def build_examples() -> list[BuiltKernel]:
    """Every example kernel, with its CUDA variants where this torch and nvcc build them
    (saying which CUDA archs, or why there are none)."""
    backend, reason = cuda_backend()
    if backend is None:
        print(f"  not building CUDA variants: {reason}")
        return build_all(verbose=False)
    try:
        built = build_all(verbose=False, cuda=True)
    except BuildError as exc:  # the CPU and torch-universal variants still load
        print(f"  not building CUDA variants: the CUDA build failed: {str(exc).splitlines()[0]}")
        return build_all(verbose=False)
    print(f"  CUDA variants: {backend}, compiled for CUDA archs {cuda_arch_list()}")
    return built


def publish_examples(key: SigningKey) -> None:
    """Build every example kernel and publish it into ``MIRROR``, signed with ``key``."""
    for kernel in build_examples():
        # force: this demo mirror is ours, and a rebuilt .so differs byte for byte (a real
        # CDN would refuse, as published versions are immutable; the cache is reset below).
        report = publish(
            kernel.build_dir,
            repo_id=kernel.repo_id,
            version=kernel.version,
            out=MIRROR,
            force=True,
            sign=key,
        )
        variants = ", ".join(v.name for v in report.variants)
        state = "unchanged" if report.noop else ("replaced" if report.replaced else "published")
        print(f"  {state:9} {kernel.repo_id} v{kernel.version}: {variants}")


def serve(root: Path) -> ThreadingHTTPServer:
    handler = functools.partial(_CountingHandler, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def explain_choice(module: ModuleType, backend: str | None = None) -> None:
    """Print the variant ``module`` was loaded from and why: the system it was chosen
    for, every published variant that fits it (best first) and why each other does not."""
    import flashhub_kernels
    from flashhub_kernels._variants.named_system import target_system
    from flashhub_kernels._variants.verdicts import describe_system

    loaded = next(k for k in flashhub_kernels.get_loaded_kernels() if k.module is module)
    assert loaded.repo_id is not None and loaded.version is not None
    verdicts = flashhub_kernels.get_kernel_variants(loaded.repo_id, loaded.version, backend=backend)
    fits = [str(v.variant) for v in verdicts if isinstance(v, flashhub_kernels.VariantAccepted)]
    assert fits[0] == loaded.variant, f"loaded {loaded.variant}, but the best fit is {fits[0]}"
    forced = f" with backend={backend!r}" if backend else ""
    print(f"  {loaded.repo_id} v{loaded.version}: variant {loaded.variant}")
    print(
        f"    why: the best{forced} of those that fit this system "
        f"({describe_system(target_system(backend))}): {', '.join(fits)}"
    )
    for verdict in verdicts:
        if isinstance(verdict, flashhub_kernels.VariantRejected):
            print(f"    not {verdict.variant}: {verdict.reason}")


def run_audio_kernel() -> None:
    """Import the audio kernel (cold) and check its op against the reference, on the GPU
    when torch sees one."""
    import flashhub.sdq.audio_codebook_primitives.v1 as k
    import torch

    explain_choice(k)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    logits = torch.randn((4, 16), dtype=torch.bfloat16, device=device)
    codebook = torch.randn((4, 16, 8), dtype=torch.bfloat16, device=device)
    codes, emb = k.delayed_codebook_argmax_embed_bf16(logits, codebook, delay=2, boc=1)
    ref_codes, ref_emb = k.reference_delayed_codebook_argmax_embed(logits, codebook, 2, 1)
    assert torch.equal(codes, ref_codes) and torch.equal(emb, ref_emb), "op != reference"
    where = "cpu (torch sees no GPU)" if device == "cpu" and torch.version.cuda else device
    print(f"  {k.__name__} on {where}: codes={codes.tolist()} (matches the reference)")


def import_tensor_tricks(version: int) -> ModuleType:
    """Import acme/tensor-tricks ``version`` through the hook: the variant this torch
    loads, or else its CPU build (``...v<N>_cpu``, as ``backend="cpu"`` names it)."""
    import flashhub_kernels
    from flashhub_kernels._variants.named_system import target_system

    backend = None if flashhub_kernels.has_kernel(TRICKS, version) else "cpu"
    if backend:
        own = target_system(None).backend_tag
        print(f"  {TRICKS} v{version}: no variant for {own}, so its CPU build (backend='cpu')")
    module_name = flashhub_kernels.RepoInfo(TRICKS, version).module_name(backend)
    module = importlib.import_module(module_name)
    explain_choice(module, backend)
    return module


def run_side_by_side() -> None:
    """Load two native builds of one kernel in one process; each has its own op namespace."""
    import torch

    from flashhub_kernels.errors import NewerVersionWarning

    with warnings.catch_warnings():
        # Loading v1 would warn that v2 is published; here v2 is loaded on purpose.
        warnings.simplefilter("ignore", NewerVersionWarning)
        v1, v2 = import_tensor_tricks(1), import_tensor_tricks(2)

    x = torch.arange(4, dtype=torch.float32)
    for k in (v1, v2):
        out = k.scale_shift(x, 2.0)
        assert torch.equal(out, k.reference_scale_shift(x, 2.0)), f"{k.__name__} != reference"
        print(f"  {k.__name__}: torch.ops.{k.NAMESPACE} -> {out.tolist()}")
    assert v1.NAMESPACE != v2.NAMESPACE


def main() -> int:
    key = publisher_key()
    print(f"1. building and publishing the example kernels into {MIRROR}")
    print(f"  signed with the publisher key {key.key_id} ({PUBLISHER_KEY})")
    publish_examples(key)

    server = serve(MIRROR)
    cdn_url = f"http://127.0.0.1:{server.server_address[1]}"
    shutil.rmtree(CACHE, ignore_errors=True)  # start cold, so the first load downloads
    os.environ.update(
        FLASHHUB_CDN_URL=cdn_url,
        FLASHHUB_CACHE_DIR=str(CACHE),
        FLASHHUB_TRUSTED_KEYS=key.public_line,  # a load refuses what this key did not sign
    )
    print(f"2. serving the mirror at {cdn_url} (cache: {CACHE})")
    print(f"  the client trusts {key.public_line}")

    import flashhub_kernels

    print("3. import flashhub.sdq.audio_codebook_primitives.v1 (cold)")
    run_audio_kernel()
    print("4. acme/tensor-tricks v1 and v2 side by side")
    run_side_by_side()
    loaded = len(flashhub_kernels.get_loaded_kernels())
    print(f"  ({loaded} kernels loaded, each one's signature checked against {key.key_id})")

    print(f"5. import times in fresh processes with torch imported (median of {RUNS})")
    cold_ms = median([timed_import(fresh_cache(f"cold-{run}")) for run in range(RUNS)])
    before = _CountingHandler.requests_served
    warm_ms = median([timed_import(CACHE) for _run in range(RUNS)])
    warm_requests = _CountingHandler.requests_served - before
    server.shutdown()
    server.server_close()
    print(f"  cold (download + verify + import):  {cold_ms:8.1f} ms")
    print(f"  warm (from the cache):              {warm_ms:8.1f} ms, {warm_requests} requests")
    print("6. try it in your own shell (no server needed: the mirror is a directory):")
    print(f"  export FLASHHUB_CDN_URL={MIRROR.as_uri()}")
    print(f"  export FLASHHUB_TRUSTED_KEYS={key.public_line}")
    print(
        f"  {shlex.quote(sys.executable)} -c 'import flashhub.sdq.audio_codebook_primitives.v1 "
        "as k; print(k.__file__)'"
    )
    return 0 if warm_requests == 0 else 1


def fresh_cache(name: str) -> Path:
    """An empty cache directory under the quickstart's work directory."""
    path = WORKDIR / name
    shutil.rmtree(path, ignore_errors=True)
    return path


def timed_import(cache: Path) -> float:
    """Milliseconds one import of the audio kernel takes in a fresh process using ``cache``."""
    result = subprocess.run(
        [sys.executable, "-c", TIMED_IMPORT],
        env={**os.environ, "FLASHHUB_CACHE_DIR": str(cache)},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(result.stdout.strip())


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


if __name__ == "__main__":
    sys.exit(main())
