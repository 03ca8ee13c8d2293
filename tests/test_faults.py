"""Fault injection: a real loopback CDN misbehaves; the client rides it out or says why.

Every test checks the outcome and the server's request log. docs/reliability.md lists
each fault and what the client does.
"""

from __future__ import annotations

import email.utils
import hashlib
import importlib
import os
import pickle
import signal
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import (
    NOBODY,
    MakeCdn,
    load_peak_rise,
    needs_root,
    plant_partial,
    refused_port,
    run_python,
)
from flashhub_kernels._config import get_config
from flashhub_kernels._network.progress import Progress
from flashhub_kernels._network.transport import Fetcher, warn_if_insecure
from flashhub_kernels.errors import CacheError, IntegrityError, ManifestError, TransportError
from support.cdn_server import (
    CdnHandler,
    CdnServer,
    Fault,
    capped_range,
    chunked,
    compression_bomb,
    delayed,
    drop_after,
    drop_every,
    endless,
    long_body,
    other_file,
    redirect,
    stall,
    status,
    tampered,
    unannounced_long_body,
    wrong_range,
)
from support.cli_runner import PYTHON_M_FLASHHUB, flashhub
from support.preloaded import process_state, run_code, start_code
from support.projects import write_project
from support.trees import (
    b64sha256,
    kernel_files,
    local_variant,
    write_blob_kernel,
    write_kernel,
    write_variant,
)

REPO = "acme/tensor-tricks"
BLOB = bytes(range(256)) * (3 * 4096)  # 3 MiB, so drops land mid-file
VARIANT = "torch-universal"
BLOB_PATH = f"kernels/{REPO}/v1/build/{VARIANT}/tensor_tricks/blob.bin"
BLOB_DIGEST = hashlib.sha256(BLOB).digest()


@pytest.fixture
def blob_kernel(cdn: CdnServer) -> CdnServer:
    write_blob_kernel(cdn.root, BLOB)
    return cdn


def cached_blob(k: object) -> bytes:
    return (Path(k.__file__).parent / "blob.bin").read_bytes()  # type: ignore[attr-defined]


def ranges(cdn: CdnServer, suffix: str) -> list[str | None]:
    return [r.range for r in cdn.requests if r.path.endswith(suffix)]


