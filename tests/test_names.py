"""Repo ids, versions, revisions and module names (pure)."""

from __future__ import annotations

import pytest

from flashhub_kernels._loading.version_arguments import parse_revision, requested_version
from flashhub_kernels._models.names import (
    RepoInfo,
    cdn_name_candidates,
    parse_module_name,
    parse_repo_id,
)


@pytest.mark.parametrize(
    "repo_id", ["sdq/audio-codebook-primitives", "acme/tensor_tricks", "_x/Y9"]
)
def test_valid_repo_ids(repo_id: str) -> None:
    org, pkg = parse_repo_id(repo_id)
    assert f"{org}/{pkg}" == repo_id


@pytest.mark.parametrize(
    "repo_id",
    [
        "a/b/c",
        "../x",
        "ORG/",
        "",
        "/pkg",
        "org",
        "org/pk g",
        "org/..",
        "9org/x",
        "org/x.y",
        "a\\b/c",
    ],
)
def test_malformed_repo_ids_raise_value_error(repo_id: str) -> None:
    with pytest.raises(ValueError, match="repo id"):
        parse_repo_id(repo_id)


@pytest.mark.parametrize("version", [0, -1, True, 1.0, "1", None])
def test_bad_versions(version: object) -> None:
    with pytest.raises(ValueError):
        RepoInfo("acme/x", version)  # type: ignore[arg-type]


@pytest.mark.parametrize(("revision", "expected"), [("v1", 1), ("1", 1), ("v12", 12), (" v3 ", 3)])
def test_revisions(revision: str, expected: int) -> None:
    assert parse_revision(revision) == expected


@pytest.mark.parametrize("revision", ["v0", "0", "main", "v", "v1.2", "", "vv1", "-1"])
def test_bad_revisions(revision: str) -> None:
    with pytest.raises(ValueError, match="revision"):
        parse_revision(revision)


def test_exactly_one_of_version_and_revision() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        requested_version(None, None)
    with pytest.raises(ValueError, match="exactly one"):
        requested_version(1, "v1")
    assert requested_version(None, "v2") == 2


def test_repo_info_names() -> None:
    info = RepoInfo("sdq/audio-codebook-primitives", 3)
    assert info.py_pkg == "audio_codebook_primitives"
    assert info.module_name() == "flashhub.sdq.audio_codebook_primitives.v3"
    assert info.module_name("cpu") == "flashhub.sdq.audio_codebook_primitives.v3_cpu"
    assert info.cdn_path == "sdq/audio-codebook-primitives/v3"
    with pytest.raises(ValueError, match="backend"):
        info.module_name("tpu")


def test_name_candidates_dashed_first_then_literal() -> None:
    assert cdn_name_candidates("tensor_tricks") == ["tensor-tricks", "tensor_tricks"]
    assert cdn_name_candidates("sdq") == ["sdq"]
    assert cdn_name_candidates("_acme") == ["_acme"]  # "-acme" is no repo id's org


def test_parse_module_name() -> None:
    assert parse_module_name("flashhub.sdq") is not None
    parsed = parse_module_name("flashhub.sdq.acp.v2_cpu")
    assert parsed is not None and (parsed.version, parsed.backend) == (2, "cpu")
    for name in [
        "flashhub",
        "flashhub.a.b.main",
        "flashhub.a.b.v0",
        "flashhub.a.b.v1.sub",
        "other.a.b.v1",
    ]:
        assert parse_module_name(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "flashhub.\u0430cme.tricks.v1",  # a Cyrillic a
        "flashhub.acme.tr\u00efcks.v1",
        "flashhub.\u0430cme",
        f"flashhub.{'a' * 97}.tricks.v1",  # over the 96 characters of a repo id's org
        f"flashhub.acme.{'t' * 97}",
    ],
)
def test_module_names_no_repo_id_maps_to_are_not_the_hooks(name: str) -> None:
    assert parse_module_name(name) is None


def test_the_longest_names_a_repo_id_takes_are_the_hooks() -> None:
    parsed = parse_module_name(f"flashhub.{'a' * 96}.{'t' * 96}.v1")
    assert parsed is not None
    assert RepoInfo(f"{parsed.org}/{parsed.pkg}", 1).repo_id == f"{'a' * 96}/{'t' * 96}"
