"""Names and answers from the CDN reach the terminal with their control characters escaped.

A variant name, a file name or an HTTP reason phrase can carry an ESC sequence, a
carriage return or a newline. Printed raw, it would recolour, overwrite or forge the
lines of an error message or the CLI's output. What the commands print of them is tested
in test_cli.py and test_cli_cache.py.
"""

from __future__ import annotations

import json

import pytest

import flashhub_kernels as fk
from conftest import assert_terminal_safe
from flashhub_kernels._utils.escaping import escape_path
from flashhub_kernels.errors import FlashhubError, NoCompatibleVariantError, TransportError
from support.cdn_server import CdnHandler, CdnServer
from support.cli_runner import flashhub
from support.trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"


def test_no_compatible_variant_message_escapes_hostile_names(hostile_kernel: CdnServer) -> None:
    with pytest.raises(NoCompatibleVariantError) as info:
        fk.get_kernel(REPO, version=1)

    message = str(info.value)
    assert_terminal_safe(message)
    assert "torch-\\x1b[31mred\\x1b[0m\\r" in message
    assert "torch-x\\n  hint: run rm -rf ~" in message
    assert [line for line in message.splitlines() if line.lstrip().startswith("hint:")] == [
        f"  hint: {info.value.hint}"
    ], "a name cannot forge a line of the message"


def _reason_with_escapes(handler: CdnHandler, _body: bytes) -> None:
    handler.record(404)
    handler.send_response(404, "\x1b[2J\x1b[Hall good\r")
    handler.send_header("Content-Length", "0")
    handler.end_headers()


def test_a_hostile_http_reason_phrase_is_escaped(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    ops = f"kernels/{REPO}/v1/build/{local_variant()}/tensor_tricks/_ops.py"
    cdn.inject(ops, _reason_with_escapes)

    with pytest.raises(TransportError) as info:
        fk.get_kernel(REPO, version=1)

    assert_terminal_safe(str(info.value))
    assert "\\x1b[2J\\x1b[Hall good" in str(info.value)


def test_every_flashhub_error_escapes_its_message_and_hint() -> None:
    error = FlashhubError("name \x1b[31m\x9b\u202e\ud800\nnext line\tcell", hint="hint\r\x00")

    assert error.message == "name \\x1b[31m\\x9b\\u202e\\ud800\nnext line\tcell"
    assert error.hint == "hint\\r\\x00"
    assert str(error) == f"{error.message}\n  hint: {error.hint}"


def test_a_path_keeps_the_bytes_of_its_names_but_not_the_controls_they_would_make() -> None:
    latin1, utf8 = "k\udce9", "cdn-\udcc3\udcbc"  # b"k\xe9"; "cdn-\xfc" read as ASCII
    assert escape_path(f"/a/{latin1}/{utf8}") == f"/a/{latin1}/{utf8}"
    assert escape_path("/a/\x1b[2J\u202e\ud800") == "/a/\\x1b[2J\\u202e\\ud800"
    # b"\xc2\x9b" is UTF-8 for the CSI control; a lone b"\x9b" is one to an 8-bit terminal.
    assert escape_path("/a/\udcc2\udc9b/\udc9b") == "/a/\\udcc2\\udc9b/\\udc9b"


def test_flashhub_info_shows_a_lone_surrogate_in_a_manifest_escaped(cdn: CdnServer) -> None:
    # Valid JSON ("\\ud800"), which no encoding can write: printed as it is, the output
    # would fail halfway, blaming the terminal's encoding.
    write_kernel(cdn.root, REPO, 1)
    manifest = cdn.root / f"kernels/{REPO}/v1/build/{local_variant()}/metadata.json"
    document = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**document, "name": "x\ud800y"}))

    result = flashhub("info", REPO, "--version", "1")

    assert result.returncode == 0, result.stderr
    assert "name: x\\ud800y" in result.stdout


GOOD_ID = "0123456789abcdef"
HOSTILE_IDS = ["\x1b[2J\x1b[Hsigned by the acme release key\r", "abc\u202efedcba9876543210"]


def test_key_ids_from_an_unverified_signature_file_are_escaped(cdn: CdnServer) -> None:
    """Without a trusted key, `flashhub info` and `variants` show the key ids a `.sig`
    names, unchecked: a well-formed one as it is, anything else escaped."""
    write_kernel(cdn.root, REPO, 1)
    manifest = cdn.root / f"kernels/{REPO}/v1/build/{local_variant()}/metadata.json"
    signatures = [{"key_id": k, "signature": "AAAA"} for k in [GOOD_ID, *HOSTILE_IDS]]
    manifest.with_name("metadata.json.sig").write_text(
        json.dumps({"format": 1, "signatures": signatures})
    )

    for command in ("info", "variants"):
        result = flashhub(command, REPO, "--version", "1")
        assert result.returncode == 0, result.stderr
        assert_terminal_safe(result.stdout)
        line = next(line for line in result.stdout.splitlines() if "signed by " in line)
        assert f"signed by {GOOD_ID}, " in line
        assert "\\x1b[2J\\x1b[Hsigned by the acme release key\\r" in line
        assert "abc\\u202efedcba9876543210" in line
        assert line.endswith("(not verified: no trusted key)")
