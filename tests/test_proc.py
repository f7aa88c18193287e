"""harness.measure.proc with real process trees (SYNTHETIC `python -c` programs): the deadline holds whatever the
descendants do, a clean exit stays a clean exit, and nothing is left running."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from harness.measure.proc import run_with_deadline

# A benchmark that prints its result, starts a child in a session of its own that keeps stdout open (or closes it
# and lives on as a daemon), writes the child's pid to a file and exits 0.
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], start_new_session=True, close_fds=False,
                         stdout=None if sys.argv[3] == "hold" else subprocess.DEVNULL)
open(sys.argv[2], "w").write(str(child.pid))
print("Decode: 1.0 ms (123.0 tok/s)", flush=True)
time.sleep(float(sys.argv[4]))
"""
CHILD = "import time; time.sleep(120)"


def _alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, reaped by nobody but init, counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _ended(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


def _run_parent(tmp_path: Path, mode: str, linger: float, timeout_s: float = 1.0):
    pid_file = tmp_path / "child.pid"
    argv = [sys.executable, "-c", PARENT, CHILD, str(pid_file), mode, str(linger)]
    started = time.monotonic()
    finished = run_with_deadline(argv, os.environ, timeout_s)
    return finished, time.monotonic() - started, int(pid_file.read_text())


def test_a_clean_exit_is_ok_although_a_setsid_child_holds_stdout(tmp_path):
    finished, took, child = _run_parent(tmp_path, "hold", 0.0)
    assert finished.returncode == 0 and not finished.timed_out
    assert "123.0 tok/s" in finished.stdout
    assert took < 1.5  # the drain is bounded: not the child's 120 s
    assert _ended(child), "the child that left the session still runs"


def test_a_daemon_that_left_the_session_and_closed_stdout_is_killed(tmp_path):
    finished, _, child = _run_parent(tmp_path, "daemon", 0.5)  # seen by the tree sampler while the parent ran
    assert finished.returncode == 0
    assert _ended(child)


def test_a_process_that_never_exits_ends_at_the_deadline(tmp_path):
    finished, took, child = _run_parent(tmp_path, "hold", 120.0, timeout_s=1.0)
    assert finished.timed_out and finished.returncode is None
    assert "123.0 tok/s" in finished.stdout  # what it printed before the deadline is kept
    assert 0.9 < took < 2.0
    assert _ended(child)


def test_exit_code_and_stderr_are_kept(tmp_path):
    finished = run_with_deadline([sys.executable, "-c", "import sys; sys.exit('bad ' * 3)"], os.environ, 5)
    assert finished.returncode == 1 and finished.stderr.strip() == "bad bad bad"
