"""A caching edge (or proxy) in front of the CDN that answers what the CDN would not: a
load fails saying what the edge did and what to do about it, not with a generic hint.

Each case injects the edge's answers into the loopback CDN and loads the kernel.
docs/reliability.md lists each case.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import flashhub_kernels as fk
from flashhub_kernels.errors import IntegrityError, NoCompatibleVariantError, TransportError
from support.cdn_server import (
    CdnServer,
    compressed_keeping_length,
    not_modified,
    redirect,
    status,
    web_page,
)
from support.trees import MIB_BLOB, local_variant, write_blob_kernel, write_kernel

REPO = "acme/tensor-tricks"
VARIANTS = f"kernels/{REPO}/v1/variants.json"
LOCAL = local_variant()
EDGE_404 = "a caching edge in front of the CDN may still serve the 404 it cached before then"
PURGE_OR_WAIT = "purge it there, or wait for the edge's cache time (TTL) for 404s to pass"
ERROR_PAGE = b"<html><head><title>502 Bad Gateway</title></head><body>edge</body></html>"
CONDITIONS = {"if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range"}


@pytest.fixture
def blob(cdn: CdnServer) -> str:
    """The CDN path of a 1 MiB file of ``acme/tensor-tricks`` v1, whose size its
    ``metadata.json`` states."""
    return write_blob_kernel(cdn.root, MIB_BLOB, with_sizes=True)


def nothing_cached(cache_dir: Path) -> bool:
    return not list(cache_dir.glob(f"kernels/{REPO}/v1/*/tensor_tricks"))


@pytest.mark.parametrize("what", ["document", "file"])
def test_a_304_to_a_request_without_a_condition_is_named_an_edges_bug(
    cdn: CdnServer, blob: str, cache_dir: Path, what: str
) -> None:
    path = VARIANTS if what == "document" else blob
    cdn.inject(path, not_modified())
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert f"{cdn.url}: HTTP 304 Not Modified to a request without a condition" in error.message
    assert "a caching edge's bug" in error.message
    assert error.hint is not None and error.hint.startswith("purge the caching edge's")
    assert "FLASHHUB_CDN_URL at the origin" in error.hint and "no_proxy" in error.hint
    # As the message says, the request had no condition the 304 could answer.
    (asked,) = [r for r in cdn.requests if r.path == f"/{path}"]
    assert asked.status == 304 and not {h.lower() for h in asked.headers} & CONDITIONS
    assert nothing_cached(cache_dir)


def test_a_web_page_served_in_place_of_a_file_is_named_with_the_portal_hint(
    cdn: CdnServer, blob: str, cache_dir: Path
) -> None:
    cdn.inject(blob, web_page(ERROR_PAGE), web_page(ERROR_PAGE))
    with pytest.raises(IntegrityError) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert f"{cdn.url}: it served a web page (text/html) in place of the file" in error.message
    assert "most likely an error or login page of an edge or proxy" in error.message
    assert f"announces {len(ERROR_PAGE)} bytes" in error.message
    assert f"metadata.json lists {len(MIB_BLOB)} bytes" in error.message
    # The hint documents get for a web page, with what it means for a file.
    assert error.hint is not None and "a captive portal or a login page" in error.hint
    assert "an edge or proxy in front of the CDN serves its error page" in error.hint
    # Asked once more from scratch, as for any bad bytes from the only mirror.
    assert [r.status for r in cdn.requests if r.path == f"/{blob}"] == [200, 200]
    assert nothing_cached(cache_dir)


@pytest.mark.parametrize("loop", ["to itself", "between two URLs"])
def test_a_redirect_loop_names_the_urls_that_loop(
    cdn: CdnServer, blob: str, cache_dir: Path, loop: str
) -> None:
    if loop == "to itself":  # a document, redirected to its URL with a signed query
        path, hop = VARIANTS, f"/{VARIANTS}?X-Amz-Signature=s3cr3t"
        shown = [f"{cdn.url}/{VARIANTS}?X-Amz-Signature=****"] * 2
    else:  # a file, redirected elsewhere and back
        path, hop = blob, "/elsewhere/blob.bin"
        cdn.inject(hop, *[redirect(f"/{blob}")] * 40)
        shown = [f"{cdn.url}/{blob}", f"{cdn.url}{hop}", f"{cdn.url}/{blob}"]
    cdn.inject(path, *[redirect(hop)] * 40)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert f"{cdn.url}: redirected in a loop: {' -> '.join(shown)}\n" in f"{error.message}\n"
    assert "s3cr3t" not in str(error)
    assert error.hint is not None and error.hint.startswith("fix the redirects of the CDN")
    assert nothing_cached(cache_dir)


def test_redirects_past_requests_limit_name_the_first_and_last_url(
    cdn: CdnServer, blob: str
) -> None:
    cdn.inject(blob, redirect("/hop/1"))
    for n in range(1, 40):
        cdn.inject(f"/hop/{n}", redirect(f"/hop/{n + 1}"))
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    first, last = f"{cdn.url}/{blob}", f"{cdn.url}/hop/30"
    assert f"{cdn.url}: redirected 30 times, from {first} to {last}\n" in f"{info.value.message}\n"


# -- a 404 that the edge cached before the publish, for a path a document lists --------


def test_a_version_versions_json_lists_answered_404_hints_at_an_edges_cached_404(
    cdn: CdnServer,
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)  # on the origin, and in versions.json the edge passes on
    v2 = f"kernels/{REPO}/v2"
    cdn.inject(f"{v2}/variants.json", status(404))
    cdn.inject(f"{v2}/build/{LOCAL}/metadata.json", *[status(404)] * 2)  # the guess, the probe
    with pytest.raises(NoCompatibleVariantError) as info:
        fk.get_kernel(REPO, version=2)
    error = info.value
    assert f"{REPO}@v2 has no variants.json" in error.message
    for hint in (error.hint, error.cli_hint):
        assert hint is not None and f"if {REPO}@v2 was published just now, {EDGE_404}" in hint
        assert f"{PURGE_OR_WAIT}; otherwise ask the publisher for a build" in hint


def test_a_listed_variant_whose_manifest_answers_404_hints_at_an_edges_cached_404(
    cdn: CdnServer,
) -> None:
    write_kernel(cdn.root, REPO, 1)
    cdn.inject(f"kernels/{REPO}/v1/build/{LOCAL}/metadata.json", *[status(404)] * 2)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert f"{REPO}@v1 lists variant {LOCAL}, but " in error.message
    assert error.hint == (
        f"if {REPO}@v1 was published just now, {EDGE_404}: {PURGE_OR_WAIT}; otherwise the "
        "CDN is incomplete: report it to the kernel's publisher, or add a complete mirror "
        "to FLASHHUB_CDN_URL"
    )


def test_a_listed_file_answering_404_hints_at_an_edges_cached_404(
    cdn: CdnServer, blob: str
) -> None:
    cdn.inject(blob, status(404))
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert f"{cdn.url}: HTTP 404 Not Found for a file its manifest lists" in error.message
    assert error.hint is not None
    assert error.hint.startswith(f"if the kernel's version was published just now, {EDGE_404}")


@pytest.mark.parametrize("then", ["keeps the connection", "hangs up"])
@pytest.mark.parametrize("what", ["document", "file"])
def test_a_body_an_edge_compressed_keeping_its_length_is_named_not_taken_for_a_stall(
    cdn: CdnServer,
    blob: str,
    cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    what: str,
    then: str,
) -> None:
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "1")
    path = f"kernels/{REPO}/v1/build/torch-universal/metadata.json" if what == "document" else blob
    length = (cdn.root / path).stat().st_size
    cdn.inject(path, *[compressed_keeping_length(hang_up=then == "hangs up")] * 8)
    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert f"{cdn.url}: the server sent " in error.message
    announced = f" of the {length} bytes its Content-Length announced, with Content-Encoding: gzip"
    assert announced in error.message and f"they decode to all {length}" in error.message
    assert "a caching edge that compresses a body and keeps its original length" in error.message
    assert "stalled" not in error.message and "broke" not in error.message
    assert error.hint is not None and error.hint.startswith("turn compression off at the edge")
    assert "purge the copies the edge keeps" in error.hint
    assert nothing_cached(cache_dir)
