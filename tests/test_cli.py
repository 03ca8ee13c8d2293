"""The ``flashhub`` command: ``variants``, ``info`` and ``get`` (online and offline), the
advice its errors give in options, what it prints of hostile names, ``-v``, usage and
help, and the 0.1.2 ``flashhub-kernel-load`` script.

Each command runs in this process (``cli_runner.flashhub``); the lock and download
commands are tested in test_cli_lock.py, the cache commands in test_cli_cache.py and
``flashhub publish`` in test_cli_publish.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import flashhub_kernels as fk
from conftest import MakeCdn, assert_terminal_safe, run_python
from flashhub_kernels._loading.version_info import _PARALLEL_HEADS
from flashhub_kernels.cli._command_line import build_parser
from support.cdn_server import CdnServer, drop_after, redirect
from support.cli_runner import (
    OFFLINE,
    PYTHON_M_KERNEL_LOAD,
    flashhub,
    flashhub_child,
    flashhub_kernel_load,
    flashhub_process,
    ok_json,
    refused_offline,
)
from support.machines import CPU_BUILD, CUDA_MACHINE, OLD_CUDA_BUILD, run_as
from support.preloaded import run_code
from support.projects import CUDA, PY_PKG, REPO, UNIVERSAL, publish_tensor_tricks, write_project
from support.trees import (
    ESCAPE,
    FORGED,
    MIB_BLOB,
    cpu_variant,
    kernel_files,
    local_variant,
    write_blob_kernel,
    write_kernel,
    write_variant,
)

LOCAL = local_variant()
DOCS = Path(__file__).parent.parent / "docs"


# -- variants, info, get ------------------------------------------------------------------


def test_variants_text_and_json(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    text = flashhub("variants", REPO, "--version", "2")
    document = ok_json(flashhub("variants", REPO, "--json"))  # newest: v3

    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].startswith(f"{REPO}@v2 on torch ")
    assert f"  + {LOCAL}: compatible" in text.stdout
    assert f"  - {CUDA}: " in text.stdout
    assert f"chosen: {LOCAL}" in text.stdout
    assert (document["version"], document["chosen"]) == (3, UNIVERSAL)
    assert document["variants"] == [
        {"variant": UNIVERSAL, "compatible": True, "preferred": True, "reason": None}
    ]


@pytest.mark.usefixtures("cpu_only_torch")
def test_variants_exits_1_when_nothing_fits(cdn: CdnServer) -> None:
    write_kernel(cdn.root, "acme/gpu-only", 1, [CUDA])
    result = flashhub("variants", "acme/gpu-only", "--version", "1")
    assert result.returncode == 1
    assert f"  - {CUDA}: built for cu126" in result.stdout
    assert "chosen: none" in result.stdout


@pytest.mark.usefixtures("cpu_only_torch")
def test_info_lists_variants_files_and_sizes(cdn: CdnServer) -> None:
    local = cpu_variant()  # the build a CPU-only torch loads
    cdn.head = True  # answers HEAD with each file's length
    files = write_kernel(cdn.root, REPO, 1, [local, CUDA])

    document = ok_json(flashhub("info", REPO, "--version", "1", "--json"))
    text = flashhub("info", REPO, "--version", "1")

    assert document["chosen"] == local
    variants = {v["variant"]: v for v in document["variants"]}
    assert variants[local]["compatible"] and not variants[CUDA]["compatible"]
    assert "cu126" in variants[CUDA]["reason"]
    for name, published in files.items():
        listed = {f["path"]: f["bytes"] for f in variants[name]["files"]}
        assert listed == {path: len(data) for path, data in published.items()}
        assert variants[name]["bytes"] == sum(map(len, published.values()))
        assert variants[name]["content_hash"].startswith("sha256-")
    assert text.returncode == 0, text.stderr
    assert f"chosen variant: {local}" in text.stdout
    init_size = len(files[local][f"{PY_PKG}/__init__.py"])
    assert f"{init_size} B  {PY_PKG}/__init__.py" in text.stdout
    assert "rejected: built for cu126" in text.stdout


def test_info_takes_sizes_from_metadata_json_without_head(cdn: CdnServer) -> None:
    files = kernel_files(PY_PKG, "sized")
    write_variant(cdn.root, REPO, 1, UNIVERSAL, files, with_sizes=True)
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([UNIVERSAL]))
    [variant] = ok_json(flashhub("info", REPO, "--version", "1", "--json"))["variants"]
    assert {f["path"]: f["bytes"] for f in variant["files"]} == {
        path: len(data) for path, data in files.items()
    }  # the test server answers HEAD with 501: these sizes can only come from the manifest


def test_info_from_a_file_mirror_and_without_head_support(cdn: CdnServer) -> None:
    files = write_kernel(cdn.root, REPO, 1, [UNIVERSAL])
    size = len(files[UNIVERSAL][f"{PY_PKG}/_ops.py"])

    mirror = ok_json(
        flashhub(
            "info", REPO, "--version", "1", "--json", env={"FLASHHUB_CDN_URL": cdn.root.as_uri()}
        )
    )
    no_head = ok_json(flashhub("info", REPO, "--version", "1", "--json"))

    [variant] = mirror["variants"]
    assert {"path": f"{PY_PKG}/_ops.py", "bytes": size} in variant["files"]
    [variant] = no_head["variants"]
    assert variant["bytes"] is None, "the test server answers HEAD with 501: size unknown"


def test_info_stops_asking_a_mirror_without_head_for_sizes(cdn: CdnServer) -> None:
    """A static host that answers HEAD with 501 does so for every file: once it has said
    so, the other files' sizes are not asked for (only the HEADs already in flight)."""
    files = {f"{PY_PKG}/data_{i:02}.bin": b"x" for i in range(40)}
    write_variant(cdn.root, REPO, 1, UNIVERSAL, {**kernel_files(PY_PKG, "m"), **files})
    (cdn.root / f"kernels/{REPO}/v1/variants.json").write_text(json.dumps([UNIVERSAL]))

    [variant] = ok_json(flashhub("info", REPO, "--version", "1", "--json"))["variants"]

    assert variant["bytes"] is None and len(variant["files"]) > 40
    heads = [r for r in cdn.requests if r.method == "HEAD"]
    assert 1 <= len(heads) <= _PARALLEL_HEADS and {r.status for r in heads} == {501}


