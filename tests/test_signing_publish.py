"""The publisher's side of signing: ``flashhub publish --sign`` and ``flashhub sign``."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from flashhub_kernels._publish import destination as publish_destination, publish, sign_tree
from flashhub_kernels._signing.signature_files import parse_signatures
from flashhub_kernels._signing.signing_keys import SigningKey, generate_signing_key, write_key_pair
from flashhub_kernels._signing.statements import DocumentKind
from flashhub_kernels._signing.trusted_keys import TrustedKey, parse_trusted_keys
from flashhub_kernels._signing.verification import verify_document
from flashhub_kernels.errors import PublishError, SignatureError
from support.cli_runner import flashhub, ok_json

pytestmark = pytest.mark.signing

REPO = "acme/my-kern"
UNIVERSAL = "torch-universal"
CPU = "torch213-cxx11-cpu-x86_64-linux"

Where = tuple[DocumentKind, "int | None", "str | None"]


def make_build(
    root: Path, marker: str = "one", variants: tuple[str, ...] = (UNIVERSAL, CPU)
) -> Path:
    for variant in variants:
        package = root / "build" / variant / "my_kern"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(f"MARKER = {marker!r}\n")
    return root


@pytest.fixture
def build(tmp_path: Path) -> Path:
    return make_build(tmp_path / "kernel")


def keyfile(directory: Path, name: str) -> tuple[Path, SigningKey]:
    key = generate_signing_key()
    write_key_pair(key, directory / name)
    return directory / name, key


def trusted(*keys: SigningKey) -> tuple[TrustedKey, ...]:
    return parse_trusted_keys(" ".join(f"acme:{k.public_line}" for k in keys), source="test")


def documents(pkg_dir: Path, only: int | None = None) -> dict[Path, Where]:
    """Every signable document of the kernel published at ``pkg_dir`` (of its version
    ``only`` and ``versions.json``, with ``only``)."""
    found: dict[Path, Where] = {pkg_dir / "versions.json": ("versions", None, None)}
    for version_dir in pkg_dir.glob("v[0-9]*"):
        version = int(version_dir.name[1:])
        if only is not None and version != only:
            continue
        found[version_dir / "variants.json"] = ("variants", version, None)
        for manifest in version_dir.glob("build/*/metadata.json"):
            found[manifest] = ("metadata", version, manifest.parent.name)
    return found


def sig_of(path: Path) -> Path:
    return path.with_name(path.name + ".sig")


def vouchers(
    pkg_dir: Path, keys: tuple[TrustedKey, ...], only: int | None = None
) -> dict[str, str | None]:
    """The key id that vouches for each document (``require=True``), by relative path."""
    result = {}
    for path, (kind, version, variant) in documents(pkg_dir, only).items():
        sig = sig_of(path)
        result[path.relative_to(pkg_dir).as_posix()] = verify_document(
            kind=kind,
            repo_id=REPO,
            version=version,
            variant=variant,
            data=path.read_bytes(),
            sig_bytes=sig.read_bytes() if sig.exists() else None,
            keys=keys,
            org="acme",
            require=True,
        )
    return result


def signers(path: Path) -> list[str]:
    return [e.key_id for e in parse_signatures(sig_of(path).read_bytes(), source=str(path))]


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


# --- publish --sign ----------------------------------------------------------------------


def test_publish_signs_metadata_variants_and_versions(build: Path, tmp_path: Path) -> None:
    path, key = keyfile(tmp_path, "release.key")
    out = tmp_path / "cdn"
    report = publish(build, repo_id=REPO, version=1, out=out, sign=path)

    pkg = out / "kernels" / REPO
    base = f"kernels/{REPO}"
    sigs = {
        f"{base}/versions.json.sig",
        f"{base}/v1/variants.json.sig",
        f"{base}/v1/build/{UNIVERSAL}/metadata.json.sig",
        f"{base}/v1/build/{CPU}/metadata.json.sig",
    }
    assert sigs <= set(report.written)
    assert {p for p in files(out) if p.endswith(".sig")} == sigs
    assert report.signed_by == (key.key_id,) and report.to_dict()["signed_by"] == [key.key_id]
    assert report.bytes_written == sum(len(b) for b in files(out).values())
    assert set(vouchers(pkg, trusted(key)).values()) == {key.key_id}
    for sig in sigs:
        assert stat.S_IMODE((out / sig).stat().st_mode) == 0o644
        assert json.loads((out / sig).read_bytes())["format"] == 1
    assert [p.name for p in pkg.iterdir() if p.name.startswith(".")] == []


def test_cli_publish_sign(build: Path, tmp_path: Path) -> None:
    path, key = keyfile(tmp_path, "release.key")
    out = tmp_path / "cdn"
    args = ["publish", build, "--repo-id", REPO, "--version", "1", "--out", out, "--prefix", ""]
    result = flashhub(*args, "--sign", path)
    assert result.returncode == 0, result.stderr
    assert f"signed with key {key.key_id}" in result.stdout
    assert set(vouchers(out / REPO, trusted(key)).values()) == {key.key_id}
    assert ok_json(flashhub(*args, "--sign", path, "--json"))["noop"] is True

    path.chmod(0o640)
    refused = flashhub(*args, "--sign", path)
    assert refused.returncode == 1 and f"hint: chmod 600 {path}" in refused.stderr


def test_republishing_a_signed_version_changes_nothing(build: Path, tmp_path: Path) -> None:
    path, key = keyfile(tmp_path, "release.key")
    out = tmp_path / "cdn"
    publish(build, repo_id=REPO, version=1, out=out, sign=path)
    before = files(out)
    assert publish(build, repo_id=REPO, version=1, out=out, sign=key).noop
    # Without a key, identical content is still a no-op, and the signatures stay.
    assert publish(build, repo_id=REPO, version=1, out=out).noop
    assert files(out) == before


def test_signing_a_published_version_writes_only_sig_files(build: Path, tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    publish(build, repo_id=REPO, version=1, out=out)
    pkg = out / "kernels" / REPO
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in pkg.rglob("*") if p.is_file()}

    path, key = keyfile(tmp_path, "release.key")
    report = publish(build, repo_id=REPO, version=1, out=out, sign=path)
    assert not report.noop and not report.replaced
    assert all(p.endswith(".sig") for p in report.written) and len(report.written) == 4
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in pkg.rglob("*") if p.is_file()}
    assert {p: s for p, s in after.items() if p.suffix != ".sig"} == before
    assert set(vouchers(pkg, trusted(key)).values()) == {key.key_id}


def test_publishing_unsigned_into_a_signed_kernel_is_refused(build: Path, tmp_path: Path) -> None:
    path, _key = keyfile(tmp_path, "release.key")
    out = tmp_path / "cdn"
    publish(build, repo_id=REPO, version=1, out=out, sign=path)
    before = files(out)
    other = make_build(tmp_path / "other", "two")
    with pytest.raises(PublishError, match="is signed") as raised:
        publish(other, repo_id=REPO, version=2, out=out)
    assert "--sign KEYFILE" in (raised.value.hint or "")
    with pytest.raises(PublishError, match="is signed"):
        publish(other, repo_id=REPO, version=1, out=out, force=True)
    assert files(out) == before


def test_a_new_version_re_signs_versions_json(build: Path, tmp_path: Path) -> None:
    old_path, old = keyfile(tmp_path, "old.key")
    _new_path, new = keyfile(tmp_path, "new.key")
    out = tmp_path / "cdn"
    pkg = out / "kernels" / REPO
    publish(build, repo_id=REPO, version=1, out=out, sign=old_path)
    report = publish(make_build(tmp_path / "v2", "two"), repo_id=REPO, version=2, out=out, sign=new)

    assert report.versions == (1, 2)
    assert f"kernels/{REPO}/versions.json.sig" in report.written
    # versions.json changed: the old key's signature signed the old bytes, and went.
    assert signers(pkg / "versions.json") == [new.key_id]
    assert vouchers(pkg, trusted(old, new)) == {
        "versions.json": new.key_id,
        "v1/variants.json": old.key_id,
        f"v1/build/{UNIVERSAL}/metadata.json": old.key_id,
        f"v1/build/{CPU}/metadata.json": old.key_id,
        "v2/variants.json": new.key_id,
        f"v2/build/{UNIVERSAL}/metadata.json": new.key_id,
        f"v2/build/{CPU}/metadata.json": new.key_id,
    }
    assert [p.name for p in pkg.iterdir() if p.name.startswith(".")] == []


def test_a_new_version_signed_by_both_keys_verifies_with_either_alone(
    build: Path, tmp_path: Path
) -> None:
    """During a rotation, a client that trusts only the old key and one that trusts only
    the new key both accept the new version and the versions.json that lists it."""
    old_path, old = keyfile(tmp_path, "old.key")
    new_path, new = keyfile(tmp_path, "new.key")
    out = tmp_path / "cdn"
    pkg = out / "kernels" / REPO
    publish(build, repo_id=REPO, version=1, out=out, sign=old_path)
    two = make_build(tmp_path / "v2", "two")
    report = publish(two, repo_id=REPO, version=2, out=out, sign=[new_path, old, new_path])

    assert report.signed_by == (new.key_id, old.key_id)  # in order, each key once
    assert signers(pkg / "versions.json") == [new.key_id, old.key_id]
    assert signers(pkg / "v2" / "variants.json") == [new.key_id, old.key_id]
    for key in (old, new):
        vouched = vouchers(pkg, trusted(key), only=2)
        assert len(vouched) == 4  # versions.json, v2's variants.json and two manifests
        assert set(vouched.values()) == {key.key_id}
    assert set(vouchers(pkg, trusted(old)).values()) == {old.key_id}  # v1 too


def test_cli_publish_sign_repeated(build: Path, tmp_path: Path) -> None:
    old_path, old = keyfile(tmp_path, "old.key")
    new_path, new = keyfile(tmp_path, "new.key")
    out = tmp_path / "cdn"
    args = ["publish", build, "--repo-id", REPO, "--version", "1", "--out", out, "--prefix", ""]
    result = flashhub(*args, "--sign", old_path, "--sign", new_path)
    assert result.returncode == 0, result.stderr
    assert f"signed with keys {old.key_id}, {new.key_id}" in result.stdout
    assert signers(out / REPO / "versions.json") == [old.key_id, new.key_id]
    for key in (old, new):
        assert set(vouchers(out / REPO, trusted(key)).values()) == {key.key_id}
    again = ok_json(flashhub(*args, "--sign", new_path, "--sign", old_path, "--json"))
    assert again["noop"] is True and again["signed_by"] == [new.key_id, old.key_id]


def test_versions_json_is_vouched_for_at_every_step_of_its_update(
    build: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its new bytes and its new .sig cannot land in one rename: the .sig first holds the
    old and the new signatures, so a reader in between (or after a crash) still verifies."""
    old_path, old = keyfile(tmp_path, "old.key")
    _new_path, new = keyfile(tmp_path, "new.key")
    out = tmp_path / "cdn"
    pkg = out / "kernels" / REPO
    publish(build, repo_id=REPO, version=1, out=out, sign=old_path)
    states = []
    write = publish_destination.write_atomic

    def recording(path: Path, data: bytes, **options: Any) -> None:
        write(path, data, **options)
        if path.parent == pkg:
            versions = pkg / "versions.json"
            states.append((versions.read_bytes(), sig_of(versions).read_bytes()))

    monkeypatch.setattr(publish_destination, "write_atomic", recording)
    publish(make_build(tmp_path / "v2", "two"), repo_id=REPO, version=2, out=out, sign=new)

    vouched = []
    for data, sig in states:
        vouched.append(
            verify_document(
                kind="versions",
                repo_id=REPO,
                version=None,
                variant=None,
                data=data,
                sig_bytes=sig,
                keys=trusted(old, new),
                org="acme",
                require=True,
            )
        )
    assert vouched == [old.key_id, new.key_id, new.key_id]


