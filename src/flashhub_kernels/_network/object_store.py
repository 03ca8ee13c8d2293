"""An object store (``s3://bucket/prefix``, or another fsspec URL) as a tree of files.

The reader (:mod:`.fsspec_mirror`) and the publisher (:mod:`.._publish.destination`)
both go through :class:`Store`. fsspec, and s3fs beneath it for ``s3://``, come with the
``s3`` extra and are imported here only when such a URL is used: a load from the cache,
or from an ``http(s)://`` CDN, never imports them.

Credentials are fsspec's (for ``s3://``: botocore's chain, as the AWS CLI reads it: the
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` variables, ``AWS_PROFILE`` and the
shared credentials and config files, then container and instance roles), and so is the
endpoint (``AWS_ENDPOINT_URL`` for an S3-compatible store). Every failure becomes an
:class:`ObjectMissing` or a :class:`StoreError` whose message names the bucket and, when
access was refused, where the credentials came from; never a secret.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from typing import IO, Any

from .._utils.urls import redact_text, redact_url
from ..errors import FlashhubError

S3_EXTRA_HINT = "pip install 'flashhub-kernels[s3]'"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# What one ranged read of a large object asks for, and so the most a read holds in memory.
BLOCK_SIZE = 8 << 20
_AWS_CREDENTIALS_HINT = (
    "give the AWS credentials as the AWS CLI reads them: AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), AWS_PROFILE with ~/.aws/credentials, "
    "or an instance or container role; they need s3:GetObject and s3:ListBucket on the "
    "bucket (s3:PutObject and s3:DeleteObject to publish)"
)

# What S3 means by the codes of a refusal that the key pair alone causes, and what to do.
_KEY_REFUSALS = {
    "SignatureDoesNotMatch": (
        "the secret access key does not match the access key id: S3 SignatureDoesNotMatch",
        "give the secret access key that was issued with this access key id, where the "
        "credentials come from (AWS_SECRET_ACCESS_KEY beside AWS_ACCESS_KEY_ID, or "
        "aws_secret_access_key beside aws_access_key_id in the profile): it is mistyped, "
        "or another key's",
    ),
    "InvalidAccessKeyId": (
        "the store knows no such access key id: S3 InvalidAccessKeyId",
        "the access key id is mistyped, deleted (a rotated key), or issued by another "
        "account or S3-compatible store than the one the endpoint names (AWS_ENDPOINT_URL): "
        "give a current key pair where the credentials come from (AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY, or aws_access_key_id and aws_secret_access_key in the profile)",
    ),
}


class ObjectMissing(Exception):
    """The store holds no object at the path (the bucket exists)."""


class StoreError(Exception):
    """The store could not be used: the message says why, naming the bucket.

    ``denied``: it refused the credentials, or none were found. ``hint``: what to do.
    """

    def __init__(self, message: str, *, hint: str, denied: bool = False) -> None:
        super().__init__(message)
        self.hint = hint
        self.denied = denied


def is_url(location: str) -> bool:
    """Whether ``location`` is a URL (``scheme://...``) rather than a path."""
    return _SCHEME.match(location) is not None


def scheme_of(url: str) -> str:
    return url.partition("://")[0].lower()


class Store:
    """The tree of files at an fsspec URL; paths are relative to it, ``/`` separated."""

    def __init__(self, url: str, *, timeouts: tuple[float, float] | None = None) -> None:
        """Open the store at ``url``; ``timeouts`` are (connect, read) seconds for S3.

        Raises:
            StoreError: fsspec (or the package for the URL's kind) is not installed, or
                the URL is not one fsspec can open.
        """
        self.url = url.rstrip("/")
        self.protocol = scheme_of(url)
        options: dict[str, Any] = {"skip_instance_cache": True, "use_listings_cache": False}
        if self.protocol == "s3" and timeouts is not None:
            options["config_kwargs"] = {
                "connect_timeout": timeouts[0],
                "read_timeout": timeouts[1],
            }
        try:
            import fsspec.core
        except ImportError:
            raise StoreError(
                f"{redact_url(self.url)} is an object store URL, and object store support "
                "(fsspec) is not installed",
                hint=S3_EXTRA_HINT,
            ) from None
        try:
            self._fs, root = fsspec.core.url_to_fs(self.url, **options)
        except ImportError as exc:  # fsspec knows the protocol; its package is missing
            hint = S3_EXTRA_HINT if self.protocol == "s3" else str(exc)
            raise StoreError(
                f"{redact_url(self.url)}: the package for {self.protocol}:// is not installed",
                hint=hint,
            ) from None
        except ValueError as exc:  # an unknown protocol
            raise StoreError(
                f"{redact_url(self.url)} is not a URL fsspec can open: {exc}",
                hint="use a directory, or an object store URL such as s3://bucket/prefix",
            ) from None
        self._root: str = root.rstrip("/")

    @property
    def bucket(self) -> str:
        """The bucket (or container) of the URL: the first segment of its path."""
        return self._root.partition("/")[0]

    def shown(self, rel: str = "") -> str:
        """The URL of ``rel``, as messages show it."""
        return redact_url(f"{self.url}/{rel}" if rel else self.url)

    def _path(self, rel: str) -> str:
        return f"{self._root}/{rel}" if rel else self._root

    # -- reading ----------------------------------------------------------------------

    def read(self, rel: str, limit: int | None = None) -> bytes:
        """The object at ``rel`` whole, or its first ``limit + 1`` bytes."""
        with self._errors(rel, "reading"):
            if limit is None:
                return bytes(self._fs.cat_file(self._path(rel)))
            with self._fs.open(self._path(rel), "rb", block_size=limit + 1) as file:
                return bytes(file.read(limit + 1))

    def size(self, rel: str) -> int:
        with self._errors(rel, "reading"):
            return int(self._fs.size(self._path(rel)))

    @contextlib.contextmanager
    def reader(self, rel: str) -> Iterator[Reader]:
        """The object at ``rel``, open to be read in ranged reads."""
        with self._errors(rel, "reading"):
            file = self._fs.open(self._path(rel), "rb", block_size=BLOCK_SIZE, cache_type="none")
        try:
            yield Reader(self, rel, file)
        finally:
            with contextlib.suppress(Exception):  # a file opened to read has nothing to lose
                file.close()

    def files(self, rel: str) -> dict[str, int]:
        """Every object under ``rel``, relative to it, with its size; ``{}`` if none."""
        base = self._path(rel)
        with self._errors(rel, "listing"):
            try:
                found = self._fs.find(base, detail=True)
            except FileNotFoundError:
                return {}
        return {
            path[len(base) + 1 :]: int(info.get("size") or 0)
            for path, info in found.items()
            if path.startswith(f"{base}/") and info.get("type") != "directory"
        }

    def subdirs(self, rel: str) -> list[str]:
        """The names of the "directories" (common prefixes) directly under ``rel``."""
        base = self._path(rel)
        with self._errors(rel, "listing"):
            try:
                entries = self._fs.ls(base, detail=True)
            except FileNotFoundError:
                return []
        return sorted(
            entry["name"].rstrip("/").rpartition("/")[2]
            for entry in entries
            if entry.get("type") == "directory"
        )

    # -- writing ----------------------------------------------------------------------

    def write(self, rel: str, data: bytes) -> None:
        """Store ``data`` as the object ``rel``, in one request (readers see all or none)."""
        with self._errors(rel, "writing"):
            self._fs.pipe_file(self._path(rel), data)

    def upload(self, rel: str, chunks: Iterable[bytes]) -> None:
        """Store the bytes ``chunks`` yields as the object ``rel``, in parts; if it (or
        the upload) raises, what was stored is removed again (best effort: nothing a
        reader follows names the object yet)."""
        path = self._path(rel)
        try:
            with self._errors(rel, "writing"), self._fs.open(path, "wb") as file:
                for chunk in chunks:
                    file.write(chunk)
        except BaseException:
            with contextlib.suppress(Exception):
                self._fs.rm_file(path)
            raise

    def delete(self, rel: str) -> None:
        with self._errors(rel, "deleting"):
            self._fs.rm_file(self._path(rel))

    # -- errors -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _errors(self, rel: str, doing: str) -> Iterator[None]:
        """Turn what fsspec (and botocore beneath it) raises into our two exceptions."""
        try:
            yield
        except (ObjectMissing, StoreError, FlashhubError):  # ours (a publish's check): as they are
            raise
        except FileNotFoundError as exc:
            if _error_code(exc) != "NoSuchBucket":
                raise ObjectMissing(self.shown(rel)) from None
            raise StoreError(
                f"{doing} {self.shown(rel)}: the bucket {self.bucket!r} does not exist",
                hint=f"check the bucket name in {redact_url(self.url)}; create the bucket "
                "before publishing to it",
            ) from None
        except Exception as exc:
            raise self._failure(exc, rel, doing) from None

    def _failure(self, exc: Exception, rel: str, doing: str) -> StoreError:
        denied = isinstance(exc, PermissionError) or type(exc).__name__ == "NoCredentialsError"
        source, secrets = credential_source(self.protocol)
        reason = redact_text(_reason(exc), secrets)
        where = f"{doing} {self.shown(rel)} (bucket {self.bucket!r})"
        if denied:
            code = self._refusal_code(exc, rel) or ""
            what, hint = _KEY_REFUSALS.get(code, (reason, _credentials_hint(self.protocol)))
            return StoreError(
                f"{where}: access denied ({what}); credentials: {source}", hint=hint, denied=True
            )
        return StoreError(
            f"{where} failed: {reason}",
            hint="check the network, the store's endpoint (AWS_ENDPOINT_URL for an "
            "S3-compatible store) and the URL",
        )

    def _refusal_code(self, exc: Exception, rel: str) -> str | None:
        """The S3 error code of the refusal ``exc``. The answer to a ``HEAD`` request (how
        s3fs opens an object, or learns its size) has no body, so its code is the bare
        status, ``403``; then that of a ``GET`` of the object's first byte, whose answer
        names the refusal (a key no signature check passes refuses every request alike)."""
        code = _error_code(exc)
        if code != "403" or self.protocol != "s3":
            return code
        try:
            self._fs.cat_file(self._path(rel), start=0, end=1)
        except Exception as again:
            return _error_code(again)
        return None


class Reader:
    """An object open to be read, one ranged read per :data:`BLOCK_SIZE` bytes."""

    def __init__(self, store: Store, rel: str, file: IO[bytes]) -> None:
        self._store = store
        self._rel = rel
        self._file = file
        size = getattr(file, "size", None)
        self.size = int(size) if size is not None else None

    def chunks(self, offset: int) -> Iterator[bytes]:
        """The object's bytes from ``offset`` on, a block at a time."""
        with self._store._errors(self._rel, "reading"):
            self._file.seek(offset)
        while True:
            with self._store._errors(self._rel, "reading"):
                chunk = bytes(self._file.read(BLOCK_SIZE))
            if not chunk:
                return
            yield chunk


def _error_code(exc: BaseException) -> str | None:
    """The S3 error code behind an exception s3fs translated (``NoSuchBucket``), if any."""
    response = getattr(exc.__cause__, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:300] + "..."


def _credentials_hint(protocol: str) -> str:
    if protocol == "s3":
        return _AWS_CREDENTIALS_HINT
    return f"check the credentials that fsspec's {protocol}:// filesystem uses"


def credential_source(protocol: str) -> tuple[str, tuple[str, ...]]:
    """Where the credentials for ``protocol`` come from, in words (no secret in them), and
    the secrets that a message must not show.

    For S3 that is botocore's answer, found as s3fs finds them; called only to explain
    a failure.
    """
    secrets = tuple(
        value
        for name in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN")
        if (value := os.environ.get(name))
    )
    if protocol != "s3":
        return f"those of fsspec's {protocol}:// filesystem", secrets
    try:
        import botocore.credentials
        import botocore.session

        session = botocore.session.Session()
        credentials = session.get_credentials()
    except Exception as exc:  # a broken config file, say: that is the answer
        return f"none usable ({type(exc).__name__} while looking for them)", secrets
    if credentials is None:
        return "no credentials found", secrets
    if type(credentials) is botocore.credentials.Credentials:  # static: no refresh to trigger
        secrets += tuple(s for s in (credentials.secret_key, credentials.token) if s)
    return _describe_method(credentials.method, session, credentials.access_key), secrets


def _describe_method(method: str, session: Any, access_key: str | None) -> str:
    profile = session.get_config_variable("profile") or "default"
    sources = {
        "env": "env AWS_ACCESS_KEY_ID",
        "shared-credentials-file": (
            f"shared credentials file {session.get_config_variable('credentials_file')} "
            f"(profile {profile})"
        ),
        "config-file": f"config file {session.get_config_variable('config_file')} "
        f"(profile {profile})",
        "iam-role": "the instance's IAM role (instance metadata)",
        "container-role": "the container's role",
        "assume-role": f"an assumed role (profile {profile})",
        "assume-role-with-web-identity": "a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE)",
        "sso": f"AWS SSO (profile {profile})",
        "custom-process": f"credential_process (profile {profile})",
    }
    described = sources.get(method, method)
    if access_key and len(access_key) > 8:  # as `aws configure list` shows it
        described += f", access key ****{access_key[-4:]}"
    return described
