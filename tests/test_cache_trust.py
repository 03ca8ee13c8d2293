"""A cache nobody else can plant code in: ownership and mode checks, as ssh makes them.

Each attack is staged for real: a verified cache entry is made by a load, then handed to
another user (``nobody``, with ``os.chown``, which needs root) or opened up (``chmod``),
and code is planted in it (``planted_cache``, in conftest.py). A fresh process then loads
the kernel. What ``flashhub cache verify`` reports of such a cache is in test_cli_cache.py.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import NOBODY, needs_root
from flashhub_kernels._cache.directories import ensure_dir
from flashhub_kernels._cache.receipt import read_receipt
from flashhub_kernels._cache.trust import distrust
from flashhub_kernels._cache.versions_seen import VERSIONS_SEEN_NAME
from flashhub_kernels._cache_imports import TABLE_DIR
from flashhub_kernels._constants import INDEX_NAME, MANIFEST_NAME, RECEIPT_NAME
from flashhub_kernels._utils.filesystem import read_regular
from support.cdn_server import CdnServer, drop_after
from support.cli_runner import PYTHON_M_FLASHHUB
from support.preloaded import run_code
from support.trees import local_variant, write_blob_kernel, write_kernel

REPO = "acme/tensor-tricks"
LOAD = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"


def load_in_child(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_code(LOAD, env={**os.environ, **(env or {})})


def refused(result: subprocess.CompletedProcess[str], path: Path, marker: Path) -> str:
    assert result.returncode != 0
    assert "CacheError" in result.stderr and "refusing to trust the cache" in result.stderr
    assert str(path) in result.stderr and "FLASHHUB_CACHE_DIR" in result.stderr
    assert not marker.exists(), "the planted code ran"
    return result.stderr


def test_a_cache_root_owned_by_another_user_is_refused(
    planted_cache: Path, cache_dir: Path, cdn: CdnServer
) -> None:
    needs_root()
    os.chown(cache_dir, NOBODY, NOBODY)
    cdn.clear_log()
    stderr = refused(load_in_child(), cache_dir, planted_cache)
    assert "owned by another user" in stderr and f"uid {NOBODY}" in stderr
    assert "mode 0700" in stderr
    assert cdn.requests == []  # refused before anything, the network included


def test_a_cache_directory_that_is_a_file_is_named_as_such(tmp_path: Path, cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    a_file = tmp_path / "cache-file"
    a_file.write_text("not a directory")
    fk.configure(cache_dir=a_file)

    with pytest.raises(fk.errors.CacheError) as info:
        fk.get_kernel(REPO, version=1)

    assert f"{a_file} is not a directory" in info.value.message
    assert "trust" not in str(info.value), "a file is no matter of who may write it"
    assert info.value.hint is not None and "FLASHHUB_CACHE_DIR" in info.value.hint
    assert a_file.read_text() == "not a directory"


@pytest.mark.parametrize("where", ["root", "version"])
@pytest.mark.parametrize("mode, why", [(0o777, "every user"), (0o770, "its group")])
def test_a_directory_others_can_write_is_refused(
    planted_cache: Path, cache_dir: Path, where: str, mode: int, why: str
) -> None:
    path = cache_dir if where == "root" else cache_dir / "kernels/acme/tensor-tricks/v1"
    path.chmod(mode)
    stderr = refused(load_in_child(), path, planted_cache)
    assert f"is writable by {why}" in stderr and f"mode {mode:04o}" in stderr


def test_a_sticky_world_writable_ancestor_is_fine(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    public = tmp_path / "public"
    public.mkdir()
    public.chmod(0o1777)  # like /tmp: others may create, not replace
    monkeypatch.setenv("FLASHHUB_CACHE_DIR", str(public / "mine"))
    write_kernel(cdn.root, REPO, 1)
    assert load_in_child().returncode == 0
    assert load_in_child().stdout.strip() == f"{REPO}@v1:{local_variant()}"


def test_a_group_writable_cache_needs_the_shared_opt_in(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)
    cache_dir.chmod(0o770)
    refused(load_in_child(), cache_dir, tmp_path / "no-marker")
    shared = load_in_child({"FLASHHUB_CACHE_SHARED": "1"})
    assert shared.returncode == 0, shared.stderr
    assert shared.stdout.strip() == f"{REPO}@v1:{local_variant()}"


@pytest.mark.parametrize("shared", [False, True], ids=["private", "shared"])
def test_under_umask_000_no_one_else_may_write_what_a_load_caches(
    cdn: CdnServer, cache_dir: Path, shared: bool
) -> None:
    # Python makes __pycache__ under the umask: 0777 here, so that another user could swap
    # the bytecode a warm load runs, had the load left it so.
    write_kernel(cdn.root, REPO, 1)
    env = {**os.environ, "FLASHHUB_CACHE_SHARED": "1"} if shared else dict(os.environ)
    loaded = run_code(f"import os; os.umask(0); {LOAD}", env=env)
    assert loaded.returncode == 0, loaded.stderr
    made = [cache_dir, *cache_dir.rglob("*")]
    assert any(path.name == "__pycache__" for path in made)
    others_write = [p for p in made if p.stat().st_mode & 0o002]
    assert others_write == []
    if not shared:  # the group may write nothing either
        assert [p for p in made if p.stat().st_mode & 0o020] == []


def test_a_cache_a_group_shares_is_left_open_to_the_group_whatever_the_umask(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    loaded = run_code(
        f"import os; os.umask(0o077); {LOAD}",
        env={**os.environ, "FLASHHUB_CACHE_SHARED": "1"},
    )
    assert loaded.returncode == 0, loaded.stderr
    table = cache_dir / TABLE_DIR  # rows of one user's imports: its own
    made = [p for p in [cache_dir, *cache_dir.rglob("*")] if table not in (p, *p.parents)]
    entry = cache_dir / "kernels/acme/tensor-tricks/v1" / local_variant()
    for path in made:
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir():  # the group's members make entries, mutexes and staging there
            assert mode & 0o070 == 0o070, f"{path}: {mode:04o}"
        elif path.suffix == ".lock":  # and wait for each other on these
            assert mode & 0o060 == 0o060, f"{path}: {mode:04o}"
        else:
            assert mode & 0o040, f"{path}: {mode:04o}"
    assert entry / "tensor_tricks/__init__.py" in made


@pytest.mark.parametrize("what", ["version", "entry"])
def test_a_symlinked_version_or_entry_directory_is_refused(
    planted_cache: Path, cache_dir: Path, tmp_path: Path, what: str
) -> None:
    version_dir = cache_dir / "kernels/acme/tensor-tricks/v1"
    path = version_dir if what == "version" else version_dir / local_variant()
    elsewhere = tmp_path / f"elsewhere-{what}"
    shutil.move(path, elsewhere)
    path.symlink_to(elsewhere, target_is_directory=True)
    stderr = refused(load_in_child(), path, planted_cache)
    assert "is a symlink" in stderr
    assert "hint: remove the symlink (whoever can write the cache made it" in stderr
    # A group sharing the cache on purpose is not told to set what is set.
    stderr = refused(load_in_child({"FLASHHUB_CACHE_SHARED": "1"}), path, planted_cache)
    assert "is a symlink" in stderr and "FLASHHUB_CACHE_SHARED" not in stderr


def test_a_root_owned_read_only_cache_is_trusted() -> None:
    # What an image bakes: owned by root, 0755. (This process may be root or not: root is
    # a trusted owner either way, and so is this user.)
    root_owned = os.stat("/usr")
    assert stat.S_IMODE(root_owned.st_mode) & 0o022 == 0 and root_owned.st_uid == 0
    assert distrust(root_owned, shared=False, inside=True) is None


def nobody_runs() -> list[str]:
    """What runs a command as ``nobody``, in its own group only; the test is skipped where
    that cannot be done."""
    needs_root()
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running a process as another user needs setpriv")
    as_nobody = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if subprocess.run([*as_nobody, sys.executable, "-c", ""], capture_output=True).returncode:
        pytest.skip(f"nobody cannot run {sys.executable} (one under a private home, say)")
    return as_nobody


def test_a_member_of_a_group_sharing_the_cache_loads_past_another_members_kept_files(
    cdn: CdnServer,
) -> None:
    # One member's download broke off, keeping its files to continue (0644: writable by
    # that member only). The next member to load cannot write to them: it fetches anew.
    as_nobody = nobody_runs()
    cdn.inject(write_blob_kernel(cdn.root, bytes(3 << 20)), *[drop_after(1 << 20)] * 6)
    with tempfile.TemporaryDirectory() as shared:  # not under tmp_path: nobody cannot reach it
        os.chmod(shared, 0o755)
        cache = Path(shared, "flashhub-cache")
        cache.mkdir()
        os.chown(cache, os.geteuid(), NOBODY)  # nobody's group shares it with this user
        os.chmod(cache, 0o2770)
        env = {"FLASHHUB_CACHE_DIR": str(cache), "FLASHHUB_CACHE_SHARED": "1"}
        broke_off = load_in_child(env)
        kept = list(cache.glob("kernels/acme/tensor-tricks/v1/.partial-*/*"))
        cdn.faults.clear()
        command = [*as_nobody, sys.executable, "-c", LOAD]
        loaded = subprocess.run(command, env={**os.environ, **env}, capture_output=True, text=True)
    assert "TransportError" in broke_off.stderr and kept, broke_off.stderr
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip().endswith("blob")


def test_a_root_owned_cache_loads_for_another_user_once_made_readable(cdn: CdnServer) -> None:
    # An image built as root and run as another user: the cache is created private
    # (0700); hosting.md's step `chmod -R a+rX` opens it to reading only.
    as_nobody = nobody_runs()
    write_kernel(cdn.root, REPO, 1)
    with tempfile.TemporaryDirectory() as image:  # not under tmp_path: nobody cannot reach it
        os.chmod(image, 0o755)
        cache = Path(image, "flashhub-cache")
        built = load_in_child({"FLASHHUB_CACHE_DIR": str(cache)})  # the build step, as root
        cdn.clear_log()
        offline = {**os.environ, "FLASHHUB_CACHE_DIR": str(cache), "FLASHHUB_OFFLINE": "1"}

        def run_as_nobody() -> subprocess.CompletedProcess[str]:
            command = [*as_nobody, sys.executable, "-c", LOAD]
            return subprocess.run(command, env=offline, capture_output=True, text=True)

        private = run_as_nobody()
        subprocess.run(["chmod", "-R", "a+rX,a-w", str(cache)], check=True)
        opened = run_as_nobody()
    assert built.returncode == 0, built.stderr
    assert private.returncode == 1
    assert "CacheError: cannot read" in private.stderr and "cannot write" not in private.stderr
    assert "chmod -R a+rX" in private.stderr
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout.strip() == built.stdout.strip()
    assert cdn.requests == []


GET_KERNEL = f"import flashhub_kernels as fk\nprint(fk.get_kernel({REPO!r}, version=1).marker())\n"


def test_an_image_cache_read_only_to_its_user_loads_what_it_holds_and_names_what_it_lacks(
    cdn: CdnServer,
) -> None:
    # An image built by root, its cache made readable and read-only (`chmod -R
    # a+rX,a-w`), run online by another user: what it holds loads and checks out without
    # a word, what it lacks fails on the kernel's name, before any request.
    as_nobody = nobody_runs()
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    with tempfile.TemporaryDirectory() as image:  # not under tmp_path: nobody cannot reach it
        os.chmod(image, 0o755)
        cache = Path(image, "flashhub-cache")
        env = {**os.environ, "FLASHHUB_CACHE_DIR": str(cache)}
        built = load_in_child(env)  # the build step, as root
        subprocess.run(["chmod", "-R", "a+rX,a-w", str(cache)], check=True)
        before = {p: p.stat().st_mtime_ns for p in cache.rglob("*")}
        cdn.clear_log()

        def run_as_nobody(*args: str) -> subprocess.CompletedProcess[str]:
            command = [*as_nobody, sys.executable, *args]
            return subprocess.run(command, env=env, capture_output=True, text=True)

        imported, got = run_as_nobody("-c", LOAD), run_as_nobody("-c", GET_KERNEL)
        listed = run_as_nobody("-m", "flashhub_kernels", "cache", "list")
        verified = run_as_nobody("-m", "flashhub_kernels", "cache", "verify")
        lacking = run_as_nobody("-c", "import flashhub.acme.tensor_tricks.v2")
        after = {p: p.stat().st_mtime_ns for p in cache.rglob("*")}
    assert built.returncode == 0, built.stderr
    for quiet in (imported, got, listed, verified):
        assert (quiet.returncode, quiet.stderr) == (0, ""), quiet.stderr
    assert imported.stdout == got.stdout == built.stdout
    assert f"{REPO}  " in listed.stdout and "1 entry checked" in verified.stdout
    assert lacking.returncode == 1
    error = lacking.stderr.splitlines()
    assert error[-2].startswith(
        f"flashhub_kernels.errors.CacheError: {REPO}@v2 is not in the cache, and this "
        "process cannot write there to download it: cannot write "
    )
    assert f"`flashhub get {REPO} --version 2`" in error[-1]
    assert "free disk space" not in error[-1]
    assert cdn.requests == []
    assert after == before  # nothing written, not even a lock file


WRITING_BYTECODE = "import sys\nsys.dont_write_bytecode = False\n"
WATCH_WRITES = """
import os, sys
import torch, flashhub  # their own start-up is not the warm load under test
writes = []

