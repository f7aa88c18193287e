"""harness.measure.proc with real process trees (SYNTHETIC `python -c` programs): the deadline holds whatever the
descendants do, a clean exit stays a clean exit, and nothing is left running. Every test runs twice: with the Linux
child subreaper, and without it (`nosubreaper`: the psutil-sampled tree, the path macOS takes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.measure import proc as proc_module
from harness.measure.proc import own_children, run_with_deadline


@pytest.fixture(autouse=True, params=["subreaper", "nosubreaper"])
def reaper_mode(request, monkeypatch):
    if request.param == "nosubreaper":
        monkeypatch.setattr(proc_module, "_PRCTL", None)
    elif proc_module._PRCTL is None:
        pytest.skip("no prctl here (not Linux)")
    return request.param


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


# A benchmark that double-forks a daemon (new session, output closed, environment cleared: it carries no run token)
# and exits as soon as the daemon has written its pid, long before the tree sampler (TRACK_S) looks.
VANISHING = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        fd = os.open(os.devnull, os.O_RDWR)
        for i in (0, 1, 2):
            os.dup2(fd, i)
        os.execve(sys.executable, [sys.executable, "-c",
                  "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)",
                  sys.argv[1]], {})
    os._exit(0)
while not os.path.exists(sys.argv[1]) or not open(sys.argv[1]).read():
    time.sleep(0.001)
print("Decode: 1.0 ms (123.0 tok/s)", flush=True)
"""


def test_a_daemon_that_escapes_at_once_is_ended_by_the_subreaper(tmp_path, reaper_mode):
    if reaper_mode == "nosubreaper":
        pytest.skip("without a subreaper only what the sampled tree saw is ended (documented for macOS)")
    pid_file = tmp_path / "daemon.pid"
    finished = run_with_deadline([sys.executable, "-c", VANISHING, str(pid_file)], os.environ, 5)
    assert finished.returncode == 0 and "123.0 tok/s" in finished.stdout
    assert _ended(int(pid_file.read_text()))


def test_the_harness_keeps_its_own_children_and_leaves_no_zombie(tmp_path):
    mine = subprocess.Popen(["sleep", "30"])
    try:
        before = own_children()
        _run_parent(tmp_path, "daemon", 0.3)
        run_with_deadline([sys.executable, "-c", VANISHING, str(tmp_path / "v.pid")], os.environ, 5)
        assert mine.poll() is None, "a child the harness started itself was killed"
        assert own_children() - before == set(), "a process of the run is still this process's child (a zombie)"
    finally:
        mine.kill()
        mine.wait()


def test_the_subreaper_setting_is_restored(tmp_path, reaper_mode):
    if reaper_mode == "nosubreaper":
        pytest.skip("no prctl")
    import ctypes

    run_with_deadline([sys.executable, "-c", "print(1)"], os.environ, 5)
    value = ctypes.c_int(-1)
    assert proc_module._PRCTL(proc_module.PR_GET_CHILD_SUBREAPER, ctypes.addressof(value), 0, 0, 0) == 0
    assert value.value == 0  # orphans of anything else this process starts go to init again


# A process outside the run (started before it, so neither the run's child nor its token's carrier) that receives
# the benchmark's stdout over a UNIX socket (SCM_RIGHTS) and keeps it open: only the wide search finds it.
KEEPER = """
import socket, sys, time
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(1)
print("ready", flush=True)
connection, _ = server.accept()
_, fds, _, _ = socket.recv_fds(connection, 16, 1)
time.sleep(120)
"""
GIVER = """
import socket, sys
client = socket.socket(socket.AF_UNIX)
client.connect(sys.argv[1])
socket.send_fds(client, [b"x"], [1])
print("Decode: 1.0 ms (123.0 tok/s)", flush=True)
"""


def test_a_process_outside_the_run_holding_its_output_is_found_by_the_wide_search(tmp_path):
    if not Path("/proc").is_dir():
        pytest.skip("the pipe's holders are found through /proc")
    address = str(tmp_path / "keeper.sock")
    keeper = subprocess.Popen([sys.executable, "-c", KEEPER, address], stdout=subprocess.PIPE, text=True)
    try:
        assert keeper.stdout is not None and keeper.stdout.readline().strip() == "ready"
        started = time.monotonic()
        finished = run_with_deadline([sys.executable, "-c", GIVER, address], os.environ, 10)
        assert finished.returncode == 0 and "123.0 tok/s" in finished.stdout
        assert time.monotonic() - started < 5  # the drain did not wait for the keeper
        assert keeper.wait(5) == -9, "the process holding the run's output was not ended"
    finally:
        keeper.kill()
        keeper.wait()
