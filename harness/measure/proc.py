"""Running one benchmark process under a deadline that holds whatever its descendants do.

`subprocess.communicate()` reads until every copy of the output pipes is closed, so a benchmark that exits but
leaves a child holding stdout (a daemon it started, a helper that `setsid`'d away) makes the run wait for that
child, and one that never exits hangs the sweep. Here the pipes are read with `select` only until the main child
exits (then a short, bounded drain), never past `timeout_s`; a run whose main child exited by itself keeps its exit
code and output (a lingering descendant does not make it "timed out").

Afterwards every process that belongs to the run is killed: its process group and session (the benchmark runs in
a session of its own), every descendant seen while it ran (the tree is sampled from /proc, so a grandchild that
left the group or session is still known, matched by its start time so a reused pid is never hit), and every
process still holding the run's output pipes, and every process that carries the run's token in its environment
(RUN_TOKEN_ENV, set when the benchmark starts and inherited from the first instant): a daemon that double-forks,
leaves the session and closes its output within one sampling interval is known by nothing else. Without /proc
(macOS) only the process group is killed; the deadline holds there too, because reading stops at it.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_S = 0.05  # how often the loop looks at the main child while its pipes are quiet
TRACK_S = 0.2  # how often the process tree is sampled (a descendant living longer than this is always known)
DRAIN_S = 0.5  # after the main child exits: how long to keep reading what is left in the pipes
WAIT_S = 5.0  # the longest wait for the killed main child to be reaped
PROC = Path("/proc")
RUN_TOKEN_ENV = "MOECAL_RUN_TOKEN"  # unique per run: marks every process the benchmark starts, however detached


_RUNS = itertools.count()


@dataclass
class Finished:
    """What one process run left: `returncode` None when it was killed at the deadline; `seconds` until the main
    child exited (or the deadline)."""

    returncode: int | None
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


@dataclass(frozen=True)
class _Stat:
    ppid: int
    pgid: int
    sid: int
    start: int  # clock ticks since boot: with the pid, identifies one process for its whole life


def _stat(pid: int) -> _Stat | None:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # the command name may hold spaces and parentheses
    try:
        return _Stat(int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


def process_table() -> dict[int, _Stat]:
    """Every process visible in /proc ({} where there is no /proc)."""
    try:
        names = os.listdir(PROC)
    except OSError:
        return {}
    table = {}
    for name in names:
        if name.isdigit():
            stat = _stat(int(name))
            if stat is not None:
                table[int(name)] = stat
    return table


def descendants(roots: set[int], table: Mapping[int, _Stat]) -> set[int]:
    """Every process below `roots` in `table` (children, their children, …)."""
    children: dict[int, list[int]] = {}
    for pid, stat in table.items():
        children.setdefault(stat.ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _token_holders(token: str) -> set[int]:
    """Processes (other than this one) whose environment holds RUN_TOKEN_ENV=token."""
    marker = f"\0{RUN_TOKEN_ENV}={token}\0".encode()
    holders = set()
    for pid in process_table():
        if pid == os.getpid():
            continue
        try:
            environ = (PROC / str(pid) / "environ").read_bytes()
        except OSError:
            continue
        if marker in b"\0" + environ + b"\0":
            holders.add(pid)
    return holders


def _pipe_holders(inodes: set[int]) -> set[int]:
    """Processes (other than this one) with an open descriptor on one of the pipes `inodes`."""
    wanted = {f"pipe:[{inode}]" for inode in inodes}
    holders = set()
    for pid in process_table():
        if pid == os.getpid():
            continue
        try:
            links = os.listdir(PROC / str(pid) / "fd")
        except OSError:
            continue
        for fd in links:
            with contextlib.suppress(OSError):
                if os.readlink(PROC / str(pid) / "fd" / fd) in wanted:
                    holders.add(pid)
                    break
    return holders


class _Tree:
    """The processes of one run seen so far (pid → start time), to kill them all at the end."""

    def __init__(self, root: int, token: str):
        self.root, self.token = root, token
        self.known: dict[int, int] = {}
        self.sampled = 0.0

    def sample(self) -> None:
        self.sampled = time.monotonic()
        table = process_table()
        roots = {self.root, *(pid for pid, start in self.known.items() if pid in table and table[pid].start == start)}
        for pid in descendants(roots, table) | {p for p, s in table.items() if self.root in (s.pgid, s.sid)}:
            self.known.setdefault(pid, table[pid].start)

    def kill(self, pipe_inodes: set[int]) -> None:
        """SIGKILL the process group and every process of the run still alive (pids checked by start time)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.root, signal.SIGKILL)
        self.sample()
        table = process_table()
        victims = {pid for pid, start in self.known.items() if pid in table and table[pid].start == start}
        victims |= _pipe_holders(pipe_inodes) if pipe_inodes and table else set()
        victims |= _token_holders(self.token) if table else set()
        victims.discard(os.getpid())
        for pid in victims:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


