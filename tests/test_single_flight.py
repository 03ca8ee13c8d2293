"""Many processes load one cold kernel at once, and the CDN serves each URL once per
cache: the payload files, and the documents too (``variants.json``, each ``metadata.json``
read to choose the variant, ``versions.json``), whether the version lists its variants or
is probed, whether the variant's choice needs the builds' metadata, and whether an
earlier load left the variant partly downloaded.

The loads choose for a GPU node whose device is named (``cuda_capability="9.0"``), so
that they choose by the CUDA archs each build's ``metadata.json`` declares, on this
CPU-only machine too.
"""

from __future__ import annotations

import collections
import errno
import json
import os
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import device_capability
from flashhub_kernels._cache.layout import Cache
from flashhub_kernels._cache.mutex import hold_if_free
from flashhub_kernels._config import get_config
from flashhub_kernels._models.names import RepoInfo
from flashhub_kernels._network.choosing import Choice, chosen_variant
from flashhub_kernels._network.transport import remote
from flashhub_kernels._variants.named_system import target_system
from flashhub_kernels.errors import TransportError
from support.cdn_server import CdnServer, delayed, drop_after
from support.preloaded import run_code
from support.trees import b64sha256, kernel_files, write_variant

REPO, PY_PKG = "acme/relu", "relu"
SYSTEM = "torch213-cxx11-cu126-x86_64-linux"  # the GPU node's torch, as a build name
CU126 = SYSTEM  # built for CUDA archs 8.0 and 8.6: passed over on a 9.0 device
CU124 = "torch213-cxx11-cu124-x86_64-linux"  # built for 9.0a: the one a 9.0 device takes
UNIVERSAL = "torch-universal"
BUILDS: dict[str, list[str] | None] = {CU126: ["8.0", "8.6"], CU124: ["9.0a"], UNIVERSAL: None}
GPU_NODE = {"system": SYSTEM, "cuda_capability": "9.0"}
PROCESSES = 16

V1 = f"/kernels/{REPO}/v1"
VARIANTS_JSON = f"{V1}/variants.json"
CHOOSING = [f"{V1}/build/{CU126}/metadata.json", f"{V1}/build/{CU124}/metadata.json"]
PAYLOAD = sorted(f"{V1}/build/{CU124}/{path}" for path in kernel_files(PY_PKG, ""))

# One interpreter imports the cold path's modules, then forks the processes, which load
# the kernel (as the machine its second argument names, in JSON: install_kernel's
# arguments) once all are forked: each reads one byte of a pipe, and all the bytes are
# written at once. A third argument, an errno, makes every flock() fail with it.
LOAD_AT_ONCE = f"""
import fcntl, json, os, sys, traceback
import flashhub_kernels as fk
import flashhub_kernels._network.download  # imported once, for every process forked below
machine = json.loads(sys.argv[2])
if len(sys.argv) > 3:
    def no_flock(fd, operation, error=int(sys.argv[3])):
        raise OSError(error, os.strerror(error))
    fcntl.flock = no_flock
gate, release = os.pipe()
children = []
for _ in range(int(sys.argv[1])):
    pid = os.fork()
    if pid == 0:
        os.close(release)
        os.read(gate, 1)
        try:
            entry = fk.install_kernel({REPO!r}, version=1, **machine)
            os.write(1, f"{{entry.name}}\\n".encode())  # one write: lines do not mix
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)
        os._exit(0)
    children.append(pid)
os.write(release, b"x" * len(children))
sys.exit(sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in children))
"""


def publish(root: Path, *, listed: bool, builds: dict[str, list[str] | None] | None = None) -> None:
    """``REPO`` v1 with ``builds`` (default ``BUILDS``), each ``metadata.json`` declaring
    its CUDA archs; ``listed``: with a variants.json."""
    builds = builds or BUILDS
    for variant, archs in builds.items():
        files = kernel_files(PY_PKG, f"{REPO}@v1:{variant}")
        metadata: dict[str, object] = {
            "digest": {"files": {path: b64sha256(data) for path, data in sorted(files.items())}}
        }
        if archs is not None:
            metadata["backend"] = {"type": "cuda", "archs": archs}
        write_variant(root, REPO, 1, variant, files, manifest=metadata)
    repo_dir = root / "kernels" / REPO
    if listed:
        (repo_dir / "v1" / "variants.json").write_text(json.dumps(sorted(builds)))
    (repo_dir / "versions.json").write_text("[1]")


def with_latency(cdn: CdnServer, variants: list[str] | None = None) -> None:
    """Answer each ``metadata.json`` (of ``variants``, default ``BUILDS``'s) a while after
    it is asked for, as a distant CDN does: the other processes are waiting meanwhile."""
    for variant in variants or BUILDS:
        cdn.inject(f"kernels/{REPO}/v1/build/{variant}/metadata.json", delayed(0.3))


def load_at_once(
    processes: int = PROCESSES,
    machine: dict[str, str] | None = None,
    *,
    flock_error: int | None = None,
) -> list[str]:
    """Run :data:`LOAD_AT_ONCE` in ``processes`` processes released together, as
    ``machine`` (default ``GPU_NODE``; ``{}``: this one), on a file system whose
    ``flock()`` fails with ``flock_error``, if given; the variant each loaded."""
    machine = GPU_NODE if machine is None else machine
    args = [str(processes), json.dumps(machine)]
    if flock_error is not None:
        args.append(str(flock_error))
    result = run_code(LOAD_AT_ONCE, *args, env=dict(os.environ), timeout=180)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def fetched_more_than_once(cdn: CdnServer) -> dict[str, int]:
    return {url: n for url, n in collections.Counter(cdn.gets()).items() if n > 1}


