"""Running one benchmark process under a deadline that holds whatever its descendants do, and ending every process
it started — at a cost of microseconds per run, whatever else runs on the host.

`subprocess.communicate()` reads until every copy of the output pipes is closed, so a benchmark that exits but
leaves a child holding stdout (a daemon it started, a helper that `setsid`'d away) makes the run wait for that
child, and one that never exits hangs the sweep. Here the pipes are read with `select` only until the main child
exits (then a short, bounded drain), never past `timeout_s`; a run whose main child exited by itself keeps its exit
code and output (a lingering descendant does not make it "timed out").

Afterwards every process that belongs to the run is killed, found without scanning the host's process table:
- the benchmark runs in a session and process group of its own: one `killpg` ends everything that stayed in it;
- on Linux the harness is a child subreaper while the benchmark runs (`prctl(PR_SET_CHILD_SUBREAPER)`), so a
  descendant whose parent exits — a double-forked daemon, a helper that left the session — is re-parented to the
  harness instead of init. The harness's own new children are then exactly the run's escaped processes: they are
  killed and reaped, and again for their children (re-parented in turn), until none is left. Listing one's own
  children reads /proc/self/task/*/children (O(own children)); psutil's `children()` would read every process's
  stat, whose cost grows with the host's processes (it is the fallback where that file does not exist);
- without a subreaper (macOS) the run's tree is sampled with psutil while it runs, and processes seen outside the
  group are killed by (pid, create time), so a reused pid is never hit;
- only when the run's output pipe is still held after all that (some process outside everything above kept a copy
  of it) is the host searched widely: every process carrying the run's token in its environment (RUN_TOKEN_ENV, set
  when the benchmark starts and inherited from the first instant) and, where /proc exists, every holder of the pipe.
One run at a time per process: the adopted children of a run are this process's new children while it runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import psutil

POLL_S = 0.05  # without a pidfd: how often the loop looks at the main child while its pipes are quiet
TRACK_S = 0.2  # without a subreaper: how often the run's tree is sampled (a descendant living longer is known)
DRAIN_S = 0.5  # after the main child exits: how long to keep reading what is left in the pipes
WAIT_S = 5.0  # the longest wait for the killed processes to be reaped
HELD_S = 0.05  # after the kill: how long the pipes may take to close before the wide search runs
RUN_TOKEN_ENV = "MOECAL_RUN_TOKEN"  # unique per run: marks every process the benchmark starts, however detached
PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER = 36, 37  # <linux/prctl.h>

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


def _prctl() -> Callable[..., int] | None:
    """libc's prctl (Linux only; None elsewhere or where libc cannot be loaded)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    function.restype = ctypes.c_int
    return function


_PRCTL = _prctl()


class _Subreaper:
    """This process as child subreaper for the duration of a `with` block (restored afterwards), so the run's
    orphans come to it rather than to init. `active` False where the kernel or platform has none."""

    def __init__(self) -> None:
        self.active, self._before = False, 0

    def __enter__(self) -> _Subreaper:
        if _PRCTL is not None:
            value = ctypes.c_int(0)
            if _PRCTL(PR_GET_CHILD_SUBREAPER, ctypes.addressof(value), 0, 0, 0) == 0:
                self._before = value.value
                self.active = _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        return self

    def __exit__(self, *exc: object) -> None:
        if self.active and not self._before:
            _PRCTL(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)  # type: ignore[misc]


def own_children() -> set[int]:
    """This process's children (zombies included). /proc/self/task/*/children costs one read per thread; where it
    does not exist (macOS, a kernel without CONFIG_PROC_CHILDREN) psutil, which reads the whole process table."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        tasks = []
    children: set[int] = set()
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children", "rb") as handle:
                children.update(int(pid) for pid in handle.read().split())
        except FileNotFoundError:
            break  # no such file on this kernel: ask psutil below
        except OSError:
            continue  # the thread ended meanwhile
    else:
        if tasks:
            return children
    return {child.pid for child in psutil.Process().children()}


def _carries(pid: int, token: str) -> bool | None:
    """Whether `pid`'s environment holds RUN_TOKEN_ENV=token (None: a zombie or unreadable)."""
    try:
        return psutil.Process(pid).environ().get(RUN_TOKEN_ENV) == token
    except (psutil.Error, OSError):
        return None


