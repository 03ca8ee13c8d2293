"""A CDN in an object store: ``flashhub publish --out s3://bucket/prefix`` and
``FLASHHUB_CDN_URL=s3://bucket/prefix``, against a real S3-compatible server on loopback
(moto's server mode, started once for the module, checking request signatures)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import run_python
from flashhub_kernels import get_kernel
from flashhub_kernels._config import get_config
from flashhub_kernels._network.fsspec_mirror import FsspecMirror
from flashhub_kernels._network.hashing import HashingWriter
from flashhub_kernels._network.mirrors import MirrorFailed
from flashhub_kernels._publish import publish
from flashhub_kernels._publish.destination import open_destination
from flashhub_kernels._publish.layout import SourceFile
from flashhub_kernels._signing.signing_keys import generate_signing_key
from flashhub_kernels.errors import IntegrityError, PublishError, TransportError
from support.builds import CPU, PY_PKG, REPO, UNIVERSAL, make_kernel
from support.cli_runner import PYTHON_M_FLASHHUB, flashhub, ok_json
from support.hub_server import HubServer, builder_variant
from support.preloaded import run_code
from support.s3_server import S3Server

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

PKG = f"kernels/{REPO}"
EXTRA = "pip install 'flashhub-kernels[s3]'"
# Variants enough for a publish of some length: 4 variants, 26 objects in all, signed.
MANY = (UNIVERSAL, CPU, "torch212-cxx11-cu126-x86_64-linux", "torch-cuda")
NETWORK_LIBRARIES = ("fsspec", "s3fs", "aiobotocore", "botocore", "boto3", "requests")


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server(tmp_path_factory.mktemp("moto") / "moto.log").start()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def aws_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point every client of the test (child processes too) at the server, with its key."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3.env(tmp_path).items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def bucket(s3: S3Server) -> str:
    """A new, empty bucket."""
    return s3.new_bucket()


@pytest.fixture
def universal(tmp_path: Path) -> Path:
    """A build of one variant that loads on any machine (torch-universal)."""
    return make_kernel(tmp_path / "kernel", (UNIVERSAL,))


def publish_cli(build: Path, out: str, *extra: str, version: int = 1) -> Any:
    return flashhub(
        "publish", build, "--repo-id", REPO, "--version", str(version), "--out", out, *extra
    )


def objects(s3: S3Server, bucket: str) -> dict[str, str]:
    """Every object in ``bucket`` and its ETag."""
    listed = s3.s3().list_objects_v2(Bucket=bucket).get("Contents", [])
    return {item["Key"]: item["ETag"] for item in listed}


LOAD = (
    "import torch, flashhub_kernels as fk\n"
    f"k = fk.get_kernel({REPO!r}, version=1)\n"
    "print(k.double(torch.tensor(21)).item(), k.__file__)\n"
)


# -- publish, then load --------------------------------------------------------------------


def test_publish_to_a_bucket_then_load_from_it_and_warm_without_the_network(
    s3: S3Server, bucket: str, universal: Path
) -> None:
    result = publish_cli(universal, f"s3://{bucket}/cdn", "--json")
    report = ok_json(result)
    assert report["version_dir"] == f"s3://{bucket}/cdn/{PKG}/v1"
    assert report["versions"] == [1] and report["noop"] is False
    listed = objects(s3, bucket)
    assert sorted(listed) == sorted(f"cdn/{rel}" for rel in report["written"])
    versions = s3.s3().get_object(Bucket=bucket, Key=f"cdn/{PKG}/versions.json")["Body"].read()
    assert json.loads(versions) == [1]

    env = {"FLASHHUB_CDN_URL": f"s3://{bucket}/cdn"}
    value, path = run_python(LOAD, env=env).split()
    assert value == "42" and Path(path).is_relative_to(get_config().cache_dir)

    answered = len(s3.requests())
    warm = LOAD + "import sys\nprint(sorted(m for m in sys.modules if m.split('.')[0] in "
    warm += f"{NETWORK_LIBRARIES!r}))\n"
    assert run_python(warm, env=env, torch_only=True).splitlines()[-1] == "[]"
    assert len(s3.requests()) == answered  # not one request


# A tuned config as vllm's fused MoE kernels ship hundreds of (kernels-community/vllm-moe):
# a name with '=', ',', '[', ']' and a space, which a URL spells quoted.
TUNED_CONFIG = "N=1536,K=7168,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128, 128].json"


def test_a_file_whose_name_a_url_quotes_loads_from_a_bucket(
    s3: S3Server, bucket: str, universal: Path
) -> None:
    configs = universal / "build" / UNIVERSAL / PY_PKG / "configs"
    configs.mkdir()
    (configs / TUNED_CONFIG).write_text('{"1": {"BLOCK_SIZE_M": 16}}')
    ok_json(publish_cli(universal, f"s3://{bucket}/cdn", "--json"))
    code = (
        "import json, os, flashhub_kernels as fk\n"
        f"k = fk.get_kernel({REPO!r}, version=1)\n"
        f"path = os.path.join(os.path.dirname(k.__file__), 'configs', {TUNED_CONFIG!r})\n"
        "print(json.load(open(path))['1']['BLOCK_SIZE_M'])\n"
    )
    assert run_python(code, env={"FLASHHUB_CDN_URL": f"s3://{bucket}/cdn"}).split() == ["16"]


def test_mirror_from_the_hub_publishes_into_a_bucket_that_then_serves_loads(
    s3: S3Server, bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("huggingface_hub")
    files = {
        "__init__.py": b"def double(x):\n    return x * 2\n",
        "_ops.py": b"MARKER = 'from the hub'\n",
    }
    hub = HubServer().start()
    try:
        hub.push(REPO, builder_variant(UNIVERSAL, files, name="my-kern"), branch="v1")
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        out = f"s3://{bucket}/cdn"
        report = ok_json(flashhub("mirror", REPO, "--version", "1", "--out", out, "--json"))
    finally:
        hub.stop()
    assert report["version_dir"] == f"{out}/{PKG}/v1"
    assert f"cdn/{PKG}/versions.json" in objects(s3, bucket)

    value, _path = run_python(LOAD, env={"FLASHHUB_CDN_URL": out}).split()
    assert value == "42"


def test_the_same_publish_again_is_a_noop_and_a_changed_one_is_refused(
    s3: S3Server, bucket: str, universal: Path
) -> None:
    out = f"s3://{bucket}/cdn"
    ok_json(publish_cli(universal, out, "--json"))
    before = objects(s3, bucket)
    answered = len(s3.requests())

    again = ok_json(publish_cli(universal, out, "--json"))
    assert again["noop"] is True and again["written"] == []
    assert [r for r in s3.requests()[answered:] if r[0] in ("PUT", "POST", "DELETE")] == []

    (universal / "build" / UNIVERSAL / PY_PKG / "helpers.py").write_text("changed = True\n")
    refused = publish_cli(universal, out)
    assert refused.returncode == 1
    assert f"already published at s3://{bucket}/cdn/{PKG}/v1 with different content" in (
        refused.stderr
    )
    assert "2 changed, e.g. build/torch-universal/my_kern/helpers.py" in refused.stderr
    assert "--version 2" in refused.stderr
    assert objects(s3, bucket) == before


def test_force_replaces_a_version_in_the_store_and_drops_its_stale_files(
    s3: S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = f"s3://{bucket}"
    publish(make_kernel(tmp_path / "two", (UNIVERSAL, CPU)), repo_id=REPO, version=1, out=out)
    one = make_kernel(tmp_path / "one", (UNIVERSAL,))
    helpers = one / "build" / UNIVERSAL / PY_PKG / "helpers.py"
    helpers.write_text(helpers.read_text() + "\nMARK = 'replaced'\n")

    report = publish(one, repo_id=REPO, version=1, out=out, force=True)
    assert report.replaced
    assert [key for key in objects(s3, bucket) if f"/{CPU}/" in key] == []
    monkeypatch.setenv("FLASHHUB_CDN_URL", out)
    assert get_kernel(REPO, version=1).helpers.MARK == "replaced"


def test_the_files_of_a_publish_that_stopped_before_its_documents_are_replaced(
    s3: S3Server, bucket: str, universal: Path
) -> None:
    """Nothing names them, so no reader can have used them: no --force is needed."""
    stray = f"cdn/{PKG}/v1/build/{UNIVERSAL}/{PY_PKG}/stray.py"
    s3.s3().put_object(Bucket=bucket, Key=stray, Body=b"left by a publish that stopped")
    report = publish(universal, repo_id=REPO, version=1, out=f"s3://{bucket}/cdn")
    assert not report.replaced and report.versions == (1,)
    assert stray not in objects(s3, bucket)


def test_a_build_file_that_changes_while_it_goes_up_is_refused_and_removed(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    source = tmp_path / "helpers.py"
    source.write_bytes(b"rebuilt meanwhile")
    scanned = SourceFile(source, hashlib.sha256(b"as it was scanned").digest(), 17)
    destination = open_destination(f"s3://{bucket}/cdn")
    with pytest.raises(PublishError, match="changed while it was being published"):
        destination.write_version(f"{PKG}/v1", [("helpers.py", scanned)], replace=False)
    assert objects(s3, bucket) == {}


# -- a reader while the version goes up --------------------------------------------------


def unreachable(exists: Any, read: Any, manifests: list[str], base: str) -> list[str]:
    """What a reader of the kernel at ``base`` could find listed but not fetch: a version
    versions.json lists without its variants.json, a variant variants.json lists without
    its metadata.json, a file one of ``manifests`` (those there) lists that is missing;
    and a document there without its signatures.

    ``read(key)`` is the object's bytes or ``None``; ``exists(key)`` whether it is there.
    Each document is read before what it names is looked for, so on a store that only
    grows a reader's view can only have grown in between."""
    problems = []
    versions = read(f"{base}/versions.json")
    for version in json.loads(versions) if versions is not None else []:
        if not exists(f"{base}/v{version}/variants.json"):
            problems.append(f"versions.json lists v{version} without its variants.json")
    variants = read(f"{base}/v1/variants.json")
    for variant in json.loads(variants) if variants is not None else []:
        if not exists(f"{base}/v1/build/{variant}/metadata.json"):
            problems.append(f"variants.json lists {variant} without its metadata.json")
    documents = [f"{base}/versions.json", f"{base}/v1/variants.json", *manifests]
    problems += [
        f"{key} without its .sig" for key in documents if exists(key) and not exists(f"{key}.sig")
    ]
    for key in manifests:
        listed = json.loads(read(key))["digest"]["files"]
        problems += [
            f"{key} lists the missing {rel}"
            for rel in listed
            if not exists(f"{key.rpartition('/')[0]}/{rel}")
        ]
    return problems


