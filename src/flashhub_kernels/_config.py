"""Settings: parsed from the environment in this one place, overridable per process.

The environment is read on every :func:`get_config` call (a handful of dict lookups),
so a test or launcher that sets ``FLASHHUB_*`` variables after import is honoured.
Values passed to :func:`~flashhub_kernels.configure` win over the environment for the rest of
the process (:data:`overrides`).
"""

from __future__ import annotations

import os
import re
import urllib.parse
from contextvars import ContextVar
from pathlib import Path

from ._constants import (
    PROJECT_FILE_BYTES,
    PYPROJECT_NAME,
    REQUIRE_SIGNATURES_VAR,
    TRUSTED_KEYS_VAR,
    default_cache_dir,
)
from ._models.names import is_digits
from ._models.record import Record

TYPE_CHECKING = False  # not typing's: a warm load imports this module
if TYPE_CHECKING:
    from ._signing.trusted_keys import TrustedKey
    from .errors import ConfigError

DEFAULT_CDN_URL = "https://flashhub-cdn.aodianyun.com"
DEFAULT_PREFIX = "kernels"
_CDN_URL_SETTING = "FLASHHUB_CDN_URL (or the cdn_url passed to configure())"
CDN_URL_HINT = f"fix {_CDN_URL_SETTING}"
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 60.0
DEFAULT_MAX_FILE_BYTES = 32 << 30

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}
# The object stores a CDN URL may name, read through fsspec (the s3 extra for s3://).
OBJECT_STORE_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss")
_CDN_SCHEMES = ("https://", "http://", "file://", *(f"{s}://" for s in OBJECT_STORE_SCHEMES))


class Config(Record):
    """The effective settings of this process.

    Attributes:
        cdn_urls: Base URLs of the CDN mirrors, tried in order.
        prefix: Path prefix under each base URL (may be empty).
        cache_dir: Root of the local kernel cache.
        offline: Never touch the network (``FLASHHUB_OFFLINE=1``).
        progress_bars: Show tqdm progress bars for large downloads on a TTY.
        connect_timeout: Seconds to wait for a TCP/TLS connection.
        read_timeout: Seconds to wait for the next bytes of a response; also the window
            over which a transfer averaging under 1 KiB/s is cut.
        lock_timeout: Seconds to wait for another process's download of the same entry
            (``None``: as long as it takes).
        max_file_bytes: The most bytes one download may write when ``metadata.json``
            does not state the file's size (``FLASHHUB_MAX_FILE_BYTES``).
        cache_shared: Trust cache directories that the user's group may write
            (``FLASHHUB_CACHE_SHARED=1``): for a cache shared by a group on purpose.
        version_check: When a load downloads, read the repo's ``versions.json`` and warn
            if a newer version is published (off with ``FLASHHUB_NO_VERSION_CHECK=1``).
        trusted_keys: The publishers' public keys whose signatures vouch for kernels
            (see :func:`trusted_keys`).
        require_signatures: Refuse every unsigned kernel, even of an org no trusted key
            is scoped to (``FLASHHUB_REQUIRE_SIGNATURES=1``).
    """

    cdn_urls: tuple[str, ...]
    prefix: str
    cache_dir: Path
    offline: bool = False
    progress_bars: bool = True
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    read_timeout: float = DEFAULT_READ_TIMEOUT
    lock_timeout: float | None = None
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    cache_shared: bool = False
    version_check: bool = True
    trusted_keys: tuple[TrustedKey, ...] = ()
    require_signatures: bool = False

    @property
    def cdn_url(self) -> str:
        """The first of :attr:`cdn_urls`: the single ``cdn_url`` of the 0.1.2 release."""
        return self.cdn_urls[0]

    def checks_signatures(self, org: str) -> bool:
        """Whether the kernels of ``org`` must be signed by a trusted key."""
        return self.require_signatures or any(k.trusted_for(org) for k in self.trusted_keys)

    def accepts_signer(self, org: str, signer: str | None, *, locked: str | None = None) -> bool:
        """Whether a kernel of ``org`` that the key ``signer`` vouched for (``None``: not
        verified) may load under these settings; ``locked`` is the signer a lock file
        records, which must then be the one."""
        if not self.checks_signatures(org):
            return True
        if locked is not None and signer != locked:
            return False
        return any(k.key_id == signer and k.trusted_for(org) for k in self.trusted_keys)

    def __repr__(self) -> str:
        # The CDN URLs may carry credentials: a repr ends up in logs and tracebacks.
        fields = {**vars(self), "cdn_urls": tuple(map(_redact, self.cdn_urls))}
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"


