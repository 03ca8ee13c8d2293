"""Every way a load can fail ends in a FlashhubError that is also an ImportError.

Each case drives ``get_kernel`` or an ``import`` statement against the loopback CDN
(or a cache with something planted in it) and checks the error's type, its hint, and
that nothing else was touched.
"""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import import_in_child
from flashhub_kernels.errors import (
    CacheError,
    ConfigError,
    FlashhubError,
    KernelImportError,
    NoCompatibleVariantError,
    TransportError,
)
from support import cli_runner  # not its flashhub(): an import statement here binds that name
from support.cdn_server import CdnServer, raw_redirect, redirect
from support.trees import local_variant, write_kernel

REPO = "acme/tensor-tricks"
MODULE = "flashhub.acme.tensor_tricks.v1"
LOCAL = local_variant()
OPS = f"kernels/{REPO}/v1/build/{LOCAL}/tensor_tricks/_ops.py"


def load_error(expected: type[FlashhubError]) -> FlashhubError:
    """The error ``get_kernel`` raises, checked to be ``expected``, an ImportError, hinted."""
    with pytest.raises(expected) as info:
        fk.get_kernel(REPO, version=1)
    error = info.value
    assert isinstance(error, ImportError) and isinstance(error, FlashhubError)
    assert error.hint, "every load error says what to do next"
    assert MODULE not in sys.modules
    return error


# -- the CDN ------------------------------------------------------------------------------


def test_a_listed_file_missing_on_the_only_mirror_is_a_transport_error(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    (cdn.root / OPS).unlink()

    error = load_error(TransportError)

    assert "_ops.py" in error.message and "404" in error.message


def test_a_variant_listed_without_its_metadata_is_a_load_error(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    (cdn.root / f"kernels/{REPO}/v1/build/{LOCAL}/metadata.json").unlink()

    error = load_error(KernelImportError)

    assert "metadata.json" in error.message


@pytest.mark.parametrize(
    "location",
    [
        "http://127.0.0.1:99999/x",
        "http://127.0.0.1:abc/x",
    ],
    ids=["port-out-of-range", "port-not-a-number"],
)
def test_a_redirect_to_a_malformed_url_is_a_transport_error(cdn: CdnServer, location: str) -> None:
    write_kernel(cdn.root, REPO, 1)
    cdn.inject(OPS, redirect(location))

    load_error(TransportError)


@pytest.mark.parametrize(
    "location", ["/dé.json".encode("latin-1"), "/dé.json".encode()], ids=["latin-1", "utf-8"]
)
def test_a_redirect_to_a_non_ascii_location_is_a_transport_error(
    cdn: CdnServer, location: bytes
) -> None:
    write_kernel(cdn.root, REPO, 1)
    cdn.inject(OPS, raw_redirect(location))

    load_error(TransportError)


def test_a_typo_in_the_cdn_port_names_the_setting(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1)
    monkeypatch.setenv("FLASHHUB_CDN_URL", "http://127.0.0.1:876S")

    error = load_error(ConfigError)
    assert isinstance(error, ValueError)  # what a malformed setting raised before
    assert "876S" in error.message and "FLASHHUB_CDN_URL" in str(error)
    raised, printed = import_in_child(MODULE)
    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    assert "FLASHHUB_CDN_URL" in printed and "876S" in printed
    result = cli_runner.flashhub("get", REPO, "--version", "1")

    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line, hint = result.stderr.splitlines()
    assert line.startswith("error: ") and "876S" in line
    assert hint.startswith("  hint: ") and "FLASHHUB_CDN_URL" in hint
    assert cdn.requests == []


@pytest.mark.parametrize("url", ["http://[::1", "http://[::1/kernels", "http://[cdn]:80"])
def test_a_cdn_url_with_a_malformed_ipv6_host_says_so_not_invalid_port(
    cdn: CdnServer, url: str
) -> None:
    raised, printed = import_in_child(MODULE, env={"FLASHHUB_CDN_URL": url})

    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    assert f"CDN URL {url!r} is malformed: its host is neither a name nor an IP" in printed
    assert "http://[::1]:8080" in printed and "invalid port" not in printed
    assert cdn.requests == []


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("FLASHHUB_READ_TIMEOUT", "nan"),
        ("FLASHHUB_CONNECT_TIMEOUT", "1e30"),
        ("FLASHHUB_LOCK_TIMEOUT", "inf"),
    ],
)
def test_a_timeout_that_is_no_finite_number_of_seconds_names_its_variable(
    cdn: CdnServer, name: str, raw: str
) -> None:
    write_kernel(cdn.root, REPO, 1)

    raised, printed = import_in_child(MODULE, env={name: raw})

    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    assert f"{name}={raw!r} must be" in printed and "at most a week" in printed
    assert cdn.requests == []