def test_a_reader_during_a_publish_never_sees_a_listed_version_or_file_missing(
    s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    client = s3.s3()
    base = f"cdn/{PKG}"
    missing = (client.exceptions.NoSuchKey, client.exceptions.ClientError)

    def read(key: str) -> bytes | None:
        try:
            return bytes(client.get_object(Bucket=bucket, Key=key)["Body"].read())
        except missing:
            return None

    def exists(key: str) -> bool:
        try:
            client.head_object(Bucket=bucket, Key=key)
        except missing:
            return False
        return True

    def look() -> list[str]:
        keys = [item["Key"] for item in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
        # versions.json first, then what it names: a look never goes back in time
        manifests = [k for k in keys if k.endswith("/metadata.json")]
        return unreachable(exists, read, manifests, base)

    problems: list[str] = []
    published = threading.Event()
    looks = []

    def poll() -> None:
        while not published.is_set():
            problems.extend(look())
            looks.append(1)

    poller = threading.Thread(target=poll)
    answered = len(s3.requests())
    poller.start()
    try:
        publish(
            make_kernel(tmp_path / "kernel", MANY),
            repo_id=REPO,
            version=1,
            out=f"s3://{bucket}/cdn",
            sign=generate_signing_key(),
        )
    finally:
        published.set()
        poller.join()
    assert problems == []
    # The last look saw the whole version, so looking finds what is listed.
    assert look() == [] and json.loads(read(f"{base}/versions.json") or b"") == [1]
    assert len(json.loads(read(f"{base}/v1/variants.json") or b"[]")) == len(MANY)
    assert looks

    # Every state the store went through, one write at a time, as the server logged them.
    final = {key: read(key) for key in objects(s3, bucket)}
    writes = [
        path.removeprefix(f"/{bucket}/")
        for method, path, status in s3.requests()[answered:]
        if method == "PUT" and path.startswith(f"/{bucket}/") and status == 200
    ]
    assert sorted(writes) == sorted(final)  # each object written once
    for count in range(len(writes) + 1):
        there = set(writes[:count])
        manifests = [key for key in there if key.endswith("/metadata.json")]

        def state(key: str, there: set[str] = there) -> bytes | None:
            return final[key] if key in there else None

        seen = unreachable(there.__contains__, state, manifests, base)
        assert seen == [], f"after {writes[count - 1] if count else 'nothing'}: {seen}"
    assert writes[-2:] == [f"{base}/versions.json.sig", f"{base}/versions.json"]
    assert writes[-4:-2] == [f"{base}/v1/variants.json.sig", f"{base}/v1/variants.json"]


# -- reading: failover, verification, resume -------------------------------------------------


def test_a_missing_bucket_fails_over_to_the_next_mirror(
    bucket: str, universal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(universal, repo_id=REPO, version=1, out=f"s3://{bucket}/cdn")
    absent = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/cdn"
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{absent},s3://{bucket}/cdn")
    assert get_kernel(REPO, version=1).double(21) == 42


def test_a_tampered_object_fails_its_digest_and_nothing_is_cached(
    s3: S3Server, bucket: str, universal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(universal, repo_id=REPO, version=1, out=f"s3://{bucket}/cdn")
    source = universal / "build" / UNIVERSAL / PY_PKG / "helpers.py"
    tampered = source.read_bytes().replace(b"x * 2", b"x * 3")  # the same size
    key = f"cdn/{PKG}/v1/build/{UNIVERSAL}/{PY_PKG}/helpers.py"
    s3.s3().put_object(Bucket=bucket, Key=key, Body=tampered)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"s3://{bucket}/cdn")
    with pytest.raises(IntegrityError, match="sha256"):
        get_kernel(REPO, version=1)
    assert not (get_config().cache_dir / PKG / "v1" / UNIVERSAL).exists()


def memory_mirror(files: dict[str, bytes]) -> FsspecMirror:
    """A mirror of fsspec's in-memory store holding ``files`` under its prefix."""
    import fsspec

    root = f"tree-{uuid.uuid4().hex[:8]}"
    store = fsspec.filesystem("memory")
    for rel, data in files.items():
        store.pipe_file(f"/{root}/kernels/{rel}", data)
    return FsspecMirror(f"memory://{root}", get_config())


@pytest.mark.parametrize(
    ("kept", "expected"),
    [
        (b"abc", b"abc3456789"),  # continued at byte 3: the bytes kept are not asked again
        (b"abcdefghijkl", b"0123456789"),  # longer than the object: started over
    ],
)
def test_a_download_continues_from_the_bytes_already_written(
    tmp_path: Path, kept: bytes, expected: bytes
) -> None:
    mirror = memory_mirror({"f.bin": b"0123456789"})
    dest = tmp_path / "f.bin"
    dest.write_bytes(kept)
    writer = HashingWriter(dest)
    try:
        mirror.download("f.bin", writer, threading.Event())
    finally:
        writer.close()
    assert dest.read_bytes() == expected


def test_a_listed_file_missing_from_the_store_fails_the_mirror(tmp_path: Path) -> None:
    mirror = memory_mirror({})
    writer = HashingWriter(tmp_path / "f.bin")
    with pytest.raises(MirrorFailed, match="missing"):
        mirror.download("f.bin", writer, threading.Event())
    writer.close()


# -- errors ----------------------------------------------------------------------------------


def child_error(code: str, env: dict[str, str] | None = None) -> str:
    """What ``code`` printed, run in a fresh process where it must fail."""
    import os

    result = run_code(code, env={**os.environ, **(env or {})})
    assert result.returncode != 0, result.stdout
    return result.stdout + result.stderr


LOAD_FAILING = (
    "import flashhub_kernels as fk\n"
    "try:\n"
    f"    fk.get_kernel({REPO!r}, version=1)\n"
    "except ImportError as exc:\n"
    "    print(type(exc).__name__, exc)\n"
    "    raise SystemExit(1)\n"
)


def test_without_the_extra_publish_and_load_say_what_to_install(
    s3: S3Server, bucket: str, universal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish(universal, repo_id=REPO, version=1, out=f"s3://{bucket}/cdn")
    monkeypatch.setitem(sys.modules, "fsspec", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"s3://{bucket}/cdn")
    with pytest.raises(TransportError, match="fsspec") as failed:
        get_kernel(REPO, version=1)
    assert f"hint: {EXTRA}" in str(failed.value)
    result = publish_cli(universal, f"s3://{bucket}/other")
    assert result.returncode == 1 and EXTRA in result.stderr and "Traceback" not in result.stderr
    assert [key for key in objects(s3, bucket) if key.startswith("other/")] == []


# A process in which the packages named by argv[1] (comma-separated, taken off argv) are
# not installed.
UNINSTALLED = """
import importlib.abc, sys

class Uninstalled(importlib.abc.MetaPathFinder):
    missing = sys.argv.pop(1).split(",")

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.missing:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Uninstalled())
"""


@pytest.mark.parametrize("missing", ["s3fs", "botocore,aiobotocore,boto3"])
def test_with_fsspec_but_not_the_rest_of_the_extra_an_import_says_what_to_install(
    s3: S3Server, bucket: str, universal: Path, missing: str
) -> None:
    # fsspec comes with torch: what a machine lacks is s3fs, or the AWS SDK below it.
    publish(universal, repo_id=REPO, version=1, out=f"s3://{bucket}/cdn")
    asked = len(s3.requests())
    module = "flashhub." + REPO.replace("-", "_").replace("/", ".") + ".v1"
    code = UNINSTALLED + f"import {module}"
    env = {**os.environ, "FLASHHUB_CDN_URL": f"s3://{bucket}/cdn"}
    imported = run_code(code, missing, env=env)
    command = run_code(
        UNINSTALLED + PYTHON_M_FLASHHUB, missing, "get", REPO, "--version", "1", env=env
    )
    assert imported.returncode == 1
    error, hint = imported.stderr.strip().splitlines()[-2:]
    assert error.startswith("flashhub_kernels.errors.TransportError: s3://")
    assert hint == f"  hint: {EXTRA}"
    assert command.returncode == 1 and command.stderr.endswith(f"  hint: {EXTRA}\n")
    assert "Traceback" not in command.stderr
    assert len(s3.requests()) == asked  # nothing was asked of the bucket
    assert not get_config().cache_dir.exists()


def test_mirror_into_a_bucket_without_the_extra_fails_before_asking_the_hub(
    bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytest.importorskip("huggingface_hub")
    hub = HubServer().start()
    try:
        hub.push(
            REPO, builder_variant(UNIVERSAL, {"__init__.py": b""}, name="my-kern"), branch="v1"
        )
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.setitem(sys.modules, "fsspec", None)  # as if it were not installed
        monkeypatch.setitem(sys.modules, "fsspec.core", None)
        out = f"s3://{bucket}/cdn"
        result = flashhub("mirror", REPO, "--version", "1", "--out", out)
    finally:
        hub.stop()
    assert result.returncode == 1 and EXTRA in result.stderr and "Traceback" not in result.stderr
    assert hub.requests == []  # not one download for a publish that cannot happen


@pytest.mark.parametrize(
    "unknown_key_id, refusal",
    [
        (False, "the secret access key does not match the access key id"),
        (True, "the store knows no such access key id"),
    ],
)
def test_refused_credentials_name_what_is_wrong_the_bucket_and_their_source_never_the_secret(
    s3: S3Server,
    bucket: str,
    universal: Path,
    monkeypatch: pytest.MonkeyPatch,
    unknown_key_id: bool,
    refusal: str,
) -> None:
    publish(universal, repo_id=REPO, version=1, out=f"s3://{bucket}/cdn")
    key_id = f"AKIA{uuid.uuid4().hex[:16].upper()}" if unknown_key_id else s3.access_key
    wrong = f"Wr0ng+{uuid.uuid4().hex}/secret"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    shown = child_error(LOAD_FAILING, {"FLASHHUB_CDN_URL": f"s3://{bucket}/cdn"})
    published = publish_cli(universal, f"s3://{bucket}/cdn", version=2)
    assert published.returncode == 1
    for text in (shown, published.stderr):
        assert f"bucket {bucket!r}" in text and f"access denied ({refusal}" in text
        assert "credentials: env AWS_ACCESS_KEY_ID" in text
        assert f"****{key_id[-4:]}" in text
        assert wrong not in text and s3.secret_key not in text
    assert "AWS_SECRET_ACCESS_KEY" in shown  # the hint says where credentials go


def test_no_credentials_at_all_is_said_so(
    bucket: str, universal: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    result = publish_cli(universal, f"s3://{bucket}/cdn")
    assert result.returncode == 1
    assert f"bucket {bucket!r}" in result.stderr and "credentials: no credentials found" in (
        result.stderr
    )


def test_a_missing_bucket_is_named_when_publishing(universal: Path) -> None:
    absent = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
    result = publish_cli(universal, f"s3://{absent}/cdn")
    assert result.returncode == 1
    assert f"the bucket {absent!r} does not exist" in result.stderr


def test_an_object_store_cdn_url_is_accepted_and_another_scheme_refused() -> None:
    from flashhub_kernels._config import parse_cdn_urls
    from flashhub_kernels.errors import ConfigError

    assert parse_cdn_urls("s3://bucket/cdn/, https://cdn.example") == (
        "s3://bucket/cdn",
        "https://cdn.example",
    )
    with pytest.raises(ConfigError, match="s3://bucket/prefix"):
        parse_cdn_urls("ftp://cdn.example")