def test_info_on_a_probed_version_fetches_each_manifest_once(cdn: CdnServer) -> None:
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL], with_variants_json=False)
    [variant] = ok_json(flashhub("info", REPO, "--version", "1", "--json"))["variants"]
    assert variant["variant"] == UNIVERSAL
    manifests = cdn.gets("/metadata.json")  # the probe's, most of them not found
    assert f"/kernels/{REPO}/v1/build/{UNIVERSAL}/metadata.json" in manifests
    assert len(manifests) == len(set(manifests))


def test_get_downloads_one_kernel(cdn: CdnServer, cache_dir: Path) -> None:
    publish_tensor_tricks(cdn.root)

    text = flashhub("get", REPO, "--version", "2")
    document = ok_json(flashhub("get", REPO, "--version", "1", "--json"))

    assert text.returncode == 0, text.stderr
    path = Path(text.stdout.strip())
    assert path == cache_dir / "kernels" / REPO / "v2" / LOCAL
    assert (path / PY_PKG / "__init__.py").is_file()
    assert document == {
        "repo_id": REPO,
        "version": 1,
        "variant": LOCAL,
        "path": str(cache_dir / "kernels" / REPO / "v1" / LOCAL),
    }


def test_info_and_get_default_to_the_newest_version_like_variants(
    cdn: CdnServer, cache_dir: Path
) -> None:
    publish_tensor_tricks(cdn.root)  # v1, v2 and v3, which holds only torch-universal

    info = ok_json(flashhub("info", REPO, "--json"))
    got = ok_json(flashhub("get", REPO, "--json"))
    text = flashhub("info", REPO)

    assert (info["version"], info["chosen"]) == (3, UNIVERSAL)
    assert got == {
        "repo_id": REPO,
        "version": 3,
        "variant": UNIVERSAL,
        "path": str(cache_dir / "kernels" / REPO / "v3" / UNIVERSAL),
    }
    assert text.stdout.startswith(f"{REPO}@v3 on torch ")