# What configure() set for this process: it wins over the environment.
overrides: dict[str, object] = {}
# While this thread loads the kernels a kernel verified by signature depends on: the key
# that signed it. They must be signed too, by a key trusted for their org or by this one:
# its publisher vouches for what the kernel runs, and the CDN must not choose that code.
vouching_signer: ContextVar[str | None] = ContextVar("flashhub_vouching_signer", default=None)


def config_error(message: str, *, hint: str) -> ConfigError:
    """A :class:`~flashhub_kernels.errors.ConfigError`: the errors are imported only when
    a setting is wrong, not by every load."""
    from .errors import ConfigError

    return ConfigError(message, hint=hint)


def _redact(url: str) -> str:
    from ._utils.urls import redact_url  # only a message or a repr needs it: not a load

    return redact_url(url)


def _malformed(url: str, *, listed: bool) -> ConfigError:
    """The error for ``url``; ``listed``: one of several in a ``,``-separated setting."""
    from ._utils.urls import malformed_url_error

    return malformed_url_error(url, "CDN URL", _CDN_URL_SETTING, hide_port=listed)


def _split(url: str) -> urllib.parse.SplitResult:
    if "[" not in url:
        return urllib.parse.urlsplit(url)
    from ._utils.urls import split_url  # an IPv6 address: checked here on any Python

    return split_url(url)


def parse_cdn_urls(value: str) -> tuple[str, ...]:
    """Split a comma-separated mirror list; drop blanks and trailing slashes.

    Raises:
        ConfigError: a URL is malformed (no scheme, a bad port or host, credentials not
            percent-encoded, a query or fragment); shown with its credentials hidden.
    """
    value = _read_as_utf8(value)
    urls = tuple(_lower_scheme(u.strip().rstrip("/")) for u in value.split(",") if u.strip())
    if not urls:
        raise config_error(
            f"no CDN URL in {value!r}: give one or more base URLs separated by ','",
            hint=CDN_URL_HINT,
        )
    # Every scheme first: a ',' in a password splits a URL in two, and the part after it
    # (``secret@host``) must be the one reported, not the part before. Everything before
    # its last '@' is hidden: a '/', '?' or '#' in the secret would hide it from
    # _redact, which reads a URL that has no scheme as a host and a path.
    for url in urls:
        if not url.startswith(_CDN_SCHEMES):
            shown = f"****@{url.rpartition('@')[2]}" if "@" in url else _redact(url)
            split = "; a ',' separates the URLs: write one in credentials as %2C"
            raise config_error(
                f"CDN URL {shown!r} must start with https://, http://, file://, or "
                "name an object store: s3://bucket/prefix (or gs://, az://, abfs://)",
                hint=CDN_URL_HINT + (split if "," in value else ""),
            )
    for url in urls:
        unfit = _unfit_character(url)
        if unfit:
            raise config_error(
                f"CDN URL {_redact(url)!r} holds {unfit}",
                hint=f"{CDN_URL_HINT}: percent-encode it where it belongs (a blank is %20)",
            )
        try:
            _split(url).port  # noqa: B018  # parses the port, or raises
        except ValueError:
            raise _malformed(url, listed="," in value) from None
        # A query or fragment, even empty; a host urllib3 reads otherwise (as
        # _utils.urls.host_read_two_ways judges it: that module is imported for errors).
        host = url.split("/")[2].rpartition("@")[2]
        if "?" in url or "#" in url or "\\" in host.rpartition("]")[2] or "%" in host:
            raise _malformed(url, listed="," in value)
    return urls


def _lower_scheme(url: str) -> str:
    """``url`` with its scheme in lower case (``HTTPS://cdn`` is ``https://cdn``: a scheme
    is case-insensitive); as it is where it has none."""
    scheme, separator, rest = url.partition("://")
    if separator and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return scheme.lower() + separator + rest
    return url


def _read_as_utf8(value: str) -> str:
    """``value`` with the bytes Python could not read in the locale's encoding (an ASCII
    one: ``LC_ALL=C``), which the environment and the command line hold as lone
    surrogates, read as UTF-8 where they are UTF-8 (``cdn-\xfc``); as it is otherwise."""
    if not any("\udc80" <= char <= "\udcff" for char in value):
        return value
    try:
        return os.fsencode(value).decode("utf-8")
    except UnicodeError:  # not UTF-8 (a Latin-1 byte): _unfit_character says so
        return value


