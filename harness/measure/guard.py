"""Guarded runs: a run no neighbour contaminated, and the evidence that it was not.

This follows lablup/mlxcel's scripts/rocm_gpu_guard.sh ("a benchmark that shares the GPU with another process, or
the UMA memory bus with a compiler, is not a measurement"): every run is sampled before it starts and once per
`interval_s` while it runs (harness.measure.guard_probes); a sample that shows a GPU compute process that is neither
moecal nor one of its descendants, a compiler, thermal or hardware clock throttling, a load above the configured
bound, or a suspension gap marks the run contended. A contended run raises RunContended: the protocol writes its row
marked `contended:` (excluded like a failure, never pooled) and runs the slot again (harness.measure.protocol). As in
the script, every sample is appended to a log, `guard.csv` beside samples.csv, "so the published evidence is the log
itself"; the addendum summarizes it. The sweep as a whole holds mlxcel's host lock (harness.measure.host_lock) and, on
macOS, a `caffeinate` sleep assertion. Every probe is optional: one whose source this host lacks is reported absent;
by default (`guard.enabled: null`) the guard is on where a GPU-process probe exists, and on every Mac.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, Protocol, TypedDict

from harness.config.schema import GuardSettings
from harness.errors import InputError
from harness.measure import guard_probes as probes
from harness.measure import host_lock
from harness.measure.protocol import RunContended, RunOutcome


class ExternalRunner(Protocol):
    """What the guard wraps: a runner of one external process per run (harness.measure.workloads.command)."""

    last_text: str

    def run(self, path: str, extra_env: dict[str, str] | None = None) -> RunOutcome: ...

    def close(self) -> None: ...


GUARD_FILE = "guard.csv"
GUARD_COLUMNS = ["timestamp", "point", "arm", "sample", "contended", "detail"]


@dataclass
class Sample:
    """One look at the host: what would distort a measurement ("" reasons: clean) and what was seen."""

    reasons: list[str] = field(default_factory=list)
    seen: str = ""


@dataclass
class Guard:
    """The probes a sweep's runs are sampled with. `absent`: the probes this host lacks (reported, never fatal)."""

    settings: GuardSettings
    log_path: Path | None = None
    absent: list[str] = field(default_factory=list)
    me: int = field(default_factory=os.getpid)
    descends: Callable[[int, int], bool] = host_lock.descends_from

    def available(self) -> list[str]:
        """The probes that answer on this host; the others go to `absent`."""
        checks = {
            "kfd (/sys/class/kfd/kfd/proc)": probes.kfd_holders(self._kfd()) is not None,
            "nvidia-smi compute apps": probes.nvidia_holders() is not None,
            "nvidia-smi throttle reasons": probes.throttle_reasons() is not None,
            "compilers (/proc/<pid>/comm)": probes.compilers(self._compilers()) is not None,
            "load average": probes.load_per_core() is not None,
            "suspension clocks": probes.clock_pair() is not None,
        }
        self.absent = [name for name, ok in checks.items() if not ok]
        return [name for name, ok in checks.items() if ok]

    def _kfd(self) -> str:
        return self.settings.kfd_dir or probes.KFD_PROC_DIR

    def _compilers(self) -> str:
        return self.settings.compilers or probes.COMPILER_RE

    def foreign(self, holders: list[probes.Holder] | None) -> list[str]:
        """GPU holders that are not moecal or its descendants and whose process still exists (a holder reaped since
        the kernel listed it is not contention, rocm_gpu_guard.sh #2065)."""
        return [
            f"{pid}:{name}"
            for pid, name in holders or []
            if Path(f"/proc/{pid}").exists() and not self.descends(pid, self.me)
        ]

    def sample(self) -> Sample:
        """One look at every probe this host has."""
        found = Sample()
        gpu = self.foreign(probes.kfd_holders(self._kfd())) + self.foreign(probes.nvidia_holders())
        if gpu:
            found.reasons.append(f"foreign GPU process {','.join(gpu)}")
        busy = [f"{pid}:{name}" for pid, name in probes.compilers(self._compilers()) or []]
        if busy:
            found.reasons.append(f"compiler {','.join(busy)}")
        throttled = probes.throttle_reasons()
        if throttled:
            found.reasons.append(f"clock throttle ({', '.join(throttled)})")
        load = probes.load_per_core()
        limit = self.settings.max_load_per_core
        if load is not None and limit is not None and load > limit:
            found.reasons.append(f"load {load:.2f} per core > {limit:g}")
        found.seen = f"load={'' if load is None else f'{load:.2f}'}"
        return found

    def log(self, point: str, arm: str, index: int | str, sample: Sample, detail: str = "") -> None:
        """Append one line to guard.csv (no log before the run directory is known)."""
        if self.log_path is None:
            return
        new = not self.log_path.exists()
        with self.log_path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(GUARD_COLUMNS)
            stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            text = "; ".join(sample.reasons) or sample.seen
            writer.writerow([stamp, point, arm, index, int(bool(sample.reasons)), detail or text])