def test_force_keeps_other_keys_signatures_only_on_unchanged_documents(
    build: Path, tmp_path: Path
) -> None:
    a_path, key_a = keyfile(tmp_path, "a.key")
    _b_path, key_b = keyfile(tmp_path, "b.key")
    out = tmp_path / "cdn"
    pkg = out / "kernels" / REPO
    publish(build, repo_id=REPO, version=1, out=out, sign=a_path)
    sign_tree(out, key_b)

    changed = make_build(tmp_path / "changed", "two")
    report = publish(changed, repo_id=REPO, version=1, out=out, force=True, sign=a_path)
    assert report.replaced
    assert signers(pkg / "v1/variants.json") == [key_a.key_id, key_b.key_id]  # same bytes
    assert signers(pkg / f"v1/build/{CPU}/metadata.json") == [key_a.key_id]
    assert signers(pkg / "versions.json") == [key_a.key_id, key_b.key_id]
    assert set(vouchers(pkg, trusted(key_a)).values()) == {key_a.key_id}
    with pytest.raises(SignatureError):
        vouchers(pkg, trusted(key_b))


# --- flashhub sign -----------------------------------------------------------------------


def publish_two_versions(tmp_path: Path, out: Path, prefix: str = "kernels") -> Path:
    for version in (1, 2):
        kernel = make_build(tmp_path / f"kernel{version}", f"v{version}")
        publish(kernel, repo_id=REPO, version=version, out=out, prefix=prefix)
    return out.joinpath(*prefix.split("/"), *REPO.split("/")) if prefix else out / REPO