def test_a_max_file_bytes_past_what_int_parses_names_its_variable(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    raw = "9" * 5000  # digits only, past the 4,300 that int() parses

    raised, printed = import_in_child(MODULE, env={"FLASHHUB_MAX_FILE_BYTES": raw})

    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    assert "FLASHHUB_MAX_FILE_BYTES=" in printed and "at most 18 digits" in printed
    assert cdn.requests == []


CYRILLIC_ORG = "flashhub.\u0430cme"  # a Cyrillic a: no CDN name is anything but ASCII
LONG_ORG = f"flashhub.{'a' * 97}"  # one character over the 96 of a name


@pytest.mark.parametrize(
    ("module", "missing"),
    [
        (f"{CYRILLIC_ORG}.tensor_tricks.v1", CYRILLIC_ORG),
        (f"{LONG_ORG}.tensor_tricks.v1", LONG_ORG),
        (LONG_ORG, LONG_ORG),
        (f"flashhub.acme.{'t' * 97}.v1", f"flashhub.acme.{'t' * 97}"),
    ],
    ids=["cyrillic-org", "long-org", "long-org-alone", "long-package"],
)
def test_a_module_name_no_kernel_can_have_is_a_module_not_found_error(
    cdn: CdnServer, module: str, missing: str
) -> None:
    raised, printed = import_in_child(module)
    assert raised is ModuleNotFoundError, printed
    assert f"No module named '{missing}'" in printed
    assert cdn.requests == []


# -- the cache ------------------------------------------------------------------------------


def download_mutex(cache_dir: Path) -> Path:
    return cache_dir / "kernels" / REPO / "v1" / ".locks" / f"{LOCAL}.lock"


def index_mutex(cache_dir: Path) -> Path:
    return cache_dir / ".locks" / REPO / "v1.lock"


MUTEXES = {"download mutex": download_mutex, "index mutex": index_mutex}


@pytest.mark.parametrize("which", MUTEXES)
def test_a_directory_planted_at_a_lock_path_is_a_cache_error(
    cdn: CdnServer, cache_dir: Path, which: str
) -> None:
    write_kernel(cdn.root, REPO, 1)
    planted = MUTEXES[which](cache_dir)
    (planted / "inside").mkdir(parents=True)

    error = load_error(CacheError)

    assert str(planted) in error.message
    assert "FLASHHUB_CACHE_DIR" in str(error.hint)
    assert [p.name for p in planted.iterdir()] == ["inside"]
    assert not (cache_dir / "kernels" / REPO / "v1" / LOCAL).exists()


@pytest.mark.parametrize("target_exists", [False, True], ids=["dangling", "to-a-file"])
@pytest.mark.parametrize("which", MUTEXES)
def test_a_symlink_planted_at_a_lock_path_is_a_cache_error_and_its_target_is_untouched(
    cdn: CdnServer, cache_dir: Path, tmp_path: Path, which: str, target_exists: bool
) -> None:
    write_kernel(cdn.root, REPO, 1)
    target = tmp_path / "elsewhere" / "precious.txt"
    target.parent.mkdir()
    if target_exists:
        target.write_text("keep me")
    planted = MUTEXES[which](cache_dir)
    planted.parent.mkdir(parents=True)
    planted.symlink_to(target)

    error = load_error(CacheError)

    assert "symlink" in error.message
    assert "FLASHHUB_CACHE_DIR" in str(error.hint)
    assert planted.is_symlink() and os.readlink(planted) == str(target)
    if target_exists:
        assert target.read_text() == "keep me"
    else:
        assert not target.exists()
    assert not (cache_dir / "kernels" / REPO / "v1" / LOCAL).exists()


# -- reloading a kernel whose cache entry is gone -----------------------------------------------


def test_reload_after_the_cache_was_removed_downloads_the_kernel_again(
    cdn: CdnServer, cache_dir: Path
) -> None:
    write_kernel(cdn.root, REPO, 1)
    module = fk.get_kernel(REPO, version=1)
    shutil.rmtree(cache_dir)
    cdn.clear_log()

    reloaded = importlib.reload(module)

    assert reloaded is module and module.marker() == f"{REPO}@v1:{LOCAL}"
    assert Path(module.__file__ or "").is_file()
    assert module.__spec__ is not None and module.__spec__.origin == module.__file__
    assert module.__path__ == [str(Path(module.__file__ or "").parent)]
    assert len(cdn.gets(".py")) == 3, "the kernel was fetched again"
    assert importlib.import_module(f"{MODULE}.helpers").shout() == module.marker().upper()


def test_reload_after_cache_clear_downloads_the_kernel_again(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1)
    module = fk.get_kernel(REPO, version=1)
    # --force: this process imported the kernel, so a plain clear leaves it alone
    assert cli_runner.flashhub("cache", "clear", "--yes", "--force").returncode == 0
    cdn.clear_log()

    assert importlib.reload(module).marker() == f"{REPO}@v1:{LOCAL}"
    assert Path(module.__file__ or "").is_file()
    assert len(cdn.gets(".py")) == 3, "the kernel was fetched again"


def test_reload_after_the_cache_was_removed_offline_is_an_offline_error(
    cdn: CdnServer, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_kernel(cdn.root, REPO, 1)
    module = fk.get_kernel(REPO, version=1)
    shutil.rmtree(cache_dir)
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    cdn.clear_log()

    with pytest.raises(fk.errors.OfflineError) as info:
        importlib.reload(module)

    assert info.value.hint and "flashhub get" in info.value.hint
    assert cdn.requests == []


def test_no_compatible_variant_is_an_import_error(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, ["torch212-cxx11-cu126-x86_64-linux"])
    load_error(NoCompatibleVariantError)
