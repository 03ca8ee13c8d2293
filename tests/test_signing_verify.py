"""Verifying signed documents: statements bind what was asked for, key rotation, org
scopes, malformed ``.sig`` files, and a missing ``cryptography``."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import SIGNING_EXTRA
from flashhub_kernels._models.manifest import parse_metadata
from flashhub_kernels._models.names import RepoInfo
from flashhub_kernels._signing.signature_files import (
    MAX_SIGNATURE_BYTES,
    SignatureEntry,
    dump_signatures,
    parse_signatures,
    sign_document,
)
from flashhub_kernels._signing.signing_keys import SigningKey
from flashhub_kernels._signing.statements import DocumentKind, statement
from flashhub_kernels._signing.trusted_keys import TrustedKey, parse_trusted_keys
from flashhub_kernels._signing.verification import cached_signer, verify_document
from flashhub_kernels.errors import IntegrityError, SignatureError
from support.trees import b64sha256

pytest.importorskip("cryptography", reason=SIGNING_EXTRA)

KEY_A = SigningKey(bytes([1]) * 32)
KEY_B = SigningKey(bytes([2]) * 32)
KEY_C = SigningKey(bytes([3]) * 32)
REPO = "acme/my-kern"
MANIFEST = b'{"digest": {"files": {"my_kern/__init__.py": "..."}}}\n'
VARIANT = "torch-universal"

Where = tuple[DocumentKind, str, "int | None", "str | None"]
METADATA: Where = ("metadata", REPO, 1, VARIANT)


def trusted(*keys: SigningKey, org: str | None = None) -> tuple[TrustedKey, ...]:
    scope = f"{org}:" if org else ""
    return parse_trusted_keys(" ".join(scope + k.public_line for k in keys), source="test")


def sign(where: Where, data: bytes, *keys: SigningKey) -> bytes:
    sig: bytes | None = None
    for key in keys:
        sig = sign_document(*where, data, key, sig)
    assert sig is not None
    return sig


def verify(
    where: Where,
    data: bytes,
    sig: bytes | None,
    keys: tuple[TrustedKey, ...],
    *,
    require: bool = False,
) -> str | None:
    kind, repo_id, version, variant = where
    return verify_document(
        kind=kind,
        repo_id=repo_id,
        version=version,
        variant=variant,
        data=data,
        sig_bytes=sig,
        keys=keys,
        org=repo_id.split("/")[0],
        require=require,
    )


def test_the_statement_names_kind_repo_version_variant_and_digest() -> None:
    assert statement("metadata", REPO, 3, VARIANT, b"{}") == (
        b"flashhub-signed-document v1\n"
        b"kind: metadata\n"
        b"repo: acme/my-kern\n"
        b"version: 3\n"
        b"variant: torch-universal\n"
        b"sha256: 44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a\n"
    )
    assert b"version: 2\nvariant: -\n" in statement("variants", REPO, 2, None, b"[]")
    assert b"kind: versions\nrepo: acme/my-kern\nversion: -\nvariant: -\n" in statement(
        "versions", REPO, None, None, b"[1]"
    )


@pytest.mark.parametrize(
    ("kind", "repo_id", "version", "variant"),
    [
        ("metadata", REPO, 1, None),
        ("metadata", REPO, None, VARIANT),
        ("variants", REPO, 1, VARIANT),
        ("variants", REPO, None, None),
        ("versions", REPO, 1, None),
        ("manifest", REPO, 1, VARIANT),
        ("metadata", "acme", 1, VARIANT),
        ("metadata", REPO, 0, VARIANT),
        ("metadata", REPO, 1, "a/b"),
        ("metadata", REPO, 1, "torch\nsha256: 00"),
        ("metadata", REPO, 1, ""),
    ],
)
def test_a_statement_for_a_malformed_request_is_refused(
    kind: DocumentKind, repo_id: str, version: int | None, variant: str | None
) -> None:
    with pytest.raises(ValueError):
        statement(kind, repo_id, version, variant, b"{}")


@pytest.mark.parametrize(
    "other",
    [
        ("metadata", "acme/other-kern", 1, VARIANT),
        ("metadata", REPO, 2, VARIANT),
        ("metadata", REPO, 1, "torch213-cxx11-cpu-x86_64-linux"),
        ("variants", REPO, 1, None),
        ("versions", REPO, None, None),
    ],
)
def test_a_signature_holds_only_for_what_it_was_made_for(other: Where) -> None:
    sig = sign(METADATA, MANIFEST, KEY_A)
    keys = trusted(KEY_A)
    assert verify(METADATA, MANIFEST, sig, keys) == KEY_A.key_id
    with pytest.raises(SignatureError, match="no signature by a key trusted"):
        verify(other, MANIFEST, sig, keys)


def test_a_signature_holds_only_for_the_exact_bytes() -> None:
    sig = sign(METADATA, MANIFEST, KEY_A)
    with pytest.raises(SignatureError, match="no signature by a key trusted") as raised:
        verify(METADATA, MANIFEST.replace(b"\n", b" \n"), sig, trusted(KEY_A))
    error = raised.value
    assert isinstance(error, IntegrityError) and isinstance(error, ImportError)
    assert f"{REPO}/v1/build/{VARIANT}/metadata.json" in error.message
    assert f"signed by: {KEY_A.key_id}; trusted: {KEY_A.key_id}" in error.message
    assert "FLASHHUB_TRUSTED_KEYS" in (error.hint or "")


def test_two_trusted_keys_both_vouch_while_keys_rotate() -> None:
    both = sign(METADATA, MANIFEST, KEY_A, KEY_B)
    assert [e.key_id for e in parse_signatures(both, source="t")] == [KEY_A.key_id, KEY_B.key_id]
    assert verify(METADATA, MANIFEST, both, trusted(KEY_A)) == KEY_A.key_id
    assert verify(METADATA, MANIFEST, both, trusted(KEY_B)) == KEY_B.key_id
    only_new = sign(METADATA, MANIFEST, KEY_B)
    assert verify(METADATA, MANIFEST, only_new, trusted(KEY_A, KEY_B)) == KEY_B.key_id
    only_old = sign(METADATA, MANIFEST, KEY_A)
    assert verify(METADATA, MANIFEST, only_old, trusted(KEY_A, KEY_B)) == KEY_A.key_id


def test_signing_again_replaces_the_keys_own_entry_and_keeps_the_others() -> None:
    first = sign(METADATA, MANIFEST, KEY_A, KEY_B)
    again = sign_document(*METADATA, MANIFEST, KEY_A, first)
    assert again == first  # Ed25519 is deterministic
    stale = dump_signatures(
        [
            SignatureEntry(KEY_A.key_id, base64.b64encode(bytes(64)).decode()),
            SignatureEntry("0123456789abcdef", "from another tool"),
            SignatureEntry(KEY_A.key_id, "a duplicate"),
        ]
    )
    fixed = parse_signatures(sign_document(*METADATA, MANIFEST, KEY_A, stale), source="t")
    assert [e.key_id for e in fixed] == [KEY_A.key_id, "0123456789abcdef"]
    assert verify(METADATA, MANIFEST, dump_signatures(fixed), trusted(KEY_A)) == KEY_A.key_id


def test_a_key_scoped_to_another_org_does_not_vouch() -> None:
    sig = sign(METADATA, MANIFEST, KEY_A)
    elsewhere = trusted(KEY_A, org="other-org")
    # No key covers acme: unsigned is allowed, and the signature is not looked at.
    assert verify(METADATA, MANIFEST, sig, elsewhere) is None
    with pytest.raises(SignatureError, match="no trusted key is configured for the org 'acme'"):
        verify(METADATA, MANIFEST, sig, elsewhere, require=True)
    acme = trusted(KEY_B, org="acme")
    with pytest.raises(SignatureError, match=f"signed by: {KEY_A.key_id}; trusted: {KEY_B.key_id}"):
        verify(METADATA, MANIFEST, sig, elsewhere + acme)
    assert verify(METADATA, MANIFEST, sig, trusted(KEY_A, org="acme")) == KEY_A.key_id


def test_unsigned_documents_and_required_signatures() -> None:
    assert verify(METADATA, MANIFEST, None, ()) is None
    with pytest.raises(SignatureError, match="is not signed") as raised:
        verify(METADATA, MANIFEST, None, trusted(KEY_A))
    assert "flashhub sign" in (raised.value.hint or "")
    assert f"{REPO}/v1/build/{VARIANT}/metadata.json.sig does not exist" in raised.value.message
    with pytest.raises(SignatureError, match="signatures are required"):
        verify(METADATA, MANIFEST, None, (), require=True)
    assert verify(METADATA, MANIFEST, sign(METADATA, MANIFEST, KEY_A), trusted(KEY_A), require=True)


def test_the_org_must_be_the_repos() -> None:
    with pytest.raises(ValueError, match="not the org"):
        verify_document(
            kind="versions",
            repo_id=REPO,
            version=None,
            variant=None,
            data=b"[1]",
            sig_bytes=None,
            keys=trusted(KEY_A, org="evil"),
            org="evil",
            require=False,
        )


GOOD_SIGNATURE = base64.b64encode(bytes(64)).decode()


@pytest.mark.parametrize(
    ("sig", "says"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[]", "must be a JSON object"),
        (b'{"signatures": []}', "has format None"),
        (b'{"format": 2, "signatures": []}', "has format 2"),
        (b'{"format": true, "signatures": []}', "has format True"),
        (b'{"format": 1}', '"signatures" list'),
        (b'{"format": 1, "signatures": {}}', '"signatures" list'),
        (b'{"format": 1, "signatures": [1]}', "string"),
        (b'{"format": 1, "signatures": [{"key_id": 1, "signature": ""}]}', "string"),
        (b'{"format": 1, "signatures": [{"key_id": "x"}]}', "string"),
        (b" " * (MAX_SIGNATURE_BYTES + 1), "over the 64 KiB limit"),
        (
            json.dumps(
                {"format": 1, "signatures": [{"key_id": "x", "signature": ""}] * 65}
            ).encode(),
            "at most 64 entries",
        ),
        (
            dump_signatures([SignatureEntry(KEY_A.key_id, GOOD_SIGNATURE[:-4])]),
            "is not base64 of 64 bytes",
        ),
        (
            dump_signatures([SignatureEntry(KEY_A.key_id, "not base64!")]),
            "is not base64 of 64 bytes",
        ),
    ],
)
def test_a_malformed_sig_is_a_signature_error(sig: bytes, says: str) -> None:
    with pytest.raises(SignatureError, match=says) as raised:
        verify(METADATA, MANIFEST, sig, trusted(KEY_A))
    assert raised.value.message.startswith(f"{REPO}/v1/build/{VARIANT}/metadata.json.sig")
    assert raised.value.hint


def test_entries_of_unknown_keys_are_ignored() -> None:
    real = parse_signatures(sign(METADATA, MANIFEST, KEY_A), source="t")
    odd = [
        SignatureEntry("not-a-key-id\x1b[31m", "???"),
        SignatureEntry(KEY_C.key_id, "garbage, but nobody trusts key C"),
    ]
    sig = dump_signatures([*odd, *real])
    assert verify(METADATA, MANIFEST, sig, trusted(KEY_A)) == KEY_A.key_id
    with pytest.raises(SignatureError) as raised:
        verify(METADATA, MANIFEST, dump_signatures(odd), trusted(KEY_B))
    assert "'not-a-key-id\\x1b[31m'" in raised.value.message  # shown escaped
    extra = json.loads(sig)
    extra["signatures"][-1]["comment"] = "fields a later writer may add are ignored"
    extra["note"] = "so are top-level ones"
    assert verify(METADATA, MANIFEST, json.dumps(extra).encode(), trusted(KEY_A))


def test_signing_over_a_malformed_sig_says_to_delete_it() -> None:
    with pytest.raises(SignatureError, match="not valid JSON") as raised:
        sign_document(*METADATA, MANIFEST, KEY_A, b"{")
    assert "delete the .sig file" in (raised.value.hint or "")


def test_a_cached_manifest_vouches_only_for_the_content_the_entry_was_verified_against(
    tmp_path: Path,
) -> None:
    """A validly signed metadata.json of other content (a republished build's, swapped
    into a shared cache) vouches for no entry whose files were verified against another."""
    verified, republished = (
        json.dumps({"digest": {"files": {"my_kern/__init__.py": b64sha256(code)}}}).encode()
        for code in (b"", b"# republished\n")
    )
    (tmp_path / "metadata.json").write_bytes(republished)
    (tmp_path / "metadata.json.sig").write_bytes(sign(METADATA, republished, KEY_A))

    def signer(verified_against: bytes) -> str | None:
        content = parse_metadata(verified_against).content_hash
        return cached_signer(tmp_path, RepoInfo(REPO, 1), VARIANT, content, trusted(KEY_A))

    assert signer(republished) == KEY_A.key_id
    assert signer(verified) is None


SIG_BY_A = dump_signatures([SignatureEntry(KEY_A.key_id, GOOD_SIGNATURE)])


def test_without_cryptography_signing_and_verifying_say_what_to_install() -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["cryptography"] = None  # as if it were not installed
        from flashhub_kernels._signing.signing_keys import SigningKey, generate_signing_key
        from flashhub_kernels._signing.verification import cached_signer, verify_document
        from flashhub_kernels._signing.trusted_keys import parse_trusted_keys
        from flashhub_kernels.errors import SignatureError
        from flashhub_kernels.cli import main

        keys = parse_trusted_keys({KEY_A.public_line!r}, source="test")
        common = dict(kind="versions", repo_id="acme/k", version=None, variant=None,
                      data=b"[1]", org="acme", require=False)
        # Unsigned documents of orgs no key covers need no cryptography.
        assert verify_document(sig_bytes=None, keys=(), **common) is None
        sig = {SIG_BY_A!r}
        for attempt in (
            lambda: verify_document(sig_bytes=sig, keys=keys, **common),
            generate_signing_key,
            lambda: SigningKey(bytes(32)),
        ):
            try:
                attempt()
            except SignatureError as exc:
                assert "cryptography" in exc.message, exc.message
                assert exc.hint == "install it: pip install 'flashhub-kernels[signing]'"
            else:
                raise AssertionError("no SignatureError")
        assert main(["keygen", "--out", {"/nonexistent/k"!r}]) == 1
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'flashhub-kernels[signing]'" in result.stderr