def test_flashhub_sign_signs_an_unsigned_tree(tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    pkg = publish_two_versions(tmp_path, out)
    path, key = keyfile(tmp_path, "release.key")
    with pytest.raises(SignatureError, match="is not signed"):
        vouchers(pkg, trusted(key))

    result = flashhub("sign", out, "--key", path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        f"signed 7 documents with key {key.key_id} (0 already signed by it)"
    )
    assert f"wrote kernels/{REPO}/v2/build/{CPU}/metadata.json.sig" in result.stdout
    assert set(vouchers(pkg, trusted(key)).values()) == {key.key_id}

    before = files(out)
    again = ok_json(flashhub("sign", out, "--key", path, "--json"))
    assert again["key_id"] == key.key_id
    assert len(again["documents"]) == 7 and again["written"] == []
    assert f"kernels/{REPO}/versions.json" in again["documents"]
    assert files(out) == before


def test_signing_with_a_second_key_keeps_the_first(tmp_path: Path) -> None:
    out = tmp_path / "cdn"
    pkg = publish_two_versions(tmp_path, out)
    a_path, key_a = keyfile(tmp_path, "a.key")
    b_path, key_b = keyfile(tmp_path, "b.key")
    assert flashhub("sign", out, "--key", a_path).returncode == 0
    assert flashhub("sign", out, "--key", b_path).returncode == 0
    for document in documents(pkg):
        assert signers(document) == [key_a.key_id, key_b.key_id]
    assert set(vouchers(pkg, trusted(key_a)).values()) == {key_a.key_id}
    assert set(vouchers(pkg, trusted(key_b)).values()) == {key_b.key_id}


@pytest.mark.parametrize("prefix", ["", "mirror/kernels"])
def test_sign_finds_the_kernels_under_any_prefix_and_below_the_root(
    tmp_path: Path, prefix: str
) -> None:
    out = tmp_path / "cdn"
    pkg = publish_two_versions(tmp_path, out, prefix)
    _path, key = keyfile(tmp_path, "release.key")

    only_v1 = sign_tree(pkg / "v1", key)
    assert only_v1.documents == (
        f"build/{UNIVERSAL}/metadata.json",
        f"build/{CPU}/metadata.json",
        "variants.json",
    )
    one = sign_tree(pkg / "versions.json", key)
    assert (one.documents, one.written) == (("versions.json",), ("versions.json.sig",))
    assert not sig_of(pkg / "v2/variants.json").exists()

    everything = sign_tree(out, key)
    assert len(everything.documents) == 7 and len(everything.written) == 3
    assert set(vouchers(pkg, trusted(key)).values()) == {key.key_id}


def test_sign_leaves_staging_directories_kernel_files_and_strays_alone(tmp_path: Path) -> None:
    kernel = make_build(tmp_path / "kernel", variants=(UNIVERSAL,))
    (kernel / "build" / UNIVERSAL / "my_kern" / "metadata.json").write_text("{}")  # the kernel's
    out = tmp_path / "cdn"
    publish(kernel, repo_id=REPO, version=1, out=out)
    pkg = out / "kernels" / REPO
    staging = pkg / ".v2.staging-abc"
    (staging / "build" / UNIVERSAL).mkdir(parents=True)
    (staging / "variants.json").write_text("[]")
    (staging / "build" / UNIVERSAL / "metadata.json").write_text("{}")
    (out / "kernels" / "versions.json").write_text("[1]")  # no v<N> beside it: not a kernel's

    _path, key = keyfile(tmp_path, "release.key")
    report = sign_tree(out, key)
    assert report.documents == (
        f"kernels/{REPO}/v1/build/{UNIVERSAL}/metadata.json",
        f"kernels/{REPO}/v1/variants.json",
        f"kernels/{REPO}/versions.json",
    )
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.sig")) == sorted(
        f"{d}.sig" for d in report.documents
    )


