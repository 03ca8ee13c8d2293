"""The Hugging Face Hub, read through ``huggingface_hub`` (the ``hub`` extra): a kernel
repo's revision resolved to its commit, the files of its ``build/`` tree, and those files
downloaded.

``huggingface_hub`` is imported when a :class:`Hub` is made, never before: a missing
package is a :class:`~flashhub_kernels.errors.MirrorError` naming the extra. The Hub is the one
``HF_ENDPOINT`` names (read when the :class:`Hub` is made), and the token is
``huggingface_hub``'s own choice: ``HF_TOKEN``, else the one ``hf auth login`` saved.
Every failure to talk to the Hub becomes a :class:`~..errors.MirrorError` that names the
endpoint, its credentials hidden.

Kernel repos have their own repo type on the Hub (``kernel``), which older
``huggingface_hub`` releases do not know; they were model repos before. A repo is looked
up as a kernel first, where ``huggingface_hub`` can, then as a model.

:class:`HubOrigin` is the record of where a republished build came from, kept under
``"mirrored-from"`` in each published ``metadata.json``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .._config import get_config
from .._constants import __version__
from .._models.record import Record
from .._network.progress import Progress, progress_bar
from .._utils.threads import DeafThreadPool
from .._utils.urls import redact_text, redact_url
from ..errors import MirrorError

HUB_EXTRA_HINT = "pip install 'flashhub-kernels[hub]'"
MIRRORED_FROM = "mirrored-from"
BUILD_DIR = "build"
_PARALLEL_DOWNLOADS = 8
_TOKEN_HINT = (
    "check ORG/PKG; for a private or gated repo, set HF_TOKEN to a token that may read it, "
    "or log in with `hf auth login`"
)
# The first huggingface_hub release that knows the Hub's kernel repo type.
_KERNEL_TYPE_SINCE = "1.10"
_OLD_HUB = (
    "this huggingface_hub predates the Hub's kernel repo type and finds a kernel only "
    f"where it is still a model repo: pip install -U 'huggingface_hub>={_KERNEL_TYPE_SINCE}'"
)
_NETWORK_HINT = (
    "check the network connection, and HF_ENDPOINT if it is set (unset, it is "
    "https://huggingface.co)"
)
# The HTTP libraries huggingface_hub talks through (requests up to 0.x, httpx in 1.x,
# httpx2 since 2.0), and their errors for a connection that failed or timed out.
_TRANSPORT_ERRORS = (
    ("httpx2", "TransportError"),
    ("httpx", "TransportError"),
    ("requests", "ConnectionError"),
    ("requests", "Timeout"),
)
# What huggingface_hub raises reading an answer that is not the Hub's: a page that is
# not JSON, or JSON of another shape, as a captive portal or a misconfigured proxy serves.
_UNREADABLE_ANSWERS = (ValueError, KeyError, TypeError)


class HubOrigin(Record):
    """Where a republished build came from: the Hub (its endpoint, credentials hidden), the
    repo, the revision asked for, and the commit it resolved to."""

    hub: str
    repo: str
    revision: str
    commit: str

    def to_document(self) -> dict[str, str]:
        return dict(zip(self._fields, self._values(), strict=True))

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> HubOrigin | None:
        """The ``"mirrored-from"`` record of a ``metadata.json``; ``None`` when it has
        none, or none of this shape."""
        record = document.get(MIRRORED_FROM)
        if not isinstance(record, dict):
            return None
        values = [value for name in cls._fields if isinstance(value := record.get(name), str)]
        return cls(*values) if len(values) == len(cls._fields) else None

    def describe(self) -> str:
        return f"{self.hub}/{self.repo} at {self.revision} (commit {self.commit})"


class HubTree(Record):
    """The ``build/`` tree of one commit of a kernel repo: where it came from, the repo
    type it was found as, and the size the listing gives each of its files (by their
    paths under ``build/``)."""

    source: HubOrigin
    repo_type: str
    files: Mapping[str, int]


def _check_hub_installed() -> None:
    try:
        import huggingface_hub  # noqa: F401
    except ImportError as exc:
        raise MirrorError(
            f"mirroring from the Hugging Face Hub needs the 'huggingface_hub' package, "
            f"which cannot be imported ({exc})",
            hint=f"install the hub extra: {HUB_EXTRA_HINT}",
        ) from None


class Hub:
    """One Hugging Face Hub, the one ``HF_ENDPOINT`` names (default: huggingface.co)."""

    def __init__(self) -> None:
        _check_hub_installed()
        from huggingface_hub import HfApi, constants, errors

        self._errors = errors
        self.endpoint = (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        self.shown = redact_url(self.endpoint)
        self._api = HfApi(
            endpoint=self.endpoint, library_name="flashhub-kernels", library_version=__version__
        )
        kernel_type = "kernel" in getattr(constants, "REPO_TYPES_WITH_KERNEL", ())
        self._repo_types = ("kernel", "model") if kernel_type else ("model",)
        self._transport_errors = tuple(
            getattr(sys.modules[module], name)
            for module, name in _TRANSPORT_ERRORS
            if hasattr(sys.modules.get(module), name)
        )

    def build_tree(self, repo_id: str, revision: str) -> HubTree:
        """The commit ``revision`` (a branch, tag or commit) of ``repo_id`` names, and the
        files of its ``build/`` directory."""
        repo_type, commit = self._commit(repo_id, revision)
        source = HubOrigin(self.shown, repo_id, revision, commit)
        from huggingface_hub.hf_api import RepoFile

        not_found = self._errors.EntryNotFoundError
        try:
            with self._talking(f"listing {repo_id} at {revision}", passing=(not_found,)):
                entries = list(
                    self._api.list_repo_tree(
                        repo_id,
                        path_in_repo=BUILD_DIR,
                        recursive=True,
                        revision=commit,
                        repo_type=repo_type,
                    )
                )
        except not_found:
            entries = []
        prefix = f"{BUILD_DIR}/"
        files = {
            entry.path[len(prefix) :]: entry.size
            for entry in entries
            if isinstance(entry, RepoFile) and entry.path.startswith(prefix)
        }
        if not files:
            raise MirrorError(
                f"{repo_id} at {revision} (commit {commit}) on the Hub at {self.shown} has no "
                f"{BUILD_DIR}/ directory: it is not a kernel build",
                hint="check ORG/PKG and the revision; a kernel's version N is its branch v<N>",
            )
        return HubTree(source, repo_type, files)

    def download(self, tree: HubTree, paths: Sequence[str], directory: Path) -> None:
        """Download ``build/<path>`` of ``tree`` for each of ``paths`` into
        ``directory/build/<path>``, several at a time; a file that grows past the size
        the listing gives it is cut off there."""
        source = tree.source

        def fetch(path: str, progress: Progress) -> None:
            try:
                self._api.hf_hub_download(
                    source.repo,
                    f"{BUILD_DIR}/{path}",
                    repo_type=tree.repo_type,
                    revision=source.commit,
                    local_dir=directory,
                    tqdm_class=self._counting_bar(tree, path, progress),
                )
            except self._errors.LocalEntryNotFoundError as exc:  # its first request failed
                cause = exc.__cause__ or exc
                status = _status(cause) if isinstance(cause, self._errors.HfHubHTTPError) else None
                raise MirrorError(
                    f"cannot download {BUILD_DIR}/{path} of {source.repo} from the Hub at "
                    f"{self.shown}: {_first_line(cause)}; nothing was published",
                    hint=_NETWORK_HINT if status is None else _http_hint(status),
                ) from None
            except self._errors.EntryNotFoundError:
                raise MirrorError(
                    f"the Hub at {self.shown} lists {BUILD_DIR}/{path} in {source.repo} at "
                    f"commit {source.commit}, but does not serve it; nothing was published",
                    hint="retry later; if it persists, report it to the Hub",
                ) from None

        with (
            self._talking(f"downloading {source.repo} at {source.revision}"),
            progress_bar(
                f"{source.repo} at {source.revision}",
                enabled=get_config().progress_bars,
                total=sum(tree.files[path] for path in paths),
            ) as progress,
            DeafThreadPool(_PARALLEL_DOWNLOADS, thread_name_prefix="flashhub-hub") as pool,
        ):
            for _ in pool.map(functools.partial(fetch, progress=progress), paths):
                pass

    def _counting_bar(self, tree: HubTree, path: str, progress: Progress) -> type[Any]:
        """huggingface_hub's progress bar, for the download of ``build/<path>``, never
        drawn: it counts the bytes into ``progress``, the one bar of all the files
        (huggingface_hub's bars, a line per file drawn by several threads at once, left
        blank lines on the terminal), and fails the download once more bytes arrive
        than the listing gives the file: huggingface_hub counts each chunk there before
        writing it, and would otherwise write all a Hub sends before finding the size
        wrong."""
        from huggingface_hub.utils.tqdm import tqdm

        size, shown = tree.files[path], self.shown

        class CountingBar(tqdm):
            received: float = 0

            def __init__(self, *args: Any, **kwargs: Any) -> None:
                quiet = {**kwargs, "disable": True}
                super().__init__(*args, **quiet)  # type: ignore[no-untyped-call, unused-ignore]

            def update(self, n: float | None = 1) -> bool | None:
                self.received += n or 0
                if self.received > size:
                    raise MirrorError(
                        f"the Hub at {shown} sends more than the {size} bytes its listing "
                        f"gives {BUILD_DIR}/{path} of {tree.source.repo} at commit "
                        f"{tree.source.commit}; nothing was published",
                        hint="retry later; if it persists, report it to the Hub",
                    )
                progress.advance(int(n or 0))
                return None

            def update_transfer(self, n: float) -> None:
                """Bytes over the network, which Xet storage compresses and shares
                between files: not the file's size, so not counted."""

        return CountingBar

    def _commit(self, repo_id: str, revision: str) -> tuple[str, str]:
        """The repo type under which the Hub has ``repo_id``, and the commit ``revision``
        names there."""
        errors = self._errors
        passing = (errors.RepositoryNotFoundError, errors.RevisionNotFoundError)
        for repo_type in self._repo_types:
            try:
                with self._talking(f"looking up {repo_id}", passing=passing):
                    info = self._api.repo_info(repo_id, revision=revision, repo_type=repo_type)
            except errors.RepositoryNotFoundError:  # or gated, or private
                continue
            except errors.RevisionNotFoundError:
                raise MirrorError(
                    f"{repo_id} on the Hub at {self.shown} has no revision {revision!r}",
                    hint="check the version: a kernel's version N is its branch v<N>; "
                    "pass revision= for a tag or commit",
                    cli_hint="check --version: a kernel's version N is its branch v<N>; "
                    "pass --revision REV for a tag or commit",
                ) from None
            if not isinstance(info.sha, str):
                raise MirrorError(
                    f"the Hub at {self.shown} did not say which commit {revision!r} of "
                    f"{repo_id} is",
                    hint="check that HF_ENDPOINT names a Hugging Face Hub",
                )
            return repo_type, info.sha
        raise MirrorError(
            f"{repo_id} is not on the Hub at {self.shown}, or the token does not let it be "
            f"read (asked for as a {' and as a '.join(self._repo_types)} repo)",
            hint=_TOKEN_HINT if "kernel" in self._repo_types else f"{_TOKEN_HINT}; {_OLD_HUB}",
        )

    @contextmanager
    def _talking(self, doing: str, *, passing: tuple[type[Exception], ...] = ()) -> Iterator[None]:
        """Turn what ``huggingface_hub`` raises while ``doing`` into a :class:`MirrorError`,
        but for the exceptions in ``passing``, which the caller handles."""
        errors = self._errors
        try:
            yield
        except passing:
            raise
        except errors.OfflineModeIsEnabled:
            raise MirrorError(
                f"HF_HUB_OFFLINE is set, and {doing} needs the Hugging Face Hub",
                hint="unset HF_HUB_OFFLINE to mirror from the Hub",
            ) from None
        except errors.HfHubHTTPError as exc:
            status = _status(exc)
            raise MirrorError(
                f"the Hub at {self.shown} answered {status or 'with an error'} while {doing}: "
                f"{_first_line(exc)}",
                hint=_http_hint(status),
            ) from None
        except self._transport_errors as exc:
            raise MirrorError(
                f"cannot reach the Hugging Face Hub at {self.shown} while {doing}: "
                f"{_first_line(exc)}",
                hint=_NETWORK_HINT,
            ) from None
        except OSError as exc:  # not the network's: writing the files where they are staged
            raise MirrorError.cannot_stage(exc) from None
        except _UNREADABLE_ANSWERS as exc:
            raise MirrorError(
                f"the Hub at {self.shown} gave an answer that huggingface_hub cannot read "
                f"while {doing} ({type(exc).__name__}: {_first_line(exc)})",
                hint="check that HF_ENDPOINT names a Hugging Face Hub, and that no proxy "
                "between answers in its place",
            ) from None


def _status(exc: BaseException) -> int | None:
    """The HTTP status of the Hub's answer that ``exc`` reports, if it says."""
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def _http_hint(status: int | None) -> str:
    """What to do when the Hub answered ``status``: a token for a refusal, else wait (a
    rate limit, the Hub failing)."""
    return _TOKEN_HINT if status in (401, 403) else "retry later"


def _first_line(exc: BaseException) -> str:
    """What ``exc`` says, its first line (huggingface_hub's go on with advice), any
    credentials in it hidden."""
    text = str(exc).strip().splitlines()
    return redact_text(text[0]) if text else type(exc).__name__