def test_dropped_connection_resumes_with_range(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(BLOB_PATH, drop_after(1 << 20))
    k = fk.get_kernel(REPO, version=1)
    assert cached_blob(k) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [None, f"bytes={1 << 20}-"]


def test_short_body_resumes(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(
        f"kernels/{REPO}/v1/build/{VARIANT}/tensor_tricks/helpers.py", drop_after(10)
    )
    fk.get_kernel(REPO, version=1)
    assert ranges(blob_kernel, "helpers.py") == [None, "bytes=10-"]


def test_503s_are_retried(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(BLOB_PATH, status(503), status(503), status(503))
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert [r.status for r in blob_kernel.requests if r.path.endswith("blob.bin")] == [503] * 3 + [
        200
    ]


def test_429_honours_retry_after(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(BLOB_PATH, status(429, retry_after=1))
    fk.get_kernel(REPO, version=1)
    first, second = [r for r in blob_kernel.requests if r.path.endswith("blob.bin")]
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 0.9  # a lower bound the client guarantees by sleeping


@pytest.mark.parametrize(
    "retry_after",
    [
        "9" * 5000,
        "Mon, 01 Jan 99999 00:00:00 GMT",
        "Mon, 01 Jan 99999999999999999999 00:00:00 GMT",
        "-1",
        "in a while",
    ],
)
def test_a_503_with_an_unreadable_retry_after_is_retried(
    blob_kernel: CdnServer, retry_after: str
) -> None:
    blob_kernel.inject(BLOB_PATH, status(503, retry_after=retry_after))
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert [r.status for r in blob_kernel.requests if r.path.endswith("blob.bin")] == [503, 200]


@pytest.mark.parametrize("code", [429, 503])
@pytest.mark.parametrize("form", ["seconds", "date"])
def test_a_retry_after_past_the_cap_fails_at_once_saying_when_to_retry(
    blob_kernel: CdnServer, code: int, form: str
) -> None:
    # An hour, past the 60 s a load waits, and how the error says when to retry.
    an_hour_on = time.time() + 3600
    retry_after, when = {
        "seconds": ("3600", "after 3600 seconds"),
        "date": (
            email.utils.formatdate(an_hour_on, usegmt=True),
            time.strftime("at %Y-%m-%d %H:%M:%S UTC", time.gmtime(an_hour_on)),
        ),
    }[form]
    blob_kernel.inject(BLOB_PATH, *[status(code, retry_after=retry_after)] * 10)
    started = time.monotonic()
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert time.monotonic() - started < 30  # not the minutes of a 60 s wait per retry
    assert f"asking to be retried {when}" in info.value.message
    assert f"load again {when}" in (info.value.hint or "")
    assert len(blob_kernel.gets("blob.bin")) == 1  # asked once, never again


def test_a_retry_after_past_the_cap_gives_way_to_the_next_mirror(
    blob_kernel: CdnServer, make_cdn: MakeCdn, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy = make_cdn()  # the same tree
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{blob_kernel.url},{healthy.url}")
    blob_kernel.inject(BLOB_PATH, *[status(503, retry_after=3600)] * 10)
    started = time.monotonic()
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert time.monotonic() - started < 30
    assert len(blob_kernel.gets("blob.bin")) == 1
    assert healthy.gets("blob.bin") == [f"/{BLOB_PATH}"]


def test_persistent_5xx_fails_with_the_url_and_a_hint(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    blob_kernel.inject(BLOB_PATH, *[status(502)] * 20)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert "blob.bin" in message and "HTTP 502" in message and "FLASHHUB_CDN_URL" in message
    assert len(blob_kernel.gets("blob.bin")) == 5  # the first try and four retries
    assert not list((cache_dir / "kernels").glob("*/*/v1/torch-universal"))


def test_long_body_with_content_length_is_cut_at_the_announced_length(
    blob_kernel: CdnServer,
) -> None:
    blob_kernel.inject(BLOB_PATH, long_body())
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB


def test_long_body_without_content_length_fails_the_digest_then_retries(
    blob_kernel: CdnServer,
) -> None:
    blob_kernel.inject(BLOB_PATH, unannounced_long_body())
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [None, None]


def test_stalled_body_times_out_and_resumes(
    blob_kernel: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "0.5")
    blob_kernel.inject(BLOB_PATH, stall(5, after=4096))
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [None, "bytes=4096-"]


def test_wrong_range_offset_restarts_from_zero(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(BLOB_PATH, drop_after(1000), wrong_range())
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [None, "bytes=1000-", None]


def test_tampered_byte_is_refetched_once(blob_kernel: CdnServer) -> None:
    blob_kernel.inject(BLOB_PATH, tampered(12345))
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert len(blob_kernel.gets("blob.bin")) == 2


def test_a_different_fault_on_every_file_at_once_is_ridden_out(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    # Each fault alone has its test above; here they meet in one load, on one session
    # and its pool: the documents' retries beside the files' resumes and restarts.
    build = f"kernels/{REPO}/v1/build/{VARIANT}"
    faults = {
        f"kernels/{REPO}/v1/variants.json": [status(503), chunked()],
        f"{build}/metadata.json": [status(429, retry_after=0), drop_after(40)],
        BLOB_PATH: [
            tampered(9),
            drop_every(700_000),
            wrong_range(),
            drop_after(300_000),
            capped_range(500_000),
            drop_every(1_000_000),
        ],
        f"{build}/tensor_tricks/__init__.py": [chunked(cut_after=30), status(500)],
        f"{build}/tensor_tricks/helpers.py": [unannounced_long_body()],
        f"{build}/tensor_tricks/_ops.py": [
            redirect(f"/{build}/tensor_tricks/_ops.py"),
            long_body(),
        ],
    }
    for path, queued in faults.items():
        blob_kernel.inject(path, *queued)
    k = fk.get_kernel(REPO, version=1)
    assert cached_blob(k) == BLOB
    assert k.some_function(1) == 2
    assert not any(blob_kernel.faults.values()), "every fault was met"
    assert ranges(blob_kernel, "blob.bin") == [
        None,  # tampered: discarded, and the file asked for once more
        None,
        "bytes=700000-",  # answered from byte 0: started over
        None,
        "bytes=300000-",  # a capped part, kept
        "bytes=800000-",
        "bytes=1800000-",
    ]
    version_dir = cache_dir / "kernels" / REPO / "v1"
    assert sorted(p.name for p in version_dir.iterdir() if "staging" in p.name) == []


def test_dead_and_failing_mirrors_fail_over(blob_kernel: CdnServer, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    failing = CdnServer(tmp_path / "empty").start()
    try:
        failing.inject(f"kernels/{REPO}/v1/variants.json", *[status(503)] * 50)
        mirrors = f"http://127.0.0.1:{refused_port()},{failing.url},{blob_kernel.url}"
        fk.configure(cdn_url=mirrors)
        assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
        # Both bad mirrors were tried for the first document, then moved to the back.
        asked = set(failing.gets(missed_guesses=False))
        assert asked == {f"/kernels/{REPO}/v1/variants.json"}
        assert len(blob_kernel.gets("blob.bin")) == 1
    finally:
        failing.stop()


def test_a_redirect_within_the_cdn_is_followed(blob_kernel: CdnServer) -> None:
    variants = f"kernels/{REPO}/v1/variants.json"
    (blob_kernel.root / "moved.json").write_text(f'["{VARIANT}"]')
    blob_kernel.inject(variants, redirect("/moved.json"))
    fk.get_kernel(REPO, version=1)
    asked = [path for path in blob_kernel.gets() if "/build/" not in path]
    assert asked[:2] == [f"/{variants}", "/moved.json"]


def test_a_redirect_to_a_location_with_a_space_is_followed(blob_kernel: CdnServer) -> None:
    variants = f"kernels/{REPO}/v1/variants.json"
    # The test server maps the request path to a file name without unquoting it.
    (blob_kernel.root / "moved%20here.json").write_text(f'["{VARIANT}"]')
    blob_kernel.inject(variants, redirect("/moved here.json"))
    fk.get_kernel(REPO, version=1)
    asked = [path for path in blob_kernel.gets() if "/build/" not in path]
    assert asked[:2] == [f"/{variants}", "/moved%20here.json"]


INFLATED = 1 << 30  # what the redirect's body holds, inflated or sent


@pytest.mark.parametrize("body", ["compression bomb", "endless"])
def test_a_redirects_body_is_never_read_into_memory(blob_kernel: CdnServer, body: str) -> None:
    moved = f"/{BLOB_PATH}.moved"
    (blob_kernel.root / moved.lstrip("/")).write_bytes(BLOB)
    if body == "compression bomb":  # 1 MiB on the wire, 1 GiB once decoded
        bomb = compression_bomb(INFLATED)
        blob_kernel.inject(BLOB_PATH, redirect(moved, bomb, {"Content-Encoding": "gzip"}))
    else:
        blob_kernel.inject(BLOB_PATH, endless(limit=INFLATED, status=302, location=moved))
    rise, outcome = load_peak_rise(REPO)
    assert outcome == "loaded"
    assert rise < 128 << 20, f"the load's peak memory rose by {rise >> 20} MiB"
    assert blob_kernel.gets("blob.bin") + blob_kernel.gets(".moved") == [
        f"/{BLOB_PATH}",
        moved,
    ]
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB


@pytest.mark.parametrize(
    "repo_id, version",
    [
        *[("a/b/c", 1), ("../x", 1), ("ORG/", 1), ("", 1), ("acme/x", 0), ("acme/x", -3)],
        *[("acme/x", 10**9), ("acme/x", 10**12)],  # more digits than a module name holds
    ],
)
def test_malformed_references_raise_value_error_before_any_request(
    cdn: CdnServer, repo_id: str, version: int
) -> None:
    with pytest.raises(ValueError):
        fk.get_kernel(repo_id, version=version)
    with pytest.raises(ValueError):
        fk.has_kernel(repo_id, version=version)
    assert cdn.requests == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"repo_id": 123, "version": 1},
        {"repo_id": Path("acme/x"), "version": 1},
        {"repo_id": "acme/x", "version": "one"},
        {"repo_id": "acme/x", "version": 1.0},
        {"repo_id": "acme/x", "version": True},
        {"repo_id": "acme/x", "revision": 1},
    ],
    ids=["int repo id", "path repo id", "str version", "float version", "bool", "int revision"],
)
def test_an_argument_of_the_wrong_type_is_a_type_error_and_a_value_error(
    cdn: CdnServer, arguments: dict[str, object]
) -> None:
    """Code written for Hugging Face kernels catches a ``TypeError``; for 0.1.2, a
    ``ValueError``: both catch it, before any request, and it pickles whole."""
    for load in (fk.get_kernel, fk.has_kernel):
        with pytest.raises(TypeError) as info:
            load(**arguments)  # type: ignore[arg-type]
        error = info.value
        assert isinstance(error, ValueError) and isinstance(error, fk.errors.ArgumentTypeError)
        assert "must be" in str(error)
        assert str(pickle.loads(pickle.dumps(error))) == str(error)
    assert cdn.requests == []


def test_a_version_given_as_a_revisions_str_loads_as_0_1_2_took_it_and_warns(
    cdn: CdnServer,
) -> None:
    # 0.1.2 took version="1" (from an environment variable, say), and a revision second
    # in has_kernel and get_kernel_variants, where version is now.
    write_kernel(cdn.root, REPO, 1)
    calls = [
        lambda: fk.get_kernel(REPO, version="1").__name__,  # type: ignore[arg-type]
        lambda: fk.has_kernel(REPO, "v1"),  # type: ignore[arg-type]
        lambda: [v.variant for v in fk.get_kernel_variants(REPO, "v1")][:1],  # type: ignore[arg-type]
    ]
    answers = []
    for call in calls:
        with pytest.warns(DeprecationWarning, match=r"version= takes an int: pass version=1 "):
            answers.append(call())
    assert answers == ["flashhub.acme.tensor_tricks.v1", True, [local_variant()]]


@pytest.mark.parametrize(
    ("version", "revision"),
    [(10**9, None), (None, "v1000000000"), (None, "1" + "0" * 5000)],
)
def test_a_version_past_nine_digits_names_the_bound(
    cdn: CdnServer, version: int | None, revision: str | None
) -> None:
    with pytest.raises(ValueError, match="at most 999999999") as info:
        fk.get_kernel(REPO, version=version, revision=revision)
    assert not isinstance(info.value, ImportError)
    assert cdn.requests == []


@pytest.mark.parametrize("revision", ["v0", "main", "1.0", ""])
def test_malformed_revisions(cdn: CdnServer, revision: str) -> None:
    with pytest.raises(ValueError, match="revision"):
        fk.get_kernel(REPO, revision=revision)
    assert cdn.requests == []


def test_hostile_documents_are_refused(cdn: CdnServer, cache_dir: Path) -> None:
    files = kernel_files("tensor_tricks", "x")
    honest = {p: b64sha256(d) for p, d in files.items()}
    any_digest = next(iter(honest.values()))
    cases: list[dict[str, str]] = [
        {**honest, "pad": "A" * (1 << 20)},  # metadata.json over 1 MiB
        {f"tensor_tricks/f{i}.py": any_digest for i in range(10_001)},  # too many files
        {**honest, "tensor_tricks/x.py": "c2hvcnQ="},  # a digest of 5 bytes
        {**honest, "tensor_tricks/a.py": any_digest, "tensor_tricks/A.py": any_digest},
    ]
    for version, manifest in enumerate(cases, start=1):
        document = {"digest": {"files": manifest}}
        write_variant(cdn.root, REPO, version, VARIANT, files, manifest=document)
        with pytest.raises(ManifestError):
            fk.get_kernel(REPO, version=version)
    assert list(cache_dir.glob(f"kernels/acme/tensor-tricks/v*/{VARIANT}")) == []
    fetched = [p for p in cdn.gets() if "/build/" in p and not p.endswith("metadata.json")]
    assert fetched == []  # refused before a single file of the variant was fetched


def test_wrong_shaped_variants_and_versions_json(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text('{"torch-universal": true}')
    with pytest.raises(ManifestError, match=r"variants\.json"):
        fk.get_kernel(REPO, version=1)
    (cdn.root / f"kernels/{REPO}/versions.json").write_text('["1"]')
    with pytest.raises(ManifestError, match=r"versions\.json"):
        fk.has_kernel(REPO)


def test_symlink_in_the_cache_is_detected_and_refetched(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    k = fk.get_kernel(REPO, version=1)
    helpers = Path(k.__file__).parent / "helpers.py"
    evil = tmp_path / "evil.py"
    evil.write_text(helpers.read_text())
    helpers.unlink()
    helpers.symlink_to(evil)
    os.utime(helpers, follow_symlinks=False)
    cdn.clear_log()
    code = "import flashhub.acme.tensor_tricks.v1 as k; print(k.helpers.__file__)"
    out = run_python(code).strip()
    assert not Path(out).is_symlink()
    assert cdn.gets("helpers.py")


def test_plain_http_to_another_host_warns_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn_if_insecure("http://127.0.0.1:8000")
        warn_if_insecure("https://cdn.example")
        warn_if_insecure("http://cdn.example")
        warn_if_insecure("http://cdn.example/other")
    assert [str(w.message).split(":")[0] for w in caught] == [
        "fetching kernels over plain http from cdn.example"
    ]


def test_threads_loading_one_cold_kernel_fetch_each_file_once(blob_kernel: CdnServer) -> None:
    modules: list[object] = []
    errors: list[BaseException] = []

    def load() -> None:
        try:
            modules.append(fk.get_kernel(REPO, version=1))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(modules) == 8 and all(m is modules[0] for m in modules)
    files = [p for p in blob_kernel.gets() if "/build/" in p]
    assert len(files) == len(set(files))


def failing_after(started: threading.Event, release: threading.Event) -> Fault:
    """Set ``started`` on arrival, then, once ``release`` is set, answer a 500 that says
    to retry in an hour (no retry waits that long: the load fails at once)."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        started.set()
        release.wait(30)
        status(500, retry_after=3600)(handler, body)

    return fault


def waits_for_an_import(thread: threading.Thread) -> bool:
    """Whether ``thread`` waits for the import lock of a module another thread imports."""
    frame = sys._current_frames().get(thread.ident or 0)
    code = frame.f_code if frame is not None else None
    return code is not None and code.co_name == "acquire" and "_bootstrap" in code.co_filename


@pytest.mark.parametrize("how", ["get_kernel", "import"])
def test_threads_waiting_for_a_failing_cold_load_get_its_error_and_a_later_call_tries_again(
    blob_kernel: CdnServer, how: str
) -> None:
    started, release = threading.Event(), threading.Event()
    index = f"kernels/{REPO}/v1/variants.json"
    blob_kernel.inject(index, failing_after(started, release), *[status(500, 3600)] * 10)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            if how == "get_kernel":
                fk.get_kernel(REPO, version=1)
            else:
                importlib.import_module("flashhub.acme.tensor_tricks.v1")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    assert started.wait(30)
    deadline = time.monotonic() + 30
    while sum(map(waits_for_an_import, threads)) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(60)
    assert len(errors) == 6 and all(type(e) is TransportError for e in errors)
    assert len({str(e) for e in errors}) == 1 and "HTTP 500" in str(errors[0])
    assert len({id(e) for e in errors}) == 6, "each thread raises an error of its own"
    together = sorted(blob_kernel.gets())
    assert together.count(f"/{index}") == 1, "one load for all the threads"
    blob_kernel.clear_log()
    with pytest.raises(TransportError, match="HTTP 500"):  # a later call: a new attempt
        fk.get_kernel(REPO, version=1)
    assert sorted(blob_kernel.gets()) == together
    blob_kernel.faults.clear()
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB


KILLABLE = "import flashhub_kernels as fk; fk.get_kernel('acme/tensor-tricks', version=1)"


@pytest.mark.parametrize("point", ["variants.json", "metadata.json", "blob.bin"])
def test_sigkill_at_any_point_leaves_a_usable_cache(
    blob_kernel: CdnServer, cache_dir: Path, point: str
) -> None:
    reached = threading.Event()
    if point == "blob.bin":  # mid-file: a staging directory with a partial file exists
        blob_kernel.inject(BLOB_PATH, stall(30, after=1 << 20, started=reached))
    else:
        where = "variants.json" if point == "variants.json" else f"build/{VARIANT}/metadata.json"
        blob_kernel.inject(f"kernels/{REPO}/v1/{where}", delayed(30, reached))
    child = start_code(KILLABLE, env=dict(os.environ))
    try:
        assert reached.wait(60), "the child never reached the fault"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    if point == "blob.bin":
        assert [p.name for p in version_dir.iterdir() if p.name.startswith(".staging-")]
    blob_kernel.faults.clear()
    k = fk.get_kernel(REPO, version=1)
    assert cached_blob(k) == BLOB
    leftovers = [
        p.name for p in version_dir.iterdir() if p.name.startswith((".staging-", ".trash-"))
    ]
    assert leftovers == []


def test_a_load_removes_a_dead_download_whose_pid_it_took(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    # A process killed as PID 1 of a container, and the next load, PID 1 of the restart.
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    plant = (
        "import os, pathlib, socket\n"
        f"version_dir = pathlib.Path({str(version_dir)!r})\n"
        f"name = f'.staging-{VARIANT}.0123abcd.{{os.getpid()}}.{{socket.gethostname()}}'\n"
        "(version_dir / name / 'tensor_tricks').mkdir(parents=True)\n"
    )
    run_python(plant + KILLABLE)
    assert [p.name for p in version_dir.iterdir() if p.name.startswith(".staging-")] == []


# The code and arguments of each run that a test kills mid-file, then runs again.
KILLED_MID_FILE = {
    "flashhub download": (PYTHON_M_FLASHHUB, "download", "{project}"),
    "an import": ("import flashhub.acme.tensor_tricks.v1",),
}
DEAD_PID = 999_999_999  # above any pid_max
SMALL_FILES = kernel_files("tensor_tricks", "blob")  # the blob kernel's files but the blob


def killed_mid_blob(cdn: CdnServer, version_dir: Path, code: str, *args: str) -> Path:
    """Run ``python -c code args`` until its staging directory holds every file of the
    blob kernel, the blob's first MiB only, then SIGKILL it (as the OOM killer does); its
    staging directory."""
    reached = threading.Event()
    cdn.inject(BLOB_PATH, stall(30, after=1 << 20, started=reached))
    child = start_code(code, *args, env=dict(os.environ))
    try:
        until_the_blob_is_half_staged(reached, version_dir)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    cdn.faults.clear()
    cdn.clear_log()
    (staging,) = version_dir.glob(".staging-*")
    return staging


def until_the_blob_is_half_staged(reached: threading.Event, version_dir: Path) -> None:
    """Wait until a download that stalls after the blob's first MiB (``reached``) has
    staged every file of the blob kernel in ``version_dir``, the blob's first MiB only."""
    assert reached.wait(60), "the child never reached the fault"
    deadline = time.monotonic() + 10
    while staged(version_dir) != {**SMALL_FILES, "tensor_tricks/blob.bin": BLOB[: 1 << 20]}:
        assert time.monotonic() < deadline, "the files never reached the disk"
        time.sleep(0.05)


def staged(version_dir: Path) -> dict[str, bytes]:
    """The files in the staging directories of ``version_dir``, by path in the entry."""
    found = [p for p in version_dir.glob(".staging-*/**/*") if p.is_file()]
    return {
        p.relative_to(version_dir).as_posix().split("/", 1)[1]: p.read_bytes()
        for p in found
        if "__pycache__" not in p.parts
    }


def build_files_fetched(cdn: CdnServer) -> list[str]:
    return sorted(p.rsplit("/", 1)[1] for p in cdn.gets() if f"/build/{VARIANT}/" in p)


@pytest.mark.parametrize("command", KILLED_MID_FILE)
def test_a_download_killed_mid_file_is_continued_by_the_next_run(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path, command: str
) -> None:
    # An init container OOM-killed mid-download, restarted on the same cache volume.
    (blob_kernel.root / f"kernels/{REPO}/versions.json").write_text("[1]")
    project = write_project(tmp_path / "project", {REPO: "==1"})
    assert flashhub("lock", project).returncode == 0
    code, *args = [arg.format(project=project) for arg in KILLED_MID_FILE[command]]
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    killed_mid_blob(blob_kernel, version_dir, code, *args)
    again = run_code(code, *args, env=dict(os.environ))
    assert again.returncode == 0, again.stderr
    assert ranges(blob_kernel, "blob.bin") == [f"bytes={1 << 20}-"]
    assert build_files_fetched(blob_kernel) == ["blob.bin", "metadata.json"]
    assert flashhub("cache", "verify").returncode == 0
    assert [p.name for p in version_dir.iterdir() if p.name.startswith(".")] == [".locks"]


def test_processes_that_find_the_same_killed_download_continue_it_once(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    killed_mid_blob(blob_kernel, version_dir, KILLABLE)
    children = [start_code(KILLABLE, env=dict(os.environ)) for _ in range(4)]
    assert [child.wait(120) for child in children] == [0] * 4
    assert ranges(blob_kernel, "blob.bin") == [f"bytes={1 << 20}-"]
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB


# A launcher that forks a worker to load the kernel, writes the worker's pid into the file
# argv[1] names, and waits for it once the file argv[2] names exists: as a launcher that
# waits for its workers in turn leaves one that was killed unreaped while the others run.
LAUNCHES_A_WORKER = """
import os, pathlib, sys, time
pid = os.fork()
if pid == 0:
    import flashhub_kernels as fk
    fk.get_kernel("acme/tensor-tricks", version=1)
    os._exit(0)
pathlib.Path(sys.argv[1]).write_text(str(pid))
while not pathlib.Path(sys.argv[2]).exists():
    time.sleep(0.01)
os.waitpid(pid, 0)
"""


def test_a_killed_download_whose_process_is_not_reaped_yet_is_continued(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """A zombie writes nothing: the next load continues its download and takes its files
    (it fetched the whole blob again, and left the zombie's staging behind)."""
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    worker_pid, reap = tmp_path / "worker", tmp_path / "reap"
    reached = threading.Event()
    blob_kernel.inject(BLOB_PATH, stall(30, after=1 << 20, started=reached))
    launcher = start_code(LAUNCHES_A_WORKER, str(worker_pid), str(reap), env=dict(os.environ))
    try:
        until_the_blob_is_half_staged(reached, version_dir)
        worker = int(worker_pid.read_text())
        os.kill(worker, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while process_state(worker) != "Z":
            assert time.monotonic() < deadline, "the worker never exited"
            time.sleep(0.01)
        blob_kernel.faults.clear()
        blob_kernel.clear_log()
        run_python(KILLABLE)
        assert ranges(blob_kernel, "blob.bin") == [f"bytes={1 << 20}-"]
        assert [p.name for p in version_dir.iterdir() if p.name.startswith(".")] == [".locks"]
    finally:
        reap.touch()
        assert launcher.wait(60) == 0


def test_a_killed_downloads_bytes_that_went_wrong_are_fetched_again(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    staging = killed_mid_blob(blob_kernel, version_dir, KILLABLE)
    with (staging / "tensor_tricks/blob.bin").open("r+b") as blob:  # a bit flipped on disk
        blob.seek(1000)
        blob.write(bytes([BLOB[1000] ^ 1]))
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [f"bytes={1 << 20}-", None]


@pytest.mark.parametrize("owner", ["a live process", "another host"])
def test_the_staging_of_a_download_that_may_still_run_is_left_alone(
    blob_kernel: CdnServer, cache_dir: Path, owner: str
) -> None:
    # This test's process is alive, and another process to the child that loads.
    pid, host = (
        (os.getpid(), os.uname().nodename) if owner == "a live process" else (DEAD_PID, "elsewhere")
    )
    staging = cache_dir / f"kernels/{REPO}/v1/.staging-{VARIANT}.0123abcd.{pid}.{host}"
    (staging / "tensor_tricks").mkdir(parents=True)
    (staging / "tensor_tricks/blob.bin").write_bytes(BLOB[: 1 << 20])
    run_python(KILLABLE)
    assert ranges(blob_kernel, "blob.bin") == [None]
    assert (staging / "tensor_tricks/blob.bin").read_bytes() == BLOB[: 1 << 20]


def test_a_dead_staging_leading_out_of_the_cache_moves_nothing_from_there(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    # A neighbour in a cache a group shares makes a dead download's package a symlink to a
    # directory of the user who loads next, holding files named as the kernel's are.
    outside = tmp_path / "project/tensor_tricks"
    outside.mkdir(parents=True)
    (outside / "blob.bin").write_bytes(BLOB[: 1 << 20])
    (outside / "helpers.py").write_text("# the user's own work\n")
    host = os.uname().nodename
    staging = cache_dir / f"kernels/{REPO}/v1/.staging-{VARIANT}.0123abcd.{DEAD_PID}.{host}"
    staging.mkdir(parents=True)
    (staging / "tensor_tricks").symlink_to(outside)
    run_python(KILLABLE)
    assert (outside / "blob.bin").read_bytes() == BLOB[: 1 << 20]
    assert (outside / "helpers.py").read_text() == "# the user's own work\n"
    assert ranges(blob_kernel, "blob.bin") == [None]


def test_a_dead_stagings_file_of_another_user_is_not_taken_into_the_entry(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    # Its owner could rewrite it once it was verified: the entry's files are this user's.
    needs_root()
    helpers = SMALL_FILES["tensor_tricks/helpers.py"]
    host = os.uname().nodename
    staging = cache_dir / f"kernels/{REPO}/v1/.staging-{VARIANT}.0123abcd.{DEAD_PID}.{host}"
    (staging / "tensor_tricks").mkdir(parents=True)
    (staging / "tensor_tricks/helpers.py").write_bytes(helpers)
    os.chown(staging / "tensor_tricks/helpers.py", NOBODY, NOBODY)
    run_python(KILLABLE)
    entry = cache_dir / f"kernels/{REPO}/v1/{VARIANT}"
    assert {p.stat().st_uid for p in entry.rglob("*")} == {os.geteuid()}
    assert blob_kernel.gets("helpers.py")


def partial_dir_leading_to(cache_dir: Path, outside: Path) -> None:
    """Make the directory that keeps acme/tensor-tricks v1's partial files a symlink to
    ``outside``, as a neighbour in a cache a group shares may (the group writes there)."""
    version_dir = cache_dir / f"kernels/{REPO}/v1"
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / f".partial-{VARIANT}").symlink_to(outside)


def test_a_kept_directory_leading_out_of_the_cache_has_nothing_taken_from_it(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    # A store of the user's that names files by their sha256, as the Hugging Face cache's
    # blobs/ does, holding a file of the kernel.
    blobs = tmp_path / "hub/blobs"
    blobs.mkdir(parents=True)
    helpers = SMALL_FILES["tensor_tricks/helpers.py"]
    stored = blobs / hashlib.sha256(helpers).hexdigest()
    stored.write_bytes(helpers)
    partial_dir_leading_to(cache_dir, blobs)
    fk.get_kernel(REPO, version=1)
    assert stored.read_bytes() == helpers
    assert blob_kernel.gets("helpers.py")


def test_a_kept_directory_leading_out_of_the_cache_has_nothing_moved_there(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    partial_dir_leading_to(cache_dir, elsewhere)
    blob_kernel.inject(BLOB_PATH, *[drop_after(1 << 20)] * 6)  # every attempt breaks off
    with pytest.raises(TransportError, match="broke off 6 times"):
        fk.get_kernel(REPO, version=1)
    assert list(elsewhere.iterdir()) == []
    # The symlink made way for a directory of the cache, where the part received is kept
    # for the next load to continue.
    kept = cache_dir / f"kernels/{REPO}/v1/.partial-{VARIANT}"
    assert not kept.is_symlink() and (kept / BLOB_DIGEST.hex()).stat().st_size == 1 << 20
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin")[-1] == f"bytes={1 << 20}-"


SWAP_AS_IT_MOVES = """
import os, sys
def swap(event, args, planted={kept!r} + ".neighbour's"):
    moving = event == "os.rename" and os.path.basename(args[0]) == os.path.basename({kept!r})
    if moving and os.stat({kept!r}).st_uid == 0:
        with open(planted, "wb") as file:
            file.write({data!r})
        os.chown(planted, {nobody}, {nobody})
        os.chmod(planted, 0o666)
        os.rename(planted, {kept!r})
sys.addaudithook(swap)
"""


def test_a_kept_file_swapped_for_another_users_as_it_moves_is_not_continued(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    # A neighbour in a cache a group shares puts a file of its own, writable by it, in
    # place of a kept file the user's load has just found to be the user's: its owner
    # could rewrite it once verified. The audit hook swaps it as the move begins.
    needs_root()
    helpers = SMALL_FILES["tensor_tricks/helpers.py"]
    kept = plant_partial(cache_dir, VARIANT, hashlib.sha256(helpers).digest())
    kept.write_bytes(helpers)
    run_python(SWAP_AS_IT_MOVES.format(kept=str(kept), data=helpers, nobody=NOBODY) + KILLABLE)
    entry = cache_dir / f"kernels/{REPO}/v1/{VARIANT}"
    assert {p.stat().st_uid for p in entry.rglob("*")} == {os.geteuid()}
    assert blob_kernel.gets("helpers.py")


PLANT_AS_IT_MOVES = """
import os, sys
def swap(event, args):
    moving = event == "os.rename" and os.path.basename(args[0]) == os.path.basename({kept!r})
    if moving and os.path.isfile({kept!r}) and not os.path.islink({kept!r}):
        os.unlink({kept!r})
        {plant}
sys.addaudithook(swap)
"""


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_kept_file_swapped_as_it_moves_for_a_symlink_or_a_fifo_is_fetched_anew(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path, planted: str
) -> None:
    # A neighbour in a cache a group shares puts a symlink to a file of the user's, or a
    # FIFO, in place of a kept file as the user's load moves it: the audit hook swaps it.
    helpers = SMALL_FILES["tensor_tricks/helpers.py"]
    kept = plant_partial(cache_dir, VARIANT, hashlib.sha256(helpers).digest())
    kept.write_bytes(helpers[:10])  # an interrupted download's first bytes
    target = tmp_path / "notes.txt"
    target.write_text("the user's own file\n")
    plant = {
        "symlink": f"os.symlink({str(target)!r}, {str(kept)!r})",
        "fifo": f"os.mkfifo({str(kept)!r})",
    }
    hook = PLANT_AS_IT_MOVES.format(kept=str(kept), plant=plant[planted])
    run_python(hook + KILLABLE, timeout=60)  # reading a FIFO would block the load forever
    assert target.read_text() == "the user's own file\n"
    cached = cache_dir / f"kernels/{REPO}/v1/{VARIANT}/tensor_tricks/helpers.py"
    assert cached.is_file() and not cached.is_symlink() and cached.read_bytes() == helpers
    assert ranges(blob_kernel, "helpers.py") == [None]  # from byte 0: nothing continued


def test_two_torch_builds_share_one_cache(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1, [local_variant(), "torch-cuda"])
    as_cuda = (
        "import flashhub_kernels._variants.system as s\n"
        "from flashhub_kernels._variants.system import SystemInfo\n"
        "s.detect_system = lambda: SystemInfo((2, 12), True, 'cuda', 'cu126', 'x86_64', 'linux')\n"
        "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
    )
    as_cpu = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
    for code, variant in [
        (as_cuda, "torch-cuda"),
        (as_cpu, local_variant()),
        (as_cuda, "torch-cuda"),
    ]:
        assert run_python(code).strip().endswith(variant)
    entries = sorted(
        p.name
        for p in (cache_dir / "kernels/acme/tensor-tricks/v1").iterdir()
        if not p.name.startswith(".")
    )
    assert entries == sorted([local_variant(), "torch-cuda", "variants-index.json"])


FULL_DISK_AT = """
import resource, signal, sys
import flashhub_kernels as fk
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))  # no file past the limit
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except fk.errors.CacheError as exc:
    print(type(exc).__name__, isinstance(exc, ImportError), exc)
"""
FULL_DISK = FULL_DISK_AT.format(limit=1 << 20)


def test_a_full_disk_is_a_cache_error_not_a_transfer_to_retry(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    # RLIMIT_FSIZE makes the 3 MiB blob fail to write as a full disk would, for real.
    output = run_code(FULL_DISK, env=dict(os.environ)).stdout
    assert output.startswith("CacheError True cannot write ")
    assert "blob.bin" in output and "FLASHHUB_CACHE_DIR" in output
    assert blob_kernel.gets("blob.bin") == [f"/{BLOB_PATH}"]  # no resume, no other mirror
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    assert not (version_dir / VARIANT).exists()
    assert [p.name for p in version_dir.iterdir() if p.name.startswith(".staging-")] == []


def test_a_disk_full_once_the_files_are_in_names_the_cache_directory(
    cdn: CdnServer, cache_dir: Path
) -> None:
    # Every file fits under the limit; the manifest, written beside them last, does not.
    files = kernel_files("tensor_tricks", "full")
    digests = {path: b64sha256(data) for path, data in files.items()}
    manifest = {"digest": {"files": digests}, "padding": "x" * (128 << 10)}
    write_variant(cdn.root, REPO, 1, VARIANT, files, manifest=manifest)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')
    output = run_code(FULL_DISK_AT.format(limit=64 << 10), env=dict(os.environ)).stdout
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    assert output.startswith(f"CacheError True cannot write {version_dir}/.staging-")
    assert "FLASHHUB_CACHE_DIR" in output
    assert not (version_dir / VARIANT).exists()
    assert [p.name for p in version_dir.iterdir() if p.name.startswith(".staging-")] == []


def test_a_failed_download_keeps_what_arrived_and_the_next_load_continues_it(
    blob_kernel: CdnServer, cache_dir: Path
) -> None:
    blob_kernel.inject(BLOB_PATH, *[drop_after(1 << 20)] * 6)  # every attempt breaks off
    with pytest.raises(TransportError, match="broke off 6 times"):
        fk.get_kernel(REPO, version=1)
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    assert not (version_dir / VARIANT).exists()
    kept = list(version_dir.glob(".partial-*/*"))
    assert max(p.stat().st_size for p in kept) == 1 << 20  # the blob, and any small file done
    blob_kernel.clear_log()
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [f"bytes={1 << 20}-"]
    # Small files kept complete are not fetched again (5 files: 4 small and the blob).
    files = [p for p in blob_kernel.gets() if "/build/" in p and not p.endswith("metadata.json")]
    assert len(files) == 5 - (len(kept) - 1)
    assert not list(version_dir.glob(".partial-*"))


def test_a_host_that_ignores_range_and_cuts_every_body_says_each_try_started_over(
    blob_kernel: CdnServer,
) -> None:
    # Every answer is the whole file (200: Range ignored), cut at the same byte, as a
    # proxy with a body-size cap cuts a host's answers.
    blob_kernel.inject(BLOB_PATH, *[drop_after(1 << 20)] * 6)
    result = flashhub("-v", "get", REPO, "--version", "1")
    assert result.returncode == 1
    error = " ".join(result.stderr.split())
    assert "the server answered the range requests with 200 (the whole file: no resume" in error
    assert "so each try started over from byte 0" in error
    assert "supports Range requests" in error and "(docs/hosting.md, 'Range requests')" in error
    assert "check the network" not in error
    assert error.count("ignoring Range: the download starts over from byte 0") == 5
    assert error.count("asking for the rest from there") == 1  # after the first, whole answer
    assert ranges(blob_kernel, "blob.bin") == [None] + [f"bytes={1 << 20}-"] * 5


def test_a_kept_file_takes_the_disk_space_of_what_arrived_not_what_was_reserved(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_blob_kernel(cdn.root, BLOB, with_sizes=True)  # its 3 MiB are reserved at the start
    cdn.inject(BLOB_PATH, *[drop_after(1 << 20)] * 6)  # every attempt breaks off
    with pytest.raises(TransportError, match="broke off 6 times"):
        fk.get_kernel(REPO, version=1)
    kept = cache_dir / f"kernels/{REPO}/v1/.partial-{VARIANT}" / BLOB_DIGEST.hex()
    assert kept.stat().st_size == 1 << 20
    assert kept.stat().st_blocks * 512 < 2 << 20


@pytest.mark.parametrize("outside", ["a first part of the file", "the whole file"])
def test_a_kept_file_hard_linked_elsewhere_is_replaced_not_written_through(
    blob_kernel: CdnServer, cache_dir: Path, tmp_path: Path, outside: str
) -> None:
    victim = tmp_path / "victim.bin"
    victim.write_bytes(BLOB[:1000] if outside.startswith("a first") else BLOB)
    before = victim.read_bytes()
    os.link(victim, plant_partial(cache_dir, VARIANT, BLOB_DIGEST))
    blob = Path(fk.get_kernel(REPO, version=1).__file__).parent / "blob.bin"
    assert victim.read_bytes() == before  # not appended to, truncated or rewritten
    assert blob.read_bytes() == BLOB
    assert blob.stat().st_nlink == 1  # the cache holds its own copy, not the outside file
    assert ranges(blob_kernel, "blob.bin") == [None]  # the linked bytes were not resumed


def test_a_cache_that_cannot_be_created_is_a_cache_error(
    blob_kernel: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory")
    monkeypatch.setenv("FLASHHUB_CACHE_DIR", str(in_the_way / "cache"))
    with pytest.raises(CacheError, match="cannot write") as info:
        fk.get_kernel(REPO, version=1)
    assert isinstance(info.value, ImportError) and "FLASHHUB_CACHE_DIR" in str(info.value)


def test_a_server_that_hangs_up_every_64_kib_but_honours_range_still_delivers(
    blob_kernel: CdnServer,
) -> None:
    piece = 64 << 10
    blob_kernel.inject(BLOB_PATH, *[drop_every(piece)] * (len(BLOB) // piece))
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert ranges(blob_kernel, "blob.bin") == [None] + [
        f"bytes={offset}-" for offset in range(piece, len(BLOB), piece)
    ]


@pytest.mark.parametrize("total", [None, "*"], ids=["total", "unknown-total"])
@pytest.mark.parametrize("with_sizes", [True, False], ids=["sizes", "no-sizes"])
def test_an_edge_that_caps_the_size_of_a_range_delivers_the_file_in_parts(
    cdn: CdnServer, with_sizes: bool, total: str | None
) -> None:
    write_blob_kernel(cdn.root, BLOB, with_sizes=with_sizes)
    piece = 1 << 20
    # The whole-file answer breaks off; each Range answer is a 206 of at most 1 MiB,
    # whose Content-Range gives the file's size, or "*" (unknown).
    cdn.inject(BLOB_PATH, drop_after(1000), *[capped_range(piece, total=total)] * 3)
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    continued = [f"bytes={offset}-" for offset in range(1000, len(BLOB), piece)]
    # A "*" total is the size metadata.json lists; without one, the part is taken for
    # the rest of the file, which fails the digest and is fetched again whole.
    whole_again = total == "*" and not with_sizes
    assert ranges(cdn, "blob.bin") == (
        [None, continued[0], None] if whole_again else [None, *continued]
    )


# -- bounded transfers: FLASHHUB_MAX_FILE_BYTES when the manifest states no size -------------

DOES_NOT_HANG = 60.0  # seconds; an endless body must be cut, not read to its end


def cache_files(cache_dir: Path) -> list[Path]:
    return [p for p in cache_dir.rglob("*") if p.is_file()]


def test_an_endless_body_is_cut_at_flashhub_max_file_bytes(
    blob_kernel: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cap = 4 << 20  # above the 3 MiB blob
    monkeypatch.setenv("FLASHHUB_MAX_FILE_BYTES", str(cap))
    blob_kernel.inject(BLOB_PATH, endless())
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert time.monotonic() - start < DOES_NOT_HANG
    message = str(info.value)
    assert "blob.bin" in message and f"runs past {cap} bytes" in message
    assert "hint: if the kernel really ships a file this large, raise FLASHHUB_MAX_FILE_BYTES" in (
        message
    )
    assert not (cache_dir / f"kernels/acme/tensor-tricks/v1/{VARIANT}").exists()
    assert max(p.stat().st_size for p in cache_files(cache_dir)) <= cap
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB  # nothing broken was kept


def test_an_endless_body_gives_way_to_the_next_mirror(
    blob_kernel: CdnServer, make_cdn: MakeCdn, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy = make_cdn()  # the same tree
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{blob_kernel.url},{healthy.url}")
    monkeypatch.setenv("FLASHHUB_MAX_FILE_BYTES", str(4 << 20))
    blob_kernel.inject(BLOB_PATH, endless())
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB
    assert healthy.gets("blob.bin") == [f"/{BLOB_PATH}"]  # from byte 0: nothing kept


def test_a_file_announced_past_flashhub_max_file_bytes_is_refused_before_its_body(
    blob_kernel: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHHUB_MAX_FILE_BYTES", str(1 << 20))
    with pytest.raises(TransportError, match=f"announces {len(BLOB)} bytes from byte 0"):
        fk.get_kernel(REPO, version=1)
    assert blob_kernel.gets("blob.bin") == [f"/{BLOB_PATH}"]
    assert not list(cache_dir.glob(f"kernels/acme/tensor-tricks/v1/.partial-*/{BLOB_DIGEST.hex()}"))


def test_a_file_mirror_is_bounded_by_flashhub_max_file_bytes(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "mirror"
    files = {**kernel_files("tensor_tricks", "blob"), "tensor_tricks/blob.bin": BLOB}
    write_variant(root, REPO, 1, VARIANT, files)
    monkeypatch.setenv("FLASHHUB_CDN_URL", root.as_uri())
    monkeypatch.setenv("FLASHHUB_MAX_FILE_BYTES", str(1 << 20))
    with pytest.raises(TransportError, match="FLASHHUB_MAX_FILE_BYTES"):
        fk.get_kernel(REPO, version=1)
    assert max(p.stat().st_size for p in cache_files(cache_dir)) <= 1 << 20


@pytest.mark.parametrize(
    ("what", "where"),
    [
        ("a pipe", "metadata.json"),
        ("a pipe", "tensor_tricks/blob.bin"),
        ("a device", "tensor_tricks/blob.bin"),
        ("a directory", "metadata.json"),
    ],
)
def test_a_file_mirror_serves_files_only_and_never_waits_on_a_pipe(
    tmp_path: Path, cache_dir: Path, what: str, where: str
) -> None:
    # Whoever can write the mirror's tree plants one: opening a pipe would wait for a
    # writer forever, and a device (/dev/zero) never ends. A child, so that a load that
    # waits on the pipe fails the test instead of hanging the suite.
    root = tmp_path / "mirror"
    files = {**kernel_files("tensor_tricks", "blob"), "tensor_tricks/blob.bin": BLOB}
    planted = write_variant(root, REPO, 1, VARIANT, files) / where
    planted.unlink()
    if what == "a pipe":
        os.mkfifo(planted)
    elif what == "a device":
        planted.symlink_to("/dev/zero")
    else:
        planted.mkdir()
    (root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')
    env = {**os.environ, "FLASHHUB_CDN_URL": root.as_uri()}
    load = f"import flashhub_kernels as fk; fk.get_kernel({REPO!r}, version=1)"
    result = run_code(load, env=env, timeout=DOES_NOT_HANG)
    assert result.returncode == 1
    assert f"TransportError: could not fetch '{REPO}/v1/build/{VARIANT}/{where}'" in result.stderr
    assert f"{what}, not a regular file" in result.stderr
    assert "hint: check the file:// trees FLASHHUB_CDN_URL names" in result.stderr
    assert not list(cache_dir.glob(f"kernels/{REPO}/v1/{VARIANT}"))


# -- bounded transfers: a size the manifest states (the fetcher, given each file's size) ------


def fetch_blob(dest: Path, size: int, seen: list[int] | None = None) -> int:
    """Download the blob as a variant download does; ``seen`` gets the file's size on disk
    after every chunk written."""

    def on_bytes(_n: int) -> None:
        if seen is not None:
            seen.append(dest.stat().st_size)

    fetcher = Fetcher(get_config())
    try:
        relpath = BLOB_PATH.removeprefix("kernels/")
        return fetcher.download(relpath, dest, BLOB_DIGEST, Progress(on_bytes), size=size)
    finally:
        fetcher.close()


def test_a_content_length_other_than_the_manifests_size_is_refused_before_the_body(
    blob_kernel: CdnServer, tmp_path: Path
) -> None:
    blob_kernel.inject(BLOB_PATH, *[other_file(BLOB + b"more")] * 2)
    seen: list[int] = []
    with pytest.raises(IntegrityError, match=f"lists {len(BLOB)} bytes in all") as info:
        fetch_blob(tmp_path / "blob.bin", len(BLOB), seen)
    assert isinstance(info.value, ImportError) and "hint:" in str(info.value)
    assert seen == [] and not (tmp_path / "blob.bin").exists()
    assert ranges(blob_kernel, "blob.bin") == [None, None]  # once more from scratch, as a digest


def test_a_resume_announcing_another_length_starts_over(
    blob_kernel: CdnServer, tmp_path: Path
) -> None:
    (tmp_path / "blob.bin").write_bytes(BLOB[:1000])  # kept from an interrupted download
    blob_kernel.inject(BLOB_PATH, other_file(BLOB[:-1]))  # a 206 one byte short
    assert fetch_blob(tmp_path / "blob.bin", len(BLOB)) == len(BLOB)
    assert (tmp_path / "blob.bin").read_bytes() == BLOB
    assert ranges(blob_kernel, "blob.bin") == ["bytes=1000-", None]


def test_a_body_running_past_the_manifests_size_is_cut_and_refused(
    blob_kernel: CdnServer, tmp_path: Path
) -> None:
    blob_kernel.inject(BLOB_PATH, endless(), endless())
    seen: list[int] = []
    start = time.monotonic()
    with pytest.raises(IntegrityError, match=f"runs past the {len(BLOB)} bytes metadata.json"):
        fetch_blob(tmp_path / "blob.bin", len(BLOB), seen)
    assert time.monotonic() - start < DOES_NOT_HANG
    assert seen and max(seen) <= len(BLOB)
    assert not (tmp_path / "blob.bin").exists()


def test_a_file_mirror_holding_another_size_is_refused(
    blob_kernel: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHHUB_CDN_URL", blob_kernel.root.as_uri())
    with pytest.raises(IntegrityError, match="announces"):
        fetch_blob(tmp_path / "blob.bin", len(BLOB) + 1)
    assert not (tmp_path / "blob.bin").exists()
    assert fetch_blob(tmp_path / "blob.bin", len(BLOB)) == len(BLOB)


# -- documents that break Python's own JSON parser, paths a file system cannot hold ---------

HUGE_INT = "1" * 5000  # over Python's 4300-digit limit on int()
DEEP = "[" * 50_000 + "]" * 50_000  # far past the interpreter's recursion limit


def fetched_variant_files(cdn: CdnServer) -> list[str]:
    return [p for p in cdn.gets() if "/build/" in p and not p.endswith("metadata.json")]


@pytest.mark.parametrize("payload", [HUGE_INT, DEEP], ids=["5000-digit-int", "nested-50000-deep"])
@pytest.mark.parametrize("document", ["metadata.json", "variants.json", "versions.json"])
def test_json_that_breaks_pythons_parser_is_refused(
    cdn: CdnServer, cache_dir: Path, document: str, payload: str
) -> None:
    write_kernel(cdn.root, REPO, 1, [VARIANT])
    version_dir = cdn.root / f"kernels/{REPO}/v1"
    if document == "metadata.json":
        manifest = version_dir / f"build/{VARIANT}/metadata.json"
        manifest.write_text(manifest.read_text()[:-1] + f', "x": {payload}}}')
    elif document == "variants.json":
        (version_dir / "variants.json").write_text(f'["{VARIANT}", {payload}]')
    else:
        (version_dir.parent / "versions.json").write_text(f"[1, {payload}]")
    with pytest.raises(ManifestError, match=document.replace(".", r"\.")):
        if document == "versions.json":
            fk.has_kernel(REPO)  # get_kernel with a version never reads versions.json
        else:
            fk.get_kernel(REPO, version=1)
    assert fetched_variant_files(cdn) == []
    assert not (cache_dir / f"kernels/acme/tensor-tricks/v1/{VARIANT}").exists()


# A load records what a kernel's metadata.json asks of it (its provenance with its
# python-depends) and reads that record again on every warm import, maybe from a deeper
# call stack than the one that parsed the document.
LOAD_FRAMES_DEEP = """
import flashhub_kernels as fk

def load(frames):
    if frames:
        return load(frames - 1)
    try:
        fk.get_kernel("acme/tensor-tricks", version=1)
        return "loaded"
    except Exception as exc:
        return type(exc).__name__

print(load({frames}))
"""


def test_a_metadata_json_nested_within_pythons_parser_is_refused_not_cached(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """Deep enough for the parser at the cold load's stack, not at a warm import's deeper
    one: refused by a bound of its own, so nothing is cached that a warm import chokes on."""
    write_kernel(cdn.root, REPO, 1, [VARIANT])
    manifest = cdn.root / f"kernels/{REPO}/v1/build/{VARIANT}/metadata.json"
    levels = sys.getrecursionlimit() - 40
    nested = "[" * levels + "]" * levels
    provenance = f'{{"kernel-builder": {{"version": "0.17", "x": {nested}}}}}'
    manifest.write_text(
        manifest.read_text()[:-1] + f', "python-depends": ["json"], "provenance": {provenance}}}'
    )
    outcomes = [run_python(LOAD_FRAMES_DEEP.format(frames=n)).strip() for n in (0, 100)]
    assert outcomes == ["ManifestError", "ManifestError"]
    assert fetched_variant_files(cdn) == []
    assert not (cache_dir / f"kernels/acme/tensor-tricks/v1/{VARIANT}").exists()


@pytest.mark.parametrize(
    "path",
    [
        "tensor_tricks/" + "a" * 256 + ".py",
        "tensor_tricks/" + "\u00e9" * 128,  # 128 characters, but 256 bytes of UTF-8
        "tensor_tricks/\ud800.py",  # a lone surrogate: no file name encodes it
        ".flashhub-receipt.json/x",
        "metadata.json/x",
        "METADATA.JSON/x",  # one name on a case-insensitive file system
    ],
    ids=[
        "name-over-255-bytes",
        "utf8-name-over-255-bytes",
        "lone-surrogate",
        "under-receipt",
        "under-manifest",
        "under-manifest-other-case",
    ],
)
def test_manifest_paths_the_cache_cannot_hold_are_refused_before_any_file(
    cdn: CdnServer, cache_dir: Path, path: str
) -> None:
    files = kernel_files("tensor_tricks", "x")
    listed = {**{p: b64sha256(d) for p, d in files.items()}, path: b64sha256(b"x")}
    write_variant(cdn.root, REPO, 1, VARIANT, files, manifest={"digest": {"files": listed}})
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')
    with pytest.raises(ManifestError):
        fk.get_kernel(REPO, version=1)
    assert fetched_variant_files(cdn) == []
    assert not (cache_dir / f"kernels/acme/tensor-tricks/v1/{VARIANT}").exists()


def test_a_load_checks_the_sizes_in_metadata_json(blob_kernel: CdnServer, cache_dir: Path) -> None:
    write_blob_kernel(blob_kernel.root, BLOB, with_sizes=True)
    blob_kernel.inject(BLOB_PATH, endless(), endless())
    with pytest.raises(IntegrityError, match="runs past the"):
        fk.get_kernel(REPO, version=1)
    assert not (cache_dir / f"kernels/acme/tensor-tricks/v1/{VARIANT}").exists()
    assert cached_blob(fk.get_kernel(REPO, version=1)) == BLOB  # the honest answer loads
