"""Signing keys: ``flashhub keygen``, key files, key ids and the trusted-key lists
(``FLASHHUB_TRUSTED_KEYS``) that clients configure."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import NOBODY, SIGNING_EXTRA, needs_root
from flashhub_kernels._config import Config, trusted_keys
from flashhub_kernels._loading.settings import configure
from flashhub_kernels._signing.signing_keys import (
    SigningKey,
    generate_signing_key,
    load_signing_key,
    write_key_pair,
)
from flashhub_kernels._signing.trusted_keys import (
    TrustedKey,
    key_id_of,
    load_trusted_keys,
    parse_trusted_keys,
    read_trusted_keys,
)
from flashhub_kernels.errors import ConfigError, PublishError
from support.cli_runner import flashhub, flashhub_child, ok_json
from support.preloaded import run_code

pytest.importorskip("cryptography", reason=SIGNING_EXTRA)

# RFC 8032, section 7.1, test 1: a seed and the public key it gives.
RFC_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC_LINE = "flashhub-ed25519:11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo="
PUBLIC_LINE = re.compile(r"flashhub-ed25519:[A-Za-z0-9+/]{43}=")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_077() -> Iterator[None]:
    """A umask that would make every new file private: the key files set their modes."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


# --- keygen ----------------------------------------------------------------------------


def test_keygen_makes_every_missing_directory_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 000 the directories above the last were made 0777: anyone could swap
    the key's directory for one of their own."""
    old = os.umask(0)
    try:
        assert flashhub("keygen", "--out", tmp_path / "new/a/b/release.key").returncode == 0
    finally:
        os.umask(old)
    for directory in ("new", "new/a", "new/a/b"):
        assert mode(tmp_path / directory) == 0o700, directory


def test_keygen_force_that_cannot_write_the_public_file_keeps_the_old_key(
    tmp_path: Path,
) -> None:
    keyfile = tmp_path / "release.key"
    assert flashhub("keygen", "--out", keyfile).returncode == 0
    before = keyfile.read_bytes()
    (tmp_path / "release.key.pub").unlink()
    (tmp_path / "release.key.pub").mkdir()  # where the new public key cannot go

    result = flashhub("keygen", "--out", keyfile, "--force")

    assert result.returncode == 1
    assert keyfile.read_bytes() == before  # the pair is not left half new


def test_keygen_writes_a_private_key_file_and_prints_one_public_line(
    tmp_path: Path, umask_077: None
) -> None:
    keyfile = tmp_path / "release.key"
    result = flashhub("keygen", "--out", keyfile)
    assert result.returncode == 0, result.stderr
    public_line, key_id_line = result.stdout.splitlines()
    assert PUBLIC_LINE.fullmatch(public_line)
    raw = base64.b64decode(public_line.removeprefix("flashhub-ed25519:"))
    assert key_id_line == f"key id: {hashlib.sha256(raw).hexdigest()[:16]}"

    assert mode(keyfile) == 0o600
    assert mode(tmp_path / "release.key.pub") == 0o644
    assert (tmp_path / "release.key.pub").read_text() == public_line + "\n"
    lines = keyfile.read_text().splitlines()
    assert lines[0].startswith("#") and key_id_line.split()[-1] in lines[0]
    assert re.fullmatch(r"flashhub-ed25519-private:[A-Za-z0-9+/]{43}=", lines[1])
    assert lines[1] not in result.stdout + result.stderr  # the secret is never printed

    key = load_signing_key(keyfile)
    assert (key.public_line, key.key_id) == (public_line, key_id_line.split()[-1])
    # The .pub file is what clients may point FLASHHUB_TRUSTED_KEYS at.
    (trusted,) = load_trusted_keys(str(tmp_path / "release.key.pub"))
    assert (trusted.key_id, trusted.public_key, trusted.orgs) == (key.key_id, raw, None)


