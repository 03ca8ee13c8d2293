"""metadata.json / variants.json / versions.json validation (pure)."""

from __future__ import annotations

import base64
import hashlib
import json
import re

import pytest

from flashhub_kernels._models.manifest import (
    MAX_NESTING,
    content_hash,
    decode_digest,
    encode_digest,
    parse_metadata,
    parse_variants,
    parse_versions,
)
from flashhub_kernels.errors import IntegrityError, ManifestError

RAW = hashlib.sha256(b"x").digest()
STD = base64.b64encode(RAW).decode()


def metadata(files: dict[str, str]) -> bytes:
    return json.dumps({"digest": {"files": files}}).encode()


@pytest.mark.parametrize(
    "text",
    [
        STD,
        STD.rstrip("="),
        base64.urlsafe_b64encode(RAW).decode(),
        base64.urlsafe_b64encode(RAW).decode().rstrip("="),
        "sha256-" + STD,
    ],
)
def test_digest_encodings_accepted(text: str) -> None:
    assert decode_digest(text) == RAW


@pytest.mark.parametrize("text", [base64.b64encode(b"short").decode(), "not base64!", "", 42])
def test_bad_digests(text: object) -> None:
    with pytest.raises(ValueError):
        decode_digest(text)


def test_writers_emit_padded_standard_base64() -> None:
    assert encode_digest(RAW) == STD and STD.endswith("=")


def test_parse_keeps_other_keys_and_files() -> None:
    doc = {"digest": {"files": {"pkg/__init__.py": STD}}, "name": "x"}
    manifest = parse_metadata(json.dumps(doc).encode())
    assert manifest.files == {"pkg/__init__.py": RAW}
    assert manifest.document["name"] == "x"


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../evil.py",
        "pkg/../../evil.py",
        "pkg\\evil.py",
        "pkg/\x00.py",
        "pkg//x.py",
        "pkg/./x.py",
        "pkg/",
        "C:/x.py",
        "metadata.json",
        ".flashhub-receipt.json",
    ],
)
def test_hostile_paths_are_refused(path: str) -> None:
    with pytest.raises(ManifestError):
        parse_metadata(metadata({"pkg/__init__.py": STD, path: STD}))


def test_duplicates_after_normalisation_are_refused() -> None:
    with pytest.raises(ManifestError, match=r"differ only in case .* stores as one file"):
        parse_metadata(metadata({"pkg/A.py": STD, "pkg/a.py": STD}))
    # NFC and NFD: the same on screen, so named escaped, which tells them apart.
    with pytest.raises(ManifestError) as info:
        parse_metadata(metadata({"pkg/caf\u00e9.py": STD, "pkg/cafe\u0301.py": STD}))
    assert "'pkg/caf\\xe9.py' and 'pkg/cafe\\u0301.py', one name in two Unicode" in str(info.value)


@pytest.mark.parametrize(
    ("file", "below"), [("pkg/a", "pkg/a/b/c.py"), ("pkg", "pkg/x/y.py")], ids=["deep", "top"]
)
def test_file_and_directory_clash_is_refused(file: str, below: str) -> None:
    with pytest.raises(ManifestError, match=f"lists '{file}' both as a file and a directory"):
        parse_metadata(metadata({file: STD, below: STD}))


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"digest": []}',
        b'{"digest": {"files": []}}',
        b'{"digest": {"files": {}}}',
        b"\xff\xfe",
    ],
)
def test_malformed_metadata(data: bytes) -> None:
    with pytest.raises(ManifestError) as info:
        parse_metadata(data)
    assert isinstance(info.value, IntegrityError) and isinstance(info.value, ImportError)
    assert "hint:" in str(info.value)


def test_limits() -> None:
    with pytest.raises(ManifestError, match="1 MiB"):
        parse_metadata(b" " * (1 << 20) + b"{}")
    many = {f"pkg/f{i}.py": STD for i in range(10_001)}
    with pytest.raises(ManifestError, match="10000"):
        parse_metadata(metadata(many))


def test_variants_and_versions_shapes() -> None:
    assert parse_variants(b'["a", "b", "a"]') == ["a", "b"]
    assert parse_versions(b"[3, 1, 2, 2]") == [1, 2, 3]
    assert parse_versions(b"[999999999]") == [999999999]
    for bad in (b'{"a": 1}', b"[1]", b'"x"', b'[""]'):
        with pytest.raises(ManifestError):
            parse_variants(bad)
    for bad in (b"[0]", b"[true]", b'["1"]', b"{}", b"[1.5]", b"[1, 1000000000]"):
        with pytest.raises(ManifestError):
            parse_versions(bad)


def test_content_hash_is_order_independent_and_sensitive() -> None:
    a = content_hash({"x": RAW, "y": RAW})
    assert a == content_hash({"y": RAW, "x": RAW})
    assert a.startswith("sha256-") and len(a) == len("sha256-") + 64
    assert a != content_hash({"x": RAW, "z": RAW})


