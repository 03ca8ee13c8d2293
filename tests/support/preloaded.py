"""``python -c CODE`` in a fresh process that starts with torch, requests and filelock
imported (or torch alone): forked from a server interpreter that imported them once.

Importing torch costs 2-3 s of CPU, and most tests that run a child only need a process
where flashhub starts afresh (its modules, its in-process tables, its locks), as it does
in a user's script after ``import torch`` (and ``import requests``, as in a program that
uses requests itself: 50 ms of CPU saved in each child that downloads). Such a child is
forked from the server instead of started: a new process, with nothing of flashhub
imported, that runs the code as ``python -c`` would (``__main__``, ``sys.argv``,
``sys.path[0]``, the exit status, the interpreter's shutdown up to the teardown of its
modules) in the environment and directory asked for.

A child whose test judges which libraries a load imports (a warm load brings in no HTTP
library, say, or the threads of a cold one import nothing), or hides an installed package
before requests looks for it, is forked from a second server that imported torch alone
(``torch_only``): a user's script after ``import torch``.

A child whose environment differs from the server's in a variable that the interpreter or
torch reads when they start (``PYTHONPATH``, ``LD_PRELOAD``, ``CUDA_VISIBLE_DEVICES``...) is
started as a real interpreter instead, and so is a child whose test judges the
interpreter's start itself, or what ``import flashhub`` brings in before torch.

:func:`run_code` is ``subprocess.run``'s counterpart, :func:`start_code` ``Popen``'s, for
children that run at the same time (their output is read once they exit: a test that
waits for a sign from a running child has it make a file appear, :func:`appears`, or
send its stderr to a file the test reads as it grows, :func:`stderr_into` and
:func:`written`).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from support.builder import RAN_DIR_VAR

# The server: imports torch and the libraries its arguments name, then forks a child per
# request line (JSON) on its stdin and answers on its stdout with the child's pid, and with
# its exit status once the child has exited; several children may run at once. Objects of
# the server are frozen before it forks: the children's collections leave them alone, and
# their pages stay shared. A child shuts down as `python -c` does up to the teardown of
# the modules, which for torch's takes half a second of CPU and shows nothing: threads
# are joined, atexit handlers run and streams flushed. The finalizers torch registered
# as the server imported it (one per operator library, run at exit to deregister it) are
# left out too: they show nothing either, and in a child they cost 30 ms of CPU, copying
# the server's pages they touch.
_SERVER = r"""
import atexit, builtins, gc, json, linecache, os, select, signal, sys, threading, types, weakref
import torch
for library in sys.argv[1:]:  # those that the children may find imported
    __import__(library)