class GuardedRunner:
    """A point's runner whose every run is sampled before and during; a contended run raises RunContended."""

    def __init__(self, runner: ExternalRunner, guard: Guard, point: str):
        self.runner = runner
        self.guard = guard
        self.point = point

    @property
    def last_text(self) -> str:
        """The wrapped runner's latest output (the dispatch verification pass reads and resets it)."""
        return self.runner.last_text

    @last_text.setter
    def last_text(self, text: str) -> None:
        self.runner.last_text = text

    def run(self, path: str, extra_env: dict[str, str] | None = None) -> RunOutcome:
        before = self.guard.sample()
        self.guard.log(self.point, path, "before", before)
        if before.reasons and self.guard.settings.retry_wait_s:
            time.sleep(self.guard.settings.retry_wait_s)  # give the neighbour time to finish, then look again
            before = self.guard.sample()
            self.guard.log(self.point, path, "before", before)
        reasons = list(before.reasons)
        stop = threading.Event()
        during: list[Sample] = []

        def watch() -> None:
            while not stop.wait(self.guard.settings.interval_s):
                during.append(self.guard.sample())
                self.guard.log(self.point, path, len(during), during[-1])

        clocks = probes.clocks()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            outcome = self.runner.run(path, extra_env)
        finally:
            stop.set()
            watcher.join()
        reasons += [reason for s in during for reason in s.reasons]
        gap = _suspension_gap(clocks, probes.clocks())
        if gap > self.guard.settings.suspend_gap_s:
            reasons.append(f"suspended {gap:.1f}s during the run")
            self.guard.log(self.point, path, "after", Sample([reasons[-1]]))
        if reasons:
            raise RunContended("; ".join(dict.fromkeys(reasons)))
        return outcome

    def close(self) -> None:
        self.runner.close()


def _suspension_gap(start: tuple[float, float] | None, end: tuple[float, float] | None) -> float:
    """How far the clock that stops during sleep fell behind the one that does not."""
    if start is None or end is None:
        return 0.0
    return (end[0] - start[0]) - (end[1] - start[1])


GPU_PROBES = ("kfd (/sys/class/kfd/kfd/proc)", "nvidia-smi compute apps")


def build(settings: GuardSettings) -> Guard | None:
    """The sweep's guard, or None when the config turns it off or (by default, `enabled: null`) this host is neither
    a Mac nor has a GPU-process probe: without a GPU to share there is no neighbour to guard against, and a sweep on
    a GPU-less test machine is not held up by its own compilers."""
    if settings.enabled is False:
        return None
    guard = Guard(settings)
    present = guard.available()
    if settings.enabled is None and sys.platform != "darwin" and not set(GPU_PROBES) & set(present):
        return None
    return guard


class GuardJSON(TypedDict):
    """meta.json's `guard` (describe): off with why, or on with the probes this host lacks and its log's name."""

    enabled: bool
    why: NotRequired[str]
    absent: NotRequired[list[str]]
    log: NotRequired[str]


def describe(guard: Guard | None, settings: GuardSettings) -> GuardJSON:
    """meta.json's `guard`: on or off and why, the probes this host lacks."""
    if guard is None:
        why = "off in the config" if settings.enabled is False else "no GPU-process probe on this host (not a Mac)"
        return {"enabled": False, "why": why}
    return {"enabled": True, "absent": guard.absent, "log": GUARD_FILE}


@contextlib.contextmanager
def sweep_hold(guard: Guard | None, rocm: bool, say: Callable[[str], None]) -> Iterator[str]:
    """For the whole sweep of a guarded run: the host lock (its wait reported) and, on macOS, a `caffeinate` sleep
    assertion. Yields one line saying what is held."""
    held: list[str] = []
    if guard is None:
        yield "off (see meta.json guard)"
        return
    settings = guard.settings
    with contextlib.ExitStack() as stack:
        if settings.host_lock:
            path = host_lock.lock_path(rocm, os.environ)
            try:
                lock = stack.enter_context(host_lock.held(path, settings.lock_wait_s, on_wait=say))
            except host_lock.LockUnavailable as exc:
                raise InputError(str(path), "guard.host_lock", str(exc)) from None
            held.append(lock.skipped or f"host lock {lock.path} (waited {lock.waited_s:.1f}s)")
            guard.log("(sweep)", "", "lock", Sample(seen=held[-1]))
        if sys.platform == "darwin" and shutil.which("caffeinate"):
            # -i: no idle sleep, -w: released when this process exits, even if it is killed
            awake = subprocess.Popen(["caffeinate", "-i", "-w", str(os.getpid())])
            stack.callback(awake.terminate)
            held.append("caffeinate sleep assertion")
        yield "; ".join(held) or "nothing held"
