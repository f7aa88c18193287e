"""The host-wide GPU lock mlxcel's benchmark guard takes, taken the same way for a whole sweep.

lablup/mlxcel's scripts/rocm_gpu_guard.sh serializes every agent that measures on a host (#2146): each guard takes
an `flock` on ROCM_GPU_GUARD_LOCK (default /tmp/mlxcel-rocm-gpu-guard.lock) before its first idle wait and holds it
until it exits, so two measurements started together run one after the other instead of each seeing the other as
contention. The file is created only if missing, world-writable (umask 000) so every user can share it, and opened
read-only (flock works on a read-only descriptor, while an O_CREAT open of another user's file in sticky /tmp fails
under fs.protected_regular); a lock path that is not a regular file (a FIFO would block the open) is refused. The
command runs without the lock descriptor (Python's descriptors are not inherited, PEP 446) and with
ROCM_GPU_GUARD_LOCK_HELD set to the holder's pid; a guard that starts with that variable naming one of its ancestors
skips the lock, so a sweep whose command is itself wrapped in rocm_gpu_guard.sh cannot deadlock on its own lock, and
a stale value (a pid that is not an ancestor) does not skip it.

moecal holds the lock for the whole sweep, not per run: the rounds of one sweep are one measurement, and another
agent's benchmark between two of them would be contention the interleaving cannot remove. On a host without ROCm the
same protocol runs on an equivalent per-host path (OTHER_HOST_LOCK), so two moecal sweeps on one CUDA or Metal machine
serialize too. The time spent waiting is reported.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from pathlib import Path

LOCK_ENV = "ROCM_GPU_GUARD_LOCK"
HELD_ENV = "ROCM_GPU_GUARD_LOCK_HELD"
ROCM_LOCK = "/tmp/mlxcel-rocm-gpu-guard.lock"  # rocm_gpu_guard.sh's default
OTHER_HOST_LOCK = "/tmp/moecal-gpu-guard.lock"  # moecal's equivalent on a host without ROCm
POLL_S = 0.2
_PID = re.compile(r"^[1-9][0-9]*$")


class LockUnavailable(Exception):
    """The lock could not be taken (not a regular file, cannot be opened, or the wait ran out)."""


@dataclass(frozen=True)
class HostLock:
    """What taking the lock came to: its path, the seconds spent waiting, and why it was not taken ("" when held)."""

    path: str
    waited_s: float
    skipped: str = ""


def lock_path(rocm: bool, environ: MutableMapping[str, str]) -> Path:
    """The lock a sweep takes: ROCM_GPU_GUARD_LOCK when set, else mlxcel's path on a ROCm host, else moecal's."""
    return Path(environ.get(LOCK_ENV) or (ROCM_LOCK if rocm else OTHER_HOST_LOCK))


def parent_of(pid: int) -> int | None:
    """The parent pid (from /proc/<pid>/stat where there is one, else `ps`); None when the process is gone."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            # comm (field 2) may hold spaces and parentheses: the fields after the last ')' are "state ppid ..."
            return int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None
    try:
        out = subprocess.run(["ps", "-o", "ppid=", "-p", str(pid)], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out.stdout.strip()) if out.stdout.strip().isdigit() else None


def descends_from(pid: int, root: int, parent: Callable[[int], int | None] = parent_of) -> bool:
    """Whether `pid` is `root` or one of its descendants (walking parents up to init)."""
    current: int | None = pid
    while current not in (None, 0, 1):
        if current == root:
            return True
        current = parent(current)
    return False


def outer_guard(environ: MutableMapping[str, str], pid: int | None = None) -> int | None:
    """The pid of an outer guard that holds the lock for this process tree: ROCM_GPU_GUARD_LOCK_HELD naming one of
    this process's ancestors (never itself, never a stale pid)."""
    me = os.getpid() if pid is None else pid
    held = environ.get(HELD_ENV, "")
    if _PID.match(held) and int(held) != me and descends_from(me, int(held)):
        return int(held)
    return None


def _open(path: Path) -> int:
    if not path.exists():
        old = os.umask(0)
        try:
            with contextlib.suppress(OSError):  # another guard may have just made it: the open below decides
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666))
        finally:
            os.umask(old)
    if not path.is_file():
        raise LockUnavailable(f"guard lock {path} is not a regular file")
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise LockUnavailable(f"cannot open guard lock {path}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def held(
    path: Path,
    max_wait_s: float = 0.0,
    environ: MutableMapping[str, str] | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[HostLock]:
    """Hold the host lock for the block (max_wait_s 0: wait as long as it takes). Sets ROCM_GPU_GUARD_LOCK_HELD to
    this pid for the commands the block starts, restored afterwards; skips the lock under an outer guard."""
    env = os.environ if environ is None else environ
    outer = outer_guard(env)
    if outer is not None:
        yield HostLock(str(path), 0.0, f"held by outer guard {outer} ({HELD_ENV})")
        return
    fd = _open(path)
    start = time.monotonic()
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait(f"waiting for guard lock {path} (another benchmark on this host holds it)")
            _wait(fd, path, start, max_wait_s)
        waited = time.monotonic() - start
        previous = env.get(HELD_ENV)
        env[HELD_ENV] = str(os.getpid())
        try:
            yield HostLock(str(path), waited)
        finally:
            if previous is None:
                env.pop(HELD_ENV, None)
            else:
                env[HELD_ENV] = previous
    finally:
        os.close(fd)  # releases the lock


def _wait(fd: int, path: Path, start: float, max_wait_s: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if max_wait_s > 0 and time.monotonic() - start >= max_wait_s:
                raise LockUnavailable(
                    f"gave up waiting for guard lock {path} after {max_wait_s:g}s (another benchmark holds it)"
                ) from None
            time.sleep(POLL_S)