def answer(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()

def child(request):
    os.setpgid(0, 0)  # its own process group, which a timeout kills whole
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c", *request["args"]]
    main = types.ModuleType("__main__")
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        code = compile(request["code"], "<string>", "exec")
        # What `python -c` does on Python 3.13 and later, whose tracebacks show the code's
        # lines from this cache: it holds the server's own code under "<string>" too.
        getattr(linecache, "_register_code", lambda *_: None)(code, request["code"], "<string>")
        exec(code, main.__dict__)
    except SystemExit as exc:
        return exc.code
    except BaseException:
        kind, value, traceback = sys.exc_info()
        shown = traceback.tb_next  # from the code's frame on, as `python -c` shows it
        sys.excepthook(kind, value.with_traceback(shown), shown)
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

def start(request, wakeup):
    pid = os.fork()
    if pid == 0:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for finalizer in list(weakref.finalize._registry):
            finalizer.atexit = False
        for fd in wakeup:
            os.close(fd)
        shut_down(child(request))
    answer(id=request["id"], pid=pid)
    return pid

def main():
    wakeup = os.pipe()  # a child's exit (SIGCHLD) wakes the select below
    os.set_blocking(wakeup[1], False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    running, pending = {}, b""
    answer(ready=True)
    gc.freeze()
    while True:
        readable = select.select([0, wakeup[0]], [], [])[0]
        if wakeup[0] in readable:
            os.read(wakeup[0], 4096)
        while running and (exited := os.waitpid(-1, os.WNOHANG))[0]:
            pid, status = exited
            answer(id=running.pop(pid), status=os.waitstatus_to_exitcode(status))
        if 0 in readable:
            chunk = os.read(0, 65536)
            if not chunk:  # the tests are done
                return
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                request = json.loads(line)
                running[start(request, wakeup)] = request["id"]

main()
"""

# What the server's children may be given that differs from the server's environment:
# variables read when used, after the interpreter and torch have started (``TEST_``: those
# the tests' own child code reads).
_READ_WHEN_USED = (
    "FLASHHUB_",
    "HF_",
    "AWS_",
    "XDG_",
    "PYTEST_",
    "TORCHINDUCTOR_",
    "STAND_IN_",
    "TEST_",
)
_READ_WHEN_USED_NAMES = {
    "LOCAL_KERNELS",
    "KERNELS_CACHE",
    "UNSTABLE_KERNELS_ALL_LATEST",
    "NETRC",
    "HOME",
    "NO_COLOR",
    "TERM",
    "COLUMNS",
    RAN_DIR_VAR,  # where the test kernels record that they ran
}
_NETWORK = ("_proxy", "_ca_bundle", "ssl_cert_file", "ssl_cert_dir")


def _read_when_used(name: str) -> bool:
    return (
        name.startswith(_READ_WHEN_USED)
        or name in _READ_WHEN_USED_NAMES
        or name.lower().endswith(_NETWORK)
    )


# The server's environment: the session's, as it was before any test changed it.
_SESSION_ENV = dict(os.environ)


def _preloadable(env: Mapping[str, str]) -> bool:
    """Whether a child in ``env`` may be forked from the server."""
    names = set(env) | set(_SESSION_ENV)
    return all(_read_when_used(n) for n in names if env.get(n) != _SESSION_ENV.get(n))


class PreloadedChild:
    """A child forked by the server: what the tests use of ``subprocess.Popen``, its
    output read once it has exited (:meth:`communicate`)."""

    def __init__(self, server: _Server, number: int, args: list[str]) -> None:
        self.args = args
        self.returncode: int | None = None
        self._server, self._number = server, number
        self._started, self._exited = threading.Event(), threading.Event()
        self._pid = 0

    @property
    def pid(self) -> int:
        self._started.wait()
        return self._pid

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return self._server.output(self._number)

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.killpg(self.pid, signum)  # the child and what it started

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _answered(self, answer: Mapping[str, int]) -> None:
        if "pid" in answer:
            self._pid = answer["pid"]
            self._started.set()
        else:
            self.returncode = answer["status"]
            self._started.set()  # (when the server died before it answered with a pid)
            self._exited.set()


Child = PreloadedChild | subprocess.Popen[str]


class _Server:
    """One server interpreter with torch and ``libraries`` imported, and the children it
    forked."""

    def __init__(self, libraries: tuple[str, ...]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SERVER, *libraries],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=_SESSION_ENV,
            text=True,
        )
        self.scratch = Path(tempfile.mkdtemp(prefix="preloaded-"))
        self._numbers = itertools.count()
        self._children: dict[int, PreloadedChild] = {}
        self._lock = threading.Lock()
        assert self.process.stdout is not None
        if self.process.stdout.readline() == "":
            raise RuntimeError("the preloaded server did not start")
        threading.Thread(target=self._read_answers, daemon=True).start()

    def start(
        self, code: str, args: list[str], env: Mapping[str, str], cwd: Path | None
    ) -> PreloadedChild:
        number = next(self._numbers)
        child = PreloadedChild(self, number, ["python", "-c", code, *args])
        request = {"id": number, "code": code, "args": args, "env": dict(env)}
        request.update(cwd=str(cwd or Path.cwd()), **self._outputs(number))
        with self._lock:
            self._children[number] = child
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        return child

    def output(self, number: int) -> tuple[str, str]:
        """What child ``number`` wrote to its stdout and stderr; removed once read."""
        paths = self._outputs(number)
        out, err = (Path(paths[name]).read_text() for name in ("stdout", "stderr"))
        for path in paths.values():
            Path(path).unlink()
        return out, err

    def _outputs(self, number: int) -> dict[str, str]:
        return {name: str(self.scratch / f"{number}.{name}") for name in ("stdout", "stderr")}

    def _read_answers(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            answer = json.loads(line)
            with self._lock:
                child = self._children[answer["id"]]
                if "status" in answer:
                    del self._children[answer["id"]]
            child._answered(answer)
        with self._lock:  # the server is gone, and with it what it knew of its children
            gone, self._children = list(self._children.values()), {}
        for child in gone:
            child._answered({"status": -signal.SIGKILL})

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.scratch, ignore_errors=True)


# What the servers import besides torch: most children get requests and filelock, which
# a cold load imports (and a program that uses requests itself has imported).
_PRELOADED = ("filelock", "requests")
_servers: dict[tuple[str, ...], _Server] = {}
_servers_lock = threading.Lock()


def _the_server(libraries: tuple[str, ...]) -> _Server:
    with _servers_lock:
        server = _servers.get(libraries)
        if server is None or server.process.poll() is not None:
            server = _servers[libraries] = _Server(libraries)
            atexit.register(server.close)
        return server


def start_code(
    code: str,
    *args: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    fresh: bool = False,
    torch_only: bool = False,
) -> Child:
    """``python -c code *args`` started in ``env`` and ``cwd``: forked from a preloaded
    server where ``env`` allows it (with ``torch_only``, from one that imported torch
    alone), else (and with ``fresh``) a new interpreter, its output piped."""
    if not fresh and _preloadable(env):
        libraries = () if torch_only else _PRELOADED
        return _the_server(libraries).start(code, list(args), env, cwd)
    argv = [sys.executable, "-c", code, *args]
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=pipe, stderr=pipe, text=True)


def process_state(pid: int) -> str:
    """The state ``/proc`` gives the process ``pid`` (``R``, ``S``, ``Z`` for a zombie,
    which no parent has waited for yet, ...); ``""`` once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return ""


def appears(path: Path, child: Child, timeout: float) -> bool:
    """Whether ``path`` exists within ``timeout`` seconds, or before ``child`` ends (for a
    sign a child gives while it runs: its output is read once it has exited)."""
    deadline = time.monotonic() + timeout
    while not path.exists() and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return path.exists()


def stderr_into(path: Path) -> str:
    """Code that, run first in a child, sends the rest of its stderr to ``path`` as it is
    written: for a test that reads it while the child runs (:func:`written`), where a
    child's output is otherwise read once it has exited."""
    flags = "os.O_WRONLY | os.O_CREAT | os.O_APPEND"
    return f"import os\nos.dup2(os.open({str(path)!r}, {flags}, 0o600), 2)\n"


def written(path: Path, text: str, child: Child, timeout: float) -> str:
    """The first line of ``path`` that holds ``text``, once written, within ``timeout``
    seconds and before ``child`` ends; ``""`` if none."""
    deadline = time.monotonic() + timeout
    while True:
        ended = child.poll() is not None
        lines = path.read_text().splitlines() if path.exists() else []
        found = next((line for line in lines if text in line), "")
        if found or ended or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


# Script text for a child script that forked ``pid``: wait for it, and where it is still
# there after 30 s (waiting forever on a lock copied mid-use), kill it and print "child: hung".
REAP_FORKED_CHILD = """
deadline = time.monotonic() + 30  # only a hung child takes this long
while not os.waitpid(pid, os.WNOHANG)[0]:
    if time.monotonic() > deadline:
        os.kill(pid, 9)
        print("child: hung", flush=True)
        break
    time.sleep(0.05)
"""


def run_code(
    code: str,
    *args: str,
    env: Mapping[str, str],
    cwd: Path | None = None,
    timeout: float = 120,
    fresh: bool = False,
    torch_only: bool = False,
) -> subprocess.CompletedProcess[str]:
    """:func:`start_code`, then wait for it, as ``subprocess.run`` with
    ``capture_output=True, text=True`` does (``TimeoutExpired`` after ``timeout``
    seconds, the child killed)."""
    child = start_code(code, *args, env=env, cwd=cwd, fresh=fresh, torch_only=torch_only)
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    assert child.returncode is not None
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)
