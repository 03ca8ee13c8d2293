"""The ``flashhub`` command as a real process, where the process itself is the point: its
output piped into a reader that stops early, and its log on a terminal that shows
progress bars, and Ctrl-C as it starts. Ctrl-C in a download is tested in test_interrupt.py."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import threading
from pathlib import Path

import pytest

from support.cdn_server import CdnServer, slowly
from support.cli_runner import (
    UNWRITTEN_OUTPUT,
    flashhub,
    flashhub_on_a_full_disk,
    flashhub_process,
)
from support.projects import REPO, UNIVERSAL
from support.terminal import read_all
from support.trees import kernel_files, write_blob_kernel, write_kernel, write_variant

FLASHHUB = [sys.executable, "-m", "flashhub_kernels"]


def test_output_into_a_pipe_closed_early_exits_quietly(cdn: CdnServer) -> None:
    # `flashhub info ... | head -1`: far more output than a pipe buffers.
    files = {f"tensor_tricks/data_{i:04}.bin": b"x" for i in range(3000)}
    write_variant(cdn.root, REPO, 1, UNIVERSAL, {**kernel_files("tensor_tricks", "m"), **files})
    process = subprocess.Popen(
        [*FLASHHUB, "info", REPO, "--version", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    process.stdout.close()  # the reader goes away, as `head -1` does
    err = process.stderr.read()
    code = process.wait(timeout=120)
    assert first.startswith(f"{REPO}@v1 on "), first + err
    assert err == ""  # no "Broken pipe", no "Exception ignored"
    assert code == 141  # 128 + SIGPIPE, as a shell reports a command its pipe ended


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["cache", "list", "--help"]])
def test_help_on_a_full_stdout_fails_saying_so(args: list[str]) -> None:
    # argparse ignores a stdout it cannot write: `--help > /dev/full` succeeded, unwritten.
    result = flashhub_on_a_full_disk(*args)
    assert (result.returncode, result.stderr.splitlines()) == (1, UNWRITTEN_OUTPUT)


@pytest.mark.parametrize(
    "command",
    [["cache", "list"], ["cache", "verify"], ["lock"], ["variants", REPO], ["describe-api", REPO]],
)
def test_output_on_a_full_disk_fails_saying_so(project: Path, command: list[str]) -> None:
    # Unbuffered (PYTHONUNBUFFERED), each print fails as it is made, as one past the 8 KiB
    # buffer does: it ended in a bare "error: [Errno 28] No space left on device".
    assert flashhub("get", REPO, "--version", "2").returncode == 0  # for the cache commands
    args = [*command, project] if command == ["lock"] else command
    result = flashhub_on_a_full_disk(*args, unbuffered=True)
    assert (result.returncode, result.stderr.splitlines()) == (1, UNWRITTEN_OUTPUT)


def test_a_listing_longer_than_the_output_buffer_on_a_full_disk_fails_saying_so(
    cdn: CdnServer,
) -> None:
    for version in range(1, 81):  # a line each: some 8 KiB in all
        write_kernel(cdn.root, REPO, version, [UNIVERSAL])
    result = flashhub_on_a_full_disk("variants", REPO, "--all-versions")
    assert (result.returncode, result.stderr.splitlines()) == (1, UNWRITTEN_OUTPUT)


def test_with_stderr_closed_the_output_holds_only_the_path(cdn: CdnServer, cache_dir: Path) -> None:
    # `DIR=$(flashhub get ... 2>&-)`: Python starts with sys.stderr None, and what is
    # printed to None goes to stdout. v1 has a newer version: a notice is due.
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL])
    write_kernel(cdn.root, REPO, 2, [UNIVERSAL])
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_PROGRESS_BARS", "_CHECK"))}

    def get(version: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FLASHHUB, "get", REPO, "--version", version],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.close(2),
        )

    loaded, missing = get("1"), get("3")
    assert loaded.returncode == 0
    assert loaded.stdout == f"{cache_dir / 'kernels' / REPO / 'v1' / UNIVERSAL}\n"
    assert (missing.returncode, missing.stdout) == (1, "")


@pytest.mark.parametrize("flags", [[], ["-X", "dev"]], ids=["plain", "dev mode"])
def test_with_stdout_closed_a_command_ends_without_a_traceback(
    cdn: CdnServer, flags: list[str]
) -> None:
    # Dev mode warns of every file left open at teardown: the null stream that stands in
    # for the closed stdout must not be one.
    write_blob_kernel(cdn.root, bytes(1 << 10))
    result = subprocess.run(
        [sys.executable, *flags, *FLASHHUB[1:], "get", REPO, "--version", "1"],
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_with_stdin_closed_cache_clear_asks_for_yes(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL])
    assert flashhub("get", REPO, "--version", "1").returncode == 0

    def clear(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FLASHHUB, "cache", "clear", *options],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.close(0),
        )

    refused, cleared = clear(), clear("--yes")
    assert refused.returncode == 2, refused.stderr
    assert "pass --yes to clear the cache" in refused.stderr
    assert cleared.returncode == 0 and cleared.stdout.startswith("removed 1 entry"), cleared


def flashhub_get_v1(**env: str) -> subprocess.CompletedProcess[str]:
    """``flashhub get REPO --version 1`` in a child with ``env`` added to this one's."""
    return subprocess.run(
        [*FLASHHUB, "get", REPO, "--version", "1"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_path_stdout_cannot_encode_fails_saying_how_to_show_it(
    cdn: CdnServer, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL])
    result = flashhub_get_v1(
        PYTHONIOENCODING="ascii", FLASHHUB_CACHE_DIR=str(tmp_path / "c\xe4che")
    )
    assert result.returncode == 1, result.stderr
    assert "stdout's encoding (ascii) cannot show" in result.stderr
    assert "hint: set PYTHONIOENCODING=utf-8" in result.stderr


def test_a_cache_dir_whose_name_is_not_utf8_is_printed_as_its_bytes(
    cdn: CdnServer, tmp_path: Path
) -> None:
    # A strict UTF-8 stdout, as in an en_US.UTF-8 locale; the cache's name holds a byte
    # that is no UTF-8 (a Latin-1 "\xe9"), which Python reads as a lone surrogate.
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL])
    cache = tmp_path / os.fsdecode(b"c\xe9che")
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "FLASHHUB_CACHE_DIR": str(cache)}
    got = subprocess.run(
        [*FLASHHUB, "get", REPO, "--version", "1"], env=env, capture_output=True, timeout=120
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == os.fsencode(cache / "kernels" / REPO / "v1" / UNIVERSAL) + b"\n"

    # A program that runs a command in its own process gets its stdout back as it was.
    program = (
        "import sys; from flashhub_kernels.cli import main; "
        "main(sys.argv[1:]); print(sys.stdout.errors)"
    )
    cleared = subprocess.run(
        [sys.executable, "-c", program, "cache", "clear", "--yes"],
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert cleared.stdout == b"removed 1 entry from " + os.fsencode(cache) + b"\nstrict\n", (
        cleared.stderr
    )


def test_paths_whose_names_are_not_utf8_are_printed_as_their_bytes(tmp_path: Path) -> None:
    # As the cache's directory above: a local kernel's path on stdout, and on stderr the
    # key keygen wrote, are the bytes that name them, not the text "\udce9".
    kernel = tmp_path / os.fsdecode(b"k\xe9")
    for name, data in kernel_files("tensor_tricks", "m").items():
        (kernel / "build" / UNIVERSAL / name).parent.mkdir(parents=True, exist_ok=True)
        (kernel / "build" / UNIVERSAL / name).write_bytes(data)
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "FLASHHUB_CACHE_DIR": str(kernel / "c")}

    def run(*args: str | Path) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*FLASHHUB, *map(str, args)], env=env, capture_output=True, timeout=120
        )

    info, api, prune = run("info", kernel), run("describe-api", kernel), run("cache", "prune")
    keygen = run("keygen", "--out", kernel / "key")
    assert info.stdout.startswith(os.fsencode(kernel) + b" on "), info.stderr
    assert b"Path: " + os.fsencode(kernel) + b"\n" in api.stdout, api.stderr
    assert prune.stdout == os.fsencode(kernel / "c") + b" does not exist; nothing to remove\n"
    assert b"wrote the private key to " + os.fsencode(kernel / "key") + b" " in keygen.stderr
    assert b"\\udce9" not in info.stdout + api.stdout + prune.stdout + keygen.stderr