def _unfit_character(url: str) -> str | None:
    """What ``url`` holds that no URL may hold as it is, or ``None``."""
    for char in url:
        if "\udc80" <= char <= "\udcff":  # how Python holds a byte of the environment
            return "a byte that is not UTF-8 text"
        if char.isspace() or not char.isprintable():  # urlsplit drops a tab, urllib3 not
            return "a blank or a control character"
    return None


def normalize_prefix(value: str) -> str:
    """``/kernels/`` -> ``kernels``; an empty prefix means the CDN root."""
    prefix = value.strip().strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise config_error(
            f"CDN prefix {value!r} must be a plain relative path such as 'kernels'",
            hint="fix FLASHHUB_CDN_PREFIX (or the prefix passed to configure())",
        )
    return prefix


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to 1, true, yes or on."""
    return os.environ.get(name, "").strip().lower() in _TRUE


def _env_switch(name: str) -> bool:
    """:func:`env_flag`, for a setting that changes what is fetched or trusted: a value
    that neither turns it on nor (0, false, no, off) off is refused. Taken as off, a typo
    would fetch (``FLASHHUB_OFFLINE=y``) or load unsigned kernels
    (``FLASHHUB_REQUIRE_SIGNATURES=enabled``) without a word."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if value not in _TRUE | _FALSE:
        raise config_error(
            f"{name}={raw!r} must be 1 (or true, yes, on) to turn it on, "
            "or 0 (or false, no, off) to turn it off",
            hint=f"fix {name}, or unset it",
        )
    return value in _TRUE


def _env_seconds(name: str, *, zero_ok: bool = False) -> float | None:
    """The number of seconds ``name`` is set to, or ``None`` when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0  # refused below, as "nan", "inf" and 1e30 are (clocks overflow)
    if not 0 <= value <= 7 * 86400 or (value == 0 and not zero_ok):
        least = "zero or more" if zero_ok else "a positive number of"
        raise config_error(
            f"{name}={raw!r} must be {least} seconds, at most a week", hint=f"fix {name}"
        )
    return value


def _env_bytes(name: str) -> int | None:
    """The number of bytes ``name`` is set to, or ``None`` when it is unset or empty."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not is_digits(raw) or len(raw) > 18 or int(raw) == 0:  # int() refuses 4,301 digits
        raise config_error(
            f"{name}={raw!r} must be a positive whole number of bytes, of at most 18 digits",
            hint=f"fix {name}",
        )
    return int(raw)


def cache_root() -> Path:
    """The cache's root directory: :func:`~flashhub_kernels.configure`'s, else the environment's.

    Raises:
        CacheError: it is relative, and the current directory no longer exists.
    """
    try:  # configure(cache_dir=), and each variable default_cache_dir reads, may be relative
        root = Path(str(overrides.get("cache_dir") or default_cache_dir())).expanduser()
        return Path(os.path.abspath(root))
    except FileNotFoundError:  # from os.getcwd(): the current directory was removed
        from .errors import CacheError

        raise CacheError(
            "cannot use the cache: its directory is a relative path, and the current "
            "directory no longer exists",
            hint="make FLASHHUB_CACHE_DIR (or HOME, configure(cache_dir=)) "
            "an absolute path, or run from a directory that exists",
        ) from None


def get_config(*, project_dir: Path | None = None) -> Config:
    """Return the effective settings: what :func:`~flashhub_kernels.configure` set, then
    the environment.

    ``project_dir`` is where ``pyproject.toml`` may list trusted keys (default: the
    current directory).

    Raises:
        ConfigError: a setting is malformed: a CDN URL or prefix (``configure()``'s or the
            environment's), a timeout or size (``FLASHHUB_CONNECT_TIMEOUT=abc``), a switch
            (``FLASHHUB_OFFLINE=maybe``), or the trusted keys (``FLASHHUB_TRUSTED_KEYS``, or
            ``[tool.flashhub] trusted-keys`` in ``project_dir``'s ``pyproject.toml``).
        CacheError: the cache directory is a relative path, and the current directory no
            longer exists.
    """
    cdn_url = (
        overrides.get("cdn_url")
        or os.environ.get("FLASHHUB_CDN_URL", "").strip()
        or DEFAULT_CDN_URL
    )
    prefix = overrides.get("prefix")
    if prefix is None:
        prefix = os.environ.get("FLASHHUB_CDN_PREFIX", DEFAULT_PREFIX)
    return Config(
        cdn_urls=parse_cdn_urls(str(cdn_url)),
        prefix=normalize_prefix(str(prefix)),
        cache_dir=cache_root(),
        offline=_env_switch("FLASHHUB_OFFLINE"),
        progress_bars=not env_flag("FLASHHUB_DISABLE_PROGRESS_BARS"),  # what shows: never fails
        connect_timeout=_env_seconds("FLASHHUB_CONNECT_TIMEOUT") or DEFAULT_CONNECT_TIMEOUT,
        read_timeout=_env_seconds("FLASHHUB_READ_TIMEOUT") or DEFAULT_READ_TIMEOUT,
        lock_timeout=_env_seconds("FLASHHUB_LOCK_TIMEOUT", zero_ok=True),
        max_file_bytes=_env_bytes("FLASHHUB_MAX_FILE_BYTES") or DEFAULT_MAX_FILE_BYTES,
        cache_shared=_env_switch("FLASHHUB_CACHE_SHARED"),
        version_check=not env_flag("FLASHHUB_NO_VERSION_CHECK"),
        trusted_keys=_vouched_for(trusted_keys(project_dir or Path())),
        require_signatures=_env_switch(REQUIRE_SIGNATURES_VAR) or vouching_signer.get() is not None,
    )


