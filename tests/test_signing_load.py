"""Signed kernels end to end: loading, the warm path, locks, the CLI and key sources, each
against the loopback CDN and its request log.

The trees are published with ``trees.write_kernel`` and signed with the real command,
``flashhub sign <cdn root> --key KEYFILE``. The primitives (statements, ``.sig`` parsing,
key files) are unit-tested in test_signing_verify.py, test_signing_keys.py and
test_signing_publish.py.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import PLANTED, MakeCdn, MakeProject, has_then_get, run_python
from flashhub_kernels import _finder, configure, get_kernel, get_locked_kernel, load_kernel
from flashhub_kernels._config import get_config, overrides
from flashhub_kernels._lockfiles.format import read_lockfile
from flashhub_kernels._signing.signing_keys import SigningKey, generate_signing_key, write_key_pair
from flashhub_kernels.errors import (
    ConfigError,
    KernelNotFoundError,
    LockfileError,
    SignatureError,
)
from support.builder import loaded_variant, ran, ran_label, write_builder_kernel
from support.cdn_server import CdnHandler, CdnServer, Fault, held
from support.cli_runner import OFFLINE, flashhub, ok_json
from support.preloaded import run_code
from support.projects import (
    CUDA,
    REPO,
    UNIVERSAL,
    change_published_file,
    entry,
    lockfile_of,
)
from support.trees import local_variant, write_kernel, write_variant

pytestmark = pytest.mark.signing

LOCAL = local_variant()
MODULE = "flashhub.acme.tensor_tricks.v1"
IMPORT_V1 = "import flashhub.acme.tensor_tricks.v1 as k; print(k.marker())"
OTHER = "acme/other-tricks"
TRUSTED = "FLASHHUB_TRUSTED_KEYS"
REQUIRE = "FLASHHUB_REQUIRE_SIGNATURES"


# -- helpers -------------------------------------------------------------------------------


def key_pair(tmp_path: Path, name: str) -> tuple[Path, SigningKey]:
    """A key file ``tmp_path/<name>.key`` (and its ``.pub``), as `flashhub keygen` writes it."""
    key = generate_signing_key()
    path = tmp_path / f"{name}.key"
    write_key_pair(key, path)
    return path, key


def sign(path: Path, keyfile: Path) -> None:
    """``flashhub sign PATH --key KEYFILE``."""
    result = flashhub("sign", path, "--key", keyfile)
    assert result.returncode == 0, result.stderr


def trust(monkeypatch: pytest.MonkeyPatch, *entries: str) -> None:
    """``FLASHHUB_TRUSTED_KEYS`` = ``entries`` (public lines, optionally org-scoped)."""
    monkeypatch.setenv(TRUSTED, " ".join(entries))


def forget_kernels() -> None:
    """Drop the imported kernel modules and the finder that located them, so that the next
    load resolves afresh, as in a new process (a finder serves a name it located before
    from that directory)."""
    for name in [n for n in sys.modules if n.startswith("flashhub.")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _finder.KernelFinder)]
    _finder.install()


def package_gets(cdn: CdnServer) -> list[str]:
    """GETs of anything but a document (``.json``) or its signature (``.sig``)."""
    return [p for p in cdn.gets() if not p.endswith((".json", ".sig"))]


def document_gets(cdn: CdnServer) -> list[str]:
    """The documents fetched, as ``<org>/<pkg>/...`` paths (the ``/kernels/`` prefix cut),
    but a guess that missed (see ``CdnServer.gets``)."""
    gets = cdn.gets(missed_guesses=False)
    return sorted(p.removeprefix("/kernels/") for p in gets if p.endswith((".json", ".sig")))


def cached_signers() -> dict[tuple[str, int, str], str | None]:
    """``(repo, version, variant) -> signer`` of every cache entry (`flashhub cache list`)."""
    listed = ok_json(flashhub("cache", "list", "--json"))
    return {(e["repo_id"], e["version"], e["variant"]): e["signer"] for e in listed["entries"]}


def sig_key_ids(document: Path) -> list[str]:
    sig = document.with_name(document.name + ".sig")
    return [entry["key_id"] for entry in json.loads(sig.read_text())["signatures"]]


def manifest(root: Path, version: int = 1, variant: str = LOCAL, repo: str = REPO) -> Path:
    return root / "kernels" / repo / f"v{version}" / "build" / variant / "metadata.json"


def signed_load_documents(version: int = 1, variant: str = LOCAL) -> list[str]:
    """What a cold, signature-checked load with variants.json fetches besides the files."""
    return sorted(
        [
            f"{REPO}/v{version}/variants.json",
            f"{REPO}/v{version}/variants.json.sig",
            f"{REPO}/v{version}/build/{variant}/metadata.json",
            f"{REPO}/v{version}/build/{variant}/metadata.json.sig",
        ]
    )


def guessed_documents(version: int = 1, variant: str = LOCAL) -> list[str]:
    """The manifest and signature of the build a cold load asks for beside variants.json."""
    manifest = f"{REPO}/v{version}/build/{variant}/metadata.json"
    return [manifest, f"{manifest}.sig"]


Keys = tuple[tuple[Path, SigningKey], tuple[Path, SigningKey]]


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    """Two key pairs: ``(old_path, old_key), (new_path, new_key)``."""
    (tmp_path / "keys").mkdir()
    return key_pair(tmp_path / "keys", "old"), key_pair(tmp_path / "keys", "new")


# -- 1. a CDN that swaps the files and re-hashes the manifest ---------------------------------


def test_swapped_files_with_a_rehashed_manifest_are_refused_before_any_file_is_fetched(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    change_published_file(cdn.root, 1, LOCAL)  # other bytes, and a manifest that matches them
    trust(monkeypatch, key.public_line)
    cdn.clear_log()

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)

    message = str(info.value)
    assert f"{REPO}/v1/build/{LOCAL}/metadata.json: no signature by a key trusted" in message
    assert f"(signed by: {key.key_id}; trusted: {key.key_id})" in message
    assert "changed after it was signed" in message
    assert package_gets(cdn) == [], "no file of the package is fetched"
    # The manifest was asked for beside variants.json, and once listed again: a guess
    # that failed is not the answer (another mirror may serve it intact).
    assert document_gets(cdn) == sorted(signed_load_documents() + guessed_documents())
    assert MODULE not in sys.modules and not entry(1, LOCAL).exists()

    cdn.clear_log()
    with pytest.raises(SignatureError, match="no signature by a key trusted"):
        import flashhub.acme.tensor_tricks.v1  # noqa: F401
    assert package_gets(cdn) == []
    assert MODULE not in sys.modules

    # Without keys the swap goes through unnoticed: only the signature stopped it.
    monkeypatch.delenv(TRUSTED)
    forget_kernels()
    assert get_kernel(REPO, version=1)._ops.CHANGED_AFTER_LOCKING is True


def test_a_manifest_edited_after_a_trusted_key_signed_it_says_it_does_not_match(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    published = manifest(cdn.root)
    published.write_bytes(published.read_bytes() + b"\n")  # the same JSON, other bytes
    trust(monkeypatch, key.public_line)

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)

    error = info.value
    assert "the document does not match its signature" in error.message
    assert f"by the trusted key {key.key_id}" in error.message
    assert "new key" not in (error.hint or "")
    assert package_gets(cdn) == []
    assert MODULE not in sys.modules and not entry(1, LOCAL).exists()


def test_a_manifest_signed_by_a_key_not_trusted_hints_at_adding_it(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old_path, _old_key), (_new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, old_path)
    trust(monkeypatch, new_key.public_line)

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)

    error = info.value
    assert "does not match its signature" not in error.message
    assert "if the publisher signs with a new key" in (error.hint or "")
    assert TRUSTED in (error.hint or "")


# -- 2. valid signatures replayed from another path -------------------------------------------


def _other_kernel(root: Path) -> Path:
    """``acme/tensor_tricks`` v1: another repo with the same package name, so its variant
    is a complete, consistent stand-in for acme/tensor-tricks'."""
    write_kernel(root, "acme/tensor_tricks", 1)
    return manifest(root, repo="acme/tensor_tricks").parent


