"""The notice that a newer version of a loaded kernel is published."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import _forget_kernels
from flashhub_kernels.errors import NewerVersionWarning
from support.cdn_server import CdnHandler, CdnServer, held, stalled
from support.cli_runner import flashhub
from support.trees import cpu_variant, local_variant, write_kernel

REPO = "acme/tensor-tricks"
VERSIONS_JSON = f"/kernels/{REPO}/versions.json"


@pytest.fixture(autouse=True)
def version_check_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FLASHHUB_NO_VERSION_CHECK")  # conftest turns it off for the rest


@pytest.fixture
def notices() -> Iterator[list[warnings.WarningMessage]]:
    """Every warning issued during the test."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def newer_version_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, NewerVersionWarning)]


def test_a_cold_load_of_an_older_version_warns_once_naming_the_newer(
    cdn: CdnServer, tmp_path: Path, notices: list[warnings.WarningMessage]
) -> None:
    # What a plain load and a backend="cpu" one take (one build where torch is CPU-only).
    write_kernel(cdn.root, REPO, 1, sorted({local_variant(), cpu_variant()}))
    write_kernel(cdn.root, REPO, 2)  # versions.json: [1, 2]
    fk.get_kernel(REPO, version=1)
    (message,) = newer_version_warnings(notices)
    assert "You are using version 1 of 'acme/tensor-tricks', but version 2 is available" in message
    assert "get_kernel('acme/tensor-tricks', version=2)" in message
    assert "flashhub.acme.tensor_tricks.v2" in message and "FLASHHUB_NO_VERSION_CHECK" in message
    (notice,) = [w for w in notices if issubclass(w.category, NewerVersionWarning)]
    assert notice.filename == __file__  # points at the caller's line
    assert len(cdn.gets(VERSIONS_JSON)) == 1
    # Another cold load of the repo in this process (another module name, another
    # cache): no second request, no second warning.
    fk.configure(cache_dir=tmp_path / "another-cache")
    fk.get_kernel(REPO, version=1, backend="cpu")
    assert len(newer_version_warnings(notices)) == 1 and len(cdn.gets(VERSIONS_JSON)) == 1


@pytest.mark.parametrize("fails", [False, True], ids=["loads", "fails"])
def test_a_load_ends_without_waiting_for_a_versions_json_that_stalls(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path, fails: bool
) -> None:
    """The CDN serves the files at once but stalls in the middle of versions.json, longer
    than any read timeout: the import in a new process loads (or fails, for a file the
    CDN lacks) and the process exits while the answer is still held back. No warning,
    and nothing recorded as seen from an answer that never came."""
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    monkeypatch.setenv("FLASHHUB_READ_TIMEOUT", "600")
    started, release = threading.Event(), threading.Event()
    cdn.inject(VERSIONS_JSON, stalled(started, release))
    if fails:
        (cdn.root / f"kernels/{REPO}/v1/build/{local_variant()}/tensor_tricks/_ops.py").unlink()
    try:
        returncode, output = _run_child("-c", tmp_path)
        held_back = not release.is_set()
    finally:
        release.set()
    assert started.is_set() and held_back
    if fails:
        assert returncode == 1 and "HTTP 404" in output, output
    else:
        assert returncode == 0 and "LOADED acme/tensor-tricks@v1" in output, output
    assert "NewerVersionWarning" not in output
    assert not (cache_dir / "versions-seen.json").exists()


def test_a_versions_json_answered_just_after_the_files_still_warns(
    cdn: CdnServer, notices: list[warnings.WarningMessage]
) -> None:
    """The CDN holds versions.json back until it has served the last file: the load,
    whose files are in, waits that little longer for it and warns."""
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    started, release = threading.Event(), threading.Event()
    cdn.inject(VERSIONS_JSON, held(started, release))
    build = cdn.root / f"kernels/{REPO}/v1/build/{local_variant()}"
    files = [f for f in build.rglob("*") if f.is_file() and f.name != "metadata.json"]
    served: list[str] = []

    def serve_then_release(handler: CdnHandler, body: bytes) -> None:
        handler.send_file(body)
        handler.wfile.flush()
        served.append(handler.path)
        if len(served) == len(files):
            release.set()

    for file in files:
        cdn.inject("/" + file.relative_to(cdn.root).as_posix(), serve_then_release)
    fk.get_kernel(REPO, version=1)
    assert release.is_set()  # the answer came after every file
    (message,) = newer_version_warnings(notices)
    assert "but version 2 is available" in message


def test_the_cli_prints_the_notice_as_its_own_warning_line(cdn: CdnServer) -> None:
    """``flashhub get`` of an older version: one ``warning:`` line, not Python's format
    (the library's file and line, the category, the source line of the caller)."""
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    result = flashhub("get", REPO, "--version", "1")
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if "version 2 is available" in line]
    assert line.startswith("warning: You are using version 1 of 'acme/tensor-tricks'")
    assert "pass --version 2" in line and "get_kernel(" not in line  # the command's terms
    assert "NewerVersionWarning" not in result.stderr and ".py:" not in result.stderr