def _vouched_for(keys: tuple[TrustedKey, ...]) -> tuple[TrustedKey, ...]:
    """``keys``, and while a signed kernel's dependencies load, the key that signed it
    trusted for every org (see :data:`vouching_signer`)."""
    signer = vouching_signer.get()
    vouching = tuple(key._replace(orgs=None) for key in keys if key.key_id == signer)
    return keys + vouching


def trusted_keys(project_dir: Path) -> tuple[TrustedKey, ...]:
    """The keys this process trusts, from the first of these sources that gives any:

    1. :func:`~flashhub_kernels.configure` ``(trusted_keys=...)``;
    2. ``FLASHHUB_TRUSTED_KEYS``: keys, or the path of a file of keys;
    3. ``[tool.flashhub] trusted-keys`` in ``project_dir``'s ``pyproject.toml``
       (:func:`get_config` passes the current directory, ``flashhub lock`` the project).

    With none of them, nothing is verified: the load works as for unsigned kernels.
    """
    if "trusted_keys" in overrides:
        return overrides["trusted_keys"]  # type: ignore[return-value]
    value = os.environ.get(TRUSTED_KEYS_VAR)
    if value is not None:  # set but empty is an error, not "unset": see load_trusted_keys
        return _env_trusted_keys(value)
    return _project_trusted_keys(project_dir / PYPROJECT_NAME)


# FLASHHUB_TRUSTED_KEYS -> its keys: every load reads the settings; a file of keys is read once.
_env_keys: dict[str, tuple[TrustedKey, ...]] = {}


def _env_trusted_keys(value: str) -> tuple[TrustedKey, ...]:
    keys = _env_keys.get(value)
    if keys is None:
        from ._signing.trusted_keys import load_trusted_keys

        keys = _env_keys[value] = load_trusted_keys(value, source=TRUSTED_KEYS_VAR)
    return keys


# pyproject.toml -> (its size and mtime, the keys it lists): read again only when it changes.
_project_keys: dict[Path, tuple[tuple[int, int], tuple[TrustedKey, ...]]] = {}


def _project_trusted_keys(path: Path) -> tuple[TrustedKey, ...]:
    try:
        st = path.stat()
    except OSError:
        return ()
    stamp = (st.st_size, st.st_mtime_ns)
    known = _project_keys.get(path.absolute())
    if known is not None and known[0] == stamp:
        return known[1]
    if _may_list_trusted_keys(path):
        from ._signing.trusted_keys import read_trusted_keys

        keys = read_trusted_keys(path)
    else:
        keys = ()
    _project_keys[path.absolute()] = (stamp, keys)
    return keys


def _may_list_trusted_keys(path: Path) -> bool:
    """Whether ``path`` can hold a ``trusted-keys`` key: it spells it, has a ``\\u``, ``\\U``
    or ``\\x`` escape (the only ones a quoted key can spell it with), or a NUL (UTF-16).

    Most projects' ``pyproject.toml`` has none (a regex's ``\\d`` is none): every kernel
    load in their directory skips the TOML parser (Python 3.10 may lack one) and the keys'."""
    from ._utils.filesystem import read_regular  # not a pipe, nor all of /dev/zero

    try:
        data = read_regular(path, PROJECT_FILE_BYTES)
    except OSError:
        return True  # read_trusted_keys says what is wrong
    return b"trusted-keys" in data or any(e in data for e in (b"\\u", b"\\U", b"\\x", b"\0"))
