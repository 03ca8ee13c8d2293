"""A Hugging Face Hub on 127.0.0.1 for tests: the endpoints ``huggingface_hub`` calls to
resolve a revision, list a repo's tree and download its files, a request log, and
tampering with a file's bytes, refusing to serve one, sending its download elsewhere, or
answering an API call in the Hub's place.

Endpoints (``<type>`` is ``kernels`` or ``models``, ``<prefix>`` is ``kernels/`` or
nothing, as the repo's type is ``kernel`` or ``model``)::

    GET       /api/<type>/<org>/<name>/revision/<rev>          {"id", "sha", ...}
    GET       /api/<type>/<org>/<name>/tree/<rev>[/<path>]     [{"type", "path", "oid", "size"}]
    HEAD, GET /<prefix><org>/<name>/resolve/<rev>/<path>       the file, with X-Repo-Commit,
                                                               ETag and Content-Length

A revision is a branch, a tag or a commit sha. Errors carry the ``X-Error-Code`` the Hub
sends (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``), from which
``huggingface_hub`` raises its own exceptions. A repo answers only under its own type's
URLs, as on the Hub: asking for a model repo as a kernel is a ``RepoNotFound``. With a
``token`` every request must carry ``Authorization: Bearer <token>`` (else ``401``), as
for a private repo.

:func:`builder_variant` lays out one variant as a kernel builder writes it:
``build/<variant>/`` with its files and a ``metadata.json`` holding their digests.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from flashhub_kernels._variants.grammar import as_variant

_API_TYPES = {"kernels": "kernel", "models": "model"}


@dataclass(frozen=True)
class HubRequest:
    method: str
    path: str  # unquoted, without the query
    query: dict[str, list[str]]
    headers: dict[str, str]  # names in lower case


@dataclass
class HubRepo:
    repo_type: str  # "kernel" or "model"
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> path -> bytes
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> sha


@functools.cache
def git_blob_id(data: bytes) -> str:
    """The git object id of a file: what the Hub reports as a small file's ``oid``/ETag.

    Computed once per file, when it is pushed, as the Hub stores it: the tree listings and
    every download's ETag ask again, and the benchmark serves a file of 128 MiB.
    """
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubServer:
    """Serve the repos :meth:`push` adds; ``requests`` logs every request."""

    token: str | None = None
    repos: dict[str, HubRepo] = field(default_factory=dict)
    requests: list[HubRequest] = field(default_factory=list)
    tampered: dict[str, bytes] = field(default_factory=dict)  # path in repo -> bytes served
    refused: dict[str, int] = field(default_factory=dict)  # path in repo -> status served
    redirects: dict[str, str] = field(default_factory=dict)  # path in repo -> Location
    impostors: dict[str, bytes] = field(default_factory=dict)  # "revision"/"tree" -> body
    _httpd: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> HubServer:
        hub = self

        class Handler(_HubHandler):
            server_state = hub

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def push(
        self,
        repo_id: str,
        files: Mapping[str, bytes],
        *,
        branch: str,
        repo_type: str = "kernel",
    ) -> str:
        """Commit ``files`` (the whole tree) to ``branch`` of ``repo_id``; returns the sha."""
        listing = json.dumps(sorted((p, git_blob_id(d)) for p, d in files.items()))
        sha = hashlib.sha1(f"{repo_id}\0{listing}".encode()).hexdigest()
        with self._lock:
            repo = self.repos.setdefault(repo_id, HubRepo(repo_type))
            repo.commits[sha] = dict(files)
            repo.refs[branch] = sha
        return sha

    def tag(self, repo_id: str, name: str, sha: str) -> None:
        with self._lock:
            self.repos[repo_id].refs[name] = sha

    def tamper(self, path: str, data: bytes) -> None:
        """Serve ``data`` for ``path`` (in every repo and commit) from now on; the tree
        listing and the build's metadata.json stay as they were."""
        with self._lock:
            self.tampered[path] = data

    def refuse(self, path: str, status: int) -> None:
        """Answer ``status`` (no error code) for ``path`` (in every repo and commit) from
        now on, as a rate limit (429) or a proxy that refuses it (403) does."""
        with self._lock:
            self.refused[path] = status

    def redirect(self, path: str, location: str) -> None:
        """Answer a GET of ``path`` (in every repo and commit) with a ``302`` to ``location``
        from now on, HEAD as before: the Hub sends a large file's download to its CDN so,
        with a signed URL."""
        with self._lock:
            self.redirects[path] = location

    def impersonate(self, what: str, body: bytes) -> None:
        """Answer every ``what`` API call (``"revision"`` or ``"tree"``) with ``body`` and
        200 from now on, as a captive portal or a misconfigured proxy does."""
        with self._lock:
            self.impostors[what] = body

    def log(self, request: HubRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def clear_log(self) -> None:
        with self._lock:
            self.requests.clear()


class _HubHandler(BaseHTTPRequestHandler):
    server_state: HubServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        hub = self.server_state
        split = urlsplit(self.path)
        path = unquote(split.path)
        hub.log(
            HubRequest(
                self.command,
                path,
                parse_qs(split.query),
                {k.lower(): v for k, v in self.headers.items()},
            )
        )
        if hub.token is not None and self.headers.get("Authorization") != f"Bearer {hub.token}":
            self._error(401, "RepoNotFound", send_body)
            return
        parts = split.path.strip("/").split("/")  # still quoted: a tag may hold an encoded '/'
        if parts[0] == "api" and len(parts) >= 6 and parts[1] in _API_TYPES:
            self._api(_API_TYPES[parts[1]], parts[2:], split.query, send_body)
            return
        repo_type = "kernel" if parts[0] == "kernels" else "model"
        rest = parts[1:] if repo_type == "kernel" else parts
        if len(rest) >= 5 and rest[2] == "resolve":
            self._resolve(repo_type, rest, send_body)
            return
        self._error(404, None, send_body)

    def _found(self, repo_type: str, repo_id: str, revision: str) -> tuple[str, dict[str, bytes]]:
        """The sha and files of ``revision`` of the repo; raises :class:`_NotFound`."""
        hub = self.server_state
        with hub._lock:
            repo = hub.repos.get(repo_id)
            if repo is None or repo.repo_type != repo_type:
                raise _NotFound("RepoNotFound")
            sha = repo.refs.get(revision, revision)
            if sha not in repo.commits:
                raise _NotFound("RevisionNotFound")
            return sha, repo.commits[sha]

    def _api(self, repo_type: str, parts: list[str], query: str, send_body: bool) -> None:
        repo_id, what, revision = f"{parts[0]}/{parts[1]}", parts[2], unquote(parts[3])
        try:
            sha, files = self._found(repo_type, repo_id, revision)
        except _NotFound as missing:
            self._error(404, missing.code, send_body)
            return
        if (impostor := self.server_state.impostors.get(what)) is not None:
            self._body(impostor, "text/html", send_body=send_body)
        elif what == "revision":
            siblings = [{"rfilename": p} for p in sorted(files)]
            self._json({"id": repo_id, "sha": sha, "private": False, "siblings": siblings})
        elif what == "tree":
            under = unquote("/".join(parts[4:]))
            recursive = parse_qs(query).get("recursive", ["false"])[0].lower() == "true"
            entries = _tree(files, under, recursive=recursive)
            if entries is None:
                self._error(404, "EntryNotFound", send_body)
            else:
                self._json(entries, send_body=send_body)
        else:
            self._error(404, None, send_body)

    def _resolve(self, repo_type: str, parts: list[str], send_body: bool) -> None:
        repo_id, revision = f"{parts[0]}/{parts[1]}", unquote(parts[3])
        filename = unquote("/".join(parts[4:]))
        try:
            sha, files = self._found(repo_type, repo_id, revision)
        except _NotFound as missing:
            self._error(404, missing.code, send_body)
            return
        if filename not in files:
            self._error(404, "EntryNotFound", send_body, {"X-Repo-Commit": sha})
            return
        if (status := self.server_state.refused.get(filename)) is not None:
            self._error(status, None, send_body)
            return
        if send_body and (location := self.server_state.redirects.get(filename)) is not None:
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        listed = files[filename]
        body = self.server_state.tampered.get(filename, listed)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{git_blob_id(listed)}"')
        self.send_header("X-Repo-Commit", sha)
        self.end_headers()
        if send_body:
            try:
                self.wfile.write(body)
            except ConnectionError:  # the client hung up mid-answer, having read enough
                self.close_connection = True

    def _json(self, document: Any, *, send_body: bool = True) -> None:
        self._body(json.dumps(document).encode(), "application/json", send_body=send_body)

    def _body(self, body: bytes, content_type: str, *, send_body: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def _error(
        self, status: int, code: str | None, send_body: bool, headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps({"error": code or "not found"}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)


class _NotFound(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _tree(
    files: Mapping[str, bytes], under: str, *, recursive: bool
) -> list[dict[str, Any]] | None:
    """The tree entries below the folder ``under`` (``""``: the root), as the Hub lists
    them; ``None`` when there is no such folder."""
    prefix = f"{under}/" if under else ""
    below = {p[len(prefix) :]: d for p, d in files.items() if p.startswith(prefix)}
    if not below:
        return None
    folders: set[str] = set()
    entries: list[dict[str, Any]] = []
    for rel, data in sorted(below.items()):
        *dirs, _name = rel.split("/")
        if dirs and not recursive:
            folders.add(dirs[0])
            continue
        folders.update("/".join(dirs[: i + 1]) for i in range(len(dirs)))
        entries.append(
            {"type": "file", "path": prefix + rel, "oid": git_blob_id(data), "size": len(data)}
        )
    oid = hashlib.sha1(under.encode()).hexdigest()
    entries += [{"type": "directory", "path": prefix + f, "oid": oid} for f in sorted(folders)]
    return entries


def b64digest(data: bytes, algorithm: str = "sha256") -> str:
    return base64.b64encode(hashlib.new(algorithm, data).digest()).decode()


def builder_variant(
    variant: str,
    files: Mapping[str, bytes],
    *,
    name: str,
    algorithm: str = "sha256",
    python_depends: tuple[str, ...] = (),
) -> dict[str, bytes]:
    """``build/<variant>/...``: ``files`` and the ``metadata.json`` a kernel builder writes
    beside them (its keys, and the digest of every file in ``algorithm``)."""
    digests = {path: b64digest(data, algorithm) for path, data in sorted(files.items())}
    metadata = {
        "name": name,
        "id": f"_{name.replace('-', '_')}_{hashlib.sha1(variant.encode()).hexdigest()[:7]}",
        "version": 1,
        "license": "Apache-2.0",
        "python-depends": list(python_depends),
        "backend": {"type": as_variant(variant).backend or "universal"},
        "digest": {"algorithm": algorithm, "files": digests},
        "provenance": {
            "kernel-builder": {
                "version": "0.17.0",
                "sha": "d0610aa58db33b142c86b59598a2a1c730f52996",
                "dirty": False,
            },
            "kernel": {"sha": "d45addadb0c380f3d7cc2813310b3bcd75f8aa9a", "dirty": False},
        },
    }
    tree = {f"build/{variant}/{path}": data for path, data in files.items()}
    tree[f"build/{variant}/metadata.json"] = json.dumps(metadata, indent=2).encode()
    return tree
