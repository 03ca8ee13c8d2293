"""The transport against real loopback CDNs that behave like real ones: compressed
answers, half-synced mirrors, a trickling server, connection reuse and chunked bodies.

Faults that a single request suffers (drops, 5xx, tampering) are in test_faults.py.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
import urllib3.response

import flashhub_kernels as fk
from conftest import MakeCdn, load_peak_rise, plant_partial, run_python
from flashhub_kernels._config import get_config
from flashhub_kernels._network.transport import POOL_SIZE, Fetcher
from flashhub_kernels.errors import IntegrityError, ManifestError, TransportError
from support.cdn_server import (
    CdnHandler,
    CdnServer,
    Fault,
    chunked,
    compression_bomb,
    drop_after,
    held,
    is_guess,
    slowly,
    status,
    trickle,
    trickled_headers,
)
from support.cli_runner import flashhub
from support.preloaded import start_code
from support.trees import kernel_files, local_variant, write_kernel, write_variant

REPO = "acme/tensor-tricks"
VARIANT = "torch-universal"
BLOB = bytes(range(256)) * (4 * 1024)  # 1 MiB
BUILD = f"kernels/{REPO}/v1/build/{VARIANT}"
BLOB_PATH = f"{BUILD}/tensor_tricks/blob.bin"


def publish_blob_kernel(
    root: Path, extra: dict[str, bytes] | None = None, *, with_sizes: bool = False
) -> dict[str, bytes]:
    files = {**kernel_files("tensor_tricks", "blob"), "tensor_tricks/blob.bin": BLOB}
    files.update(extra or {})
    write_variant(root, REPO, 1, VARIANT, files, with_sizes=with_sizes)
    (root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{VARIANT}"]')
    return files


def variant_dir(k: object) -> Path:
    return Path(k.__file__).parent.parent  # type: ignore[attr-defined]


def cached_files(k: object) -> dict[str, bytes]:
    root = variant_dir(k)
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and p.parent != root and "__pycache__" not in p.parts
    }


def ranges(cdn: CdnServer, suffix: str) -> list[str | None]:
    return [r.range for r in cdn.requests if r.path.endswith(suffix)]


# -- Content-Encoding -----------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_cdn_is_decoded_and_verified(
    make_cdn: MakeCdn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoding: str
) -> None:
    server = make_cdn(encoding=encoding)
    monkeypatch.setenv("FLASHHUB_CDN_URL", server.url)
    files = publish_blob_kernel(server.root)
    k = fk.get_kernel(REPO, version=1)
    assert k.marker() == "blob"
    assert cached_files(k) == files  # the decoded bytes, which the digests are over
    assert (variant_dir(k) / "metadata.json").read_bytes() == (
        server.root / BUILD / "metadata.json"
    ).read_bytes()
    assert len(server.gets("blob.bin")) == 1  # right the first time: no digest retry
    assert {r.status for r in server.requests if not is_guess(r.path)} == {200}


def brotli_stored(handler: CdnHandler, body: bytes) -> None:
    """The file as a store sends an object uploaded brotli-compressed (the bytes stand in
    for brotli's: the client must not get as far as decoding them)."""
    handler.send_simple(200, b"\x1b" + body, {"Content-Encoding": "br"})


@pytest.mark.parametrize("path", [BLOB_PATH, f"{BUILD}/metadata.json"], ids=["file", "manifest"])
def test_a_body_in_an_encoding_that_cannot_be_decoded_is_named(
    cdn: CdnServer, cache_dir: Path, path: str
) -> None:
    # An object stored brotli-compressed: the store sends its Content-Encoding whatever
    # the request asked for, and urllib3 passes through an encoding it cannot decode.
    if "br" in urllib3.response.HTTPResponse.CONTENT_DECODERS:
        pytest.skip("the brotli package is installed: urllib3 decodes br")
    publish_blob_kernel(cdn.root)
    cdn.inject(path, *[brotli_stored] * 8)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert "Content-Encoding: br, which cannot be decoded here" in str(info.value)
    assert not (cache_dir / "kernels" / REPO / "v1" / VARIANT).exists()


def encoded_as(value: str) -> Fault:
    """The file as it is, sent with ``Content-Encoding: value``."""

    def send(handler: CdnHandler, body: bytes) -> None:
        handler.send_simple(200, body, {"Content-Encoding": value})

    return send


@pytest.mark.parametrize("value", ["", "Identity", " identity , "])
@pytest.mark.parametrize("path", [BLOB_PATH, f"{BUILD}/metadata.json"], ids=["file", "manifest"])
def test_a_body_whose_content_encoding_names_no_encoding_is_taken_as_it_is(
    cdn: CdnServer, path: str, value: str
) -> None:
    # Some servers send the header empty (or "identity" in their own spelling) for a
    # body they did not encode: urllib3 hands it over as it is, and so it is verified.
    files = publish_blob_kernel(cdn.root)
    cdn.inject(path, encoded_as(value))
    k = fk.get_kernel(REPO, version=1)
    assert cached_files(k) == files
    assert [r.status for r in cdn.requests if r.path == "/" + path] == [200]


def gzipped_as(value: str) -> Fault:
    """The file gzip-compressed once for each ``gzip`` that ``value``, the
    ``Content-Encoding`` it is sent with, lists."""

    def send(handler: CdnHandler, body: bytes) -> None:
        for _ in range(value.count("gzip")):
            body = gzip.compress(body)
        handler.send_simple(200, body, {"Content-Encoding": value})

    return send


@pytest.mark.parametrize("path", [BLOB_PATH, f"{BUILD}/metadata.json"], ids=["file", "manifest"])
def test_a_body_encoded_twice_as_a_list_says_is_decoded(cdn: CdnServer, path: str) -> None:
    files = publish_blob_kernel(cdn.root)
    cdn.inject(path, gzipped_as("gzip, gzip"))
    k = fk.get_kernel(REPO, version=1)
    assert cached_files(k) == files
    assert [r.status for r in cdn.requests if r.path == "/" + path] == [200]


@pytest.mark.parametrize("value", ["identity, gzip", "gzip, identity", "gzip,"])
@pytest.mark.parametrize("path", [BLOB_PATH, f"{BUILD}/metadata.json"], ids=["file", "manifest"])
def test_a_list_of_encodings_urllib3_cannot_decode_is_named(
    cdn: CdnServer, cache_dir: Path, path: str, value: str
) -> None:
    # An edge that gzips a body it lists as identity: urllib3 decodes a list item by item,
    # and takes an item it has no decoder for (identity, an empty one) for deflate.
    publish_blob_kernel(cdn.root)
    cdn.inject(path, *[gzipped_as(value)] * 8)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert f"Content-Encoding: {value}, which cannot be decoded here" in str(info.value)
    assert not (cache_dir / "kernels" / REPO / "v1" / VARIANT).exists()


@pytest.mark.parametrize("path", [BLOB_PATH, f"{BUILD}/metadata.json"], ids=["file", "manifest"])
def test_a_compression_bomb_is_cut_at_its_size_limit_in_bounded_memory(
    cdn: CdnServer, cache_dir: Path, path: str
) -> None:
    # 1 MiB on the wire that inflates to 1 GiB: the decoded bytes stop at the size
    # metadata.json lists for the file, at 1 MiB for the manifest, and no read inflates
    # more than a chunk's worth at a time.
    publish_blob_kernel(cdn.root, with_sizes=True)
    bomb = compression_bomb(1 << 30)
    cdn.inject(path, *[encoded_bomb(bomb)] * 8)
    rise, outcome = load_peak_rise(REPO)
    assert outcome == ("IntegrityError" if path == BLOB_PATH else "ManifestError")
    assert rise < 128 << 20, f"the load's peak memory rose by {rise >> 20} MiB"
    assert not (cache_dir / "kernels" / REPO / "v1" / VARIANT).exists()
    cdn.faults.clear()
    assert fk.get_kernel(REPO, version=1).marker() == "blob"  # the honest answer loads


def test_a_manifest_past_its_limit_is_named_by_what_was_read_of_it(
    cdn: CdnServer, cache_dir: Path
) -> None:
    # The body is read no further than the chunk that passes 1 MiB: its size is not known.
    publish_blob_kernel(cdn.root)
    oversized = b" " * (3 << 20) + b"{}"
    (cdn.root / BUILD / "metadata.json").write_bytes(oversized)
    with pytest.raises(ManifestError) as info:
        fk.get_kernel(REPO, version=1)
    read = re.search(r"is over the 1 MiB limit \(at least (\d+) bytes\)", str(info.value))
    assert read is not None, str(info.value)
    assert 1 << 20 < int(read[1]) <= len(oversized)


def trickled_gzip_comment(hung_up: threading.Event) -> Fault:
    """A gzip body whose header's comment goes on a byte every 0.5 s: it decodes to
    nothing, so urllib3 reads on within one read1 call, and no chunk reaches the guard."""

    def fault(handler: CdnHandler, _body: bytes) -> None:
        handler.record(200)
        handler.send_response(200)
        handler.send_header("Content-Encoding", "gzip")
        handler.end_headers()
        handler.close_connection = True
        try:
            handler.wfile.write(b"\x1f\x8b\x08\x10\0\0\0\0\0\x03")  # FCOMMENT set
            for _ in range(120):
                handler.wfile.flush()
                handler.pause(0.5)
                handler.wfile.write(b"a")
        except OSError:
            hung_up.set()

    return fault


@pytest.mark.parametrize("path", [BLOB_PATH, f"kernels/{REPO}/v1/variants.json"])
def test_an_encoded_body_that_never_decodes_is_cut_as_stalled(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "1")
    publish_blob_kernel(cdn.root)
    hung_up = threading.Event()
    cdn.inject(path, *[trickled_gzip_comment(hung_up)] * 4)
    with pytest.raises(TransportError, match="stalled"):
        fk.get_kernel(REPO, version=1)
    assert hung_up.wait(10)  # the client cut it, before the server's minute was up


def encoded_bomb(bomb: bytes) -> Fault:
    """``bomb`` in place of the file, sent with ``Content-Encoding: gzip``."""
    return lambda handler, _body: handler.send_simple(200, bomb, {"Content-Encoding": "gzip"})


# -- mirrors --------------------------------------------------------------------------------

MISSING = [f"{BUILD}/tensor_tricks/helpers.py", f"{BUILD}/tensor_tricks/data/table.txt"]


@pytest.fixture
def mirrors(make_cdn: MakeCdn, tmp_path: Path) -> tuple[CdnServer, CdnServer]:
    """Mirror A and mirror B, the same tree (metadata.json with sizes, as published): each
    test breaks A (or both) its own way."""
    b = make_cdn(tmp_path / "b")
    publish_blob_kernel(b.root, with_sizes=True)
    shutil.copytree(b.root, tmp_path / "a")
    a = make_cdn(tmp_path / "a")
    return a, b


@pytest.mark.parametrize("code", [404, 403, 401])
def test_a_file_a_half_synced_mirror_lacks_comes_from_the_next(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    a, b = mirrors
    for path in MISSING:
        if code == 404:
            (a.root / path).unlink()
        else:
            a.inject(path, *[status(code)] * 20)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    k = fk.get_kernel(REPO, version=1)
    assert k.helpers.shout() == "BLOB"
    assert (variant_dir(k) / "tensor_tricks/data/table.txt").read_text() == "table of blob\n"
    # B served the files A lacks; it may serve more, since a mirror that failed goes to
    # the back of the list for the rest of the download.
    assert {f"/{path}" for path in MISSING} <= set(b.gets())
    assert f"/kernels/{REPO}/v1/variants.json" in a.gets()
    assert f"/{BUILD}/metadata.json" in a.gets()


def test_mirrors_configured_as_a_list_are_tried_in_order(
    mirrors: tuple[CdnServer, CdnServer],
) -> None:
    a, b = mirrors
    a.inject(f"kernels/{REPO}/v1/variants.json", *[status(503)] * 20)
    config = fk.configure(cdn_url=[a.url, b.url])
    assert config.cdn_urls == (a.url, b.url)
    assert fk.get_kernel(REPO, version=1).helpers.shout() == "BLOB"
    assert f"/kernels/{REPO}/v1/variants.json" in b.gets()


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("cdn_url", 5),
        ("cdn_url", ["https://a.example", None]),
        ("trusted_keys", 5),
        ("trusted_keys", [b"flashhub-ed25519:..."]),
    ],
)
def test_configure_with_neither_a_string_nor_a_list_of_strings_says_so(
    setting: str, value: object
) -> None:
    before = fk.get_config()
    with pytest.raises(TypeError, match=f"^{setting} must be a string or a list of strings"):
        fk.configure(**{setting: value})
    assert fk.get_config() == before