@pytest.mark.parametrize("offline", [False, True])
def test_a_warm_load_makes_no_request_and_no_warning(
    cdn: CdnServer,
    monkeypatch: pytest.MonkeyPatch,
    notices: list[warnings.WarningMessage],
    offline: bool,
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    monkeypatch.setenv("FLASHHUB_NO_VERSION_CHECK", "1")
    fk.get_kernel(REPO, version=1)  # fills the cache
    monkeypatch.delenv("FLASHHUB_NO_VERSION_CHECK")
    if offline:
        monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    _forget_kernels()
    cdn.clear_log()
    fk.get_kernel(REPO, version=1)
    assert cdn.requests == [] and newer_version_warnings(notices) == []


def test_the_environment_turns_the_check_off(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, notices: list[warnings.WarningMessage]
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    monkeypatch.setenv("FLASHHUB_NO_VERSION_CHECK", "1")
    fk.get_kernel(REPO, version=1)
    assert newer_version_warnings(notices) == [] and cdn.gets(VERSIONS_JSON) == []


def test_the_newest_version_or_no_versions_json_is_silent(
    cdn: CdnServer, notices: list[warnings.WarningMessage]
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    write_kernel(cdn.root, "acme/unlisted", 1, with_versions_json=False)
    fk.get_kernel(REPO, version=2)
    fk.get_kernel("acme/unlisted", version=1)
    assert newer_version_warnings(notices) == []
    assert len(cdn.gets(VERSIONS_JSON)) == 1  # one small request per cold load, at most


# -- the notice in the ways users run code ----------------------------------------------

IMPORT_LINE = "import flashhub.acme.tensor_tricks.v1 as k; print('LOADED', k.marker())"


def _run_child(how: str, tmp_path: Path, *args: str) -> tuple[int, str]:
    """Run IMPORT_LINE in a fresh interpreter the way ``how`` names; (returncode, output)."""
    python = [sys.executable, *args]
    env = {**os.environ, "PYTHONWARNINGS": ""}
    if how == "repl":
        return _run_in_terminal([*python, "-q", "-i"], f"{IMPORT_LINE}\nexit()\n", env)
    if how == "script":
        script = tmp_path / "load.py"
        script.write_text(IMPORT_LINE + "\n")
        command, stdin = [*python, str(script)], None
    elif how == "-c":
        command, stdin = [*python, "-c", IMPORT_LINE], None
    elif how == "stdin":
        command, stdin = [*python, "-"], IMPORT_LINE + "\n"
    elif how == "exec":  # what a notebook cell does
        command, stdin = [*python, "-c", f"exec(compile({IMPORT_LINE!r}, '<cell>', 'exec'))"], None
    else:  # a worker started with the spawn method, as DataLoader and torch.multiprocessing do
        worker = (
            "import multiprocessing as mp\n"
            "def work():\n"
            f"    {IMPORT_LINE}\n"
            "if __name__ == '__main__':\n"
            "    p = mp.get_context('spawn').Process(target=work); p.start(); p.join()\n"
            "    raise SystemExit(p.exitcode)\n"
        )
        script = tmp_path / "spawn.py"
        script.write_text(worker)
        command, stdin = [*python, str(script)], None
    result = subprocess.run(
        command, input=stdin, env=env, capture_output=True, text=True, timeout=120
    )
    return result.returncode, result.stdout + result.stderr


def _run_in_terminal(command: list[str], typed: str, env: dict[str, str]) -> tuple[int, str]:
    """Run ``command`` on a pseudo-terminal (a real interactive REPL), typing ``typed``."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(
        command, stdin=terminal, stdout=terminal, stderr=terminal, env=env, close_fds=True
    )
    os.close(terminal)
    os.write(controller, typed.encode())
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        output += chunk
    os.close(controller)
    return process.wait(timeout=120), output.decode(errors="replace")


@pytest.mark.parametrize("how", ["script", "-c", "stdin", "repl", "exec", "spawn"])
def test_the_notice_never_fails_a_cold_import_however_the_code_runs(
    cdn: CdnServer, tmp_path: Path, how: str
) -> None:
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    returncode, output = _run_child(how, tmp_path)
    assert returncode == 0, output
    assert "LOADED acme/tensor-tricks@v1" in output
    assert output.count("NewerVersionWarning") == 1, output
    assert "of 'acme/tensor-tricks', but version 2 is available" in output


def test_warnings_turned_into_errors_do_not_fail_the_load(cdn: CdnServer, tmp_path: Path) -> None:
    """``python -W error`` (common in CI) must not make a publisher's new version break
    the import: the notice is logged instead."""
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    returncode, output = _run_child("-c", tmp_path, "-W", "error")
    assert returncode == 0, output
    assert "LOADED acme/tensor-tricks@v1" in output
    assert "of 'acme/tensor-tricks', but version 2 is available" in output