def audit(event, args):
    if event == "open":
        path, mode, flags = args
        writing = any(c in (mode or "") for c in "wax+") if isinstance(mode, str) else bool(
            (flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        )
        if writing:
            writes.append(f"open {path}")
    elif event in ("os.mkdir", "os.rename", "os.replace", "os.remove"):
        writes.append(f"{event} {args[0]}")

sys.addaudithook(audit)
import flashhub.acme.tensor_tricks.v1 as k
from flashhub.acme.tensor_tricks.v1 import helpers
assert k.marker().startswith("acme/tensor-tricks@v1") and helpers.shout()
print(writes)
"""


def test_a_warm_load_writes_nothing_but_its_row_of_the_import_table(
    cdn: CdnServer, cache_dir: Path
) -> None:
    # The download imports nothing; the warm loads below import the package and a
    # submodule, so their bytecode must already be in the entry. Bytecode writing is on
    # in these processes, as it is by default (whatever PYTHONDONTWRITEBYTECODE says here).
    env = dict(os.environ)
    write_kernel(cdn.root, REPO, 1)
    install = f"import flashhub_kernels as fk; fk.install_kernel({REPO!r}, version=1)"
    cold = run_code(WRITING_BYTECODE + install, env=env)
    assert cold.returncode == 0, cold.stderr
    # The first warm import looks the kernel up in full, and records the answer: a new
    # file beside the table, renamed over it.
    first = run_code(WRITING_BYTECODE + WATCH_WRITES, env=env)
    assert first.returncode == 0, first.stderr
    writes = ast.literal_eval(first.stdout.strip().splitlines()[-1])
    # (The library's own bytecode, if this Python had not compiled it yet, is not the
    # cache's business: only what was written in the cache counts.)
    table = cache_dir / TABLE_DIR
    in_cache = {p for w in writes if cache_dir in Path(p := w.split(" ", 1)[1]).parents}
    assert in_cache - {str(table)} == {new := max(in_cache)}, writes  # the table, one file
    assert Path(new).parent == table and Path(new).name.startswith(".flashhub.acme.")
    assert f"os.rename {new}" in writes and len(list(table.glob("*.json"))) == 1
    # The next one is answered by the table, and writes nothing.
    second = run_code(WRITING_BYTECODE + WATCH_WRITES, env=env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip().splitlines()[-1] == "[]"


# -- pipes where the cache keeps its records ----------------------------------------------------
# A neighbour who may create files in the cache (a group sharing it, or anyone where its
# root sits in a sticky world-writable directory) can put a named pipe where a load or a
# command reads a record: a plain read of one waits for a writer, forever. Each load and
# command below runs in a child that is cut after PIPE_TIMEOUT seconds.

PIPE_TIMEOUT = 30
ENTRY = f"kernels/{REPO}/v1/{local_variant()}"


def plant_pipe(path: Path) -> None:
    """A named pipe at ``path`` (what was there removed), its directories made private."""
    ensure_dir(path.parent)
    path.unlink(missing_ok=True)
    os.mkfifo(path, 0o600)


def run_cut_short(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a child with this test's environment, killed (``TimeoutExpired``) if
    it has not ended after :data:`PIPE_TIMEOUT` seconds."""
    return run_code(code, *args, env=dict(os.environ), timeout=PIPE_TIMEOUT)


def test_a_pipe_in_place_of_the_versions_seen_record_is_no_record(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    plant_pipe(cache_dir / VERSIONS_SEEN_NAME)
    newest = run_cut_short(f"import flashhub_kernels as fk; print(fk.install_kernel({REPO!r}))")
    assert newest.returncode == 0, newest.stderr
    assert newest.stdout.strip() == str(cache_dir / ENTRY)
    # The record is written in its place.
    assert json.loads((cache_dir / VERSIONS_SEEN_NAME).read_bytes()) == {REPO: 1}


def test_a_record_another_user_made_in_a_sticky_cache_root_is_not_used(
    cdn: CdnServer, cache_dir: Path
) -> None:
    # A root others may write, sticky as /tmp: their versions-seen.json would claim v99
    # was listed (every newest-version lookup refused), or hold none (rollbacks let by).
    needs_root()
    write_kernel(cdn.root, REPO, 1)
    cache_dir.mkdir(parents=True, exist_ok=True)
    cache_dir.chmod(0o1777)
    planted = cache_dir / VERSIONS_SEEN_NAME
    planted.write_text(json.dumps({REPO: 99}))
    os.chown(planted, NOBODY, NOBODY)
    newest = run_code(
        f"import flashhub_kernels as fk; print(fk.install_kernel({REPO!r}))", env=dict(os.environ)
    )
    assert newest.returncode == 0, newest.stderr
    assert newest.stdout.strip() == str(cache_dir / ENTRY)
    assert "RollbackError" not in newest.stderr


def test_a_pipe_in_place_of_the_variant_index_is_no_index(cdn: CdnServer, cache_dir: Path) -> None:
    write_kernel(cdn.root, REPO, 1)
    index = cache_dir / "kernels" / REPO / "v1" / INDEX_NAME
    plant_pipe(index)
    loaded = run_cut_short(LOAD)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == f"{REPO}@v1:{local_variant()}"
    assert index.is_file() and local_variant() in json.loads(index.read_bytes())["present"]


def test_a_pipe_in_place_of_a_receipt_leaves_the_entry_untrusted_and_a_load_repairs_it(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    assert load_in_child().returncode == 0
    receipt = cache_dir / ENTRY / RECEIPT_NAME
    plant_pipe(receipt)
    listed = run_cut_short(PYTHON_M_FLASHHUB, "cache", "list")
    assert listed.returncode == 0, listed.stderr
    verified = run_cut_short(PYTHON_M_FLASHHUB, "cache", "verify")
    assert verified.returncode == 1
    assert "no receipt: the entry was never completely verified" in verified.stdout
    loaded = run_cut_short(LOAD)  # the entry is not trusted: fetched again
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == f"{REPO}@v1:{local_variant()}"
    assert receipt.is_file() and read_receipt(cache_dir / ENTRY) is not None


def test_cache_verify_of_an_entry_whose_manifest_is_a_pipe_fails_it(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    assert load_in_child().returncode == 0
    plant_pipe(cache_dir / ENTRY / MANIFEST_NAME)
    verified = run_cut_short(PYTHON_M_FLASHHUB, "cache", "verify", "--json")
    assert verified.returncode == 1, verified.stderr
    [entry] = json.loads(verified.stdout)["entries"]
    assert entry["problem"] == f"{MANIFEST_NAME} cannot be read (a pipe, not a regular file)"
    loaded = run_cut_short(LOAD)  # the receipt vouches for the files: a load needs no more
    assert loaded.returncode == 0, loaded.stderr


@pytest.mark.parametrize("kind", ["pipe", "directory", "device"])
def test_reading_a_record_refuses_at_once_what_is_no_regular_file(
    tmp_path: Path, kind: str
) -> None:
    """A symlink to ``/dev/zero`` would never end; a pipe waits for a writer."""
    path = tmp_path / "record.json"
    if kind == "pipe":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(OSError, match="not a regular file") as info:
        read_regular(path)
    assert info.value.errno == errno.EINVAL and info.value.filename == str(path)
    (tmp_path / "regular.json").write_bytes(b"{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "regular.json")
    assert read_regular(tmp_path / "link.json") == b"{}"  # a symlink to a file is read, as before


# -- a neighbour's symlinks, where others may create entries ------------------------------


@contextlib.contextmanager
def reachable_by_nobody(*names: str) -> Iterator[tuple[Path, ...]]:
    """New directories ``names`` in a temporary one that ``nobody`` can reach (no
    ``tmp_path`` is), removed afterwards."""
    with tempfile.TemporaryDirectory() as top:
        os.chmod(top, 0o755)
        made = tuple(Path(top, name) for name in names)
        for directory in made:
            directory.mkdir()
        yield made


def open_up(directory: Path, to: str, *, group_mode: int) -> None:
    """Let others create entries in ``directory``: ``"every user"`` (sticky, as /tmp), or
    the group of ``nobody``, shared with this user (``group_mode``)."""
    if to == "every user":
        directory.chmod(0o1777)
    else:
        os.chown(directory, os.geteuid(), NOBODY)
        directory.chmod(group_mode)


def as_nobody(code: str) -> None:
    """Run ``code`` as ``nobody``: the neighbour, staging an attack."""
    done = subprocess.run([*nobody_runs(), sys.executable, "-c", code], capture_output=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("plant", ["symlink", "directory"])
@pytest.mark.parametrize("root", ["every user", "a group"])
def test_a_neighbours_import_table_leads_no_row_out_of_the_cache(
    cdn: CdnServer, root: str, plant: str
) -> None:
    # Where others may create entries in the cache's directory (a sticky one, as /tmp, or
    # one a group shares), a neighbour makes `import-table` first: a symlink to a
    # directory of this user's, or a directory of the neighbour's. The loads go on, with
    # no table: not one byte is written through the link, nor into the neighbour's directory.
    write_kernel(cdn.root, REPO, 1)
    with reachable_by_nobody("notes", "cache") as (notes, cache):  # notes: this user's
        open_up(cache, root, group_mode=0o2770)  # a group's: a cache it shares on purpose
        env = {"FLASHHUB_CACHE_DIR": str(cache)}
        if root == "a group":
            env["FLASHHUB_CACHE_SHARED"] = "1"
        table = cache / TABLE_DIR
        if plant == "symlink":
            as_nobody(f"import os; os.symlink({str(notes)!r}, {str(table)!r})")
        else:
            as_nobody(f"import os; os.mkdir({str(table)!r}); os.chmod({str(table)!r}, 0o777)")
        loads = [load_in_child(env) for _ in range(3)]  # cold, then warm: each would record
        written = sorted(p.name for p in [*notes.iterdir(), *table.iterdir()])
        planted = table.lstat()
    for loaded in loads:
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stdout.strip() == f"{REPO}@v1:{local_variant()}"
    assert written == []
    assert planted.st_uid == NOBODY  # left as the neighbour made it
    assert stat.S_ISLNK(planted.st_mode) == (plant == "symlink")


@pytest.mark.parametrize("target", ["home", "nothing"])
@pytest.mark.parametrize("where", ["root", "above"])
@pytest.mark.parametrize("open_to", ["every user", "a group"])
def test_a_cache_directory_leading_through_a_neighbours_symlink_in_a_sticky_directory_is_refused(
    cdn: CdnServer, open_to: str, where: str, target: str
) -> None:
    # fs.protected_symlinks is off in many containers, so the kernel follows a neighbour's
    # link in /tmp: the cache would be wherever the neighbour chose (this user's home), and
    # move when the neighbour changes the link. The load refuses it, whether the link is
    # the cache directory or one above it, and whether it leads anywhere.
    write_kernel(cdn.root, REPO, 1)
    with reachable_by_nobody("home", "tmp") as (home, public):  # home: this user's
        # nobody's group, which this user does not trust here (no shared cache)
        open_up(public, open_to, group_mode=0o1770)
        link = public / "my-cache"
        leads_to = home if target == "home" else home / "nothing"
        as_nobody(f"import os; os.symlink({str(leads_to)!r}, {str(link)!r})")
        cache = link if where == "root" else link / "flashhub"
        cdn.clear_log()
        result = load_in_child({"FLASHHUB_CACHE_DIR": str(cache)})
        written = list(home.iterdir())
    stderr = refused(result, link, home.parent / "no-marker")
    assert f"{link} is another user's symlink in {public}" in stderr
    assert f"uid {NOBODY}" in stderr
    assert "a symlink another user made in a shared directory" in stderr
    assert "set FLASHHUB_CACHE_DIR to a path you own" in stderr
    assert written == []  # no kernels/, .locks/ or import-table/ in this user's home
    assert cdn.requests == []  # refused before anything, the network included


def test_a_symlink_of_ones_own_in_a_sticky_directory_is_followed(
    cdn: CdnServer, tmp_path: Path
) -> None:
    # This user's own link there is followed, as the kernel follows it.
    public, real = tmp_path / "public", tmp_path / "real-cache"
    public.mkdir()
    public.chmod(0o1777)
    real.mkdir()
    (public / "my-cache").symlink_to(real)
    write_kernel(cdn.root, REPO, 1)
    env = {"FLASHHUB_CACHE_DIR": str(public / "my-cache")}
    loads = [load_in_child(env) for _ in range(3)]
    for loaded in loads:
        assert loaded.returncode == 0, loaded.stderr
        assert loaded.stdout.strip() == f"{REPO}@v1:{local_variant()}"
    assert (real / "kernels" / REPO / "v1" / local_variant()).is_dir()
    assert list((real / TABLE_DIR).glob("*.json"))  # the warm loads recorded it


def test_a_cache_directory_that_is_a_symlink_to_nothing_says_so(
    cdn: CdnServer, tmp_path: Path
) -> None:
    # A link of this user's to a volume not mounted, say: creating the cache through it
    # fails, and the error says why, not to free disk space.
    link, missing = tmp_path / "my-cache", tmp_path / "unmounted" / "cache"
    link.symlink_to(missing)
    write_kernel(cdn.root, REPO, 1)
    result = load_in_child({"FLASHHUB_CACHE_DIR": str(link / "flashhub")})
    assert result.returncode == 1
    error, hint = result.stderr.splitlines()[-2:]
    assert error == (
        f"flashhub_kernels.errors.CacheError: cannot use the cache: {link} is a symlink to "
        f"{missing}, which does not exist"
    )
    assert "free disk space" not in hint and "FLASHHUB_CACHE_DIR" in hint
    assert not missing.parent.exists()
