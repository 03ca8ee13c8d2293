"""Every way a load can fail ends in a FlashhubError that is also an ImportError.

Each case drives ``get_kernel`` or an ``import`` statement against the loopback CDN
(or a cache with something planted in it) and checks the error's type, its hint, and
that nothing else was touched.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pickle
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import import_in_child, run_python
from flashhub_kernels import errors
from flashhub_kernels._lockfiles.pinning import lock_project
from flashhub_kernels._publish.publisher import VersionTakenError
from flashhub_kernels.errors import (
    CacheError,
    ConfigError,
    FlashhubError,
    IntegrityError,
    KernelImportError,
    LockMismatchError,
    MissingPythonDependencyError,
    NoCompatibleVariantError,
    OfflineError,
    TransportError,
)
from support import cli_runner  # not its flashhub(): an import statement here binds that name
from support.cdn_server import CdnServer, raw_redirect, redirect
from support.projects import (
    change_published_file,
    lockfile_of,
    publish_tensor_tricks,
    write_project,
)
from support.trees import b64sha256, kernel_files, local_variant, write_kernel, write_variant

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


@pytest.mark.parametrize("variable", ["FLASHHUB_CACHE_DIR", "HOME"])
def test_a_relative_cache_directory_after_the_current_one_was_removed_is_a_cache_error(
    cdn: CdnServer, variable: str
) -> None:
    write_kernel(cdn.root, REPO, 1)
    # Those before it unset: the default is made from it (the machine may set them).
    before = ["FLASHHUB_CACHE_DIR", "XDG_CACHE_HOME", "HOME"]
    env = {name: "" for name in before[: before.index(variable)]} | {variable: "relative-cache"}
    first = "import os, tempfile\nd = tempfile.mkdtemp()\nos.chdir(d)\nos.rmdir(d)\n"
    raised, printed = import_in_child(MODULE, env=env, first=first)
    assert issubclass(raised, CacheError) and issubclass(raised, ImportError)
    assert "the current directory no longer exists" in printed
    assert "an absolute path" in printed


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
    ("host", "why"),
    [
        ("cdn example.com", "holds a blank or a control character"),
        ("cdn\texample.com", "holds a blank or a control character"),  # urlsplit drops a tab
        ("\uff43dn.example.com", "has a host requests cannot use"),  # no IDNA label
        ("cdn\udce9.example.com", "holds a byte that is not UTF-8 text"),  # b"\xe9" in environ
    ],
    ids=["space", "tab", "full-width", "latin-1 byte"],
)
def test_a_cdn_url_whose_host_requests_cannot_use_is_a_config_error_naming_it(
    cdn: CdnServer, host: str, why: str
) -> None:
    # Python's URL parser takes these hosts; requests refuses them when it prepares the
    # first request, which escaped a load as requests' own InvalidURL, no ImportError.
    url = f"http://user:s3cret@{host}"
    raised, printed = import_in_child(MODULE, env={"FLASHHUB_CDN_URL": url})

    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    assert why in printed and "FLASHHUB_CDN_URL" in printed
    assert "s3cret" not in printed
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


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("FLASHHUB_OFFLINE", "maybe"),
        ("FLASHHUB_REQUIRE_SIGNATURES", "enabled"),
        ("FLASHHUB_CACHE_SHARED", "group"),
    ],
)
def test_a_switch_set_to_neither_on_nor_off_names_its_variable(
    cdn: CdnServer, name: str, raw: str
) -> None:
    """Read as off, ``FLASHHUB_OFFLINE=maybe`` went to the network and
    ``FLASHHUB_REQUIRE_SIGNATURES=enabled`` loaded an unsigned kernel, without a word."""
    write_kernel(cdn.root, REPO, 1)
    fk.get_kernel(REPO, version=1)  # cached: nothing but the setting stands in the way
    cdn.clear_log()

    raised, printed = import_in_child(MODULE, env={name: raw})
    result = cli_runner.flashhub("get", REPO, "--version", "1", env={name: raw})

    assert issubclass(raised, ConfigError) and issubclass(raised, ImportError)
    assert f"{name}={raw!r} must be 1 (or true, yes, on) to turn it on, or 0" in printed
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {name}={raw!r} must be 1 ")
    assert result.stderr.endswith(f"\n  hint: fix {name}, or unset it\n")
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


# -- an error sent back from a worker process -------------------------------------------------

# A load that fails in a worker of a process pool (or a DataLoader's) is pickled back to the
# program; the program then sees what the same load raises in its own process.
IN_A_WORKER_AND_HERE = """
import concurrent.futures, functools, json
import flashhub_kernels as fk

