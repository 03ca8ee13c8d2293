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

from support.preloaded import PreloadedChild, run_code, start_code

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


def test_a_child_past_its_timeout_is_killed_with_what_it_started(tmp_path: Path) -> None:
    marker = tmp_path / "grandchild"
    code = textwrap.dedent(
        f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(marker)!r}, "w").close()
        time.sleep(60)
        """
    )
    child = start_code(code, env=dict(os.environ))
    assert isinstance(child, PreloadedChild)
    with pytest.raises(subprocess.TimeoutExpired):
        child.communicate(timeout=0.5)
    while not marker.exists():
        time.sleep(0.05)
    group = child.pid
    child.kill()
    assert child.wait(30) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the grandchild goes with its group
            os.killpg(group, 0)
            time.sleep(0.05)


def test_an_environment_that_start_up_reads_gets_a_new_interpreter() -> None:
    child = start_code("print('ok')", env={**os.environ, "PYTHONPATH": "/nonexistent"})
    assert isinstance(child, subprocess.Popen)
    assert child.communicate(timeout=120)[0] == "ok\n"