# Python in the C locale with its UTF-8 mode and locale coercion off: file names in ASCII.
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
NON_ASCII_FILE = "tensor_tricks/d\xe4ta.txt"


def publish_a_non_ascii_file_name(cdn: CdnServer) -> None:
    files = {**kernel_files("tensor_tricks", "m"), NON_ASCII_FILE: b"table\n"}
    write_variant(cdn.root, REPO, 1, UNIVERSAL, files)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(f'["{UNIVERSAL}"]')


@pytest.mark.parametrize("stdout", ["ascii", "utf-8"])
def test_a_file_name_an_ascii_locale_cannot_hold_fails_saying_to_use_utf8(
    cdn: CdnServer, tmp_path: Path, stdout: str
) -> None:
    publish_a_non_ascii_file_name(cdn)
    result = flashhub_get_v1(
        **ASCII_LOCALE, PYTHONIOENCODING=stdout, FLASHHUB_CACHE_DIR=str(tmp_path)
    )
    assert result.returncode == 1, result.stderr
    assert "a name the file system encoding of this process (ascii) cannot hold" in result.stderr
    assert "hint: run in a UTF-8 locale (LC_ALL=C.UTF-8), or set PYTHONUTF8=1" in result.stderr
    assert not [p for p in cdn.gets() if "/tensor_tricks/" in p]  # refused before fetching