def test_sign_takes_a_file_url_and_refuses_an_object_store_saying_what_to_do(
    tmp_path: Path,
) -> None:
    path, key = keyfile(tmp_path, "release.key")
    out = tmp_path / "cdn"
    publish_two_versions(tmp_path, out)
    signed = ok_json(flashhub("sign", out.as_uri(), "--key", path, "--json"))
    assert signed["key_id"] == key.key_id and signed["written"]
    result = flashhub("sign", "s3://my-kernels/cdn", "--key", path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: s3://my-kernels/cdn is a URL"), result.stderr
    assert "flashhub publish --sign KEYFILE" in result.stderr
    with pytest.raises(PublishError, match="sign=KEYFILE"):
        sign_tree("s3://my-kernels/cdn", path)


def test_sign_refuses_what_it_cannot_sign(tmp_path: Path) -> None:
    path, _key = keyfile(tmp_path, "release.key")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = flashhub("sign", empty, "--key", path)
    assert result.returncode == 1 and "no published kernel documents" in result.stderr
    assert "flashhub publish --out" in result.stderr
    result = flashhub("sign", tmp_path / "no-such-tree", "--key", path)
    assert result.returncode == 1
    assert f"error: {tmp_path / 'no-such-tree'} does not exist" in result.stderr
    assert "hint: pass the CDN tree a publish wrote" in result.stderr

    out = tmp_path / "cdn"
    pkg = publish_two_versions(tmp_path, out)
    (pkg / "v2" / "variants.json").write_text("{not json")
    result = flashhub("sign", out, "--key", path)
    assert result.returncode == 1 and "refusing to sign" in result.stderr

    (pkg / "v2" / "variants.json").write_text('["torch-universal"]')
    sig_of(pkg / "versions.json").write_text("garbage")
    result = flashhub("sign", out, "--key", path)
    assert result.returncode == 1 and "delete the .sig file" in result.stderr

    assert flashhub("sign", out, "--key", f"{path}.pub").returncode == 1
    os.chmod(path, 0o604)
    assert "chmod 600" in flashhub("sign", out, "--key", path).stderr