class _Pipes:
    """The run's stdout and stderr, read without blocking: what arrived so far, and which are still open."""

    def __init__(self, proc: subprocess.Popen):
        assert proc.stdout is not None and proc.stderr is not None
        self.files = (proc.stdout, proc.stderr)
        self.data = {f.fileno(): bytearray() for f in self.files}
        self.open = list(self.data)
        self.inodes = {os.fstat(fd).st_ino for fd in self.data}

    def read(self, until: float, stop: Callable[[], bool]) -> None:
        """Collect output until `stop()` is true or `until` passes; once every pipe is closed, keep polling
        `stop` (still bounded by `until`)."""
        while not stop():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return
            if not self.open:
                time.sleep(min(POLL_S, remaining))
                continue
            ready, _, _ = select.select(self.open, [], [], min(POLL_S, remaining))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    self.data[fd] += chunk
                else:
                    self.open.remove(fd)

    def text(self) -> tuple[str, str]:
        return tuple(bytes(d).decode(errors="replace") for d in self.data.values())  # type: ignore[return-value]

    def close(self) -> None:
        for handle in self.files:
            handle.close()


def run_with_deadline(
    argv: Sequence[str], env: Mapping[str, str], timeout_s: float, drain_s: float = DRAIN_S
) -> Finished:
    """Run `argv` in a session of its own, stdin closed; stdout and stderr captured (undecodable bytes replaced).

    Returns within about `timeout_s` whatever the process and its descendants do (a clean exit reads what is left
    for at most `drain_s` more, never past the deadline), and leaves none of them running, also when interrupted
    (KeyboardInterrupt, a signal turned into an exception). Raises OSError when the program cannot be started."""
    started = time.monotonic()
    deadline = started + timeout_s
    token = f"{os.getpid()}-{next(_RUNS)}-{time.time_ns()}"
    proc = subprocess.Popen(
        list(argv),
        env={**env, RUN_TOKEN_ENV: token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    pipes = _Pipes(proc)
    tree = _Tree(proc.pid, token)

    def exited() -> bool:
        if time.monotonic() - tree.sampled >= TRACK_S:
            tree.sample()
        return proc.poll() is not None

    try:
        tree.sample()
        pipes.read(deadline, exited)
        returncode, seconds = proc.poll(), time.monotonic() - started
        if returncode is not None:  # what the benchmark printed last may still be in the pipes
            pipes.read(min(time.monotonic() + drain_s, deadline), lambda: not pipes.open)
    finally:
        tree.kill(pipes.inodes)
        pipes.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(WAIT_S)
    stdout, stderr = pipes.text()
    return Finished(returncode, stdout, stderr, seconds)


HELP_TIMEOUT_S = 5.0  # a benchmark answers `--help` at once (clap, argparse); one that does not is not waited for


@dataclass
class HelpAnswer:
    """What `argv --help` did within HELP_TIMEOUT_S: `finished` None when the program could not be started."""

    argv: tuple[str, ...]
    finished: Finished | None
    start_error: str = ""
    timeout_s: float = HELP_TIMEOUT_S

    @property
    def answered(self) -> bool:
        """It exited by itself within the bound (whatever its exit code)."""
        return self.finished is not None and not self.finished.timed_out

    def unusable(self) -> str:
        """Why this command line cannot be used as a benchmark ('' when it answered): the sweep says so in one line
        instead of waiting a run's whole timeout for every command line."""
        if self.finished is None:
            return f"cannot be started: {self.start_error}"
        if self.finished.timed_out:
            return (
                f"did not answer `--help` within {self.timeout_s:g} s (a benchmark prints its usage and exits): "
                "not usable as a benchmark command"
            )
        return ""


def ask_help(argv: Sequence[str], env: Mapping[str, str], timeout_s: float = HELP_TIMEOUT_S) -> HelpAnswer:
    """`argv --help` under a short deadline, its whole process tree ended afterwards (run_with_deadline): costs at
    most about `timeout_s` whatever the program does (sleeps, starts measuring, forks a daemon)."""
    try:
        finished = run_with_deadline([*argv, "--help"], env, timeout_s, drain_s=min(DRAIN_S, timeout_s / 10))
    except OSError as exc:
        return HelpAnswer(tuple(argv), None, exc.strerror or str(exc), timeout_s)
    return HelpAnswer(tuple(argv), finished, "", timeout_s)
