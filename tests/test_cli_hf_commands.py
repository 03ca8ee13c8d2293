"""The spellings of Hugging Face kernels' CLI that ``flashhub`` accepts too: ``variants
--all-versions``, ``--only-compatible`` and ``--version latest``; ``info --dep-tree``;
``cache ls`` (``cache list``) with its columns; ``versions``, which it does not take, names
the command that does. ``describe-api`` is in test_cli_describe_api.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from flashhub_kernels.cli._common import size
from support.builder import (
    loaded_variant,
    ran,
    write_builder_kernel,
    write_dependency_chain,
)
from support.cdn_server import CdnServer
from support.cli_runner import (
    OFFLINE,
    flashhub,
    flashhub_process,
    ok_json,
    refused_offline,
)
from support.projects import CUDA, REPO, UNIVERSAL, publish_tensor_tricks, write_project
from support.trees import local_variant, write_kernel

LOCAL = local_variant()

# -- variants ---------------------------------------------------------------------------------


def test_variants_all_versions_judges_each_version_oldest_first(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)  # v1: LOCAL and UNIVERSAL; v2 also CUDA; v3: UNIVERSAL

    text = flashhub("variants", REPO, "--all-versions")
    document = ok_json(flashhub("variants", REPO, "--all-versions", "--json"))

    assert text.returncode == 0, text.stderr
    blocks = text.stdout.split("\n\n")
    assert [block.splitlines()[0].split(" on ")[0] for block in blocks] == [
        f"{REPO}@v1",
        f"{REPO}@v2",
        f"{REPO}@v3",
    ]
    assert f"  - {CUDA}: " in blocks[1]
    assert blocks[2].splitlines()[-1] == f"chosen: {UNIVERSAL}"
    assert document["repo_id"] == REPO and "system" in document
    assert [v["version"] for v in document["versions"]] == [1, 2, 3]
    v2 = document["versions"][1]
    assert v2["chosen"] == LOCAL
    assert {v["variant"]: (v["compatible"], v["preferred"]) for v in v2["variants"]} == {
        LOCAL: (True, True),
        UNIVERSAL: (True, False),
        CUDA: (False, False),
    }


def test_variants_only_compatible_leaves_out_the_rejected(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    text = flashhub("variants", REPO, "--version", "2", "--only-compatible")
    document = ok_json(flashhub("variants", REPO, "--version", "2", "--only-compatible", "--json"))

    assert text.returncode == 0, text.stderr
    assert CUDA not in text.stdout
    assert f"  + {LOCAL}: compatible" in text.stdout and f"chosen: {LOCAL}" in text.stdout
    assert [v["variant"] for v in document["variants"]] == [LOCAL, UNIVERSAL]
    assert document["chosen"] == LOCAL


@pytest.mark.usefixtures("cpu_only_torch")
def test_variants_only_compatible_with_nothing_that_fits(cdn: CdnServer) -> None:
    write_kernel(cdn.root, "acme/gpu-only", 1, [CUDA])

    result = flashhub("variants", "acme/gpu-only", "--only-compatible")

    assert result.returncode == 1
    assert result.stdout.splitlines()[1:] == [
        "  (no compatible variants)",
        "chosen: none (no variant fits this system)",
    ]


def test_variants_version_latest_is_the_newest_in_versions_json(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    latest = ok_json(flashhub("variants", REPO, "--version", "latest", "--json"))
    default = ok_json(flashhub("variants", REPO, "--json"))

    assert latest == default
    assert latest["version"] == 3
    assert latest["variants"] == [
        {"variant": UNIVERSAL, "compatible": True, "preferred": True, "reason": None}
    ]


@pytest.mark.parametrize(
    "args",
    [["--all-versions", "--version", "2"], ["--all-versions", "--version", "latest"]],
)
def test_all_versions_and_a_version_are_a_usage_error(args: list[str]) -> None:
    result = flashhub("variants", REPO, *args)
    assert result.returncode == 2
    assert "not allowed with argument" in result.stderr


def test_versions_says_which_command_lists_them(cdn: CdnServer) -> None:
    result = flashhub("versions", REPO)  # Hugging Face kernels' command, deprecated there
    assert result.returncode == 2
    assert "invalid choice: 'versions'" in result.stderr
    assert "use `flashhub variants --all-versions ORG/PKG`" in result.stderr
    assert cdn.requests == []


def test_all_versions_lists_a_version_with_no_build_for_this_system(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    # v4 has no variants.json, and none of the builds this system could load.
    write_kernel(cdn.root, REPO, 4, [CUDA], with_variants_json=False)

    document = ok_json(flashhub("variants", REPO, "--all-versions", "--json"))
    text = flashhub("variants", REPO, "--all-versions")
    alone = flashhub("variants", REPO, "--version", "4")

    v4 = document["versions"][3]
    assert (v4["version"], v4["chosen"], v4["variants"]) == (4, None, [])
    assert "none of the variants this system can load is published" in v4["problem"]
    assert text.returncode == 0  # the other versions have a build that fits
    assert "none of the variants this system can load is published" in text.stdout
    assert alone.returncode == 1 and alone.stderr.startswith("error: ")


def test_all_versions_offline_lists_the_versions_the_cache_records(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    refused_offline(flashhub("variants", REPO, "--all-versions", env=OFFLINE), "records no version")
    assert flashhub("get", REPO, "--version", "2").returncode == 0

    document = ok_json(flashhub("variants", REPO, "--all-versions", "--json", env=OFFLINE))

    assert [v["version"] for v in document["versions"]] == [2]
    assert document["versions"][0]["chosen"] == LOCAL


def test_variants_options_in_a_process(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)

    result = flashhub_process(
        "variants", REPO, "--all-versions", "--only-compatible", "--version", "latest"
    )
    listed = flashhub_process("variants", REPO, "--all-versions", "--only-compatible", "--json")

    assert result.returncode == 2 and "not allowed with argument" in result.stderr
    assert listed.returncode == 0, listed.stderr
    versions = json.loads(listed.stdout)["versions"]
    assert [[v["variant"] for v in one["variants"]] for one in versions] == [
        [LOCAL, UNIVERSAL],
        [LOCAL, UNIVERSAL],
        [UNIVERSAL],
    ]


# -- info --dep-tree ---------------------------------------------------------------------------

TOP, BASE, LEAF = "acme/top", "acme/base", "acme/leaf"
LOADED = loaded_variant()


def publish_tree(cdn_root: Path) -> None:
    """acme/top v1 depends on acme/base v2 and acme/leaf v1; acme/base v2 on acme/leaf v1."""
    write_builder_kernel(cdn_root, LEAF, 1)
    write_builder_kernel(cdn_root, BASE, 2, kernel_depends=[(LEAF, 1)])
    write_builder_kernel(cdn_root, TOP, 1, kernel_depends=[(BASE, 2), (LEAF, 1)])


TREE_LINES = [
    "kernel dependencies:",
    f"{TOP} v1 ({LOADED})",
    f"|-- {BASE} v2 ({LOADED})",
    f"|   `-- {LEAF} v1 ({LOADED})",
    f"`-- {LEAF} v1 ({LOADED})",
]


def leaf_node() -> dict[str, object]:
    return {"repo_id": LEAF, "version": 1, "variant": LOADED, "depends": []}


def test_info_dep_tree_draws_the_kernels_it_depends_on(cdn: CdnServer, ran_dir: Path) -> None:
    publish_tree(cdn.root)

    text = flashhub("info", TOP, "--dep-tree")
    document = ok_json(flashhub("info", TOP, "--version", "1", "--dep-tree", "--json"))
    plain = ok_json(flashhub("info", TOP, "--version", "1", "--json"))

    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[-len(TREE_LINES) :] == TREE_LINES
    assert document["dependency_tree"] == {
        "repo_id": TOP,
        "version": 1,
        "variant": LOADED,
        "depends": [
            {"repo_id": BASE, "version": 2, "variant": LOADED, "depends": [leaf_node()]},
            leaf_node(),
        ],
    }
    assert "dependency_tree" not in plain
    assert {k: v for k, v in document.items() if k != "dependency_tree"} == plain
    assert ran(ran_dir) == []  # read, never imported


def test_info_dep_tree_offline_from_the_cache(
    cdn: CdnServer, ran_dir: Path, tmp_path: Path
) -> None:
    publish_tree(cdn.root)
    project = write_project(tmp_path / "project", {TOP: "==1"})
    assert flashhub("lock", project).returncode == 0  # locks what acme/top depends on too
    assert flashhub("download", project, "--all-variants").returncode == 0

    text = flashhub("info", TOP, "--version", "1", "--dep-tree", env=OFFLINE)

    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[-len(TREE_LINES) :] == TREE_LINES
    assert ran(ran_dir) == []


@pytest.mark.usefixtures("cpu_only_torch")
def test_info_dep_tree_names_a_dependency_with_no_build_for_this_system(
    cdn: CdnServer, ran_dir: Path
) -> None:
    write_builder_kernel(cdn.root, BASE, 2, variants=["torch-cuda"])
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[(BASE, 2)])

    result = flashhub("info", TOP, "--version", "1", "--dep-tree")

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-3:] == [
        "kernel dependencies:",
        f"{TOP} v1 (torch-cpu)",
        f"`-- {BASE} v2 (no variant fits this system)",
    ]


def test_info_dep_tree_refuses_a_cycle(cdn: CdnServer, ran_dir: Path) -> None:
    write_builder_kernel(cdn.root, TOP, 1, kernel_depends=[(BASE, 1)])
    write_builder_kernel(cdn.root, BASE, 1, kernel_depends=[(TOP, 1)])

    result = flashhub("info", TOP, "--version", "1", "--dep-tree")

    assert result.returncode == 1
    assert "kernel dependencies form a cycle: acme/top v1 -> acme/base v1 -> acme/top v1" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_info_dep_tree_refuses_a_chain_past_64_levels(cdn: CdnServer, ran_dir: Path) -> None:
    write_dependency_chain(cdn.root, "acme/chain", 66)

    result = flashhub("info", "acme/chain", "--version", "1", "--dep-tree")

    assert result.returncode == 1
    assert "more than 64 levels deep: acme/chain v1 -> " in result.stderr
    assert "Traceback" not in result.stderr


def test_info_dep_tree_in_a_process(cdn: CdnServer, ran_dir: Path) -> None:
    publish_tree(cdn.root)
    result = flashhub_process("info", TOP, "--version", "1", "--dep-tree")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-len(TREE_LINES) :] == TREE_LINES
    assert ran(ran_dir) == []


# -- cache ls -----------------------------------------------------------------------------------

HEADER = ["ID", "SIZE", "LAST_ACCESSED", "LAST_MODIFIED", "VERSION", "VARIANTS", "CONTENT_HASH"]
DAY = 86400


def age(path: Path, *, accessed_days: int, modified_days: int) -> None:
    """Set the times of every file in ``path`` (and its own) that many days back."""
    now = time.time()
    times = (now - accessed_days * DAY, now - modified_days * DAY)
    for item in [path, *path.rglob("*")]:
        os.utime(item, times, follow_symlinks=False)


def test_cache_ls_lists_versions_with_their_variants(project: Path, cache_dir: Path) -> None:
    assert flashhub("lock", project).returncode == 0  # v2, with three variants
    assert flashhub("download", project, "--all-variants").returncode == 0
    assert flashhub("get", REPO, "--version", "3").returncode == 0
    age(cache_dir / "kernels" / REPO / "v2", accessed_days=3, modified_days=15)

    ls = flashhub("cache", "ls")
    listed = flashhub("cache", "list")
    full = flashhub("cache", "ls", "--no-truncate")
    document = ok_json(flashhub("cache", "ls", "--json"))

    assert ls.returncode == 0, ls.stderr
    assert ls.stdout == listed.stdout
    hashes = {(e["version"], e["variant"]): e["content_hash"] for e in document["entries"]}
    short = {key: value[: len("sha256-") + 12] for key, value in hashes.items()}
    sizes = {(e["version"], e["variant"]): e["bytes"] for e in document["entries"]}
    v2_size = sum(size for (version, _), size in sizes.items() if version == 2)
    rows = [line.split() for line in ls.stdout.splitlines()]
    assert rows[0] == HEADER
    assert set(ls.stdout.splitlines()[1]) <= {"-", " "}
    # A row per version; its further variants below it, by name, the other columns blank.
    # UNIVERSAL sorts first; the order of the other two depends on this machine's torch.
    first, *others = sorted([UNIVERSAL, CUDA, LOCAL])
    assert first == UNIVERSAL
    assert rows[2:] == [
        [
            REPO,
            *size_words(v2_size),
            "3",
            "days",
            "ago",
            "2",
            "weeks",
            "ago",
            "v2",
            UNIVERSAL,
            short[(2, UNIVERSAL)],
        ],
        *([variant, short[(2, variant)]] for variant in others),
        [
            REPO,
            *size_words(sizes[(3, UNIVERSAL)]),
            "a",
            "few",
            "seconds",
            "ago",
            "a",
            "few",
            "seconds",
            "ago",
            "v3",
            UNIVERSAL,
            short[(3, UNIVERSAL)],
        ],
    ]
    assert all(value in full.stdout for value in hashes.values())
    now = time.time()
    assert document["repos"] == [
        {
            "repo_id": REPO,
            "size_on_disk": sum(sizes.values()),
            "last_accessed": pytest.approx(now, abs=60),
            "last_modified": pytest.approx(now, abs=60),
            "versions": [
                {
                    "version": "v2",
                    "size_on_disk": v2_size,
                    "last_accessed": pytest.approx(now - 3 * DAY, abs=60),
                    "last_modified": pytest.approx(now - 15 * DAY, abs=60),
                    "variants": [first, *others],
                },
                {
                    "version": "v3",
                    "size_on_disk": sizes[(3, UNIVERSAL)],
                    "last_accessed": pytest.approx(now, abs=60),
                    "last_modified": pytest.approx(now, abs=60),
                    "variants": [UNIVERSAL],
                },
            ],
        }
    ]


def size_words(nbytes: int) -> list[str]:
    """How the SIZE column shows ``nbytes``, split as the row is."""
    return size(nbytes).split()


def test_cache_ls_of_an_empty_cache(cache_dir: Path) -> None:
    cache_dir.mkdir()
    result = flashhub("cache", "ls")
    assert result.returncode == 0
    assert result.stdout == f"No cached kernel versions found in {cache_dir}.\n"
    assert ok_json(flashhub("cache", "ls", "--json"))["repos"] == []


def test_cache_ls_in_a_process(cdn: CdnServer) -> None:
    publish_tensor_tricks(cdn.root)
    assert flashhub("get", REPO, "--version", "3").returncode == 0

    result = flashhub_process("cache", "ls", "--json")

    assert result.returncode == 0, result.stderr
    repos = json.loads(result.stdout)["repos"]
    assert [(r["repo_id"], [v["version"] for v in r["versions"]]) for r in repos] == [
        (REPO, ["v3"])
    ]