def _other_version(root: Path) -> Path:
    write_kernel(root, REPO, 2)
    return manifest(root, 2).parent


def _other_variant(root: Path) -> Path:
    write_kernel(root, REPO, 1, [LOCAL, UNIVERSAL])
    return manifest(root, 1, UNIVERSAL).parent


@pytest.mark.parametrize(
    ("make_source", "marker"),
    [
        (_other_kernel, f"acme/tensor_tricks@v1:{LOCAL}"),
        (_other_version, f"{REPO}@v2:{LOCAL}"),
        (_other_variant, f"{REPO}@v1:{UNIVERSAL}"),
    ],
    ids=["another-kernel", "another-version", "another-variant"],
)
def test_a_signed_manifest_replayed_from_another_path_is_refused(
    cdn: CdnServer,
    keys: Keys,
    monkeypatch: pytest.MonkeyPatch,
    make_source: Callable[[Path], Path],
    marker: str,
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL])
    source = make_source(cdn.root)
    sign(cdn.root, path)
    target = manifest(cdn.root).parent
    shutil.rmtree(target)
    shutil.copytree(source, target)  # the files, metadata.json and its valid .sig
    assert sig_key_ids(target / "metadata.json") == [key.key_id]
    trust(monkeypatch, key.public_line)
    cdn.clear_log()

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)

    assert f"{REPO}/v1/build/{LOCAL}/metadata.json: no signature by a key trusted" in str(
        info.value
    )
    assert f"signed by: {key.key_id}" in str(info.value)
    assert package_gets(cdn) == []
    assert not entry(1, LOCAL).exists()

    # The replayed variant is complete: without keys it loads, as the other build.
    monkeypatch.delenv(TRUSTED)
    forget_kernels()
    assert get_kernel(REPO, version=1).marker() == marker


def test_variants_json_signature_replayed_from_another_version_is_refused(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    sign(cdn.root, path)
    v1, v2 = (cdn.root / "kernels" / REPO / f"v{n}" / "variants.json" for n in (1, 2))
    assert v1.read_bytes() == v2.read_bytes(), "the same bytes: only the version differs"
    shutil.copyfile(v2.with_name("variants.json.sig"), v1.with_name("variants.json.sig"))
    trust(monkeypatch, key.public_line)
    cdn.clear_log()

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)

    assert f"{REPO}/v1/variants.json: no signature by a key trusted" in str(info.value)
    refused = [f"{REPO}/v1/variants.json", f"{REPO}/v1/variants.json.sig"]
    # LOCAL's manifest, asked for beside variants.json, may have been answered or not.
    assert [path for path in document_gets(cdn) if "/build/" not in path] == refused
    assert package_gets(cdn) == []
    # v2's own signature still holds where it was made.
    assert get_kernel(REPO, version=2).marker() == f"{REPO}@v2:{LOCAL}"


def test_a_rewritten_versions_json_cannot_point_at_an_unsigned_version(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    write_kernel(cdn.root, REPO, 2)  # unsigned, and listed in a versions.json the .sig misses
    trust(monkeypatch, key.public_line)
    cdn.clear_log()

    result = flashhub("get", REPO)

    assert result.returncode == 1
    assert f"{REPO}/versions.json: no signature by a key trusted" in result.stderr
    assert document_gets(cdn) == [f"{REPO}/versions.json", f"{REPO}/versions.json.sig"]
    assert package_gets(cdn) == []


# -- 3. keys scoped to an org -----------------------------------------------------------------


def test_a_key_scoped_to_another_org_does_not_vouch(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), (_new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, REPO, 2)
    sign(cdn.root, path)

    # Signatures required: the only key is another org's, so none is trusted for acme.
    trust(monkeypatch, f"otherorg:{key.public_line}")
    monkeypatch.setenv(REQUIRE, "1")
    cdn.clear_log()
    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)
    assert "no trusted key is configured for the org 'acme'" in str(info.value)
    assert "acme:flashhub-ed25519:" in str(info.value), "the hint shows how to scope a key"
    assert package_gets(cdn) == []
    monkeypatch.delenv(REQUIRE)

    # Another key is trusted for acme; the signer's key is scoped to otherorg only.
    trust(monkeypatch, f"otherorg:{key.public_line}", f"acme:{new_key.public_line}")
    cdn.clear_log()
    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)
    assert f"(signed by: {key.key_id}; trusted: {new_key.key_id})" in str(info.value)
    assert package_gets(cdn) == []

    # The same key, scoped to the right org: the kernel loads, vouched for by it.
    trust(monkeypatch, f"acme:{key.public_line}")
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id

    # Only another org's key and nothing required: acme's kernels are not checked at all.
    trust(monkeypatch, f"otherorg:{key.public_line}")
    cdn.clear_log()
    assert get_kernel(REPO, version=2).marker() == f"{REPO}@v2:{LOCAL}"
    assert cdn.gets(".sig") == []
    assert cached_signers()[(REPO, 2, LOCAL)] is None


# `import flashhub.acme_corp.tricks.v1` stands for either of these; the hook tries the
# dashed spelling first, then the literal one.
DASHED = "acme-corp/tricks"
UNDERSCORED = "acme_corp/tricks"
CORP_MODULE = "flashhub.acme_corp.tricks.v1"


def plant_unsigned(root: Path, repo_id: str, ran: Path) -> None:
    """Publish ``repo_id`` v1, unsigned, as a kernel whose import writes the file ``ran``."""
    init = f"{repo_id.split('/')[1].replace('-', '_')}/__init__.py"
    write_variant(root, repo_id, 1, LOCAL, {init: PLANTED.format(marker=str(ran)).encode()})
    (root / "kernels" / repo_id / "v1" / "variants.json").write_text(json.dumps([LOCAL]))