def test_keygen_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    keyfile = tmp_path / "release.key"
    first = ok_json(flashhub("keygen", "--out", keyfile, "--json"))
    before = keyfile.read_bytes()

    refused = flashhub("keygen", "--out", keyfile)
    assert refused.returncode == 1
    assert "already exists" in refused.stderr and "--force" in refused.stderr
    assert keyfile.read_bytes() == before

    (tmp_path / "other.key.pub").write_text("stale\n")  # a leftover .pub counts too
    assert flashhub("keygen", "--out", tmp_path / "other.key").returncode == 1
    assert not (tmp_path / "other.key").exists()

    keyfile.chmod(0o644)  # --force writes a new private file: 0600 again
    second = ok_json(flashhub("keygen", "--out", keyfile, "--force", "--json"))
    assert second["key_id"] != first["key_id"]
    assert mode(keyfile) == 0o600
    assert load_signing_key(keyfile).key_id == second["key_id"]
    assert (tmp_path / "release.key.pub").read_text() == second["public_key"] + "\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "other.key.pub",
        "release.key",
        "release.key.pub",
    ]


def test_a_failed_keygen_force_keeps_the_old_key_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyfile = tmp_path / "release.key"
    write_key_pair(generate_signing_key(), keyfile)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def refuse(*_args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_key_pair(generate_signing_key(), keyfile, force=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    assert mode(keyfile) == 0o600


def test_keygen_without_force_never_replaces_a_key_that_appears_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another keygen writes the file after the existence check: its key is kept."""
    keyfile = tmp_path / "release.key"
    theirs = b"their key\n"
    real_link = os.link

    def link_after_them(source: str, target: str) -> None:
        Path(target).write_bytes(theirs)
        real_link(source, target)

    monkeypatch.setattr(os, "link", link_after_them)
    with pytest.raises(FileExistsError):
        write_key_pair(generate_signing_key(), keyfile)
    assert keyfile.read_bytes() == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["release.key"]


def test_keygen_creates_the_key_directory(tmp_path: Path) -> None:
    """`flashhub keygen --out ~/.config/flashhub/sdq.key` works on a fresh home."""
    keyfile = tmp_path / "config" / "flashhub" / "sdq.key"
    result = flashhub("keygen", "--out", keyfile)
    assert result.returncode == 0, result.stderr
    assert mode(keyfile.parent) == 0o700 and mode(keyfile) == 0o600
    assert load_signing_key(keyfile).public_line == result.stdout.splitlines()[0]
    assert sorted(p.name for p in keyfile.parent.iterdir()) == ["sdq.key", "sdq.key.pub"]


def test_keygen_json(tmp_path: Path) -> None:
    report = ok_json(flashhub("keygen", "--out", tmp_path / "k", "--json"))
    assert set(report) == {"key_id", "public_key", "private_key_file", "public_key_file"}
    assert PUBLIC_LINE.fullmatch(report["public_key"])
    assert report["public_key_file"] == str(tmp_path / "k.pub")


def test_key_id_is_stable() -> None:
    key = SigningKey(RFC_SEED)
    assert key.public_key == RFC_PUBLIC
    assert key.public_line == RFC_LINE
    assert key.key_id == key_id_of(RFC_PUBLIC) == "21fe31dfa154a261"
    assert key.key_id == hashlib.sha256(RFC_PUBLIC).hexdigest()[:16]
    (trusted,) = parse_trusted_keys(RFC_LINE, source="test")
    assert trusted.key_id == key.key_id
    assert RFC_SEED.hex() not in repr(key) and "21fe31dfa154a261" in repr(key)


# --- key files -------------------------------------------------------------------------


def write_key(path: Path, text: str, file_mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(file_mode)
    return path


PRIVATE_LINE = "flashhub-ed25519-private:" + base64.b64encode(RFC_SEED).decode()


def test_a_key_file_needs_only_its_private_line(tmp_path: Path) -> None:
    key = load_signing_key(write_key(tmp_path / "k", f"\n  {PRIVATE_LINE}  \n"))
    assert key.key_id == "21fe31dfa154a261"


@pytest.mark.parametrize("file_mode", [0o640, 0o604, 0o660, 0o644])
def test_a_key_file_others_may_read_is_refused(tmp_path: Path, file_mode: int) -> None:
    keyfile = write_key(tmp_path / "k", PRIVATE_LINE + "\n", file_mode)
    with pytest.raises(PublishError, match="accessible by others") as raised:
        load_signing_key(keyfile)
    assert raised.value.hint == f"chmod 600 {keyfile}"
    assert PRIVATE_LINE not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (RFC_LINE + "\n", "is a public key"),
        ("flashhub-ed25519-private:AAAA\n", "not a flashhub signing key"),
        (f"{PRIVATE_LINE}\n{PRIVATE_LINE}\n", "not a flashhub signing key"),
        ("", "not a flashhub signing key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----\n", "not a flashhub signing key"),
    ],
)
def test_a_file_that_is_not_a_private_key_is_refused(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(PublishError, match=says) as raised:
        load_signing_key(write_key(tmp_path / "k", text))
    assert "KEYFILE.pub" in (raised.value.hint or "")
    assert PRIVATE_LINE not in str(raised.value)


def test_a_missing_key_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(PublishError, match="cannot read the signing key") as raised:
        load_signing_key(tmp_path / "nope.key")
    assert "flashhub keygen" in (raised.value.hint or "")


@pytest.mark.parametrize("command", ["publish", "sign"])
def test_a_directory_given_as_the_key_is_named_as_such(
    command: str, kernel: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cdn"
    publish = ("publish", kernel, "--repo-id", "acme/my-kern", "--version", "1", "--out", out)
    assert flashhub(*publish).returncode == 0
    if command == "publish":
        result = flashhub(*publish, "--version", "2", "--sign", tmp_path)
    else:
        result = flashhub("sign", out, "--key", tmp_path)
    assert result.returncode == 1
    assert f"error: cannot read the signing key {tmp_path}: Is a directory" in result.stderr
    assert "Errno" not in result.stderr


# --- trusted keys ----------------------------------------------------------------------


KEY_A = SigningKey(bytes([1]) * 32)
KEY_B = SigningKey(bytes([2]) * 32)


def test_parse_trusted_keys_scopes_comments_and_separators() -> None:
    text = f"""
        # the release key, for every org
        {KEY_A.public_line},
        acme:{KEY_B.public_line}   # acme's own key
        _lab-2:{KEY_B.public_line},,
    """
    keys = parse_trusted_keys(text, source="keys.txt")
    assert keys == (
        TrustedKey(KEY_A.key_id, KEY_A.public_key, None),
        TrustedKey(KEY_B.key_id, KEY_B.public_key, frozenset({"acme", "_lab-2"})),
    )
    assert keys[0].trusted_for("anyone")
    assert keys[1].trusted_for("acme") and not keys[1].trusted_for("other")
    assert keys[1].public_line == KEY_B.public_line


def test_a_key_scoped_to_an_org_covers_both_spellings_of_its_name() -> None:
    """``acme-corp`` and ``acme_corp`` are both ``flashhub.acme_corp``: one org to a key."""
    for scope in ("acme-corp", "acme_corp"):
        (key,) = parse_trusted_keys(f"{scope}:{KEY_A.public_line}", source="test")
        assert key.orgs == {scope}
        assert key.trusted_for("acme-corp") and key.trusted_for("acme_corp")
        assert not key.trusted_for("acmecorp") and not key.trusted_for("acme")
        config = Config((), "", Path(), trusted_keys=(key,))
        assert config.checks_signatures("acme-corp") and config.checks_signatures("acme_corp")
        assert config.accepts_signer("acme-corp", KEY_A.key_id)
        assert not config.accepts_signer("acme-corp", None)
        assert not config.accepts_signer("acme_corp", None)


def test_an_unscoped_entry_trusts_the_key_for_every_org() -> None:
    for text in (
        f"acme:{KEY_A.public_line} {KEY_A.public_line}",
        f"{KEY_A.public_line} acme:{KEY_A.public_line}",
    ):
        (key,) = parse_trusted_keys(text, source="test")
        assert key.orgs is None


def test_no_entries_no_keys() -> None:
    """The parser gives no keys; the settings built on it refuse that (below)."""
    assert parse_trusted_keys("  # nothing here\n, ,\n", source="test") == ()


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("flashhub-ed25519:not-base64!", "not a public key"),
        ("flashhub-ed25519:" + base64.b64encode(bytes(31)).decode(), "not a public key"),
        ("flashhub-ed25519:" + base64.b64encode(bytes(33)).decode(), "not a public key"),
        ("flashhub-ed25519:", "not a public key"),
        ("ssh-ed25519", "must be flashhub-ed25519"),
        ("9acme:" + KEY_A.public_line, "neither"),
        ("ac.me:" + KEY_A.public_line, "neither"),
        ("acme:ssh-ed25519:AAAA", "must be flashhub-ed25519"),
        ("acme:other:" + KEY_A.public_line, "must be flashhub-ed25519"),
    ],
)
def test_a_bad_entry_names_the_source_and_the_entry(entry: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        parse_trusted_keys(f"{KEY_A.public_line}\n{entry}", source="FLASHHUB_TRUSTED_KEYS")
    message = str(raised.value)
    assert message.startswith("FLASHHUB_TRUSTED_KEYS: entry ")
    assert repr(entry) in message
    assert raised.value.hint == "fix FLASHHUB_TRUSTED_KEYS"


def test_flashhub_given_a_malformed_trusted_key_says_which_setting_to_fix() -> None:
    result = flashhub_child(
        "get", "acme/relu", "--version", "1", env={"FLASHHUB_TRUSTED_KEYS": "ssh-rsa"}
    )
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [
        "error: FLASHHUB_TRUSTED_KEYS: entry 'ssh-rsa' must be flashhub-ed25519:<base64> or "
        "<org>:flashhub-ed25519:<base64>",
        "  hint: fix FLASHHUB_TRUSTED_KEYS",
    ]


def test_a_private_key_among_trusted_keys_is_refused_without_echoing_it() -> None:
    for entry in (PRIVATE_LINE, f"acme:{PRIVATE_LINE}"):
        with pytest.raises(ValueError, match="holds a private key") as raised:
            parse_trusted_keys(f"{KEY_A.public_line} {entry}", source="keys.txt")
        assert PRIVATE_LINE.split(":")[1] not in str(raised.value)


@pytest.mark.parametrize("scope", ["", "sdq:"])
def test_a_private_key_alone_as_the_trusted_keys_value_is_refused_without_echoing_it(
    scope: str,
) -> None:
    """The private line pasted into FLASHHUB_TRUSTED_KEYS: a seed with a '/' in its base64
    (half of them) was taken for a path, and shown whole in the error."""
    private = "flashhub-ed25519-private:" + base64.b64encode(b"\xff" * 32).decode()
    assert "/" in private.split(":")[1]
    with pytest.raises(ValueError, match="holds a private key") as raised:
        load_trusted_keys(f"{scope}{private}")
    assert private.split(":")[1] not in str(raised.value)


def test_a_trusted_keys_file_saved_with_a_bom_and_crlf_is_read(tmp_path: Path) -> None:
    """As Windows Notepad saves a file: a byte order mark first, CRLF line ends."""
    listed = tmp_path / "keys.pub"
    listed.write_bytes(f"\ufeff{KEY_A.public_line}\r\n".encode())
    keys = load_trusted_keys(str(listed))
    assert [k.key_id for k in keys] == [KEY_A.key_id]


def test_load_trusted_keys_reads_a_file_or_the_value(tmp_path: Path) -> None:
    listed = tmp_path / "trusted keys.txt"
    listed.write_text(f"# ours\n{KEY_A.public_line}\nacme:{KEY_B.public_line}\n")
    from_file = load_trusted_keys(str(listed))
    assert [k.key_id for k in from_file] == [KEY_A.key_id, KEY_B.key_id]
    assert load_trusted_keys(f"{KEY_A.public_line},acme:{KEY_B.public_line}") == from_file

    listed.write_text("acme:flashhub-ed25519:AAAA\n")
    with pytest.raises(ValueError, match=re.escape(f"FLASHHUB_TRUSTED_KEYS file {listed}")):
        load_trusted_keys(str(listed))
    with pytest.raises(ValueError, match="neither an existing file nor a list"):
        load_trusted_keys(str(tmp_path / "missing.txt"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (f'["{KEY_A.public_line}", "acme:{KEY_B.public_line}"]', [KEY_A.key_id, KEY_B.key_id]),
        (f'"{KEY_A.public_line} acme:{KEY_B.public_line}"', [KEY_A.key_id, KEY_B.key_id]),
    ],
)
def test_pyproject_trusted_keys_are_a_list_or_one_string(
    tmp_path: Path, value: str, expected: list[str]
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"[project]\nname = 'app'\n[tool.flashhub]\ntrusted-keys = {value}\n")
    assert [k.key_id for k in read_trusted_keys(pyproject)] == expected


def test_pyproject_trusted_keys_spelled_with_an_escape_are_read(tmp_path: Path) -> None:
    # A quoted key spells the name with \\u (or \\U, \\x): the cheap check before the
    # TOML parser must not take such a file for one that lists no keys.
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.flashhub]\n"trusted\\u002dkeys" = ["{KEY_A.public_line}"]\n'
    )
    assert [k.key_id for k in trusted_keys(tmp_path)] == [KEY_A.key_id]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_pyproject_in_utf_16_listing_trusted_keys_is_refused_not_skipped(
    tmp_path: Path, encoding: str
) -> None:
    # No byte spells trusted-keys there; skipping the file would check no signature.
    text = f'[tool.flashhub]\ntrusted-keys = ["{KEY_A.public_line}"]\n'
    (tmp_path / "pyproject.toml").write_bytes(text.encode(encoding))
    with pytest.raises(ConfigError, match="cannot read the trusted keys"):
        trusted_keys(tmp_path)


def test_a_pyproject_whose_backslashes_cannot_spell_trusted_keys_is_not_parsed(
    tmp_path: Path,
) -> None:
    # Regexes and Windows paths in other tools' settings: on Python 3.10 without tomli,
    # parsing such a file would fail every kernel load run in the project's directory.
    (tmp_path / "pyproject.toml").write_text(
        '[tool.ruff.lint]\nallowed = "^\\\\d+$"\n[tool.app]\npath = "C:\\\\Windows\\\\"\n'
    )
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from flashhub_kernels._config import trusted_keys\n"
        "print(trusted_keys(Path('.')), 'tomllib' in sys.modules)\n"
    )
    said = run_code(code, env=dict(os.environ), cwd=tmp_path)
    assert said.stdout.split() == ["()", "False"], said.stderr


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("42", "must be a list of strings"),
        ('["flashhub-ed25519:AAAA"]', "is not a public key"),
        ("[", "cannot read the trusted keys"),
        # what Python's TOML parser cannot take: a clear error, not ValueError or RecursionError
        ("[" * 100_000 + "]" * 100_000, "the file is nested too deeply"),
        ("5" * 5000, "the file holds an integer with too many digits"),
    ],
)
def test_malformed_pyproject_trusted_keys_name_the_file(
    tmp_path: Path, value: str, message: str
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"[tool.flashhub]\ntrusted-keys = {value}\n")
    with pytest.raises(ConfigError, match=message) as raised:
        read_trusted_keys(pyproject)
    assert str(pyproject) in str(raised.value)
    assert isinstance(raised.value, ValueError)  # what a malformed setting raised before


def _import_error_of_a_kernel_import(cwd: Path, **env: str) -> str:
    """``<type> <message>`` of the ImportError that ``import flashhub...`` raises in a
    fresh process run in ``cwd`` with ``env``."""
    code = (
        "try:\n"
        "    import flashhub.acme.tensor_tricks.v1\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    result = run_code(code, env={**os.environ, **env}, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_trusted_keys_nested_too_deep_fail_an_import_with_an_import_error(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.flashhub]\ntrusted-keys = " + "[" * 100_000 + "]" * 100_000)
    said = _import_error_of_a_kernel_import(tmp_path)
    assert said.startswith("ConfigError cannot read the trusted keys in pyproject.toml")
    assert "nested too deeply" in said


@pytest.mark.parametrize("value", ["garbage", "acme:flashhub-ed25519:zz", "/no/such/keys", ""])
def test_a_malformed_trusted_keys_variable_fails_an_import_with_an_import_error(
    tmp_path: Path, value: str
) -> None:
    said = _import_error_of_a_kernel_import(tmp_path, FLASHHUB_TRUSTED_KEYS=value)
    assert said.startswith("ConfigError FLASHHUB_TRUSTED_KEYS"), said
    assert repr(value) in said


# --- settings that name no key --------------------------------------------------------


def _keys_file(tmp_path: Path, text: str, file_mode: int = 0o644) -> Path:
    listed = tmp_path / "trusted-keys.txt"
    listed.write_text(text)
    listed.chmod(file_mode)
    return listed


@pytest.mark.parametrize(
    "text", ["", "\n\n", "# the release key goes here\n"], ids=["empty", "blank", "comments"]
)
def test_a_trusted_keys_file_that_lists_no_key_is_a_config_error(tmp_path: Path, text: str) -> None:
    listed = _keys_file(tmp_path, text)
    with pytest.raises(ConfigError) as raised:
        load_trusted_keys(str(listed))
    message = str(raised.value)
    assert message.startswith(f"FLASHHUB_TRUSTED_KEYS names the file {listed}, which lists no key")
    assert "unset FLASHHUB_TRUSTED_KEYS" in message, "the hint says how to trust no key"
    assert isinstance(raised.value, ImportError), "raised by an import, it is an ImportError"
    assert isinstance(raised.value, ValueError), "as every malformed setting is"


@pytest.mark.parametrize("value", [",", " , ,", "# no key yet", "", "  "])
def test_a_trusted_keys_value_that_lists_no_key_is_a_config_error(value: str) -> None:
    """Empty too, unlike other settings: ``FLASHHUB_TRUSTED_KEYS=$KEYS`` with ``KEYS``
    unset must not switch verification off."""
    with pytest.raises(ConfigError, match=f"FLASHHUB_TRUSTED_KEYS={value!r} lists no key"):
        load_trusted_keys(value)


@pytest.mark.parametrize("file_mode", [0o664, 0o646, 0o666, 0o622])
def test_a_trusted_keys_file_others_may_write_is_refused(tmp_path: Path, file_mode: int) -> None:
    listed = _keys_file(tmp_path, f"{KEY_A.public_line}\n", file_mode)
    with pytest.raises(ConfigError, match="writable by") as raised:
        load_trusted_keys(str(listed))
    assert f"{listed}" in str(raised.value) and f"mode {file_mode:04o}" in str(raised.value)
    assert raised.value.hint == f"chmod go-w {listed}"

    listed.chmod(0o644)  # readable by all is fine: a public key is no secret
    assert [k.key_id for k in load_trusted_keys(str(listed))] == [KEY_A.key_id]


def test_a_trusted_keys_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    needs_root()
    listed = _keys_file(tmp_path, f"{KEY_A.public_line}\n")
    os.chown(listed, NOBODY, -1)
    with pytest.raises(ConfigError, match="is owned by another user"):
        load_trusted_keys(str(listed))


@pytest.mark.parametrize("value", ["[]", '""', '","', '["# later"]'])
def test_pyproject_trusted_keys_that_list_no_key_are_a_config_error(
    tmp_path: Path, value: str
) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f"[tool.flashhub]\ntrusted-keys = {value}\n")
    with pytest.raises(ConfigError, match="lists no key") as raised:
        read_trusted_keys(pyproject)
    assert f"{pyproject} [tool.flashhub] trusted-keys" in str(raised.value)


def test_configure_trusted_keys_that_list_no_key_is_a_config_error() -> None:
    for value in (",", "", ["# later"], [" "]):
        with pytest.raises(ConfigError, match=r"configure\(trusted_keys=\) lists no key"):
            configure(trusted_keys=value)
    assert configure(trusted_keys=[]).trusted_keys == (), "[] says: trust no key"


# --- no cryptography at import ---------------------------------------------------------


def test_importing_flashhub_kernels_imports_no_cryptography() -> None:
    code = (
        "import flashhub_kernels, sys; "
        "assert not any(m.startswith('cryptography') for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_parsing_keys_and_signatures_imports_no_cryptography() -> None:
    code = f"""
import sys
from flashhub_kernels import _publish
from flashhub_kernels.cli._command_line import build_parser
from flashhub_kernels._signing.signature_files import parse_signatures
from flashhub_kernels._signing.statements import statement
from flashhub_kernels._signing.trusted_keys import parse_trusted_keys
parse_trusted_keys({KEY_A.public_line!r}, source="test")
parse_signatures(b'{{"format": 1, "signatures": []}}', source="test")
statement("versions", "acme/k", None, None, b"[1]")
build_parser()
print(json.dumps(sorted(m for m in sys.modules if m.startswith("cryptography"))))
"""
    result = subprocess.run(
        [sys.executable, "-c", "import json\n" + code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(result.stdout) == []