def test_cache_commands_in_an_ascii_locale_leave_an_entry_they_cannot_name_the_files_of(
    cdn: CdnServer, tmp_path: Path
) -> None:
    # Cached in a UTF-8 locale; checked in one whose file names are ASCII, where the file
    # seemed missing: verify failed the entry, and prune removed it.
    publish_a_non_ascii_file_name(cdn)
    cache = tmp_path / "cache"
    # From the tree itself: the test's server looks its files up by their escaped names.
    got = flashhub_get_v1(FLASHHUB_CACHE_DIR=str(cache), FLASHHUB_CDN_URL=cdn.root.as_uri())
    assert got.returncode == 0, got.stderr
    for command in ("verify", "prune"):
        result = subprocess.run(
            [*FLASHHUB, "cache", command],
            env={**os.environ, **ASCII_LOCALE, "FLASHHUB_CACHE_DIR": str(cache)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 1, result.stdout + result.stderr
        assert "a name the file system encoding of this process (ascii) cannot hold as UTF-8" in (
            result.stderr
        )
        assert "hint: run in a UTF-8 locale (LC_ALL=C.UTF-8), or set PYTHONUTF8=1" in result.stderr
    entry = cache / "kernels" / REPO / "v1" / UNIVERSAL
    assert (entry / NON_ASCII_FILE).read_bytes() == b"table\n"


def test_a_utf8_cdn_url_in_an_ascii_locale_is_read_as_utf8(tmp_path: Path) -> None:
    # Python reads the command line and the environment in the locale's encoding: in an
    # ASCII one, each byte of the UTF-8 "\xfc" is a lone surrogate, once refused as "a
    # byte that is not UTF-8 text". A Latin-1 byte still is, with the same hint as the
    # variable's, in the option's name.
    root = tmp_path / "cdn-\xfc"
    write_kernel(root, REPO, 1, [UNIVERSAL])
    env = {**os.environ, **ASCII_LOCALE, "FLASHHUB_CACHE_DIR": str(tmp_path / "cache")}

    def get(url: bytes, option: bool) -> subprocess.CompletedProcess[bytes]:
        given = ["--cdn-url", url] if option else []
        with_url = env if option else {**env, "FLASHHUB_CDN_URL": os.fsdecode(url)}
        command = [*map(os.fsencode, FLASHHUB), b"get", REPO.encode(), b"--version", b"1"]
        return subprocess.run([*command, *given], env=with_url, capture_output=True, timeout=120)

    utf8 = root.as_uri().encode()  # file:///.../cdn-%C3%BC: as the shell would type it
    utf8 = utf8.replace(b"%C3%BC", "\xfc".encode())
    for option in (True, False):
        got = get(utf8, option)
        assert got.returncode == 0, got.stderr
        assert got.stdout.endswith(f"/v1/{UNIVERSAL}\n".encode())
    refused = get(utf8.replace("\xfc".encode(), b"\xe9"), option=True)
    assert refused.returncode == 2
    assert b"holds a byte that is not UTF-8 text" in refused.stderr
    assert b"hint: fix --cdn-url: percent-encode it where it belongs" in refused.stderr


def test_v_log_lines_on_a_terminal_start_their_own_line_beside_a_bar(cdn: CdnServer) -> None:
    cdn.inject(write_blob_kernel(cdn.root, bytes(3 << 20)), slowly(2.0))  # a bar appears
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "FLASHHUB_DISABLE_PROGRESS_BARS"}
    process = subprocess.Popen(
        [*FLASHHUB, "-v", "get", REPO, "--version", "1"],
        stdout=subprocess.PIPE,
        stderr=terminal,
        env={**env, "PYTHONWARNINGS": "ignore"},
    )
    os.close(terminal)
    received: list[bytes] = []
    reader = threading.Thread(target=read_all, args=(controller, received), daemon=True)
    reader.start()
    try:
        assert process.wait(timeout=120) == 0
    finally:
        if process.poll() is None:
            process.kill()
        reader.join(10)
        os.close(controller)
        assert process.stdout is not None
        process.stdout.close()
    screen = b"".join(received).decode()
    assert re.search(r"\d+%\|", screen), screen  # a bar was drawn
    starts = [m.start() for m in re.finditer("flashhub_kernels: ", screen)]
    assert any("downloaded" in screen[s : s + 40] for s in starts), screen
    for start in starts:
        assert start == 0 or screen[start - 1] in "\r\n", repr(screen[max(0, start - 80) : start])


# On the path of a process, it raises KeyboardInterrupt, as Ctrl-C pressed then would,
# when the module named by INTERRUPT_AT_IMPORT is first imported.
CTRL_C_AT_IMPORT = """
import os, sys

class _CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("INTERRUPT_AT_IMPORT"):
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, _CtrlC())
"""


@pytest.mark.parametrize(
    "module",
    [
        "argparse",  # the first the command line imports
        "flashhub_kernels.cli._common",  # what every command shares
        "flashhub_kernels.cli.cache",  # the command's own, imported as its parser is built
    ],
)
def test_ctrl_c_while_the_command_starts_says_interrupted_without_a_traceback(
    tmp_path: Path, module: str
) -> None:
    """Ctrl-C in the first fraction of a second, as ``flashhub`` imports its modules and
    builds its parser, ends it as a later Ctrl-C does: one line, status 130."""
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_AT_IMPORT)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    result = flashhub_process(
        "cache", "list", env={"PYTHONPATH": path, "INTERRUPT_AT_IMPORT": module}
    )
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "interrupted\n")


def test_ctrl_c_while_the_0_1_2_script_starts_says_interrupted_without_a_traceback(
    tmp_path: Path,
) -> None:
    (tmp_path / "sitecustomize.py").write_text(CTRL_C_AT_IMPORT)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path, "INTERRUPT_AT_IMPORT": "argparse"}
    script = Path(sys.executable).with_name("flashhub-kernel-load")
    result = subprocess.run(
        [script, "acme/tensor-tricks", "--version", "1"], env=env, capture_output=True, text=True
    )
    assert (result.returncode, result.stdout, result.stderr) == (130, "", "interrupted\n")
