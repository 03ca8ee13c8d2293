"""The import table: a row that no longer stands for what the full lookup would load is not used."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from conftest import run_python
from flashhub_kernels import _cache_imports as imports
from flashhub_kernels._cache import admin
from flashhub_kernels._cache.layout import Cache
from flashhub_kernels._cache.staging import evict
from flashhub_kernels._config import get_config
from support.cdn_server import CdnServer
from support.preloaded import Child, run_code, start_code
from support.trees import write_kernel
from test_import_table import IMPORT, MODULE, REPO, entry_dir, import_once
from test_signing_load import TRUSTED, key_pair, sign


def waits_for_shared_flock(child: Child, directory: Path, timeout: float = 60) -> bool:
    """Whether ``child`` comes to wait for a shared ``flock`` on ``directory`` within
    ``timeout`` seconds (``/proc/locks`` lists each waiter after ``->``)."""
    inode, pid = f":{directory.stat().st_ino}", str(child.pid)
    deadline = time.monotonic() + timeout
    while child.poll() is None and time.monotonic() < deadline:
        for fields in map(str.split, Path("/proc/locks").read_text().splitlines()):
            if fields[1:3] == ["->", "FLOCK"] and fields[5] == pid and fields[6].endswith(inode):
                return True
        time.sleep(0.01)
    return False


def test_an_entry_cache_clear_removes_while_a_hit_waits_to_mark_it_is_fetched_again(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row checks out, and the import waits for its mark on the entry while `cache
    clear` holds it to remove it: once clear is done the row's entry is gone, and the import
    looks the kernel up in full (it fetches it again) rather than load from what was removed."""
    write_kernel(cdn.root, REPO, 1)
    assert [import_once()[0] for _ in range(3)] == [True, True, False]  # cold, recorded, hit
    entry = entry_dir(cache_dir)
    loaders: list[Child] = []

    def evict_once_a_hit_waits(path: Path) -> None:
        loaders.append(start_code(IMPORT, env=dict(os.environ)))
        assert waits_for_shared_flock(loaders[0], path), "the hit never came to mark its entry"
        evict(path)

    monkeypatch.setattr(admin, "evict", evict_once_a_hit_waits)
    assert admin.clear(Cache.from_config(get_config())).removed
    out, err = loaders[0].communicate(timeout=120)
    assert loaders[0].returncode == 0, err
    in_full, marker, file = json.loads(out.splitlines()[-1])
    assert in_full and marker.startswith(f"{REPO}@v1")
    assert Path(file) == entry / "tensor_tricks/__init__.py" and Path(file).is_file()


def test_a_row_that_does_not_cover_the_spellings_tried_before_its_own_is_a_miss(
    cdn: CdnServer, cache_dir: Path
) -> None:
    """The module name stands for the dashed repo first, then the underscored one; a row
    for the underscored one holds the stamp of the dashed one's version directory (none). A
    row damaged in place to hold none of it does not answer once the dashed repo is cached:
    the full lookup loads that one, as it comes first."""
    underscored = REPO.replace("-", "_")
    write_kernel(cdn.root, underscored, 1)
    assert [import_once()[0] for _ in range(3)] == [True, True, False]  # cold, recorded, hit
    table = Path(imports.table_file(str(cache_dir), MODULE))
    document = json.loads(table.read_text())
    (row,) = document["rows"].values()
    assert row["repo"] == 1 and row["versions"] == [None]
    row["versions"] = []
    table.write_text(json.dumps(document))
    write_kernel(cdn.root, REPO, 1)
    run_python(f"import flashhub_kernels as fk; fk.get_kernel({REPO!r}, version=1)")
    in_full, marker, _file = import_once()
    assert in_full and marker.startswith(f"{REPO}@v1")


@pytest.mark.signing
def test_a_keys_file_rewritten_with_its_times_set_back_is_another_key(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path
) -> None:
    """The file FLASHHUB_TRUSTED_KEYS names is rewritten in place to revoke the publisher's
    key, the same size, its modification time set back (as `touch -r` or a copy that keeps
    times does): its change time, which no one can set back, makes it another key, and
    the import is refused."""
    (signing, key), (_other_file, other) = key_pair(tmp_path, "a"), key_pair(tmp_path, "b")
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, signing)
    keys = tmp_path / "keys"
    keys.write_text(key.public_line + "\n")
    keys.chmod(0o600)
    trusting = {TRUSTED: str(keys)}
    assert [import_once(env=trusting)[0] for _ in range(3)] == [True, True, False]
    before = keys.stat()
    keys.write_text(other.public_line + "\n")
    os.utime(keys, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = keys.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    result = run_code(IMPORT, env={**os.environ, **trusting})
    assert result.returncode == 1 and "no signature by a key trusted" in result.stderr
