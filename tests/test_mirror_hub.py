"""``flashhub mirror``: a kernel build on a loopback Hugging Face Hub, read through
huggingface_hub, verified against its own metadata.json, published into a CDN tree and
loaded from there."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import MakeCdn, refused_port, run_python
from flashhub_kernels._hub.republish import republish
from flashhub_kernels._signing.signing_keys import generate_signing_key, write_key_pair
from flashhub_kernels.errors import PublishError
from support.cdn_server import CdnServer, slowly
from support.cli_runner import (
    UNWRITTEN_OUTPUT,
    CliResult,
    flashhub,
    flashhub_on_a_full_disk,
    flashhub_process,
    ok_json,
    refused_offline,
)
from support.hub_server import HubServer, builder_variant
from support.preloaded import run_code
from support.projects import CUDA, UNIVERSAL
from support.terminal import run_on_a_terminal, screen
from support.trees import local_variant, todays_name

hub_constants = pytest.importorskip("huggingface_hub.constants")

# Kernel repos have a type of their own on the Hub; a huggingface_hub older than it finds
# them where they are still model repos.
KERNEL_TYPE = "kernel" in getattr(hub_constants, "REPO_TYPES_WITH_KERNEL", ())
REPO_TYPE = "kernel" if KERNEL_TYPE else "model"

REPO = "kernels-community/relu"
MODULE = "flashhub.kernels_community.relu.v1"
LOCAL = local_variant()
# A build for another runtime, whose name this client's variant grammar does not know.
FOREIGN = "onnx-universal"
NATIVE = "_relu_0f3c2a1.abi3.so"
TOKEN = "hf_loopbackTokenForTheTests"
EXTRA = "pip install 'flashhub-kernels[hub]'"


def kernel_files(marker: str) -> dict[str, bytes]:
    """A flattened variant as a kernel builder writes it: the package's files directly in
    the variant directory, a native library beside them (never imported here)."""
    return {
        "__init__.py": b"from . import layers\nfrom ._ops import MARKER\n",
        "_ops.py": f"MARKER = {marker!r}\n".encode(),
        "layers.py": b"import torch\n\n\nclass ReLU(torch.nn.Module):\n    pass\n",
        NATIVE: b"\x7fELF: stands in for the native library",
    }


def hub_build(marker: str = "one", *, algorithm: str = "sha256") -> dict[str, bytes]:
    """The repo's whole tree: this machine's build, torch-universal, a CUDA build, one of
    another runtime, and the files around them that are not mirrored."""
    assert CUDA != LOCAL
    tree = {"README.md": b"# relu\n", "build.toml": b"[general]\nname = 'relu'\n"}
    for variant in (LOCAL, UNIVERSAL, CUDA, FOREIGN):
        files = kernel_files(f"{marker}:{variant}")
        tree |= builder_variant(variant, files, name="relu", algorithm=algorithm)
    # Left out of a variant's digest by kernel builders, and so never mirrored.
    tree[f"build/{LOCAL}/metadata.json.sigstore"] = b'{"bundle": "not checked"}'
    tree[f"build/{LOCAL}/__pycache__/_ops.cpython-311.pyc"] = b"bytecode"
    return tree


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[HubServer]:
    """A loopback Hub that HF_ENDPOINT names, with HF_TOKEN set."""
    server = HubServer().start()
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    yield server
    server.stop()


def mirror(out: Path, *args: str | Path, env: dict[str, str] | None = None) -> CliResult:
    return flashhub("mirror", REPO, "--version", "1", "--out", out, *args, env=env)


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def failed(result: CliResult, *phrases: str) -> None:
    """The command failed with an error and a hint, no traceback, saying each of ``phrases``."""
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.startswith("error: ") and "  hint: " in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr


def test_a_mirrored_build_is_verified_published_and_loads_online_and_offline(
    hub: HubServer, cdn: CdnServer
) -> None:
    commit = hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    report = ok_json(mirror(cdn.root, "--variants", "all", "--json"))
    assert {v["name"] for v in report["variants"]} == {LOCAL, UNIVERSAL, CUDA}
    assert report["not_mirrored"] == [FOREIGN]
    assert report["mirrored_from"] == {
        "hub": hub.url,
        "repo": REPO,
        "revision": "v1",
        "commit": commit,
    }
    assert report["versions"] == [1]
    version_dir = cdn.root / "kernels" / REPO / "v1"
    assert json.loads((version_dir / "variants.json").read_text()) == sorted(
        [LOCAL, UNIVERSAL, CUDA]
    )
    local = version_dir / "build" / LOCAL
    assert sorted(p.name for p in local.iterdir()) == sorted([*kernel_files(""), "metadata.json"])
    manifest = json.loads((local / "metadata.json").read_text())
    assert manifest["name"] == "relu" and manifest["license"] == "Apache-2.0"  # the builder's
    assert manifest["mirrored-from"]["commit"] == commit
    assert manifest["digest"]["algorithm"] == "sha256"  # the CDN's own digests
    # Only the build: no repo file, no signature bundle, no bytecode, each file once.
    downloads = [r.path for r in hub.requests if r.method == "GET" and "/resolve/" in r.path]
    assert all("/build/" in p and not p.endswith((".sigstore", ".pyc")) for p in downloads)
    assert len(downloads) == len(set(downloads)) == 3 * 5
    assert all(
        r.headers.get("authorization") == f"Bearer {TOKEN}" for r in hub.requests if REPO in r.path
    )

    k = fk.get_kernel(REPO, version=1)
    assert f"one:{LOCAL}" == k.MARKER and k.__name__ == MODULE
    cdn.clear_log()
    offline = {"FLASHHUB_OFFLINE": "1"}
    assert (
        run_python(f"import {MODULE} as k; print(k.MARKER)", env=offline).strip() == f"one:{LOCAL}"
    )
    assert cdn.requests == []


def test_a_mirror_whose_report_cannot_be_written_fails_saying_so(
    hub: HubServer, cdn: CdnServer
) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    args = ("mirror", REPO, "--version", "1", "--out", cdn.root)
    result = flashhub_on_a_full_disk(*args, unbuffered=True)
    assert (result.returncode, result.stderr.splitlines()) == (1, UNWRITTEN_OUTPUT)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_a_mirror_leaves_its_report_alone_on_the_screen(
    hub: HubServer,
    make_cdn: MakeCdn,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    terminal: bool,
) -> None:
    """One bar for the download, drawn on a terminal only, and cleared: huggingface_hub's
    bars, one a file drawn by several threads at once, stayed on the terminal, with blank
    lines between them."""
    tree = hub_build()
    hub.push(REPO, tree, branch="v1", repo_type=REPO_TYPE)
    storage = make_cdn(tmp_path / "storage")
    (storage.root / "ops").write_bytes(tree[f"build/{LOCAL}/_ops.py"])
    storage.inject("ops", slowly(2.0))  # long enough for a bar to appear
    hub.redirect(f"build/{LOCAL}/_ops.py", f"{storage.url}/ops")
    for bars_off in ("FLASHHUB_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(bars_off)
    args = ["mirror", REPO, "--version", "1", "--out", str(tmp_path / "out"), "--variants", "all"]
    if terminal:
        run = run_on_a_terminal([sys.executable, "-m", "flashhub_kernels", *args], env=os.environ)
        code, shown, report = run.returncode, run.output, screen(run.output)
    else:
        result = flashhub_process(*args)
        code, shown, report = result.returncode, result.stderr, result.stdout.splitlines()
    assert code == 0, shown
    assert report[0].startswith(f"mirrored from {hub.url}/{REPO} at v1 (commit "), report
    assert report[-1] == f"not mirrored (pick them with --variants): {FOREIGN}", report
    assert all(line and "%|" not in line for line in report), report
    if terminal:
        assert re.search(rf"{REPO} at v1: +\d+%\|", shown), shown  # the bar was drawn
    else:
        assert shown == ""  # stderr: not a bar


def test_a_hub_zip_build_is_mirrored_as_it_is_and_loads(hub: HubServer, cdn: CdnServer) -> None:
    """A variant the builder laid out as a zip build: its archive, named after its id."""
    kernel_id = "_relu_0f3c2a1"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("__init__.py", "from ._ops import MARKER\n")
        archive.writestr("_ops.py", "MARKER = 'zipped on the hub'\n")
    tree = builder_variant(UNIVERSAL, {f"{kernel_id}.zip": buffer.getvalue()}, name="relu")
    metadata = f"build/{UNIVERSAL}/metadata.json"
    zipped = {**json.loads(tree[metadata]), "id": kernel_id, "build-layout": "zip"}
    tree[metadata] = json.dumps(zipped).encode()
    hub.push(REPO, tree, branch="v1", repo_type=REPO_TYPE)
    ok_json(mirror(cdn.root, "--json"))
    published = cdn.root / "kernels" / REPO / "v1" / "build" / UNIVERSAL / "metadata.json"
    manifest = json.loads(published.read_text())
    assert manifest["build-layout"] == "zip" and manifest["id"] == kernel_id
    assert list(manifest["digest"]["files"]) == [f"{kernel_id}.zip"]
    assert fk.get_kernel(REPO, version=1).MARKER == "zipped on the hub"


def test_a_hub_build_named_in_todays_spelling_is_mirrored_and_loads(
    hub: HubServer, cdn: CdnServer
) -> None:
    today = todays_name(LOCAL)  # torch-2.13-cxx11-cpu-cpython-3.9-abi3-x86_64-linux, say
    tree: dict[str, bytes] = {}
    for variant in (today, UNIVERSAL):
        tree |= builder_variant(variant, kernel_files(f"today:{variant}"), name="relu")
    hub.push(REPO, tree, branch="v1", repo_type=REPO_TYPE)
    report = ok_json(mirror(cdn.root, "--json"))
    assert [v["name"] for v in report["variants"]] == [today]
    marker = fk.get_kernel(REPO, version=1).MARKER
    assert marker == f"today:{today}"


@pytest.mark.signing
def test_info_shows_where_a_signed_mirror_came_from(
    hub: HubServer, cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    hub.tag(REPO, "release-1", commit)
    key = generate_signing_key()
    write_key_pair(key, tmp_path / "kernels.key")
    published = mirror(cdn.root, "--revision", "release-1", "--sign", tmp_path / "kernels.key")
    assert published.returncode == 0, published.stderr
    assert published.stdout.startswith(f"mirrored from {hub.url}/{REPO} at release-1 (commit ")
    assert f"signed with key {key.key_id}" in published.stdout
    skipped = ", ".join(sorted([UNIVERSAL, CUDA, FOREIGN]))
    assert f"not mirrored (pick them with --variants): {skipped}" in published.stdout
    assert (cdn.root / "kernels" / REPO / "versions.json.sig").is_file()

    monkeypatch.setenv("FLASHHUB_TRUSTED_KEYS", f"kernels-community:{key.public_line}")
    info = flashhub("info", REPO, "--version", "1")
    assert info.returncode == 0, info.stderr
    assert f"signed by {key.key_id} (verified)" in info.stdout
    assert f"mirrored from {hub.url}/{REPO} at release-1 (commit {commit})" in info.stdout
    described = ok_json(flashhub("info", REPO, "--version", "1", "--json"))
    assert described["variants"][0]["mirrored_from"]["revision"] == "release-1"
    assert f"one:{LOCAL}" == fk.get_kernel(REPO, version=1).MARKER  # its signature checked


def test_variants_auto_a_list_or_a_name_the_hub_lacks(hub: HubServer, tmp_path: Path) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    auto = ok_json(mirror(tmp_path / "auto", "--json"))
    assert [v["name"] for v in auto["variants"]] == [LOCAL]  # the one this machine loads
    gpu_node = ("--system", CUDA, "--cuda-capability", "9.0")
    for_gpus = ok_json(mirror(tmp_path / "for-gpus", *gpu_node, "--json"))
    assert [v["name"] for v in for_gpus["variants"]] == [CUDA]  # the one a GPU node loads
    usage = mirror(tmp_path / "bad", "--system", CUDA, "--rocm-arch", "gfx942")
    assert usage.returncode == 2 and "Traceback" not in usage.stderr, usage.stderr
    listed = ok_json(mirror(tmp_path / "list", "--variants", f"{UNIVERSAL},{CUDA}", "--json"))
    assert sorted(v["name"] for v in listed["variants"]) == sorted([UNIVERSAL, CUDA])
    lacking = mirror(tmp_path / "none", "--variants", f"{UNIVERSAL},torch-rocm")
    failed(lacking, "the Hub build has no variant 'torch-rocm'", "--variants all")
    assert not (tmp_path / "none").exists()


def test_mirroring_again_is_a_noop_and_a_changed_build_is_refused(
    hub: HubServer, tmp_path: Path
) -> None:
    commit = hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    out = tmp_path / "cdn"
    assert not ok_json(mirror(out, "--json"))["noop"]
    before = tree_bytes(out)
    again = ok_json(mirror(out, "--json"))
    assert again["noop"] and again["written"] == []
    # The same commit by another name holds the same files: still nothing to write.
    assert ok_json(mirror(out, "--revision", commit, "--json"))["noop"]
    hub.push(REPO, hub_build("two"), branch="v1", repo_type=REPO_TYPE)
    # The next version reads the Hub's branch v2, which does not exist: the hint names
    # the branch that moved, in the command's options and in republish's arguments.
    failed(mirror(out), f"{REPO}@v1 is already published", "--version 2 --revision v1,")
    with pytest.raises(PublishError, match=r"as version=2, revision='v1', or pass force=True"):
        republish(REPO, version=1, out=out)
    assert tree_bytes(out) == before
    # Following the hint publishes what the branch now holds as version 2.
    hinted = flashhub("mirror", REPO, "--version", "2", "--revision", "v1", "--out", out, "--json")
    assert ok_json(hinted)["versions"] == [1, 2]


@pytest.mark.parametrize("fault", ["tampered", "unlisted", "missing"])
def test_a_hub_build_that_does_not_match_its_digests_publishes_nothing(
    hub: HubServer, tmp_path: Path, fault: str
) -> None:
    out = tmp_path / "cdn"
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    assert mirror(out).returncode == 0
    before = tree_bytes(out)
    build = hub_build("two")
    path = f"build/{LOCAL}/_ops.py"
    if fault == "unlisted":
        build[f"build/{LOCAL}/extra.py"] = b"print('not in the digest')\n"
    elif fault == "missing":
        del build[path]
    hub.push(REPO, build, branch="v2", repo_type=REPO_TYPE)
    if fault == "tampered":
        hub.tamper(path, b"MARKER = 'evil'\n")
    result = flashhub("mirror", REPO, "--version", "2", "--out", out)
    expected = {
        "tampered": f"1 file of {REPO} at v2 (commit",
        "unlisted": "1 file not listed (e.g. extra.py)",
        "missing": "1 file listed but missing (e.g. _ops.py)",
    }[fault]
    failed(result, expected, "nothing was published")
    if fault == "tampered":
        assert f"{LOCAL}/_ops.py" in result.stderr
    assert tree_bytes(out) == before  # no v2, and versions.json still lists only v1


def test_a_file_larger_than_the_listing_says_is_cut_off(hub: HubServer, tmp_path: Path) -> None:
    """A hostile Hub streams far more than the size its listing gives a file: the download
    stops there, before the bytes fill the disk, and nothing is published."""
    build = hub_build()
    path = f"build/{LOCAL}/_ops.py"
    hub.push(REPO, build, branch="v1", repo_type=REPO_TYPE)
    hub.tamper(path, build[path] + b"#" * (32 << 20))
    out = tmp_path / "cdn"
    result = mirror(out)
    cut_off = f"sends more than the {len(build[path])} bytes its listing gives {path}"
    failed(result, f"the Hub at {hub.url} {cut_off}", "nothing was published")
    assert not out.exists()


def test_a_temporary_directory_without_room_is_named_with_what_to_do(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The files are downloaded into TMPDIR before they are published."""
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    small = tmp_path / "small"
    small.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=8", "tmpfs", str(small)]
    if subprocess.run(mount, capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root and a mount namespace that allows it")
    monkeypatch.setattr(tempfile, "tempdir", str(small))  # TMPDIR, as read at start
    try:
        out = tmp_path / "cdn"
        failed(mirror(out), f"cannot write {small}/flashhub-mirror-", "TMPDIR")
        assert not out.exists()
    finally:
        subprocess.run(["umount", "--lazy", str(small)], check=True)


def test_a_model_repo_with_sha512_digests(hub: HubServer, tmp_path: Path) -> None:
    """Kernel repos were model repos before the Hub gave them a type of their own."""
    hub.push(REPO, hub_build(algorithm="sha512"), branch="v1", repo_type="model")
    report = ok_json(mirror(tmp_path / "cdn", "--variants", UNIVERSAL, "--json"))
    assert [v["name"] for v in report["variants"]] == [UNIVERSAL]
    looked_up = [r.path for r in hub.requests if r.path.endswith("/revision/v1")]
    models = [f"/api/models/{REPO}/revision/v1"]
    assert looked_up == ([f"/api/kernels/{REPO}/revision/v1"] if KERNEL_TYPE else []) + models


def test_a_huggingface_hub_without_the_kernel_type_says_to_upgrade(
    hub: HubServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type="kernel")
    monkeypatch.delattr(hub_constants, "REPO_TYPES_WITH_KERNEL", raising=False)  # as before 1.10
    failed(mirror(tmp_path / "cdn"), "asked for as a model repo", "'huggingface_hub>=1.10'")
    assert [r.path for r in hub.requests if "/api/" in r.path] == [
        f"/api/models/{REPO}/revision/v1"
    ]


def test_hub_errors_are_clear(hub: HubServer, tmp_path: Path) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    out = tmp_path / "cdn"
    no_branch = flashhub("mirror", REPO, "--version", "3", "--out", out)
    failed(no_branch, f"{REPO} on the Hub at {hub.url} has no revision 'v3'", "--revision REV")
    failed(flashhub("mirror", "acme/none", "--version", "1", "--out", out), "acme/none is not on")
    hub.token = TOKEN  # a private repo: no answer without the token
    failed(mirror(out, env={"HF_TOKEN": ""}), f"{REPO} is not on the Hub", "set HF_TOKEN")
    refused_offline(mirror(out, env={"FLASHHUB_OFFLINE": "1"}))
    hub.clear_log()
    failed(mirror(out, "--sign", tmp_path / "no-such.key"), "no-such.key")
    assert hub.requests == []  # a key that cannot be used fails before the Hub is asked
    assert not out.exists()


def test_a_file_the_hub_refuses_to_serve_says_why_not_the_network(
    hub: HubServer, tmp_path: Path
) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    hub.refuse(f"build/{LOCAL}/_ops.py", 403)  # as a proxy refusing it does; 429 is retried
    out = tmp_path / "cdn"
    result = mirror(out)
    failed(result, f"cannot download build/{LOCAL}/_ops.py of {REPO}", "403", "set HF_TOKEN")
    assert "check the network connection" not in result.stderr
    assert not out.exists()


def test_the_signed_url_the_hub_sends_a_download_to_is_never_shown(
    hub: HubServer, make_cdn: MakeCdn, tmp_path: Path
) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    storage = make_cdn()  # holds nothing: the signed URL answers 404
    signed = f"{storage.url}/ops?X-Amz-Signature=sig-83d1c&X-Amz-Credential=cred-5e02"
    hub.redirect(f"build/{LOCAL}/_ops.py", signed)
    result = mirror(tmp_path / "cdn", "-v")
    failed(result, "404", f"{storage.url}/ops?X-Amz-Signature=****&X-Amz-Credential=****")
    assert storage.gets() == ["/ops?X-Amz-Signature=sig-83d1c&X-Amz-Credential=cred-5e02"]
    for secret in ("sig-83d1c", "cred-5e02"):
        assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("what", "body", "doing", "saying"),
    [
        ("revision", b"<html>Sign in to the network</html>", f"looking up {REPO}", "JSONDecode"),
        ("revision", b'{"sha": "' + b"0" * 40 + b'"}', f"looking up {REPO}", "KeyError"),
        ("tree", b'{"error": "not here"}', f"listing {REPO} at v1", "TypeError"),
        ("tree", b'[{"path": "build/x"}]', f"listing {REPO} at v1", "KeyError"),
    ],
)
def test_an_answer_in_the_hubs_place_is_a_clear_error(
    hub: HubServer, tmp_path: Path, what: str, body: bytes, doing: str, saying: str
) -> None:
    """A captive portal or a proxy answering 200 with its own page, or JSON of another shape."""
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    hub.impersonate(what, body)
    out = tmp_path / "cdn"
    result = mirror(out)
    cannot_read = f"the Hub at {hub.url} gave an answer that huggingface_hub cannot read"
    failed(result, f"{cannot_read} while {doing} ({saying}", "HF_ENDPOINT names a Hugging Face")
    assert not out.exists()


