"""``python -c CODE`` in a fresh process that starts with torch imported: forked from a
server interpreter that imported torch once.

Importing torch costs 2-3 s of CPU, and most tests that run a child only need a process
where flashhub starts afresh (its modules, its in-process tables, its locks), as it does
in a user's script after ``import torch``. Such a child is forked from the server
instead of started: a new process, with nothing of flashhub imported, that runs the code
as ``python -c`` would (``__main__``, ``sys.argv``, ``sys.path[0]``, exit status, the
interpreter's shutdown) in the environment and directory asked for.

A child whose environment differs from the server's in a variable that the interpreter or
torch reads when they start (``PYTHONPATH``, ``LD_PRELOAD``, ``CUDA_VISIBLE_DEVICES``...) is
started as a real interpreter instead (:func:`preloadable`), as is any child while the
server is busy with another. A test that judges the interpreter's start itself (what
``import torch`` or ``import flashhub`` brings in, say) runs a real one explicitly.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from support.builder import RAN_DIR_VAR

# The server: imports torch, then forks a child per request line (JSON) on its stdin and
# answers on its stdout with the child's pid, then its exit status. Objects of the server
# are frozen before it forks: the children's collections leave them alone, and their
# pages stay shared. A child then shuts down as `python -c` does, up to the teardown of
# the modules, which for torch's takes half a second of CPU and shows nothing: threads
# are joined, atexit handlers run and streams flushed.
_SERVER = r"""
import atexit, builtins, gc, json, os, sys, threading, types
import torch

def answer(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()

def child(request):
    os.setpgid(0, 0)  # its own process group, which a timeout kills whole
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_TRUNC),
    ):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c"]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        exec(compile(request["code"], "<string>", "exec"), main.__dict__)
    except SystemExit as exc:
        return exc.code
    except BaseException:
        kind, value, traceback = sys.exc_info()
        sys.excepthook(kind, value, traceback.tb_next)
        return 1
    return 0

def shut_down(code):
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code or 0)

def main():
    answer(ready=True)
    gc.freeze()
    while line := sys.stdin.readline():
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            shut_down(child(request))
        answer(pid=pid)
        answer(status=os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))

main()
"""

# What the server's children may be given that differs from the server's environment:
# variables read when used, after the interpreter and torch have started.
_READ_WHEN_USED = ("FLASHHUB_", "HF_", "AWS_", "XDG_", "PYTEST_")
_READ_WHEN_USED_NAMES = {
    *("LOCAL_KERNELS", "NETRC", "HOME", "NO_COLOR", "TERM", "COLUMNS"),
    RAN_DIR_VAR,  # where the test kernels record that they ran
}
_NETWORK = ("_proxy", "_ca_bundle", "ssl_cert_file", "ssl_cert_dir")


def _read_when_used(name: str) -> bool:
    return (
        name.startswith(_READ_WHEN_USED)
        or name in _READ_WHEN_USED_NAMES
        or name.lower().endswith(_NETWORK)
    )


class _Server:
    """One server interpreter with torch imported; one child at a time."""

    def __init__(self) -> None:
        self.env = dict(os.environ)
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.env,
            text=True,
        )
        self.busy = threading.Lock()
        self._buffer = ""
        self._answer(time.monotonic() + 300)  # "ready": torch imported

    def preloadable(self, env: Mapping[str, str]) -> bool:
        names = set(env) | set(self.env)
        changed = [name for name in names if env.get(name) != self.env.get(name)]
        return self.process.poll() is None and all(_read_when_used(n) for n in changed)

    def run(
        self, code: str, env: Mapping[str, str], cwd: Path | None, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="preloaded-") as scratch:
            out, err = Path(scratch, "stdout"), Path(scratch, "stderr")
            out.touch()
            err.touch()
            request = {"code": code, "env": dict(env), "cwd": str(cwd or Path.cwd())}
            request.update(stdout=str(out), stderr=str(err))
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            deadline = time.monotonic() + timeout
            pid = self._answer(deadline)["pid"]
            try:
                status = self._answer(deadline)["status"]
            except subprocess.TimeoutExpired:
                os.killpg(pid, signal.SIGKILL)
                self._answer(time.monotonic() + 30)
                raise subprocess.TimeoutExpired(["python", "-c", code], timeout) from None
            return subprocess.CompletedProcess(
                ["python", "-c", code], status, out.read_text(), err.read_text()
            )

    def _answer(self, deadline: float) -> dict[str, int]:
        """The server's next line, waiting until ``deadline`` at most."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        while "\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise subprocess.TimeoutExpired("preloaded server", left)
            chunk = os.read(fd, 65536).decode()
            if not chunk:
                raise RuntimeError("the preloaded server exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split("\n", 1)
        answer: dict[str, int] = json.loads(line)
        return answer

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


_server: _Server | None = None
_server_lock = threading.Lock()


def _the_server() -> _Server:
    global _server
    with _server_lock:
        if _server is None or _server.process.poll() is not None:
            _server = _Server()
            atexit.register(_server.close)
        return _server


def run_code(
    code: str,
    *,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 120,
    fresh: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in ``env`` and ``cwd``, forked from the preloaded server where
    ``env`` allows it, else (and with ``fresh``) in a new interpreter; as
    ``subprocess.run`` with ``capture_output=True, text=True`` would (``TimeoutExpired``
    after ``timeout`` seconds)."""
    server = None if fresh else _the_server()
    if server and server.preloadable(env) and server.busy.acquire(blocking=False):
        try:
            return server.run(code, env, cwd, timeout)
        finally:
            server.busy.release()
    argv = [sys.executable, "-c", code]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