def test_content_hash_is_sha256_over_sorted_path_nul_digest_pairs() -> None:
    # What every lock file pins: a change of form would make every lock fail to verify.
    init, ops = hashlib.sha256(b"init").digest(), hashlib.sha256(b"ops").digest()
    document = metadata({"pkg/ops.py": encode_digest(ops), "pkg/__init__.py": encode_digest(init)})
    by_hand = hashlib.sha256(b"pkg/__init__.py\0" + init + b"pkg/ops.py\0" + ops).hexdigest()
    assert parse_metadata(document).content_hash == f"sha256-{by_hand}"


# -- sizes ------------------------------------------------------------------------------------


def with_sizes(sizes: object) -> bytes:
    files = {"pkg/__init__.py": STD, "pkg/a.so": STD}
    return json.dumps({"digest": {"files": files}, "sizes": sizes}).encode()


def test_sizes_are_read_and_leave_the_content_hash_alone() -> None:
    manifest = parse_metadata(with_sizes({"pkg/__init__.py": 0, "pkg/a.so": 3 << 30}))
    assert manifest.sizes == {"pkg/__init__.py": 0, "pkg/a.so": 3 << 30}
    assert manifest.size_of("pkg/a.so") == 3 << 30
    without = parse_metadata(metadata({"pkg/__init__.py": STD, "pkg/a.so": STD}))
    assert without.sizes is None and without.size_of("pkg/a.so") is None
    assert manifest.content_hash == without.content_hash


@pytest.mark.parametrize(
    "sizes, message",
    [
        ({"pkg/__init__.py": 1}, "no size for 'pkg/a.so'"),
        ({"pkg/__init__.py": 1, "pkg/a.so": 2, "pkg/b.so": 3}, "'pkg/b.so', which"),
        ({"pkg/__init__.py": 1, "pkg/a.so": -1}, "got -1"),
        ({"pkg/__init__.py": 1, "pkg/a.so": True}, "got True"),
        ({"pkg/__init__.py": 1, "pkg/a.so": 1.0}, "got 1.0"),
        ({"pkg/__init__.py": 1, "pkg/a.so": "1"}, "got '1'"),
        ({"pkg/__init__.py": 1, "pkg/a.so": 2**63}, f"got {2**63}"),  # no file is that large
        ({"pkg/__init__.py": 1, "pkg/a.so": 10**400}, "got 1000000000"),
        ([1, 2], '"sizes" must map'),
        (None, '"sizes" must map'),
    ],
)
def test_bad_sizes_are_refused(sizes: object, message: str) -> None:
    with pytest.raises(ManifestError, match=re.escape(message)):
        parse_metadata(with_sizes(sizes))


# -- what Python's own parser and the file system cannot take -------------------------------


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"digest": {"files": {}}, "n": ' + b"1" * 5000 + b"}", "too many digits"),
        (b"[" * 50_000 + b"]" * 50_000, "too deeply"),
        (b'{"a": ' * 50_000 + b"1" + b"}" * 50_000, "too deeply"),
    ],
)
def test_documents_pythons_json_parser_chokes_on_are_manifest_errors(
    data: bytes, message: str
) -> None:
    for parse in (parse_metadata, parse_variants, parse_versions):
        with pytest.raises(ManifestError, match=message):
            parse(data)


def test_documents_are_refused_past_a_nesting_bound_of_their_own() -> None:
    """Not where Python's parser gives up, which depends on the call stack it runs on."""
    too_deep = b"[" * (MAX_NESTING + 1) + b"]" * (MAX_NESTING + 1)
    for parse in (parse_metadata, parse_variants, parse_versions):
        with pytest.raises(ManifestError, match=f"nested too deeply \\(more than {MAX_NESTING}"):
            parse(too_deep)
    deepest = "[" * (MAX_NESTING - 1) + "]" * (MAX_NESTING - 1)  # within the document's object
    document = metadata({"pkg/__init__.py": STD})[:-1] + f', "x": {deepest}}}'.encode()
    assert parse_metadata(document).document["x"] == json.loads(deepest)


@pytest.mark.parametrize(
    "path",
    [
        "pkg/" + "a" * 256,
        "pkg/" + "\u00e9" * 128,  # 128 characters, 256 bytes of UTF-8
        "pkg/" + ("\u00e9" * 100 + "/") * 6 + "y",  # 611 characters, 1211 bytes in all
        "pkg/\ud800.py",
        "metadata.json/x",
        ".flashhub-receipt.json/x",
        "METADATA.JSON",
        "Metadata.json/x",
    ],
)
def test_paths_the_file_system_or_the_cache_cannot_hold_are_refused(path: str) -> None:
    with pytest.raises(ManifestError):
        parse_metadata(metadata({"pkg/__init__.py": STD, path: STD}))


def test_names_at_the_limits_and_pycache_are_accepted() -> None:
    paths = ["pkg/" + "a" * 255, "pkg/" + "\u00e9" * 127, "__pycache__/x.pyc", "pkg/metadata.json"]
    manifest = parse_metadata(metadata({"pkg/__init__.py": STD, **{p: STD for p in paths}}))
    assert set(paths) <= set(manifest.files)