def _reap(pids: set[int], until: float) -> None:
    """Wait (bounded by `until`) for the killed children `pids` of this process, so none stays a zombie."""
    waiting = set(pids)
    while waiting:
        for pid in list(waiting):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid  # reaped already, or not ours
            if done:
                waiting.discard(pid)
        if not waiting or time.monotonic() >= until:
            return
        time.sleep(0.001)


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _wide_search(token: str, inodes: set[int]) -> set[int]:
    """Every other process carrying the run's token, or (with /proc) holding one of the pipes `inodes`: reads the
    whole host, so it runs only when the pipes are still held after everything the run was known to start ended."""
    wanted = {f"pipe:[{inode}]" for inode in inodes}
    found = set()
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        if _carries(process.pid, token):
            found.add(process.pid)
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{process.pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{process.pid}/fd/{fd}") in wanted:
                        found.add(process.pid)
                        break
    return found


class _Run:
    """The processes of one run and how to end them all: its group, the children it left this (subreaper)
    process, and — without a subreaper — its tree as sampled while it ran (pid → create time)."""

    def __init__(self, proc: subprocess.Popen, token: str, reaper: _Subreaper, before: set[int]):
        self.proc, self.token, self.reaper, self.before = proc, token, reaper, before
        self.known: dict[int, float] = {}
        self.sampled = 0.0

    def sample(self) -> None:
        """Without a subreaper: remember every process below the main child and below those seen earlier."""
        self.sampled = time.monotonic()
        if self.reaper.active:
            return
        for pid in [self.proc.pid, *self.known]:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        self.known.setdefault(child.pid, child.create_time())

    def end(self, until: float) -> None:
        """SIGKILL the group, reap the main child, then every process that was (or became) part of the run."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the main child is still unreaped: its group id is not reused
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(max(0.0, until - time.monotonic()))
        if self.reaper.active:
            self._end_adopted(until)
        else:
            self.sample()
            alive = set()
            for pid, created in self.known.items():
                with contextlib.suppress(psutil.Error):
                    if psutil.Process(pid).create_time() == created:
                        alive.add(pid)
            _kill(alive)

    def _end_adopted(self, until: float) -> None:
        """Kill and reap the run's processes re-parented to this one; their own children come next, until none."""
        seen: set[int] = set()
        while time.monotonic() < until:
            # one run at a time per process: every new child is the run's (a process that cleared its environment
            # carries no token, so the token cannot be the test)
            adopted = own_children() - self.before - {self.proc.pid} - seen
            if not adopted:
                return
            _kill(adopted)
            _reap(adopted, until)
            seen |= adopted

    def end_holders(self, pipes: _Pipes) -> None:
        """The wide search, only when a process outside everything ended above still holds the run's output."""
        pipes.read(time.monotonic() + HELD_S, lambda: not pipes.open)
        if pipes.open:
            _kill(_wide_search(self.token, pipes.inodes))


class _Pipes:
    """The run's stdout and stderr, read without blocking: what arrived so far, and which are still open."""

    def __init__(self, proc: subprocess.Popen):
        assert proc.stdout is not None and proc.stderr is not None
        self.files = (proc.stdout, proc.stderr)
        self.data = {f.fileno(): bytearray() for f in self.files}
        self.open = list(self.data)
        self.inodes = {os.fstat(fd).st_ino for fd in self.data}

    def read(self, until: float, stop: Callable[[], bool], wake: int | None = None) -> None:
        """Collect output until `stop()` is true or `until` passes; `wake` (a pidfd) makes select return the
        moment the main child exits. Once every pipe is closed, keep polling `stop` (still bounded by `until`)."""
        while not stop():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return
            watched = self.open + ([wake] if wake is not None else [])
            if not watched:
                time.sleep(min(POLL_S, remaining))
                continue
            ready, _, _ = select.select(watched, [], [], min(POLL_S, remaining))
            for fd in ready:
                if fd == wake:
                    continue
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


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the child has exited, without reaping it where os.waitid exists (its pid, and so its group id, stays
    reserved for the killpg); elsewhere Popen.poll, which reaps."""
    if not hasattr(os, "waitid"):
        return proc.poll() is not None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux ≥ 5.3), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


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
    with _Subreaper() as reaper:
        before = own_children() if reaper.active else set()
        proc = subprocess.Popen(
            list(argv),
            env={**env, RUN_TOKEN_ENV: token},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        pipes, run, wake = _Pipes(proc), _Run(proc, token, reaper, before), _pidfd(proc.pid)

        def exited() -> bool:
            if not reaper.active and time.monotonic() - run.sampled >= TRACK_S:
                run.sample()
            return _exited(proc)

        try:
            run.sample()
            pipes.read(deadline, exited, wake)
            by_itself, seconds = _exited(proc), time.monotonic() - started
            if by_itself:  # what the benchmark printed last may still be in the pipes
                pipes.read(min(time.monotonic() + drain_s, deadline), lambda: not pipes.open)
        finally:
            run.end(time.monotonic() + WAIT_S)
            if pipes.open:
                run.end_holders(pipes)
            pipes.close()
            if wake is not None:
                os.close(wake)
    stdout, stderr = pipes.text()
    return Finished(proc.returncode if by_itself else None, stdout, stderr, seconds)


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
