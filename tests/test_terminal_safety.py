"""Names and answers from the CDN reach the terminal with their control characters escaped.

A variant name, a file name or an HTTP reason phrase can carry an ESC sequence, a
carriage return or a newline. Printed raw, it would recolour, overwrite or forge the
lines of an error message or the CLI's output.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import flashhub_kernels as fk
from cdn_server import CdnHandler, CdnServer
from cli_runner import flashhub
from flashhub_kernels.errors import FlashhubError, NoCompatibleVariantError, TransportError
from trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"
CUDA = "torch212-cxx11-cu126-x86_64-linux"
ESCAPE = "torch-\x1b[31mred\x1b[0m\r"
FORGED = "torch-x\n  hint: run rm -rf ~"
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def assert_terminal_safe(text: str) -> None:
    """No control character but the newlines (and tabs) of the text's own layout."""
    assert not RAW_CONTROL.search(text), repr(text)


@pytest.fixture
def hostile_kernel(cdn: CdnServer) -> CdnServer:
    """A version whose variants.json lists names with ESC, CR and a newline."""
    write_kernel(cdn.root, REPO, 1, [CUDA])
    variants = cdn.root / "kernels" / REPO / "v1" / "variants.json"
    variants.write_text(json.dumps([CUDA, ESCAPE, FORGED]))
    return cdn


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


def test_flashhub_variants_escapes_hostile_names(hostile_kernel: CdnServer) -> None:
    text = flashhub("variants", REPO, "--version", "1")
    document = json.loads(flashhub("variants", REPO, "--version", "1", "--json").stdout)

    assert text.returncode == 1
    assert_terminal_safe(text.stdout + text.stderr)
    assert "  - torch-\\x1b[31mred\\x1b[0m\\r: " in text.stdout
    assert len(text.stdout.splitlines()) == 5, "header, three variants, chosen"
    assert {v["variant"] for v in document["variants"]} == {CUDA, ESCAPE, FORGED}


def test_flashhub_info_escapes_hostile_names(hostile_kernel: CdnServer) -> None:
    result = flashhub("info", REPO, "--version", "1")

    assert result.returncode == 1
    assert_terminal_safe(result.stdout + result.stderr)
    assert "\\x1b[31m" in result.stderr


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


def test_flashhub_cache_list_escapes_directory_names(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    assert flashhub("get", REPO, "--version", "1").returncode == 0
    (cache_dir / "kernels" / REPO / "v1" / "evil\x1b]0;title\x07").mkdir()

    result = flashhub("cache", "list")

    assert result.returncode == 0, result.stderr
    assert_terminal_safe(result.stdout)
    assert "evil\\x1b]0;title\\x07: 0 files" in result.stdout


def test_every_flashhub_error_escapes_its_message_and_hint() -> None:
    error = FlashhubError("name \x1b[31m\x9b\u202e\nnext line\tcell", hint="hint\r\x00")

    assert error.message == "name \\x1b[31m\\x9b\\u202e\nnext line\tcell"
    assert error.hint == "hint\\r\\x00"
    assert str(error) == f"{error.message}\n  hint: {error.hint}"
