"""The tests' preloaded children (``support.preloaded``) run code as ``python -c`` does:
each case runs in a forked child and in a new interpreter, and both must agree."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from support.preloaded import PreloadedChild, process_state, run_code, start_code

CASES = {
    "main": """
        import sys, os
        print(__name__, sys.argv, sys.path[0] == "", os.getcwd())
        print("flashhub_kernels" in sys.modules, os.environ.get("FLASHHUB_PROBE"))
    """,
    "exit status": "import sys; print('out'); sys.exit(3)",
    "exit message": "raise SystemExit('bye')",
    "uncaught": "def boom():\n    raise ValueError('no')\nboom()",
    "shutdown": """
        import atexit, threading, time
        atexit.register(lambda: print("atexit ran", flush=True))
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread joined"))).start()
    """,
}


@pytest.mark.parametrize("case", CASES)
def test_a_forked_child_runs_code_as_a_new_interpreter_does(case: str, tmp_path: Path) -> None:
    code = textwrap.dedent(CASES[case])
    env = {**os.environ, "FLASHHUB_PROBE": "seen"}
    forked = run_code(code, env=env, cwd=tmp_path)
    fresh = run_code(code, env=env, cwd=tmp_path, fresh=True)
    assert (forked.returncode, forked.stdout) == (fresh.returncode, fresh.stdout)
    assert forked.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]
    assert forked.args[:2] == ["python", "-c"]  # it was forked, not started


# What a child has imported of torch and of the libraries a cold load imports.
LIBRARIES = """
import sys
print(sorted({"torch", "requests", "urllib3", "filelock"} & set(sys.modules)))
"""


@pytest.mark.parametrize(
    ("torch_only", "imported"),
    [(False, ["filelock", "requests", "torch", "urllib3"]), (True, ["torch"])],
)
def test_a_torch_only_child_has_imported_torch_alone(torch_only: bool, imported: list[str]) -> None:
    forked = run_code(LIBRARIES, env=dict(os.environ), torch_only=torch_only)
    assert forked.args[:2] == ["python", "-c"]  # it was forked, not started
    assert forked.stdout == f"{imported}\n"


def test_a_child_past_its_timeout_is_killed_with_what_it_started(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild"
    code = textwrap.dedent(
        f"""
        import pathlib, subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        pathlib.Path({str(marker)!r}).write_text(str(grandchild.pid))
        time.sleep(60)
        """
    )
    child = start_code(code, env=dict(os.environ))
    assert isinstance(child, PreloadedChild)
    with pytest.raises(subprocess.TimeoutExpired):
        child.communicate(timeout=0.5)
    deadline = time.monotonic() + 60
    while not marker.exists() or not marker.read_text():
        assert time.monotonic() < deadline, "the child never started its own"
        time.sleep(0.05)
    grandchild = int(marker.read_text())
    child.kill()
    assert child.wait(30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while process_state(grandchild) not in ("", "Z"):  # it went with the child's group
        assert time.monotonic() < deadline, "the grandchild outlived the kill"
        time.sleep(0.05)


def test_an_environment_that_start_up_reads_gets_a_new_interpreter() -> None:
    child = start_code("print('ok')", env={**os.environ, "PYTHONPATH": "/nonexistent"})
    assert isinstance(child, subprocess.Popen)
    assert child.communicate(timeout=120)[0] == "ok\n"


def test_a_variable_of_the_tests_own_code_is_given_to_a_forked_child() -> None:
    child = start_code(
        "import os; print(os.environ['TEST_PROBE'])", env={**os.environ, "TEST_PROBE": "seen"}
    )
    assert isinstance(child, PreloadedChild)
    assert child.communicate(timeout=120)[0] == "seen\n"