def test_a_manifest_a_half_synced_mirror_lacks_comes_from_the_next(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lists the variant in variants.json, but its metadata.json has not arrived yet.
    a, b = mirrors
    (a.root / BUILD / "metadata.json").unlink()
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    assert run_python(
        f"import flashhub_kernels as fk; print(fk.get_kernel({REPO!r}, version=1).marker())"
    ).split() == ["blob"]
    assert f"/{BUILD}/metadata.json" in a.gets() and f"/{BUILD}/metadata.json" in b.gets()


def test_a_manifest_no_mirror_has_is_the_cdn_s_fault(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = mirrors
    for mirror in mirrors:
        (mirror.root / BUILD / "metadata.json").unlink()
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    with pytest.raises(
        TransportError, match=r"lists variant torch-universal, but .* does not exist"
    ):
        fk.get_kernel(REPO, version=1)


def test_when_every_mirror_fails_each_is_named(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = mirrors
    a.inject(MISSING[0], *[status(401)] * 20)
    b.inject(MISSING[0], *[status(403)] * 20)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert "helpers.py" in message
    assert f"127.0.0.1:{a.port}" in message and f"127.0.0.1:{b.port}" in message
    assert "401" in message and "403" in message


def test_a_mirror_whose_connections_time_out_is_named_with_the_timeout_alone(
    black_hole: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """urllib3's connect timeout holds the connection (shown with its memory address)
    and the message: the error and the log lines show the message alone."""
    monkeypatch.setenv("FLASHHUB_CDN_URL", black_hole)
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "0.2")
    caplog.set_level(logging.INFO, logger="flashhub_kernels")
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    timed_out = f"{black_hole}: Connection to 127.0.0.1 timed out. (connect timeout=0.2)"
    assert f"\n  {timed_out}\n" in str(info.value)
    logged = [r.getMessage() for r in caplog.records if r.name == "flashhub_kernels"]
    failed = [line for line in logged if line.startswith(f"mirror {black_hole} could not")]
    assert failed and all(line.endswith(timed_out.removeprefix(black_hole)) for line in failed)


def _connection_retries(caplog: pytest.LogCaptureFixture, path: str) -> int:
    """How often urllib3 retried a connection that timed out, for a request of ``path``."""
    return sum(
        r.name == "urllib3.connectionpool"
        and r.getMessage().startswith("Retrying ")
        and "ConnectTimeoutError" in r.getMessage()
        and r.getMessage().endswith(path)
        for r in caplog.records
    )


def _lines_naming(caplog: pytest.LogCaptureFixture, mirror: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if mirror in r.getMessage()]


def test_an_unreachable_mirror_listed_first_is_tried_once_and_the_next_load_asks_it_last(
    black_hole: str,
    cdn: CdnServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for repo in ("acme/first", "acme/second"):
        write_kernel(cdn.root, repo, 1)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{black_hole},{cdn.url}")
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "0.2")
    caplog.set_level(logging.INFO, logger="flashhub_kernels")

    assert fk.get_kernel("acme/first", version=1).marker() == f"acme/first@v1:{local_variant()}"
    # Each path asked of it first had its connection tried once, and went to the next mirror.
    put_off = f"mirror {black_hole} could not be connected to (Connection to 127.0.0.1 timed out"
    assert any(line.startswith(put_off) for line in _lines_naming(caplog, black_hole))
    assert _connection_retries(caplog, "") == 0
    assert cdn.gets("/kernels/acme/first/v1/variants.json")

    caplog.clear()
    assert fk.get_kernel("acme/second", version=1).marker() == f"acme/second@v1:{local_variant()}"
    # The process remembers it: the next load asked the other mirror first, and got all.
    assert _lines_naming(caplog, black_hole) == []
    assert cdn.gets("/kernels/acme/second/v1/variants.json")


def test_an_unreachable_mirror_is_asked_again_with_retries_once_the_others_failed(
    black_hole: str,
    cdn: CdnServer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    write_kernel(cdn.root, REPO, 1)
    variants = f"/kernels/{REPO}/v1/variants.json"
    cdn.inject(variants.lstrip("/"), *[status(403)] * 5)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{black_hole},{cdn.url}")
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "0.2")

    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)

    timed_out = "Connection to 127.0.0.1 timed out. (connect timeout=0.2)"
    answers = f"\n  {cdn.url}: HTTP 403 Forbidden\n  {black_hole}: {timed_out}\n"
    assert answers in str(info.value) and str(info.value).count(black_hole) == 1
    assert cdn.gets(variants) == [variants]
    # Tried once first; then, the last one left, retried as a lone mirror is.
    assert _connection_retries(caplog, variants) == 2


def test_a_lone_unreachable_mirror_has_its_connection_retried(
    black_hole: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FLASHHUB_CDN_URL", black_hole)
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "0.2")
    with pytest.raises(TransportError):
        fk.get_kernel(REPO, version=1)
    assert _connection_retries(caplog, f"/kernels/{REPO}/v1/variants.json") == 2


PORTAL = b"<html><body>Sign in to the guest network</body></html>"


def test_a_captive_portal_before_a_good_mirror_gives_way_to_it(
    mirrors: tuple[CdnServer, CdnServer], make_cdn: MakeCdn, tmp_path: Path
) -> None:
    _, b = mirrors
    (b.root / f"kernels/{REPO}/versions.json").write_text("[1]")
    portal = make_cdn(tmp_path / "portal", portal=PORTAL)
    for version in ([], ["--version", "1"]):
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        portal.clear_log()
        result = flashhub("get", REPO, *version, env={"FLASHHUB_CDN_URL": f"{portal.url},{b.url}"})
        assert result.returncode == 0, result.stderr
        # The portal's page was taken for no document; once it failed, B served the rest.
        assert portal.gets(".json")
        assert not portal.gets("blob.bin")
    assert f"/kernels/{REPO}/versions.json" in b.gets()
    (cached,) = (tmp_path / "cache").glob(f"kernels/{REPO}/v1/{VARIANT}/tensor_tricks/blob.bin")
    assert cached.read_bytes() == BLOB


def test_a_single_cdn_behind_a_captive_portal_is_named_with_the_portal_hint(
    make_cdn: MakeCdn, tmp_path: Path
) -> None:
    portal = make_cdn(tmp_path / "portal", portal=PORTAL)
    for version in ([], ["--version", "1"]):
        result = flashhub("get", REPO, *version, env={"FLASHHUB_CDN_URL": portal.url})
        assert result.returncode == 1
        assert f"127.0.0.1:{portal.port}: " in result.stderr
        assert "not valid JSON" in result.stderr and "captive portal" in result.stderr
    assert not list((tmp_path / "cache").glob(f"kernels/{REPO}/v1/*"))


def test_when_every_mirror_serves_a_web_page_each_is_named(
    make_cdn: MakeCdn, tmp_path: Path
) -> None:
    a = make_cdn(tmp_path / "a", portal=PORTAL)
    b = make_cdn(tmp_path / "b", portal=PORTAL)
    mirrors = f"{a.url_for('127.0.0.1', 'bob:s3cret')},{b.url}"
    result = flashhub("get", REPO, "--version", "1", env={"FLASHHUB_CDN_URL": mirrors})
    assert result.returncode == 1
    assert "variants.json" in result.stderr and "not valid JSON" in result.stderr
    assert f"127.0.0.1:{a.port}" in result.stderr and f"127.0.0.1:{b.port}" in result.stderr
    assert "captive portal" in result.stderr
    assert "s3cret" not in result.stderr
    assert not list((tmp_path / "cache").glob(f"kernels/{REPO}/v1/*/tensor_tricks"))


GARBAGE = bytes(range(255, -1, -1)) * (4 * 1024)  # as long as BLOB, other bytes


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def kept_partials(cache_dir: Path) -> list[Path]:
    return list(cache_dir.glob(f"kernels/{REPO}/v1/.partial-*/*"))


@pytest.mark.parametrize("copy", ["same size, other bytes", "longer than metadata.json says"])
def test_a_mirror_serving_a_bad_copy_gives_way_to_the_next(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch, copy: str
) -> None:
    a, b = mirrors
    (a.root / BLOB_PATH).write_bytes(GARBAGE if copy.startswith("same") else BLOB + b"x")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    k = fk.get_kernel(REPO, version=1)
    assert (variant_dir(k) / "tensor_tricks/blob.bin").read_bytes() == BLOB
    # One GET of the file per mirror; B starts from byte 0: A's bytes were discarded.
    assert ranges(a, "blob.bin") == [None]
    assert ranges(b, "blob.bin") == [None]


def test_when_every_mirror_serves_bad_bytes_each_is_named(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    a, b = mirrors
    (a.root / BLOB_PATH).write_bytes(GARBAGE)
    (b.root / BLOB_PATH).write_bytes(BLOB + b"x")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url_for('127.0.0.1', 'ann:s3cret')},{b.url}")
    with pytest.raises(IntegrityError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert "blob.bin" in message and "s3cret" not in message
    assert f"{a.url}: " in message and f"{b.url}: " in message
    assert "does not match metadata.json" in message  # A's answer
    assert f"metadata.json lists {len(BLOB)} bytes in all" in message  # B's answer
    assert ranges(a, "blob.bin") == [None] and ranges(b, "blob.bin") == [None]
    assert not (cache_dir / f"kernels/{REPO}/v1/{VARIANT}").exists()
    assert kept_partials(cache_dir) == []  # bad bytes are never kept to resume from


def test_bytes_from_a_mirror_that_sent_bad_bytes_are_not_kept(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    a, b = mirrors
    (a.root / BLOB_PATH).write_bytes(GARBAGE)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    helpers = f"{BUILD}/tensor_tricks/helpers.py"
    b.inject(helpers, status(404))  # B cannot serve the next file; A breaks off in it
    a.inject(helpers, *[drop_after(10)] * 6)
    fetcher = Fetcher(get_config())
    try:
        blob = tmp_path / "blob.bin"
        assert fetcher.download(BLOB_PATH.removeprefix("kernels/"), blob, sha256(BLOB)) == len(BLOB)
        dest = tmp_path / "helpers.py"
        digest = sha256((b.root / helpers).read_bytes())
        with pytest.raises(TransportError, match="broke off 6 times"):
            fetcher.download(helpers.removeprefix("kernels/"), dest, digest)
    finally:
        fetcher.close()
    assert ranges(b, "helpers.py") == [None] and ranges(a, "helpers.py")[0] is None
    assert dest.stat().st_size == 0  # A's bytes of it are suspect: none is kept to resume


def test_kept_bytes_that_fail_the_digest_do_not_count_against_the_mirror(
    mirrors: tuple[CdnServer, CdnServer], monkeypatch: pytest.MonkeyPatch, cache_dir: Path
) -> None:
    a, b = mirrors
    (b.root / BLOB_PATH).write_bytes(GARBAGE)  # B is bad; A is good
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    # Bytes an earlier run kept, from a mirror that served garbage: they may be at fault,
    # not A, which is asked to continue them. So A is asked again, from scratch, first.
    plant_partial(cache_dir, VARIANT, sha256(BLOB)).write_bytes(GARBAGE[:1000])
    k = fk.get_kernel(REPO, version=1)
    assert (variant_dir(k) / "tensor_tricks/blob.bin").read_bytes() == BLOB
    assert ranges(a, "blob.bin") == ["bytes=1000-", None]
    assert ranges(b, "blob.bin") == []


# -- a server that trickles -----------------------------------------------------------------


def test_a_trickling_mirror_fails_as_stalled(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "2")
    publish_blob_kernel(cdn.root)
    cdn.inject(BLOB_PATH, *[trickle(0.5)] * 50)  # a byte every 0.5 s: never a read timeout
    start = time.monotonic()
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    assert time.monotonic() - start < 15
    message = str(info.value).lower()
    assert "blob.bin" in message
    assert any(word in message for word in ("stall", "slow", "kib/s")), message


def test_a_trickling_mirror_gives_way_to_a_healthy_one(
    cdn: CdnServer, make_cdn: MakeCdn, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy = make_cdn()  # the same files
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "2")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{cdn.url},{healthy.url}")
    publish_blob_kernel(cdn.root)
    cdn.inject(BLOB_PATH, *[trickle(0.5)] * 50)
    start = time.monotonic()
    k = fk.get_kernel(REPO, version=1)
    assert time.monotonic() - start < 15
    assert (variant_dir(k) / "tensor_tricks/blob.bin").read_bytes() == BLOB
    assert healthy.gets("blob.bin")
    assert cdn.gets("blob.bin")  # it was tried first


def test_a_trickling_document_gives_way_to_a_healthy_mirror(
    cdn: CdnServer, make_cdn: MakeCdn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """variants.json trickles from the first mirror: the stall guard cuts it as it cuts a
    file, and the next mirror answers (else the load, and every process waiting on the
    version's index mutex, would wait a read timeout per byte)."""
    healthy = make_cdn()  # the same files
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "2")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{cdn.url},{healthy.url}")
    publish_blob_kernel(cdn.root)
    cdn.inject(f"kernels/{REPO}/v1/variants.json", *[trickle(0.5)] * 10)
    k = fk.get_kernel(REPO, version=1)
    assert (variant_dir(k) / "tensor_tricks/blob.bin").read_bytes() == BLOB
    assert cdn.gets("variants.json") and healthy.gets("variants.json")


def test_a_mirror_trickling_its_headers_gives_way_to_a_healthy_one(
    cdn: CdnServer, make_cdn: MakeCdn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read of the headers gets a byte just inside the read timeout, so none times
    out: the request is cut once its headers are not in after the connect timeout plus
    the read timeout, and the next mirror serves the file."""
    healthy = make_cdn()  # the same files
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "1")
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{cdn.url},{healthy.url}")
    publish_blob_kernel(cdn.root)
    hung_up = [threading.Event() for _ in range(2)]
    cdn.inject(BLOB_PATH, *(trickled_headers(0.5, limit=120, hung_up=event) for event in hung_up))
    k = fk.get_kernel(REPO, version=1)
    assert (variant_dir(k) / "tensor_tricks/blob.bin").read_bytes() == BLOB
    assert healthy.gets("blob.bin")
    # Asked twice (a read timeout is retried once), and each time the client hung up.
    assert len(cdn.gets("blob.bin")) == 2
    assert all(event.wait(10) for event in hung_up)


@pytest.mark.parametrize(
    "opening",
    [b"HTTP/1.1 200 OK\r\nX-Padding: ", b"HTTP/1.1 "],
    ids=["a header never ends", "the status line never ends"],
)
def test_a_document_whose_headers_never_end_fails_the_load_naming_the_deadline(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, opening: bytes
) -> None:
    """http.client takes the cut for the end of a header, but for a broken status line:
    either way the load names the deadline."""
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "1")
    publish_blob_kernel(cdn.root)
    cdn.inject(
        f"kernels/{REPO}/v1/variants.json", *[trickled_headers(0.5, limit=120, opening=opening)] * 2
    )
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    message = str(info.value)
    assert "variants.json" in message
    assert "headers were not all in after 2 s" in message, message


def test_a_load_stopped_past_its_headers_deadline_reads_the_answer_that_came_meanwhile(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-Z (or a debugger) stops the load while it waits for the headers; the server
    answers in time, and the process goes on after the deadline: the time it was stopped
    is not the server's, so the answer is read, not cut and fetched again."""
    monkeypatch.setenv("FLASHHUB_CONNECT_TIMEOUT", "1")
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "3")  # a deadline of 4 s: time to stop it
    publish_blob_kernel(cdn.root)
    started, release = threading.Event(), threading.Event()
    cdn.inject(BLOB_PATH, held(started, release))
    load = f"import flashhub_kernels as fk; fk.get_kernel({REPO!r}, version=1)"
    child = start_code(load, env=dict(os.environ))
    try:
        assert started.wait(60), "the blob was never asked for"
        child.send_signal(signal.SIGSTOP)
        release.set()
        time.sleep(6)  # past the deadline
    finally:
        child.send_signal(signal.SIGCONT)
        _out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert len(cdn.gets("blob.bin")) == 1


# A load's threads end soon after it, the header deadline's watchdog among them.
THREADS_AFTER_A_LOAD = """
import threading, time, flashhub_kernels as fk
fk.get_kernel("acme/tensor-tricks", version=1)
deadline = time.monotonic() + 30
while threading.active_count() > 1 and time.monotonic() < deadline:
    time.sleep(0.05)
print("left running:", sorted(t.name for t in threading.enumerate()))
"""


def test_a_cold_load_leaves_no_thread_running(cdn: CdnServer) -> None:
    publish_blob_kernel(cdn.root)
    out = run_python(THREADS_AFTER_A_LOAD, env={"FLASHHUB_CDN_URL": cdn.url})
    assert "left running: ['MainThread']" in out, out


# After a cold load, without a collection: the sockets the process still has open.
SOCKETS_AFTER_A_LOAD = """
import gc, os, flashhub_kernels as fk
gc.disable()  # what a pool in a reference cycle keeps open would wait for the collector
fk.get_kernel("acme/tensor-tricks", version=1)
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink(f"/proc/self/fd/{fd}"))
    except FileNotFoundError:  # the listing's own, closed since
        pass
print("sockets:", sum(link.startswith("socket:") for link in links))
"""


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_a_cold_load_leaves_no_connection_open(cdn: CdnServer) -> None:
    """urllib3 2 drops the pools of a closed session without closing their connections:
    kept-alive sockets to the CDN stayed open, and forked workers inherited them."""
    publish_blob_kernel(cdn.root)
    out = run_python(SOCKETS_AFTER_A_LOAD, env={"FLASHHUB_CDN_URL": cdn.url})
    assert "sockets: 0" in out, out


# The parent's load starts the header deadline's watchdog thread; a forked child has none.
FORK_THEN_LOAD = """
import os, flashhub_kernels as fk
fk.get_kernel("acme/tensor-tricks", version=1)
pid = os.fork()
if pid == 0:
    try:
        fk.get_kernel("acme/other-tricks", version=1)
    except BaseException as exc:
        print(repr(exc), flush=True)
        os._exit(1)
    os._exit(0)
print("the forked child exited with", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_forked_child_cuts_headers_that_never_end_too(cdn: CdnServer, make_cdn: MakeCdn) -> None:
    healthy = make_cdn()
    for root in (cdn.root, healthy.root):
        publish_blob_kernel(root)
        write_variant(root, "acme/other-tricks", 1, VARIANT, kernel_files("other_tricks", "o"))
    hung_up = [threading.Event() for _ in range(2)]
    other = f"kernels/acme/other-tricks/v1/build/{VARIANT}/other_tricks/__init__.py"
    cdn.inject(other, *(trickled_headers(0.5, limit=120, hung_up=event) for event in hung_up))
    env = {
        "FLASHHUB_CDN_URL": f"{cdn.url},{healthy.url}",
        "FLASHHUB_CONNECT_TIMEOUT": "1",
        "FLASHHUB_READ_TIMEOUT": "1",
    }
    out = run_python(FORK_THEN_LOAD, env=env, timeout=60)
    assert "the forked child exited with 0" in out, out
    assert all(event.wait(10) for event in hung_up)
    assert healthy.gets("other_tricks/__init__.py")


# Many requests, each answered at once, while one waits for its answer on another thread;
# the deadlines kept after them (those of requests in flight, and those not dropped yet).
MANY_REQUESTS = """
import os, threading
from flashhub_kernels._network import header_deadline
from flashhub_kernels._network.session import new_session
session = new_session(4, timeouts=(10.0, 60.0))
held = (os.environ["TEST_HELD_URL"],)
threading.Thread(target=session.get, args=held, kwargs={"timeout": (10, 60)}, daemon=True).start()
for _ in range(1000):
    session.get(os.environ["TEST_FILE_URL"], timeout=(10, 60)).content
print("deadlines kept:", len(header_deadline._WATCHDOG._due))
"""


def test_a_process_keeps_no_deadline_of_requests_it_has_the_headers_of(cdn: CdnServer) -> None:
    """The deadline of each answered request is disarmed: it must not stay in memory until
    it would have passed (a minute by default, a week at most) while another request is
    in flight, or a process making many requests holds thousands of them."""
    publish_blob_kernel(cdn.root)
    started, release = threading.Event(), threading.Event()
    cdn.inject(BLOB_PATH, held(started, release))
    env = {
        "TEST_FILE_URL": f"{cdn.url}/kernels/{REPO}/v1/variants.json",
        "TEST_HELD_URL": f"{cdn.url}/{BLOB_PATH}",
    }
    try:
        out = run_python(MANY_REQUESTS, env=env, timeout=60)
    finally:
        release.set()
    assert started.is_set()
    kept = int(out.split("deadlines kept:")[1])
    assert kept < 100, out


def test_the_wait_a_retry_after_asks_for_is_no_stall(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 429 asks the client to wait longer than the stall guard's window; the answer that
    follows sends its body at a fair rate in small pieces. The guard judges the body
    from its headers on, so the wait is not taken for a stalled transfer."""
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "2")
    publish_blob_kernel(cdn.root)
    cdn.inject(BLOB_PATH, status(429, retry_after=2.5), slowly(1.0, pieces=1024))
    k = fk.get_kernel(REPO, version=1)
    assert (variant_dir(k) / "tensor_tricks/blob.bin").read_bytes() == BLOB
    assert [r.status for r in cdn.requests if r.path.endswith("blob.bin")] == [429, 200]


# -- connections and bodies (what the old hand-written client was tested for) ---------------


def test_files_share_kept_alive_connections(cdn: CdnServer) -> None:
    extra = {f"tensor_tricks/gen/f{i:02d}.py": f"X = {i}\n".encode() for i in range(40)}
    publish_blob_kernel(cdn.root, extra)
    k = fk.get_kernel(REPO, version=1)
    assert len(cached_files(k)) == 45
    asked = cdn.gets(missed_guesses=False)
    assert len(asked) == 47  # the two documents, 45 files, nothing twice
    # One connection per download thread and document, not one per file. The threads are
    # as many as the server's measured wait asks for, more on a loaded machine: within
    # the pool's size, whatever the load.
    assert cdn.connections <= POOL_SIZE < len(extra)


def test_a_kept_alive_connection_the_server_closed_is_replaced(
    make_cdn: MakeCdn, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server's idle timeout fires just as the client reuses a pooled connection: the
    # request is never answered. Nothing was received, so nothing needs resuming; a GET
    # can be sent again on a new connection, and must be, or every such race fails a load.
    server = make_cdn(drop_reused=1)
    monkeypatch.setenv("FLASHHUB_CDN_URL", server.url)
    files = publish_blob_kernel(server.root)
    k = fk.get_kernel(REPO, version=1)
    assert cached_files(k) == files
    assert server.dropped == 1  # the race happened
    paths = server.gets(missed_guesses=False)
    assert len(paths) == len(set(paths)) == len(files) + 2  # each answered once


def test_a_chunked_body_is_read_whole(cdn: CdnServer) -> None:
    files = publish_blob_kernel(cdn.root)
    cdn.inject(BLOB_PATH, chunked())
    k = fk.get_kernel(REPO, version=1)
    assert cached_files(k) == files
    assert ranges(cdn, "blob.bin") == [None]


def test_a_chunked_body_cut_off_resumes_where_it_broke(cdn: CdnServer) -> None:
    files = publish_blob_kernel(cdn.root)
    cut = 300_000
    cdn.inject(BLOB_PATH, chunked(cut_after=cut))
    k = fk.get_kernel(REPO, version=1)
    assert cached_files(k) == files
    first, second = ranges(cdn, "blob.bin")
    assert first is None
    match = re.fullmatch(r"bytes=(\d+)-", second or "")
    assert match and 0 < int(match.group(1)) <= cut, second