def child(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh process (forked with torch imported), with ``env`` added to
    this one's."""
    return run_code(code, env={**os.environ, **env})


MAIN = "import sys\nfrom flashhub_kernels.cli import main\n"


def test_the_token_of_a_login_is_used_without_hf_token(hub: HubServer, tmp_path: Path) -> None:
    hub.push(REPO, hub_build(), branch="v1", repo_type=REPO_TYPE)
    hub.token = "hf_savedByTheLogin"  # a private repo, which only that token may read
    home = tmp_path / "logged-in"
    home.mkdir()
    (home / "token").write_text(hub.token)  # where `hf auth login` saves it
    out = tmp_path / "cdn"
    argv = ["mirror", REPO, "--version", "1", "--out", str(out), "--variants", "all"]
    result = child(MAIN + f"sys.exit(main({argv!r}))", HF_TOKEN="", HF_HOME=str(home))
    assert result.returncode == 0, result.stderr
    assert (out / "kernels" / REPO / "v1" / "build" / UNIVERSAL).is_dir()


@pytest.mark.parametrize("offline", [False, True])
def test_an_unreachable_hub_is_a_clear_error(tmp_path: Path, offline: bool) -> None:
    endpoint = f"http://mirror-bot:s3cret@127.0.0.1:{refused_port()}"
    code = MAIN + f"sys.exit(main(['mirror', {REPO!r}, '--version', '1', '--out', 'cdn']))"
    env = {"HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / "hf-home")}
    result = child(code, **env, **({"HF_HUB_OFFLINE": "1"} if offline else {}))
    assert result.returncode == 1, result.stderr
    if offline:
        expected = f"error: HF_HUB_OFFLINE is set, and looking up {REPO} needs the Hugging Face Hub"
    else:
        shown = endpoint.replace("s3cret", "****")
        expected = f"error: cannot reach the Hugging Face Hub at {shown}"
        assert "  hint: check the network connection, and HF_ENDPOINT" in result.stderr
    assert result.stderr.startswith(expected), result.stderr
    assert "s3cret" not in result.stderr and "Traceback" not in result.stderr


def test_without_huggingface_hub_the_error_names_the_extra(tmp_path: Path) -> None:
    hidden = "sys.modules['huggingface_hub'] = None  # as if it were not installed\n"
    code = MAIN + hidden + f"sys.exit(main(['mirror', {REPO!r}, '--version', '1', '--out', 'o']))"
    result = child(code)
    assert result.returncode == 1, result.stderr
    assert "needs the 'huggingface_hub' package" in result.stderr
    assert f"  hint: install the hub extra: {EXTRA}" in result.stderr
    assert "Traceback" not in result.stderr
    # Nor does the command's help import it.
    helped = (
        MAIN
        + "try:\n    main(['mirror', '--help'])\nexcept SystemExit:\n    pass\n"
        + "print('huggingface_hub' in sys.modules)"
    )
    assert child(helped).stdout.splitlines()[-1] == "False"