def described(error):
    kind = type(error)
    return [kind.__module__, kind.__qualname__, str(error), error.args, vars(error), error.name]

load = functools.partial({arguments})
with concurrent.futures.ProcessPoolExecutor(1) as pool:
    remote = pool.submit(load).exception()
try:
    load()
except Exception as local:
    print(json.dumps([described(remote), described(local)]))
"""
GET = f"fk.get_kernel, {REPO!r}, version=1"  # the arguments of the partial that loads


def _missing_file(cdn: CdnServer, tmp_path: Path) -> str:
    write_kernel(cdn.root, REPO, 1)
    (cdn.root / OPS).unlink()
    return GET


def _tampered_file(cdn: CdnServer, tmp_path: Path) -> str:
    write_kernel(cdn.root, REPO, 1)
    (cdn.root / OPS).write_text("print('not the published code')\n")
    return GET


def _missing_python_dependency(cdn: CdnServer, tmp_path: Path) -> str:
    files = kernel_files("tensor_tricks", "needs a package")
    digests = {path: b64sha256(data) for path, data in files.items()}
    manifest = {"digest": {"files": digests}, "python-depends": ["flashhub-no-such-package"]}
    write_variant(cdn.root, REPO, 1, LOCAL, files, manifest=manifest)
    return GET


def _changed_after_locking(cdn: CdnServer, tmp_path: Path) -> str:
    publish_tensor_tricks(cdn.root)
    project = write_project(tmp_path / "project", {REPO: ">=1,<3"})
    lock_project(project)
    change_published_file(cdn.root, 2, LOCAL)
    return f"fk.get_locked_kernel, {REPO!r}, lockfile={str(lockfile_of(project))!r}"


@pytest.mark.parametrize(
    ("arrange", "expected", "offline"),
    [
        (_missing_file, TransportError, False),
        (_tampered_file, IntegrityError, False),
        (_missing_file, OfflineError, True),
        (_missing_python_dependency, MissingPythonDependencyError, False),
        (_changed_after_locking, LockMismatchError, False),
    ],
    ids=["not-found", "tampered", "offline", "missing-dependency", "lock-mismatch"],
)
def test_a_load_error_in_a_worker_process_reaches_the_program_whole(
    cdn: CdnServer,
    tmp_path: Path,
    arrange: Callable[[CdnServer, Path], str],
    expected: type[FlashhubError],
    offline: bool,
) -> None:
    code = IN_A_WORKER_AND_HERE.format(arguments=arrange(cdn, tmp_path))
    env = {"FLASHHUB_OFFLINE": "1"} if offline else {}

    remote, local = json.loads(run_python(code, env=env))

    assert remote == local
    assert remote[:2] == [expected.__module__, expected.__qualname__]


def _made_with_its_required_arguments(kind: type[FlashhubError]) -> FlashhubError:
    parameters = list(inspect.signature(kind.__init__).parameters.values())[2:]
    required = {p.name: "x" for p in parameters if p.default is inspect.Parameter.empty}
    optional = {p.name: f"{p.name} \x1b[31m" for p in parameters if p.name in {"hint", "name"}}
    return kind("went \x1b[2J wrong", **{**optional, **required})


PUBLIC_ERRORS = [
    kind
    for kind in vars(errors).values()
    if isinstance(kind, type) and issubclass(kind, FlashhubError)
] + [VersionTakenError]


@pytest.mark.parametrize("kind", PUBLIC_ERRORS, ids=lambda kind: kind.__name__)
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_every_error_survives_pickling(kind: type[FlashhubError], protocol: int) -> None:
    error = _made_with_its_required_arguments(kind)

    copy = pickle.loads(pickle.dumps(error, protocol))

    assert type(copy) is kind
    assert (str(copy), copy.args, vars(copy)) == (str(error), error.args, vars(error))
    assert getattr(copy, "name", None) == getattr(error, "name", None)


class _OwnError(FlashhubError):
    """An error a user derives, whose constructor sets no attribute."""

    def __init__(self, path: str) -> None:
        Exception.__init__(self, path)  # not FlashhubError's: no hint to give


def test_an_error_a_user_derives_survives_pickling() -> None:
    copy = pickle.loads(pickle.dumps(_OwnError("/data/kernel")))

    assert (type(copy), copy.args) == (_OwnError, ("/data/kernel",))