@pytest.mark.parametrize("command", ["variants", "info", "get"])
def test_the_newest_version_offline_is_an_offline_error_naming_the_option(
    cdn: CdnServer, command: str
) -> None:
    publish_tensor_tricks(cdn.root)
    result = flashhub(command, REPO, env=OFFLINE)
    assert result.returncode == 1
    assert f"the newest version of {REPO} cannot be looked up" in result.stderr
    assert "hint: pass --version N, or unset FLASHHUB_OFFLINE" in result.stderr
    assert cdn.requests == []
    assert flashhub("get", REPO, "--version", "2").returncode == 0
    cdn.clear_log()
    result = flashhub(command, REPO, env=OFFLINE)  # the newest the cache holds is named
    assert f"`flashhub {command} {REPO} --version 2`: the newest cached" in result.stderr
    assert cdn.requests == []


def test_get_a_missing_kernel_fails(cdn: CdnServer) -> None:
    result = flashhub("get", "acme/missing", "--version", "1")
    assert result.returncode == 1
    assert "acme/missing@v1 was not found on the CDN" in result.stderr
    assert "hint:" in result.stderr


# -- offline ---------------------------------------------------------------------------------


def test_flashhub_variants_offline(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    online = flashhub("variants", REPO, "--version", "2")
    cold = [flashhub("variants", REPO, "--version", "2", env=OFFLINE)]
    cold.append(flashhub("variants", REPO, env=OFFLINE))
    assert flashhub("get", REPO, "--version", "2").returncode == 0
    cdn.clear_log()

    warm = flashhub("variants", REPO, "--version", "2", env=OFFLINE)
    newest = flashhub("variants", REPO, env=OFFLINE)

    assert online.returncode == 0, online.stderr
    assert (warm.returncode, warm.stdout) == (0, online.stdout)
    refused_offline(cold[0], f"`flashhub get {REPO} --version 2`")
    refused_offline(cold[1], "--version N")
    refused_offline(newest, "--version N")
    assert cdn.requests == []


def test_flashhub_info_offline(project: Path, cdn: CdnServer) -> None:
    assert flashhub("lock", project).returncode == 0
    online = ok_json(flashhub("info", REPO, "--version", "2", "--json"))
    cold = flashhub("info", REPO, "--version", "2", env=OFFLINE)
    assert flashhub("download", project).returncode == 0
    one_cached = flashhub("info", REPO, "--version", "2", env=OFFLINE)
    assert flashhub("download", project, "--all-variants").returncode == 0
    cdn.clear_log()

    warm = ok_json(flashhub("info", REPO, "--version", "2", "--json", env=OFFLINE))
    text = flashhub("info", REPO, "--version", "2", env=OFFLINE)

    refused_offline(cold, f"`flashhub get {REPO} --version 2`")
    refused_offline(one_cached, repr(UNIVERSAL), repr(CUDA), "flashhub download --all-variants")
    assert "Variant(" not in one_cached.stderr
    assert "flashhub get" not in one_cached.stderr  # it would get what is cached already
    for variant in online["variants"]:  # the test CDN answers no HEAD: sizes unknown online
        variant["bytes"] = None
        for file in variant["files"]:
            file["bytes"] = None
    sizes = {
        f["path"]: f["bytes"] for v in warm["variants"] if v["variant"] == LOCAL for f in v["files"]
    }
    published = cdn.root / "kernels" / REPO / "v2" / "build" / LOCAL
    assert sizes == {p: (published / p).stat().st_size for p in sizes}
    assert len(sizes) == 4
    for variant in warm["variants"]:
        variant["bytes"] = None
        for file in variant["files"]:
            file["bytes"] = None
    assert warm == online
    assert text.returncode == 0, text.stderr
    assert f"chosen variant: {LOCAL}" in text.stdout
    assert f"B  {PY_PKG}/__init__.py" in text.stdout
    assert cdn.requests == []


# -- advice in options, names made safe, what -v shows -------------------------------------------


@pytest.mark.parametrize("url_path", ["/kernels", "/kernels/"])
def test_a_prefix_doubled_by_the_cdn_url_is_named(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch, url_path: str
) -> None:
    write_kernel(cdn.root, REPO, 1)
    monkeypatch.setenv("FLASHHUB_CDN_URL", cdn.url + url_path)

    result = flashhub("get", REPO, "--version", "1")
    newest = flashhub("variants", REPO)

    assert result.returncode == 1
    assert f"{cdn.url}/kernels/kernels/{REPO}/v1/variants.json does not exist" in result.stderr
    doubled = (
        "hint: FLASHHUB_CDN_URL already ends with /kernels and FLASHHUB_CDN_PREFIX adds it "
        "again: drop one"
    )
    assert doubled in result.stderr
    assert f"{cdn.url}/kernels/kernels/{REPO}/versions.json does not exist" in newest.stderr
    assert doubled in newest.stderr


@pytest.mark.parametrize("command", ["variants", "info", "get"])
def test_an_unknown_repo_gets_cli_advice(cdn: CdnServer, command: str) -> None:
    result = flashhub(command, "acme/nope")

    assert result.returncode == 1
    assert f"{cdn.url}/kernels/acme/nope/versions.json does not exist" in result.stderr
    [hint] = [line for line in result.stderr.splitlines() if "hint:" in line]
    assert "check the repo id" in hint and "--version N" in hint
    assert "version=" not in hint


def test_cli_backend_advice_is_an_option_that_works(
    cdn: CdnServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_as(monkeypatch, CUDA_MACHINE)
    write_kernel(cdn.root, REPO, 1, [OLD_CUDA_BUILD, CPU_BUILD])

    refused = flashhub("get", REPO, "--version", "1")
    forced = flashhub("get", REPO, "--version", "1", "--backend", "cpu")
    info = flashhub("info", REPO, "--version", "1")

    assert refused.returncode == 1
    assert f"hint: pass --backend cpu to use the CPU build {CPU_BUILD}" in refused.stderr
    assert "backend='cpu'" not in refused.stderr
    forcible = "rejected: built for cpu, but this system uses cu126 (--backend cpu loads it anyway)"
    assert info.stdout.count(forcible) == 1, info.stdout
    assert forced.returncode == 0, forced.stderr
    assert Path(forced.stdout.strip()).name == CPU_BUILD


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


def test_flashhub_v_says_what_the_load_did_without_credentials(cdn: CdnServer) -> None:
    cdn.inject(write_blob_kernel(cdn.root, MIB_BLOB), drop_after(1000))
    cdn_url = f"http://user:s3cret@127.0.0.1:{cdn.port}"
    result = flashhub("-v", "get", REPO, "--version", "1", env={"FLASHHUB_CDN_URL": cdn_url})
    assert result.returncode == 0, result.stderr
    log = result.stderr
    assert f"downloaded {REPO}/v1/build/{UNIVERSAL}/tensor_tricks/blob.bin from " in log
    assert f"127.0.0.1:{cdn.port}: {len(MIB_BLOB)} bytes in " in log
    assert "stopped at byte 1000; asking for the rest from there" in log
    assert "s3cret" not in log


def test_flashhub_vv_hides_the_query_of_a_signed_url_redirected_to(
    cdn: CdnServer, make_cdn: MakeCdn
) -> None:
    blob = write_blob_kernel(cdn.root, MIB_BLOB)
    storage = make_cdn()  # serves the same tree, whatever the query
    cdn.inject(blob, redirect(f"{storage.url}/{blob}?X-Amz-Signature=sig-4f9e&token=tok-77a1"))
    result = flashhub("-vv", "get", REPO, "--version", "1")
    assert result.returncode == 0, result.stderr
    assert "blob.bin?X-Amz-Signature=****&token=****" in result.stderr  # urllib3's lines
    assert "sig-4f9e" not in result.stderr and "tok-77a1" not in result.stderr


def test_v_after_the_subcommand_works_too(cdn: CdnServer) -> None:
    write_blob_kernel(cdn.root, MIB_BLOB)
    result = flashhub("get", REPO, "--version", "1", "-v")
    assert result.returncode == 0, result.stderr
    assert f"downloaded {REPO}/v1/build/{UNIVERSAL}/tensor_tricks/blob.bin from " in result.stderr


def test_cdn_url_and_cache_dir_options_override_the_environment(
    cdn: CdnServer, tmp_path: Path
) -> None:
    publish_tensor_tricks(cdn.root)
    elsewhere = tmp_path / "elsewhere"
    env = {"FLASHHUB_CDN_URL": "http://127.0.0.1:9"}  # nothing listens there
    options = ["--cdn-url", cdn.url, "--cache-dir", str(elsewhere)]

    got = ok_json(flashhub("get", REPO, "--version", "2", "--json", *options, env=env))
    listed = ok_json(flashhub("cache", "list", "--json", "--cache-dir", elsewhere))
    variants = flashhub("variants", REPO, "--version", "2", *options, env=env)

    assert Path(got["path"]).is_relative_to(elsewhere)
    assert listed["cache_dir"] == str(elsewhere)
    assert [e["path"] for e in listed["entries"]] == [got["path"]]
    assert variants.returncode == 0, variants.stderr


def test_errors_name_the_cdn_options_the_command_was_given(cdn: CdnServer, tmp_path: Path) -> None:
    """Given ``--cdn-url`` (or the 0.1.2 script's ``--prefix``), the command ignores the
    variables: an error that said to check ``FLASHHUB_CDN_URL`` sent the user to a setting
    that played no part."""
    publish_tensor_tricks(cdn.root)
    project = write_project(tmp_path / "project", {REPO: "==1"})
    assert flashhub("lock", project).returncode == 0
    shutil.rmtree(cdn.root / f"kernels/{REPO}/v1")  # withdrawn after locking
    given = ["--cdn-url", cdn.url]

    unknown = flashhub_child("get", "acme/nope", "--version", "1", *given)
    download = flashhub_child("download", project, *given)
    script = run_code(
        PYTHON_M_KERNEL_LOAD,
        "acme/nope",
        "--version",
        "1",
        *given,
        "--prefix",
        "kernels",
        env=dict(os.environ),
    )

    assert unknown.returncode == 1
    assert "hint: check the repo id, and --cdn-url / FLASHHUB_CDN_PREFIX" in unknown.stderr
    assert download.returncode == 1
    assert f"error: {REPO}@v1 " in download.stderr
    assert "add a complete mirror to --cdn-url" in download.stderr
    assert script.returncode == 1
    assert "hint: check the repo id, and --cdn-url / --prefix" in script.stderr
    assert "FLASHHUB_CDN_PREFIX" not in script.stderr
    for result in (unknown, download, script):
        assert "FLASHHUB_CDN_URL" not in result.stderr


def test_a_malformed_cdn_url_option_is_a_usage_error() -> None:
    result = flashhub("get", REPO, "--version", "1", "--cdn-url", "http://host:notaport")
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "Traceback" not in result.stderr
    assert "hint: fix --cdn-url" in result.stderr and "configure()" not in result.stderr


def test_a_malformed_variable_beside_the_cdn_options_is_named_not_the_options() -> None:
    options = ["--cdn-url", "http://127.0.0.1:9", "--cache-dir", "cache"]
    env = {"FLASHHUB_READ_TIMEOUT": "-3"}
    result = flashhub_child("get", REPO, "--version", "1", *options, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "error: FLASHHUB_READ_TIMEOUT='-3' must be a positive number of seconds, at most a week",
        "  hint: fix FLASHHUB_READ_TIMEOUT",
    ]


def test_version_option_prints_the_version() -> None:
    result = flashhub("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"flashhub {fk.__version__}"


# -- usage, help, and the 0.1.2 script ------------------------------------------------------


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The commands of ``parser`` by name, each once (an alias, ``cache ls``, left out)."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    names: dict[int, str] = {}
    for name, sub in actions[0].choices.items() if actions else ():
        names.setdefault(id(sub), name)  # its name comes before its aliases
    return {name: actions[0].choices[name] for name in names.values()}


# Every command that takes options, as its words: ["get"], ["cache", "list"], ...
LEAF_COMMANDS = [
    [name, *action]
    for name, parser in subcommands(build_parser()).items()
    for action in [[action] for action in subcommands(parser)] or [[]]
]
# ... and the groups of actions (["cache"]).
COMMANDS = LEAF_COMMANDS + [
    [name] for name, p in subcommands(build_parser()).items() if subcommands(p)
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help(command: list[str]) -> None:
    result = flashhub(*command, "--help")
    assert result.returncode == 0
    assert result.stdout.startswith(f"usage: flashhub {' '.join(command)}")


def test_an_alias_is_named_once_in_its_groups_help_and_in_its_own() -> None:
    # argparse names a command by its first name in its usage, whichever name was typed.
    named = re.findall(r"^.*\bls\b.*$", flashhub("cache", "--help").stdout, re.MULTILINE)
    assert [re.findall(r"\bls\b", line) for line in named] == [["ls"]]
    assert "(also: ls)" in flashhub("cache", "ls", "--help").stdout


OPTION = r"--[a-z][a-z-]*(?:\s+[A-Z][A-Z0-9_./]*)?"  # and the word for its value: --system NAME


def usage_options(command: str) -> set[str]:
    """The long options the usage of ``flashhub COMMAND --help`` shows, each with the word
    for its value, but the two that every command takes (``--help``, ``--verbose``)."""
    usage = flashhub(*command.split(), "--help").stdout.split("\n\n")[0]
    options = {" ".join(option.split()) for option in re.findall(OPTION, usage)}
    return options - {"--help", "--verbose"}


def test_docs_cli_md_names_every_option_of_every_command_and_no_other() -> None:
    """The synopses of docs/cli.md (the headings, table rows and list items that quote
    ``flashhub COMMAND ...``) name each option ``--help`` shows, and only those, with the
    word ``--help`` shows for its value."""
    text = re.sub(r"```.*?```", "", (DOCS / "cli.md").read_text(), flags=re.DOTALL)
    synopses = [synopsis.split() for synopsis in re.findall(r"`flashhub ([^`]*)`", text)]
    gaps = {}
    for words in LEAF_COMMANDS:
        command = " ".join(words)
        documented = {
            option
            for synopsis in synopses
            if synopsis[: len(words)] == words
            for option in re.findall(OPTION, " ".join(synopsis))
        }
        if documented != (shown := usage_options(command)):
            gaps[command] = {"undocumented": shown - documented, "unknown": documented - shown}
    assert gaps == {}


@pytest.mark.parametrize(
    "args",
    [
        ["variants"],
        ["variants", "a/b/c"],
        ["info", REPO, "--version", "0"],
        ["get", "nope", "--version", "1"],
        ["download", "--bogus"],
        ["lock", "a", "b"],
        ["cache"],
        ["cache", "bogus"],
        ["cache", "prune", "--keep-locked"],
        ["variants", REPO, "--backend", "tpu"],
    ],
    ids=" ".join,
)
def test_bad_usage_exits_2(args: list[str]) -> None:
    result = flashhub(*args)
    assert result.returncode == 2
    assert "usage: flashhub" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["get", REPO, "\x1b[2J"],
        ["info", REPO, "--\u202eX"],
        ["variants", REPO, "--version", "1", "a\nerror: forged"],
    ],
    ids=["escape-sequence", "bidi-override", "newline"],
)
def test_an_unrecognized_argument_is_shown_escaped_with_its_commands_usage(
    args: list[str],
) -> None:
    result = flashhub(*args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: flashhub {args[0]} [-h]")  # not flashhub's
    message = result.stderr.splitlines()[-1]
    assert message.startswith(f"flashhub {args[0]}: error: unrecognized arguments: ")
    assert repr(args[-1])[1:-1] in message
    assert_terminal_safe(result.stderr)
    assert "error: forged" not in result.stderr.splitlines()


# What each command needs typed before argparse looks at an unknown option: without its
# required arguments, it reports them missing instead.
REQUIRED_ARGUMENTS = {
    "publish": ["build", "--repo-id", REPO, "--version", "1", "--out", "cdn"],
    "mirror": [REPO, "--version", "1", "--out", "cdn"],
    "keygen": ["--out", "key"],
    "sign": ["cdn", "--key", "key"],
    "variants": [REPO],
    "info": [REPO],
    "describe-api": [REPO],
    "get": [REPO],
}


@pytest.mark.parametrize("command", [*LEAF_COMMANDS, ["cache", "ls"]], ids=" ".join)
def test_an_unknown_option_is_reported_by_the_innermost_command_typed(
    command: list[str],
) -> None:
    result = flashhub(*command, *REQUIRED_ARGUMENTS.get(command[0], []), "--bogus")
    assert result.returncode == 2
    # `cache ls` is `cache list`: argparse names an alias by its command's name
    named = " ".join(["list" if word == "ls" else word for word in command])
    assert result.stderr.startswith(f"usage: flashhub {named} [-h]"), result.stderr
    last = result.stderr.splitlines()[-1]
    assert last == f"flashhub {named}: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize(
    "args",
    [
        ["cache", "list", "--cdn-url", "https://bob:hunter2@cdn.example"],  # no such option
        ["get", REPO, "--cdn-ulr=https://bob:hunter2@cdn.example"],  # a typo
    ],
    ids=["option-of-another-command", "typo"],
)
def test_an_unrecognized_argument_hides_the_credentials_of_its_url(args: list[str]) -> None:
    result = flashhub(*args)
    assert result.returncode == 2
    assert "unrecognized arguments: " in result.stderr
    assert "@cdn.example" in result.stderr and "hunter2" not in result.stderr


def test_kernel_load_shows_an_unrecognized_argument_escaped() -> None:
    result = flashhub_kernel_load(REPO, "--version", "1", "\x1b]0;title\x07")
    assert result.returncode == 2
    assert_terminal_safe(result.stderr)
    assert result.stderr.splitlines()[-1].endswith("unrecognized arguments: \\x1b]0;title\\x07")


def test_flashhub_alone_prints_its_help_as_a_usage_error() -> None:
    result = flashhub_process()
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("usage: flashhub ")
    listed = {line.split()[0] for line in result.stderr.splitlines() if line.startswith("    ")}
    assert {words[0] for words in COMMANDS} <= listed


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).with_name("flashhub-kernel-load"))],  # as installed
        [sys.executable, "-m", "flashhub_kernels.cli"],  # as 0.1.2 also ran it
    ],
    ids=["console-script", "python-m"],
)
def test_flashhub_kernel_load_keeps_working(cdn: CdnServer, command: list[str]) -> None:
    publish_tensor_tricks(cdn.root)
    result = subprocess.run(  # a real process
        [*command, REPO, "--version", "2"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"loaded {REPO} v2 as flashhub.acme.tensor_tricks.v2\n"


@pytest.mark.parametrize(
    ("version", "line"), [("2", f"{REPO} v2: True"), ("9", f"{REPO} v9: False")]
)
def test_flashhub_kernel_load_has_prints_as_0_1_2_did(
    cdn: CdnServer, version: str, line: str
) -> None:
    publish_tensor_tricks(cdn.root)
    result = flashhub_kernel_load(REPO, "--version", version, "--has")
    assert (result.returncode, result.stdout) == (0, line + "\n"), result.stderr


def test_flashhub_kernel_load_has_without_a_version_or_versions_json_says_to_pass_one(
    cdn: CdnServer,
) -> None:
    write_kernel(cdn.root, REPO, 1, [UNIVERSAL], with_versions_json=False)
    result = flashhub_kernel_load(REPO, "--has")
    assert (result.returncode, result.stdout) == (1, ""), result.stderr
    assert f"{REPO} has no versions.json on the CDN" in result.stderr
    assert "pass --version N if it is published without one" in result.stderr
    listed = flashhub_kernel_load(REPO, "--version", "1", "--has")
    assert listed.stdout == f"{REPO} v1: True\n", listed.stderr


@pytest.mark.parametrize("option", ["--cdn-url", "--prefix"])
def test_flashhub_kernel_load_takes_an_empty_option_as_left_out_as_0_1_2_did(
    cdn: CdnServer, option: str
) -> None:
    # A script passing "$VAR" unset: 0.1.2 fell back to the environment's setting.
    publish_tensor_tricks(cdn.root)
    result = flashhub_kernel_load(REPO, "--version", "2", "--has", option, "")
    assert (result.returncode, result.stdout) == (0, f"{REPO} v2: True\n"), result.stderr


def test_kernel_load_usage_errors() -> None:
    no_version = flashhub_kernel_load("acme/my-kern")
    assert no_version.returncode == 2
    assert "--version N is required" in no_version.stderr
    bad_repo = flashhub_kernel_load("a/b/c", "--version", "1")
    assert bad_repo.returncode == 2
    assert "invalid repo id" in bad_repo.stderr


# What the command imports neither for its help nor when its module is imported.
HEAVY_FOR_THE_CLI = ("torch", "requests", "http.client")


# Each of argv[2:] is a command line (JSON); after its --help, the heavy modules (argv[1])
# imported so far. The help itself is printed into a buffer.
HELP_IMPORTS = """
import contextlib, io, json, sys
from flashhub_kernels.cli import kernel_load_main, main
heavy = set(json.loads(sys.argv[1]))
for argv in map(json.loads, sys.argv[2:]):
    run = kernel_load_main if argv[0] == "flashhub-kernel-load" else main
    with contextlib.redirect_stdout(io.StringIO()):
        code = run([*argv[1:], "--help"])
    print(json.dumps([argv, code, sorted(heavy & set(sys.modules))]))
"""


def test_the_help_of_every_command_imports_neither_torch_nor_requests() -> None:
    every = [["flashhub"], *(["flashhub", *words] for words in COMMANDS), ["flashhub-kernel-load"]]
    args = [json.dumps(argv) for argv in [HEAVY_FOR_THE_CLI, *every]]
    # A fresh interpreter: this one has imported torch and requests long since.
    result = run_code(HELP_IMPORTS, *args, env=dict(os.environ), fresh=True)
    assert result.returncode == 0, result.stderr
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed == [[argv, 0, []] for argv in every]


def test_cli_help_imports_no_command_module_and_a_command_only_its_own() -> None:
    code = (
        "import sys\nfrom flashhub_kernels.cli import main\n"
        "for argv in (['--help'], ['cache', 'list', '--help']):\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "    print('loaded:', sorted(m for m in sys.modules"
        " if m.startswith('flashhub_kernels.cli.') and not m.split('.')[-1].startswith('_')))"
    )
    loaded = [line for line in run_python(code).splitlines() if line.startswith("loaded: ")]
    assert loaded == ["loaded: []", "loaded: ['flashhub_kernels.cli.cache']"]


# A program that set its own logging and settings runs a command in its own process.
COMMAND_IN_A_PROGRAM = """
import logging, sys
import flashhub_kernels as fk
from flashhub_kernels.cli import main
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="PROGRAM %(name)s")
logging.getLogger("urllib3").setLevel(logging.WARNING)
logging.getLogger("flashhub_kernels").setLevel(logging.ERROR)
fk.configure(cdn_url="http://127.0.0.1:9")
code = main(["-vv", "get", sys.argv[1], "--version", "1", "--cdn-url", sys.argv[2],
             "--cache-dir", sys.argv[3]])
print("exit", code)
print("levels", *(logging.getLogger(name).level for name in ("urllib3", "flashhub_kernels")))
config = fk.get_config()
print("settings", config.cdn_urls, str(config.cache_dir) == sys.argv[3])
"""


def test_a_command_run_in_a_program_leaves_its_logging_and_settings_as_they_were(
    cdn: CdnServer, tmp_path: Path
) -> None:
    """-vv shows the library's and urllib3's lines on stderr, and --cdn-url and --cache-dir
    apply, for the command only: they used to stay set, the loggers at NOTSET."""
    publish_tensor_tricks(cdn.root)
    cache = str(tmp_path / "the-commands-cache")
    out = run_code(COMMAND_IN_A_PROGRAM, REPO, cdn.url, cache, env=dict(os.environ)).stdout
    assert "exit 0" in out, out
    assert "levels 30 40" in out, out
    assert "settings ('http://127.0.0.1:9',) False" in out, out
    # The command's lines went to its stderr only (filelock's are the program's to show).
    assert "PROGRAM urllib3" not in out and "PROGRAM flashhub" not in out, out


def test_cli_import_is_light() -> None:
    code = (
        "import sys, flashhub_kernels.cli; "
        f"heavy = set({HEAVY_FOR_THE_CLI!r}) & set(sys.modules); assert not heavy, heavy"
    )
    run_python(code, fresh=True)  # a fresh interpreter, as above