def test_a_key_scoped_to_acme_corp_covers_the_dashed_spelling_the_hook_tries_first(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real kernel is acme_corp/tricks, signed; the CDN also serves an unsigned
    acme-corp/tricks, which the hook asks for first. A key scoped to acme_corp covers it."""
    (path, key), _ = keys
    write_kernel(cdn.root, UNDERSCORED, 1)
    sign(cdn.root / "kernels" / UNDERSCORED, path)
    ran = tmp_path / "planted-ran"
    plant_unsigned(cdn.root, DASHED, ran)
    trust(monkeypatch, f"acme_corp:{key.public_line}")

    child = run_code(f"import {CORP_MODULE}", env=dict(os.environ))
    assert child.returncode == 1, child.stdout + child.stderr
    assert "SignatureError" in child.stderr
    assert f"{DASHED}/v1/variants.json is not signed" in child.stderr
    assert not ran.exists(), "the unsigned kernel did not run"

    with pytest.raises(SignatureError, match=f"{DASHED}/v1/variants.json is not signed"):
        import flashhub.acme_corp.tricks.v1  # noqa: F401
    assert CORP_MODULE not in sys.modules
    forget_kernels()
    with pytest.raises(SignatureError, match="keys are trusted for the org 'acme-corp'"):
        get_kernel(DASHED, version=1)
    assert not ran.exists()
    assert package_gets(cdn) == [], "no file of either kernel was fetched"

    # Spelled as the signed kernel is published, it loads, vouched for by the key.
    forget_kernels()
    assert get_kernel(UNDERSCORED, version=1).marker() == f"{UNDERSCORED}@v1:{LOCAL}"
    assert cached_signers()[(UNDERSCORED, 1, LOCAL)] == key.key_id
    assert not ran.exists()


def test_a_key_scoped_to_acme_dash_corp_covers_the_underscored_spelling_a_cdn_falls_back_to(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real kernel is acme-corp/tricks, signed; the CDN answers 404 for it and serves an
    unsigned acme_corp/tricks, the hook's second spelling. A key scoped to acme-corp covers it."""
    (path, key), _ = keys
    write_kernel(cdn.root, DASHED, 1)
    sign(cdn.root / "kernels" / DASHED, path)
    shutil.rmtree(cdn.root / "kernels" / DASHED)  # the CDN drops the real kernel ...
    ran = tmp_path / "planted-ran"
    plant_unsigned(cdn.root, UNDERSCORED, ran)  # ... and serves its own under the other name
    trust(monkeypatch, f"acme-corp:{key.public_line}")

    with pytest.raises(SignatureError, match=f"{UNDERSCORED}/v1/variants.json is not signed"):
        import flashhub.acme_corp.tricks.v1  # noqa: F401
    assert CORP_MODULE not in sys.modules
    forget_kernels()
    with pytest.raises(SignatureError, match="keys are trusted for the org 'acme_corp'"):
        get_kernel(UNDERSCORED, version=1)
    forget_kernels()
    with pytest.raises(KernelNotFoundError):
        get_kernel(DASHED, version=1)
    assert not ran.exists(), "the unsigned kernel did not run"
    assert package_gets(cdn) == []

    # The key vouches for acme_corp's kernels as well: signed by it, that spelling loads.
    shutil.rmtree(cdn.root / "kernels" / UNDERSCORED)
    write_kernel(cdn.root, UNDERSCORED, 1)
    sign(cdn.root / "kernels" / UNDERSCORED, path)
    forget_kernels()
    assert get_kernel(UNDERSCORED, version=1).marker() == f"{UNDERSCORED}@v1:{LOCAL}"
    assert cached_signers()[(UNDERSCORED, 1, LOCAL)] == key.key_id


def test_a_cached_entry_of_the_other_spelling_is_rechecked_on_the_warm_path(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """acme-corp/tricks, unsigned, was imported before a key was scoped to acme_corp: neither
    a re-import in the process nor a fresh offline load may take the unvouched entry."""
    (_path, key), _ = keys
    ran = tmp_path / "planted-ran"
    plant_unsigned(cdn.root, DASHED, ran)
    import flashhub.acme_corp.tricks.v1  # no key yet: it loads, as before

    assert ran.exists()
    ran.unlink()

    configure(trusted_keys=[f"acme_corp:{key.public_line}"])
    for name in [n for n in sys.modules if n.startswith("flashhub.")]:
        del sys.modules[name]  # the finder that located it stays
    with pytest.raises(SignatureError, match=f"{DASHED}/v1/variants.json is not signed"):
        import flashhub.acme_corp.tricks.v1
    assert not ran.exists()

    forget_kernels()
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    with pytest.raises(SignatureError, match="cannot be used offline"):
        import flashhub.acme_corp.tricks.v1  # noqa: F401
    assert not ran.exists()
    assert CORP_MODULE not in sys.modules


# -- 4. two trusted keys while keys rotate ----------------------------------------------------


def test_kernels_signed_by_either_trusted_key_load(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old_path, old_key), (new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    write_kernel(cdn.root, OTHER, 1)
    sign(cdn.root / "kernels" / REPO, old_path)
    sign(cdn.root / "kernels" / OTHER, new_path)
    trust(monkeypatch, f"{old_key.public_line}\n{new_key.public_line}")

    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert get_kernel(OTHER, version=1).marker() == f"{OTHER}@v1:{LOCAL}"

    signers = cached_signers()
    assert signers[(REPO, 1, LOCAL)] == old_key.key_id
    assert signers[(OTHER, 1, LOCAL)] == new_key.key_id


def test_a_tree_signed_by_both_keys_loads_with_only_the_new_key_trusted(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old_path, old_key), (new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, old_path)
    sign(cdn.root, new_path)
    assert sig_key_ids(manifest(cdn.root)) == [old_key.key_id, new_key.key_id]
    trust(monkeypatch, new_key.public_line)
    cdn.clear_log()

    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"

    assert document_gets(cdn) == signed_load_documents()
    assert len(package_gets(cdn)) == 4
    assert cached_signers()[(REPO, 1, LOCAL)] == new_key.key_id


def answered_once_asked(asked: threading.Event, seen: list[bool]) -> Fault:
    """Serve the file once ``asked`` is set (at most 10 s later), noting in ``seen``
    whether it was."""

    def fault(handler: CdnHandler, body: bytes) -> None:
        seen.append(asked.wait(10))
        handler.send_file(body)

    return fault


def test_a_document_and_its_signature_are_asked_for_together(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checking a signature costs no round trip: the CDN holds each document's answer
    until the request for its ``.sig`` has arrived, and a load that asked for them one
    after the other would keep it waiting."""
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    sig_asked_first: list[bool] = []
    for document in (f"{REPO}/v1/variants.json", f"{REPO}/v1/build/{LOCAL}/metadata.json"):
        sig_asked, served_at_once = threading.Event(), threading.Event()
        served_at_once.set()
        cdn.inject(f"kernels/{document}", answered_once_asked(sig_asked, sig_asked_first))
        cdn.inject(f"kernels/{document}.sig", held(sig_asked, served_at_once))
    cdn.clear_log()

    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"

    assert sig_asked_first == [True, True]
    assert document_gets(cdn) == signed_load_documents()
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id


# -- 5. unsigned kernels ----------------------------------------------------------------------


def test_an_unsigned_kernel_is_refused_when_signatures_are_required(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (_path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    monkeypatch.setenv(REQUIRE, "1")

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)
    assert f"{REPO}/v1/variants.json: signatures are required, but no trusted key" in str(
        info.value
    )
    assert f"add the publisher's public key to {TRUSTED}" in str(info.value)
    assert package_gets(cdn) == []

    trust(monkeypatch, key.public_line)
    cdn.clear_log()
    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)
    assert f"{REPO}/v1/variants.json is not signed" in str(info.value)
    assert key.key_id in str(info.value) and "flashhub sign" in str(info.value)
    assert package_gets(cdn) == []
    assert not entry(1, LOCAL).exists()


def test_without_keys_an_unsigned_kernel_loads_as_before_and_no_signature_is_asked_for(
    cdn: CdnServer,
) -> None:
    write_kernel(cdn.root, REPO, 1)

    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"

    assert cdn.gets(".sig") == []
    assert document_gets(cdn) == [
        f"{REPO}/v1/build/{LOCAL}/metadata.json",
        f"{REPO}/v1/variants.json",
    ]
    assert len(package_gets(cdn)) == 4
    assert cached_signers()[(REPO, 1, LOCAL)] is None
    assert get_config().trusted_keys == ()


# A load with a key trusted where cryptography cannot be imported: what it raised.
LOADS_WITHOUT_CRYPTOGRAPHY = """
import sys
sys.modules["cryptography"] = None  # as if it were not installed
import flashhub_kernels as fk
from flashhub_kernels.errors import SignatureError
try:
    fk.get_kernel("acme/tensor-tricks", version=1)
except SignatureError as exc:
    print(exc.hint)
"""


def test_a_key_trusted_without_cryptography_installed_says_what_to_install(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)

    hint = run_python(LOADS_WITHOUT_CRYPTOGRAPHY)

    assert hint == "install it: pip install 'flashhub-kernels[signing]'\n"
    assert package_gets(cdn) == []
    assert not entry(1, LOCAL).exists()


# -- 6. the warm path --------------------------------------------------------------------------


def test_after_a_signed_cold_load_a_fresh_process_makes_no_request_and_verifies_nothing(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Warm, trusting a key costs the parsing of the key: no request, and neither the
    signing module nor cryptography is imported."""
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)

    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert document_gets(cdn) == signed_load_documents()
    cdn.clear_log()

    code = IMPORT_V1 + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"
    marker, listed = run_python(code).splitlines()
    modules = set(json.loads(listed))
    assert marker == f"{REPO}@v1:{LOCAL}"
    assert cdn.requests == []
    assert "flashhub_kernels._signing.trusted_keys" in modules  # the key was read ...
    assert {
        "flashhub_kernels._signing.statements",
        "flashhub_kernels._signing.signature_files",
        "flashhub_kernels._signing.verification",
        "flashhub_kernels._signing.ed25519",
        "flashhub_kernels._network.documents",
        "flashhub_kernels.errors",  # nor the errors: nothing failed
    }.isdisjoint(modules)
    assert not [m for m in modules if m.split(".")[0] == "cryptography"]  # ... nothing verified


# -- 7. an entry cached before keys were configured --------------------------------------------


def test_an_entry_cached_before_keys_is_verified_once_then_stays_warm(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"  # no keys yet
    assert cdn.gets(".sig") == []
    assert cached_signers()[(REPO, 1, LOCAL)] is None
    files = {p: p.stat().st_mtime_ns for p in entry(1, LOCAL).rglob("*.py")}

    trust(monkeypatch, key.public_line)
    forget_kernels()
    cdn.clear_log()
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"

    # The variant list recorded unchecked is not chosen by: the signed one is asked for.
    assert document_gets(cdn) == signed_load_documents()
    assert package_gets(cdn) == [], "the cached files are kept, not downloaded again"
    assert {p: p.stat().st_mtime_ns for p in files} == files
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id

    forget_kernels()
    cdn.clear_log()
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert run_python(IMPORT_V1).strip() == f"{REPO}@v1:{LOCAL}"
    assert cdn.requests == []


def test_an_entry_cached_before_keys_is_refused_offline(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    get_kernel(REPO, version=1)  # no keys yet
    forget_kernels()
    trust(monkeypatch, key.public_line)
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    cdn.clear_log()

    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)

    assert f"the cached copy of {REPO}@v1 cannot be used offline" in str(info.value)
    assert "no trusted key vouched for the list of its variants" in str(info.value)
    assert info.value.hint is not None
    assert "unset FLASHHUB_OFFLINE once" in info.value.hint
    assert cdn.requests == []
    assert MODULE not in sys.modules

    # Online once, it is verified; then offline loads work.
    monkeypatch.delenv("FLASHHUB_OFFLINE")
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert package_gets(cdn) == []
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")
    forget_kernels()
    cdn.clear_log()
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert cdn.requests == []


def test_has_kernel_offline_refuses_an_entry_cached_before_keys_as_the_load_does(
    cdn: CdnServer, keys: Keys
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    run_python(IMPORT_V1)  # no keys yet
    cdn.clear_log()

    trusting = {TRUSTED: key.public_line}
    assert has_then_get(REPO, 1, env=trusting) == ["SignatureError", "SignatureError"]
    assert cdn.requests == []


def test_processes_trusting_different_keys_of_the_publisher_share_a_cache(
    cdn: CdnServer, keys: Keys
) -> None:
    # A fleet mid-rotation shares one cache: the CDN carries both keys' signatures, and
    # some processes trust the old key, some the new. Each loads what the other cached,
    # checked against the signature cached with the entry: offline too, with no request,
    # and without rewriting what the other recorded.
    (old_path, old_key), (new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, old_path)
    sign(cdn.root, new_path)
    old, new = {TRUSTED: old_key.public_line}, {TRUSTED: new_key.public_line}
    assert run_python(IMPORT_V1, env=old).strip() == f"{REPO}@v1:{LOCAL}"
    cdn.clear_log()

    for env in [{**new, "FLASHHUB_OFFLINE": "1"}, new, old, new]:
        assert run_python(IMPORT_V1, env=env).strip() == f"{REPO}@v1:{LOCAL}"

    assert cdn.requests == []
    assert cached_signers()[(REPO, 1, LOCAL)] == old_key.key_id


def test_a_variant_list_a_hostile_mirror_gave_a_neighbour_does_not_choose_the_variant(
    cdn: CdnServer, make_cdn: MakeCdn, keys: Keys, tmp_path: Path
) -> None:
    # A neighbour that checks no signatures loaded through a hostile mirror, whose
    # variants.json lists only the pure-Python build, and recorded that list in the shared
    # cache. A process trusting the publisher's key, on the genuine CDN, must not choose
    # by it: it asks for the signed list and loads this machine's build.
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL])
    sign(cdn.root, path)
    hostile = make_cdn(tmp_path / "hostile")
    write_kernel(hostile.root, REPO, 1, [UNIVERSAL])
    neighbour = {"FLASHHUB_CDN_URL": hostile.url}
    assert run_python(IMPORT_V1, env=neighbour).strip() == f"{REPO}@v1:{UNIVERSAL}"
    cdn.clear_log()

    trusting = {TRUSTED: key.public_line}
    assert run_python(IMPORT_V1, env=trusting).strip() == f"{REPO}@v1:{LOCAL}"

    assert f"{REPO}/v1/variants.json.sig" in document_gets(cdn)
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id
    # Warm and offline it keeps to the list it verified; the neighbour keeps to its own.
    cdn.clear_log()
    for env in [trusting, {**trusting, "FLASHHUB_OFFLINE": "1"}]:
        assert run_python(IMPORT_V1, env=env).strip() == f"{REPO}@v1:{LOCAL}"
    assert cdn.requests == []
    assert run_python(IMPORT_V1, env=neighbour).strip() == f"{REPO}@v1:{UNIVERSAL}"


def test_an_entry_cached_under_a_key_not_trusted_here_does_not_run(
    cdn: CdnServer, keys: Keys, tmp_path: Path
) -> None:
    # A neighbour sharing the cache trusts a key this process does not (a CDN signing
    # with a key of its own fooled it): neither the entry it cached nor the signature
    # cached with it vouch for anything here, offline or online.
    (rogue_path, rogue_key), (_path, key) = keys
    ran = tmp_path / "planted-ran"
    plant_unsigned(cdn.root, REPO, ran)
    sign(cdn.root, rogue_path)
    run_python(f"import {MODULE}", env={TRUSTED: rogue_key.public_line})
    ran.unlink()

    for offline in ["1", ""]:
        env = {**os.environ, TRUSTED: key.public_line, "FLASHHUB_OFFLINE": offline}
        result = run_code(f"import {MODULE}", env=env)
        assert result.returncode == 1 and "SignatureError" in result.stderr, result.stderr
    assert not ran.exists(), "the planted code ran"


def test_a_re_import_after_keys_are_configured_in_the_process_is_checked(
    cdn: CdnServer, keys: Keys
) -> None:
    """A process imported a kernel before it trusted any key, then trusts one that does not
    vouch for it: importing the kernel again must not load the unvouched entry."""
    (path, _key), (_new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    get_kernel(REPO, version=1)  # no keys yet
    configure(trusted_keys=[new_key.public_line])
    for name in [n for n in sys.modules if n.startswith("flashhub.")]:
        del sys.modules[name]  # the finder stays: the same process imports it again

    with pytest.raises(SignatureError, match=f"trusted: {new_key.key_id}"):
        get_kernel(REPO, version=1)
    assert MODULE not in sys.modules


def test_an_entry_re_verified_against_a_re_serialized_manifest_still_passes_cache_verify(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cached unsigned; then the publisher rewrites metadata.json (same files, other bytes:
    `flashhub publish` writes its canonical form) and signs it. The re-verification keeps
    the cached files, and what it caches beside them must still check out."""
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    get_kernel(REPO, version=1)  # no keys yet
    published = manifest(cdn.root)
    published.write_text(json.dumps(json.loads(published.read_text()), indent=2))
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    forget_kernels()
    cdn.clear_log()

    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert package_gets(cdn) == []
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id

    verified = flashhub("cache", "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"{REPO}@v1 {LOCAL}: ok, signed by {key.key_id}" in verified.stdout


# -- 8. lock files -----------------------------------------------------------------------------


def test_lock_records_the_signer_of_every_variant(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    project = make_project()
    unsigned = ok_json(flashhub("lock", project, "--json"))
    assert all("signer" not in pins for pins in unsigned["kernels"][0]["variants"].values())

    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    cdn.clear_log()
    locked = flashhub("lock", project)
    assert locked.returncode == 0, locked.stderr

    document = json.loads(lockfile_of(project).read_text())
    variants = document["kernels"][0]["variants"]
    assert set(variants) == {LOCAL, UNIVERSAL, CUDA}
    assert {name: pins["signer"] for name, pins in variants.items()} == dict.fromkeys(
        variants, key.key_id
    )
    assert read_lockfile(lockfile_of(project)).kernels[REPO].signers == dict.fromkeys(
        variants, key.key_id
    )
    assert cdn.gets(f"{REPO}/versions.json.sig"), "the versions.json it resolves is checked"
    assert package_gets(cdn) == []


def test_a_locked_load_refuses_a_cdn_re_signed_with_another_trusted_key(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (old_path, old_key), (new_path, new_key) = keys
    project = make_project()
    sign(cdn.root, old_path)
    trust(monkeypatch, old_key.public_line, new_key.public_line)
    assert flashhub("lock", project).returncode == 0
    for sig in cdn.root.rglob("*.sig"):
        sig.unlink()
    sign(cdn.root, new_path)  # the CDN now carries the other key's signatures only
    cdn.clear_log()

    with pytest.raises(SignatureError) as info:
        get_locked_kernel(REPO, lockfile=lockfile_of(project))

    message = str(info.value)
    assert f"signed by the key {new_key.key_id}" in message
    assert f"the lock records the signer {old_key.key_id}" in message
    assert "nothing was fetched" in message
    assert package_gets(cdn) == []
    assert not entry(2, LOCAL).exists()
    assert "flashhub.acme.tensor_tricks.v2" not in sys.modules


def test_a_locked_load_refuses_a_cached_copy_another_key_vouched_for(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked with the old key's signer; the CDN re-signs with the new key, and a plain load
    (both keys trusted) caches that copy. The locked load must not take it."""
    (old_path, old_key), (new_path, new_key) = keys
    project = make_project()
    sign(cdn.root, old_path)
    trust(monkeypatch, old_key.public_line, new_key.public_line)
    assert flashhub("lock", project).returncode == 0
    for sig in cdn.root.rglob("*.sig"):
        sig.unlink()
    sign(cdn.root, new_path)
    get_kernel(REPO, version=2)
    assert cached_signers()[(REPO, 2, LOCAL)] == new_key.key_id
    forget_kernels()

    with pytest.raises(SignatureError) as info:
        get_locked_kernel(REPO, lockfile=lockfile_of(project))

    assert old_key.key_id in str(info.value) and new_key.key_id in str(info.value)
    assert "flashhub.acme.tensor_tricks.v2" not in sys.modules
    # `flashhub download` refuses it too, rather than reporting the copy as downloaded.
    result = flashhub("download", project, "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["results"][0]["status"] == "failed"


def locked_under_the_new_key(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, SigningKey, SigningKey]:
    """A project locked while only the new key of ``keys`` was trusted, on a tree both
    keys sign; with the old key and the new one."""
    (old_path, old_key), (new_path, new_key) = keys
    project = make_project()
    sign(cdn.root, old_path)
    sign(cdn.root, new_path)
    trust(monkeypatch, new_key.public_line)
    assert flashhub("lock", project).returncode == 0
    return project, old_key, new_key


def test_a_locked_load_accepts_the_locked_signer_beside_another_trusted_signature(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked while only the new key was trusted, on a tree both keys sign. Trusting the
    old key too (as a rotating team does) must not make the locked signer's valid
    signature count for nothing."""
    project, old_key, new_key = locked_under_the_new_key(make_project, cdn, keys, monkeypatch)
    assert read_lockfile(lockfile_of(project)).kernels[REPO].signers[LOCAL] == new_key.key_id

    trust(monkeypatch, old_key.public_line, new_key.public_line)
    module = get_locked_kernel(REPO, lockfile=lockfile_of(project))

    assert module.marker() == f"{REPO}@v2:{LOCAL}"


def test_a_locked_load_offline_takes_a_copy_cached_under_another_key_the_locked_signer_signed(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Locked while the new key was trusted, on a tree both keys sign; a neighbour trusting
    the old key cached the variant. The .sig cached with it holds the locked signer's
    signature: the locked load takes it offline, without a request, as a plain load does."""
    project, old_key, _ = locked_under_the_new_key(make_project, cdn, keys, monkeypatch)
    neighbour = {TRUSTED: old_key.public_line}
    run_python("import flashhub.acme.tensor_tricks.v2", env=neighbour)
    assert cached_signers()[(REPO, 2, LOCAL)] == old_key.key_id
    cdn.clear_log()

    lockfile = str(lockfile_of(project))
    load = "from flashhub_kernels import load_kernel\n" + (
        f"print(load_kernel({REPO!r}, lockfile={lockfile!r}).marker())"
    )
    assert run_python(load, env={"FLASHHUB_OFFLINE": "1"}).strip() == f"{REPO}@v2:{LOCAL}"

    assert cdn.requests == []
    assert cached_signers()[(REPO, 2, LOCAL)] == old_key.key_id, "the receipt stays as it was"


def test_a_locked_load_of_a_copy_a_process_checking_no_signature_cached_says_so(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A neighbour trusting no key cached the locked variant: the offline locked load
    refuses it, naming who cached it rather than printing a signer of ``None``."""
    project, _, new_key = locked_under_the_new_key(make_project, cdn, keys, monkeypatch)
    monkeypatch.delenv(TRUSTED)
    run_python("import flashhub.acme.tensor_tricks.v2")
    trust(monkeypatch, new_key.public_line)
    monkeypatch.setenv("FLASHHUB_OFFLINE", "1")

    with pytest.raises(LockfileError) as info:
        load_kernel(REPO, lockfile=lockfile_of(project))

    message = str(info.value)
    assert "None" not in message
    assert "vouched for by no key (a process checking no signature cached it)" in message
    assert f"the lock by {new_key.key_id}" in message
    assert MODULE.replace("v1", "v2") not in sys.modules


def test_flashhub_lock_of_a_project_uses_its_trusted_keys_from_any_directory(
    make_project: MakeProject, cdn: CdnServer, keys: Keys, tmp_path: Path
) -> None:
    """`flashhub lock PROJECT_DIR` reads PROJECT_DIR/pyproject.toml for the dependencies;
    the trusted keys declared next to them must apply as well."""
    (path, key), _ = keys
    project = make_project()
    sign(cdn.root, path)
    pyproject = project / "pyproject.toml"
    pyproject.write_text(
        pyproject.read_text() + f'\n[tool.flashhub]\ntrusted-keys = ["{key.public_line}"]\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    assert flashhub("lock", project, cwd=project).returncode == 0
    in_project = json.loads(lockfile_of(project).read_text())
    assert in_project["kernels"][0]["variants"][LOCAL]["signer"] == key.key_id

    assert flashhub("lock", project, cwd=elsewhere).returncode == 0
    assert json.loads(lockfile_of(project).read_text()) == in_project


# -- 9. flashhub info and flashhub variants ---------------------------------------------------


def test_info_and_variants_show_the_verified_signer(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL])
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    verified = f"signed by {key.key_id} (verified)"

    info = flashhub("info", REPO, "--version", "1")
    assert info.returncode == 0, info.stderr
    assert info.stdout.count(verified) == 2
    described = ok_json(flashhub("info", REPO, "--version", "1", "--json"))
    assert {
        (v["variant"], tuple(v["signed_by"]), v["signature_verified"])
        for v in described["variants"]
    } == {(LOCAL, (key.key_id,), True), (UNIVERSAL, (key.key_id,), True)}

    variants = flashhub("variants", REPO, "--version", "1")
    assert variants.returncode == 0, variants.stderr
    assert f"  {LOCAL}: {verified}" in variants.stdout
    assert f"  {UNIVERSAL}: {verified}" in variants.stdout
    listed = ok_json(flashhub("variants", REPO, "--version", "1", "--json"))
    assert {
        v["variant"]: (v["signed_by"], v["signature_verified"]) for v in listed["variants"]
    } == {
        LOCAL: ([key.key_id], True),
        UNIVERSAL: ([key.key_id], True),
    }

    # Offline only the cache answers: the key that vouched for the cached variant.
    get_kernel(REPO, version=1)
    cdn.clear_log()
    offline = flashhub("variants", REPO, "--version", "1", env=OFFLINE)
    assert offline.returncode == 0, offline.stderr
    assert f"  {LOCAL}: {verified}" in offline.stdout
    assert cdn.requests == []


def test_info_and_variants_without_keys_show_unverified_signers_and_nothing_for_unsigned(
    cdn: CdnServer, keys: Keys
) -> None:
    """A signed variant names its signers, marked unverified; an unsigned one gets no
    signature line or field, so the output of unsigned kernels is as it always was."""
    (old_path, old_key), (new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1, [LOCAL, UNIVERSAL])
    sign(manifest(cdn.root), old_path)  # only this system's variant is signed, by both keys
    sign(manifest(cdn.root), new_path)
    both = f"{old_key.key_id}, {new_key.key_id}"
    unverified = f"signed by {both} (not verified: no trusted key)"

    info = flashhub("info", REPO, "--version", "1")
    assert info.returncode == 0, info.stderr
    lines = info.stdout.splitlines()
    local_at = next(i for i, line in enumerate(lines) if f" {LOCAL}: " in line)
    universal_at = next(i for i, line in enumerate(lines) if f" {UNIVERSAL}: " in line)
    assert lines[local_at + 1].strip() == unverified
    assert "signed" not in "\n".join(lines[universal_at:])
    described = ok_json(flashhub("info", REPO, "--version", "1", "--json"))
    by_name = {v["variant"]: v for v in described["variants"]}
    assert by_name[LOCAL]["signed_by"] == [old_key.key_id, new_key.key_id]
    assert by_name[LOCAL]["signature_verified"] is False
    assert "signed_by" not in by_name[UNIVERSAL]

    variants = flashhub("variants", REPO, "--version", "1")
    assert variants.returncode == 0, variants.stderr
    assert f"  {LOCAL}: {unverified}" in variants.stdout
    assert f"  {UNIVERSAL}: signed" not in variants.stdout
    listed = ok_json(flashhub("variants", REPO, "--version", "1", "--json"))
    signed = {v["variant"]: v.get("signed_by") for v in listed["variants"]}
    assert signed == {LOCAL: [old_key.key_id, new_key.key_id], UNIVERSAL: None}


# -- 10. flashhub cache verify -----------------------------------------------------------------


def test_cache_verify_rechecks_the_cached_signature_against_the_configured_keys(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), (_new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    get_kernel(REPO, version=1)
    cdn.clear_log()

    passed = flashhub("cache", "verify")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert f"{REPO}@v1 {LOCAL}: ok, signed by {key.key_id}" in passed.stdout

    trust(monkeypatch, new_key.public_line)
    not_trusted = flashhub("cache", "verify")
    assert not_trusted.returncode == 0
    assert f"{REPO}@v1 {LOCAL}: intact, not trusted: signed by no key you trust" in (
        not_trusted.stdout
    )
    assert f"signed by: {key.key_id}; trusted: {new_key.key_id}" in not_trusted.stdout
    checked = json.loads(flashhub("cache", "verify", "--json").stdout)
    assert [(e["ok"], e["problem"]) for e in checked["entries"]] == [(True, None)]
    assert new_key.key_id in checked["entries"][0]["not_trusted"]

    # A cached signature file that was replaced fails even with the right key.
    trust(monkeypatch, key.public_line)
    cached_sig = entry(1, LOCAL) / "metadata.json.sig"
    original = cached_sig.read_bytes()
    shutil.copyfile(cdn.root / "kernels" / REPO / "v1" / "variants.json.sig", cached_sig)
    assert flashhub("cache", "verify").returncode == 1
    cached_sig.write_bytes(original)
    assert flashhub("cache", "verify").returncode == 0
    assert cdn.requests == [], "cache verify works from the cache alone"


def test_cache_verify_of_an_entry_cached_without_keys_says_its_next_load_checks_it(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A neighbour that trusts no key cached a signed kernel, so no .sig is kept with it.
    With a key trusted, verify must not call the kernel unsigned and send the user to its
    publisher: the next load checks the publisher's signature (here, it is signed)."""
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    run_python(IMPORT_V1)
    trust(monkeypatch, key.public_line)
    cdn.clear_log()

    not_trusted = flashhub("cache", "verify")

    assert not_trusted.returncode == 0
    why = f"{REPO}@v1 {LOCAL}: intact, not trusted: cached by a process that checked no signature"
    assert why in not_trusted.stdout
    assert "its next load with network access checks its signature" in not_trusted.stdout
    assert "is not signed" not in not_trusted.stdout and "publisher" not in not_trusted.stdout
    assert cdn.requests == [], "verify stays offline"

    get_kernel(REPO, version=1)
    passed = flashhub("cache", "verify")
    assert f"{REPO}@v1 {LOCAL}: ok, signed by {key.key_id}" in passed.stdout


def _sig_deleted(sig: Path) -> None:
    sig.unlink()


def _sig_truncated(sig: Path) -> None:
    sig.write_bytes(sig.read_bytes()[: sig.stat().st_size // 2])


@pytest.mark.parametrize("damage", [_sig_deleted, _sig_truncated], ids=["deleted", "truncated"])
def test_cache_verify_fails_an_entry_whose_cached_signature_is_gone_or_malformed(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path], None]
) -> None:
    """The receipt records that a trusted key vouched for the entry: its .sig gone, or
    malformed (it may have been that key's, tampered with), the entry is broken, not
    merely not trusted."""
    (path, key), _ = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    get_kernel(REPO, version=1)
    damage(entry(1, LOCAL) / "metadata.json.sig")

    verified = flashhub("cache", "verify")

    assert verified.returncode == 1, verified.stdout
    assert f"{REPO}@v1 {LOCAL}: FAILED: its signature does not check out" in verified.stdout


def test_cache_prune_leaves_the_entries_of_a_shared_cache_no_key_of_the_user_vouches_for(
    cdn: CdnServer, keys: Keys, tmp_path: Path
) -> None:
    """A cache a group shares. Neighbours cached acme/tensor-tricks v1 trusting no key
    (no .sig kept) and acme/other-tricks v1 trusting a key of their own (its .sig holds
    that key's signature only); of the kernels a neighbour trusting the user's key cached,
    v2's cached .sig was swapped for another document's (the trusted key's signature,
    not of this manifest) and a file of v3 changed. The user, trusting the key, runs
    verify and prune: the broken two fail and go; the other two are intact, reported as
    not trusted and left; and the user's loads never run their code on the cache's word."""
    (other_path, other_key), (path, key) = keys
    ran = tmp_path / "planted-ran"
    for repo_id in (REPO, OTHER):
        plant_unsigned(cdn.root, repo_id, ran)
    sign(cdn.root / "kernels" / OTHER, other_path)
    write_kernel(cdn.root, REPO, 2)
    write_kernel(cdn.root, REPO, 3)
    sign(cdn.root / "kernels" / REPO, path)
    run_python(f"import {MODULE}")
    run_python("import flashhub.acme.other_tricks.v1", env={TRUSTED: other_key.public_line})
    ran.unlink()
    for version in (2, 3):
        run_python(f"import flashhub.acme.tensor_tricks.v{version}", env={TRUSTED: key.public_line})
    shutil.copyfile(
        cdn.root / "kernels" / REPO / "v2/variants.json.sig", entry(2, LOCAL) / "metadata.json.sig"
    )
    ops = entry(3, LOCAL) / "tensor_tricks" / "_ops.py"
    ops.write_bytes(ops.read_bytes() + b"# changed")
    mine = {TRUSTED: key.public_line}
    cdn.clear_log()

    verified = flashhub("cache", "verify", env=mine)
    checked = json.loads(flashhub("cache", "verify", "--json", env=mine).stdout)
    pruned = ok_json(flashhub("cache", "prune", "--json", env=mine))

    assert verified.returncode == 1, verified.stdout
    lines = {line.split(":")[0]: line for line in verified.stdout.splitlines()}
    not_trusted = {f"{REPO}@v1 {LOCAL}", f"{OTHER}@v1 {LOCAL}"}
    for name in not_trusted:
        assert lines[name].startswith(f"{name}: intact, not trusted: "), verified.stdout
    assert "cached by a process that checked no signature" in lines[f"{REPO}@v1 {LOCAL}"]
    assert f"signed by: {other_key.key_id}" in lines[f"{OTHER}@v1 {LOCAL}"]
    assert "FAILED: its signature does not check out" in lines[f"{REPO}@v2 {LOCAL}"]
    assert "FAILED: tensor_tricks/_ops.py does not match" in lines[f"{REPO}@v3 {LOCAL}"]
    assert "4 entries checked (2 intact but not trusted)" in verified.stdout
    verdicts = {
        f"{e['repo_id']}@v{e['version']} {e['variant']}": (e["ok"], bool(e["not_trusted"]))
        for e in checked["entries"]
    }
    assert verdicts == {
        **dict.fromkeys(not_trusted, (True, True)),
        f"{REPO}@v2 {LOCAL}": (False, False),
        f"{REPO}@v3 {LOCAL}": (False, False),
    }
    assert sorted(e["version"] for e in pruned["removed"]) == [2, 3]
    assert entry(1, LOCAL).is_dir() and (tmp_path / "cache/kernels" / OTHER / "v1" / LOCAL).is_dir()
    for module in (MODULE, "flashhub.acme.other_tricks.v1"):
        result = run_code(f"import {module}", env={**os.environ, **mine, "FLASHHUB_OFFLINE": "1"})
        assert result.returncode == 1 and "SignatureError" in result.stderr, result.stderr
    assert not ran.exists(), "the planted code ran"
    assert cdn.requests == []


# -- 11. where trusted keys come from ----------------------------------------------------------


def _with_trusted_keys(project: Path, *lines: str) -> Path:
    project.mkdir()
    listed = ", ".join(json.dumps(line) for line in lines)
    (project / "pyproject.toml").write_text(f"[tool.flashhub]\ntrusted-keys = [{listed}]\n")
    return project


def test_trusted_keys_from_the_projects_pyproject(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (path, key), (_new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    # Another directory for each list: the keys of a pyproject.toml are cached by its stat.
    wrong = _with_trusted_keys(tmp_path / "wrong", f"acme:{new_key.public_line}")
    right = _with_trusted_keys(tmp_path / "right", f"acme:{key.public_line}")

    monkeypatch.chdir(wrong)
    with pytest.raises(SignatureError) as info:
        get_kernel(REPO, version=1)
    assert f"trusted: {new_key.key_id}" in str(info.value)
    assert package_gets(cdn) == []

    monkeypatch.chdir(right)
    assert [k.key_id for k in get_config().trusted_keys] == [key.key_id]
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id

    # FLASHHUB_TRUSTED_KEYS wins over the project's list.
    trust(monkeypatch, new_key.public_line)
    assert [k.key_id for k in get_config().trusted_keys] == [new_key.key_id]


def test_trusted_keys_from_configure(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), (_new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, new_key.public_line)  # configure() wins over the environment

    config = configure(trusted_keys=[f"acme:{key.public_line}"])
    assert [(k.key_id, k.orgs) for k in config.trusted_keys] == [(key.key_id, {"acme"})]
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert document_gets(cdn) == signed_load_documents()

    configure(trusted_keys=new_key.public_line)
    forget_kernels()
    with pytest.raises(SignatureError, match=f"trusted: {new_key.key_id}"):
        get_kernel(REPO, version=1)

    configure(trusted_keys=[])  # [] trusts no key, not even the environment's
    assert get_config().trusted_keys == ()
    overrides.clear()  # what conftest does between tests: the environment applies again
    assert [k.key_id for k in get_config().trusted_keys] == [new_key.key_id]


def test_trusted_keys_from_a_file_named_by_the_environment(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (path, key), (new_path, new_key) = keys
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)

    monkeypatch.setenv(TRUSTED, str(new_path.with_name(new_path.name + ".pub")))
    with pytest.raises(SignatureError, match=f"trusted: {new_key.key_id}"):
        get_kernel(REPO, version=1)
    assert package_gets(cdn) == []

    listed = tmp_path / "trusted-keys.txt"
    listed.write_text(f"# the release key\nacme:{key.public_line}\n{new_key.public_line}\n")
    monkeypatch.setenv(TRUSTED, str(listed))
    assert {k.key_id for k in get_config().trusted_keys} == {key.key_id, new_key.key_id}
    assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
    assert cached_signers()[(REPO, 1, LOCAL)] == key.key_id


@pytest.mark.parametrize(
    "setting",
    ["empty file", "comments-only file", "group-writable file", "','", "pyproject []"],
)
def test_trusted_key_settings_that_give_no_key_refuse_to_load_rather_than_check_nothing(
    cdn: CdnServer, keys: Keys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, setting: str
) -> None:
    """A setting meant to trust a key, which yields none, must not turn verification off:
    the unsigned kernel the CDN serves does not run."""
    (_path, key), _ = keys
    ran = tmp_path / "planted-ran"
    plant_unsigned(cdn.root, REPO, ran)
    listed = tmp_path / "trusted-keys.txt"
    listed.write_text(
        {"empty file": "", "comments-only file": "# the release key\n"}.get(
            setting, f"{key.public_line}\n"
        )
    )
    listed.chmod(0o664 if setting == "group-writable file" else 0o644)
    if setting == "','":
        monkeypatch.setenv(TRUSTED, ",")
    elif setting == "pyproject []":
        _with_trusted_keys(tmp_path / "project")
        monkeypatch.chdir(tmp_path / "project")
    else:
        monkeypatch.setenv(TRUSTED, str(listed))
    cdn.clear_log()

    with pytest.raises(ConfigError) as info:
        importlib.import_module(MODULE)
    assert isinstance(info.value, ImportError)
    named = "[tool.flashhub] trusted-keys" if setting == "pyproject []" else TRUSTED
    assert named in str(info.value)
    forget_kernels()
    with pytest.raises(ConfigError):
        get_kernel(REPO, version=1)
    result = flashhub("get", REPO, "--version", "1")
    assert result.returncode == 2 and named in result.stderr, result.stderr
    assert cdn.requests == []
    assert not ran.exists(), "the unsigned kernel did not run"
    assert MODULE not in sys.modules


def test_a_sig_missing_on_a_mirror_that_then_fails_the_document_is_asked_for_again(
    cdn: CdnServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mirror A has no .sig (404) and hangs up on variants.json; mirror B serves both,
    signed. The .sig came from A, asked beside the document, before A failed it: that
    is no verdict on B's document, and the .sig is asked for again, from B."""
    (tmp_path / "keys").mkdir()
    path, key = key_pair(tmp_path / "keys", "k")
    write_kernel(cdn.root, REPO, 1)
    sign(cdn.root, path)
    trust(monkeypatch, key.public_line)
    (tmp_path / "empty").mkdir()
    failing = CdnServer(tmp_path / "empty").start()
    try:
        failing.inject(f"kernels/{REPO}/v1/variants.json", *[hang_up] * 10)
        configure(cdn_url=f"{failing.url},{cdn.url}")
        assert get_kernel(REPO, version=1).marker() == f"{REPO}@v1:{LOCAL}"
        assert f"/kernels/{REPO}/v1/variants.json.sig" in failing.gets()
        assert cdn.gets("/variants.json.sig") == [f"/kernels/{REPO}/v1/variants.json.sig"]
    finally:
        failing.stop()


@pytest.mark.parametrize("document", ["variants.json", f"build/{LOCAL}/metadata.json"])
def test_a_sig_a_half_synced_mirror_lacks_comes_from_the_next(
    make_cdn: MakeCdn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, document: str
) -> None:
    """Mirror A has the document but not yet its .sig (a sync copies ``x.json`` before
    ``x.json.sig``); mirror B has both. The .sig comes from B, and the load verifies."""
    (tmp_path / "keys").mkdir()
    path, key = key_pair(tmp_path / "keys", "k")
    b = make_cdn(tmp_path / "b")
    write_kernel(b.root, REPO, 1)
    sign(b.root, path)
    shutil.copytree(b.root, tmp_path / "a")
    (tmp_path / "a" / f"kernels/{REPO}/v1/{document}.sig").unlink()
    a = make_cdn(tmp_path / "a")
    trust(monkeypatch, key.public_line)
    monkeypatch.setenv("FLASHHUB_CDN_URL", f"{a.url},{b.url}")
    assert run_python(IMPORT_V1).split() == [f"{REPO}@v1:{LOCAL}"]
    sig = f"/kernels/{REPO}/v1/{document}.sig"
    assert sig in a.gets() and sig in b.gets()


def hang_up(handler: CdnHandler, body: bytes) -> None:
    """Answer nothing: close the connection."""
    handler.close_connection = True


# -- 12. the kernels a signed kernel depends on -------------------------------------------------
# A key trusted for one org vouches for that org's kernels; the CDN must not choose the code
# such a kernel runs through its kernel-depends, whatever org that names.

TOP, DEP = "acme/top", "other/base"
IMPORT_TOP = "import flashhub.acme.top.v1 as k; print(k.base.__name__)"


def _publish_top_needing_another_org(root: Path) -> None:
    write_builder_kernel(root, DEP, 2)
    uses_dep = f"from flashhub_kernels import get_kernel_dep\n\nbase = get_kernel_dep({DEP!r})\n"
    write_builder_kernel(root, TOP, 1, body=uses_dep, kernel_depends=[(DEP, 2)])


def test_an_unsigned_dependency_of_a_signed_kernel_is_refused_before_it_runs(
    cdn: CdnServer, keys: Keys, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), _ = keys
    _publish_top_needing_another_org(cdn.root)
    sign(cdn.root / "kernels" / "acme", path)  # other/base stays unsigned
    trust(monkeypatch, f"acme:{key.public_line}")  # scoped: other's kernels need no signature

    child = run_code(IMPORT_TOP, env=dict(os.environ))
    assert child.returncode == 1
    assert "SignatureError: acme/top v1 is signed, so each kernel it depends on must be " in (
        child.stderr
    )
    assert f"or by the key that signed acme/top v1 ({key.key_id})" in child.stderr
    assert "other/base/v2/variants.json is not signed" in child.stderr
    assert ran(ran_dir) == [], "neither the dependency's code nor the kernel's ran"
    assert not [p for p in package_gets(cdn) if "/other/base/" in p]

    # On its own, the unsigned kernel of the other org loads, as a scoped key promises; the
    # second (warm) load records it in the import table.
    for _ in range(2):
        assert run_python("import flashhub.other.base.v2 as b; print(b.__name__)").split() == [
            "flashhub.other.base.v2"
        ]
    # Cached and in the import table now, unsigned: still refused as the dependency.
    child = run_code(IMPORT_TOP, env=dict(os.environ))
    assert child.returncode == 1
    assert "is signed, so each kernel it depends on must be signed too" in child.stderr
    assert ran(ran_dir) == [ran_label(DEP, 2)] * 2, "the signed kernel's code never ran"


def test_a_dependency_signed_by_the_key_that_signed_its_kernel_loads(
    cdn: CdnServer, keys: Keys, ran_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (path, key), (other_path, other_key) = keys
    _publish_top_needing_another_org(cdn.root)
    sign(cdn.root, path)  # acme's publisher signed the dependency too
    trust(monkeypatch, f"acme:{key.public_line}")

    assert run_python(IMPORT_TOP).split() == ["flashhub.other.base.v2"]
    assert run_python(IMPORT_TOP).split() == ["flashhub.other.base.v2"]  # warm
    assert ran(ran_dir) == [ran_label(DEP, 2), ran_label(TOP, 1)] * 2
    assert cached_signers()[(DEP, 2, loaded_variant())] == key.key_id

    # Signed by the dependency's own publisher alone, whose key is trusted for its org.
    shutil.rmtree(get_config().cache_dir)
    for sig in (cdn.root / "kernels" / "other").rglob("*.sig"):
        sig.unlink()
    sign(cdn.root / "kernels" / "other", other_path)
    for sig in (cdn.root / "kernels" / "other").rglob("*.sig"):
        assert sig_key_ids(sig.with_suffix("")) == [other_key.key_id]
    trust(monkeypatch, f"acme:{key.public_line}", f"other:{other_key.public_line}")
    assert run_python(IMPORT_TOP).split() == ["flashhub.other.base.v2"]