# -- many processes --------------------------------------------------------------------------


@pytest.mark.parametrize("listed", [True, False], ids=["variants.json", "probed"])
def test_processes_choosing_by_device_fetch_each_url_once(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, listed: bool
) -> None:
    publish(cdn.root, listed=listed)
    with_latency(cdn)
    monkeypatch.delenv("FLASHHUB_NO_VERSION_CHECK")  # the check as users have it: on
    assert load_at_once() == [CU124] * PROCESSES
    assert fetched_more_than_once(cdn) == {}
    # The build passed over and the one taken were read to choose; the payload fetched.
    assert {*CHOOSING, *PAYLOAD, f"/kernels/{REPO}/versions.json"} <= set(cdn.gets())


def test_processes_on_a_file_system_without_flock_fetch_each_url_once(cdn: CdnServer) -> None:
    # Lustre mounted without flock answers ENOSYS. filelock then locks with a file of its
    # own, which must exclude the other processes as flock does: before filelock 4.1 a
    # process that found the file removed it, took the mutex too, and every process
    # fetched every file.
    publish(cdn.root, listed=True)
    with_latency(cdn)
    assert load_at_once(8, flock_error=errno.ENOSYS) == [CU124] * 8
    assert fetched_more_than_once(cdn) == {}


def test_processes_continuing_a_partly_downloaded_variant_fetch_each_url_once(
    cdn: CdnServer, cache_dir: Path
) -> None:
    publish(cdn.root, listed=True)
    ops = f"kernels/{REPO}/v1/build/{CU124}/{PY_PKG}/_ops.py"
    cdn.inject(ops, *[drop_after(10)] * 6)  # each try breaks off after 10 bytes
    with pytest.raises(TransportError, match="broke off"):
        fk.install_kernel(REPO, version=1, **GPU_NODE)
    assert list(cache_dir.glob(f"kernels/{REPO}/v1/.partial-{CU124}/*"))  # kept to continue
    cdn.clear_log()
    with_latency(cdn)
    assert load_at_once() == [CU124] * PROCESSES
    assert fetched_more_than_once(cdn) == {}
    assert [r.range for r in cdn.requests if r.path == "/" + ops] == ["bytes=10-"]


# -- one process: what it fetches, and what it leaves the others ----------------------------


def test_a_probe_fetches_the_manifest_of_the_variant_it_takes_once(cdn: CdnServer) -> None:
    publish(cdn.root, listed=False)
    assert fk.install_kernel(REPO, version=1, **GPU_NODE).name == CU124
    assert fetched_more_than_once(cdn) == {}
    assert set(CHOOSING) <= set(cdn.gets())


def test_a_recorded_variants_json_is_not_fetched_again_to_read_the_archs(cdn: CdnServer) -> None:
    publish(cdn.root, listed=True)
    # A CPU node's load records variants.json, and no archs: it took torch-universal.
    cpu_node = "torch213-cxx11-cpu-x86_64-linux"
    assert fk.install_kernel(REPO, version=1, system=cpu_node).name == UNIVERSAL
    cdn.clear_log()
    assert fk.install_kernel(REPO, version=1, **GPU_NODE).name == CU124
    assert sorted(cdn.gets()) == sorted([*CHOOSING, *PAYLOAD])


def test_the_process_that_chose_holds_the_download_mutex_and_the_others_need_no_request(
    cdn: CdnServer,
) -> None:
    publish(cdn.root, listed=True)
    config, info = get_config(), RepoInfo(REPO, 1)
    cache = Cache.from_config(config)
    node = target_system(None, **GPU_NODE)
    index_mutex = cache.root / ".locks" / "acme" / "relu" / "v1.lock"
    download_mutex = cache.version_dir(info) / ".locks" / f"{CU124}.lock"
    with remote(config) as fetcher, chosen_variant(cache, fetcher, info, node) as first:
        assert first.variant == CU124 and first.document is not None
        with hold_if_free(index_mutex) as free:
            assert free  # the others may choose meanwhile...
        with hold_if_free(download_mutex) as free:
            assert not free  # ...and then wait for this download
    # CU126's manifest (this node's own build) and the universal build's were asked for
    # beside variants.json; counted once the run is over, which waits for every request.
    universal = f"{V1}/build/{UNIVERSAL}/metadata.json"
    assert sorted(cdn.gets()) == sorted([VARIANTS_JSON, *CHOOSING, universal])
    cdn.clear_log()
    # Another process, having waited for the index mutex: the record is enough.
    with remote(config) as fetcher, chosen_variant(cache, fetcher, info, node) as second:
        assert second == Choice(CU124, None)
    assert cdn.gets() == []


# -- on a real GPU ------------------------------------------------------------------------------


@pytest.mark.gpu
def test_on_a_gpu_processes_that_read_the_device_fetch_each_url_once(cdn: CdnServer) -> None:
    from support.trees import local_variant

    capability = "{}.{}".format(*device_capability())
    # This machine's exact build runs on no device: only a reading of this one, in each
    # process, takes torch-cuda.
    builds: dict[str, list[str] | None] = {
        local_variant(): ["5.0a"],
        "torch-cuda": [capability],
        UNIVERSAL: None,
    }
    publish(cdn.root, listed=True, builds=builds)
    with_latency(cdn, list(builds))
    assert load_at_once(machine={}) == ["torch-cuda"] * PROCESSES
    assert fetched_more_than_once(cdn) == {}
