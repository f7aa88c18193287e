"""Before a sweep: is this machine quiet enough to time on? (in the spirit of pyperf's `system check`)

A sweep interleaves the arms and its statistics absorb slow drift, but a busy machine widens every interval, so the
sweep needs more rounds to decide — or decides nothing. What can be seen cheaply, without root, is checked:

- the 1-minute load average against the CPU count (other processes competing for the cores the sweep uses);
- other processes on the NVIDIA GPUs (`nvidia-smi --query-compute-apps`), when nvidia-smi is present;
- the CPU frequency governor (Linux cpufreq): anything but `performance` lets the clock move under the timer.

The result is one line (nothing on a quiet machine): what was found and what to do. It warns; it never refuses.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

BUSY_LOAD_PER_CPU = 0.5  # more than half a runnable process per core, averaged over a minute
CPUFREQ = Path("/sys/devices/system/cpu")


def load_finding(load: float, cpus: int) -> str | None:
    if load <= BUSY_LOAD_PER_CPU * cpus:
        return None
    return f"load average {load:.1f} on {cpus} CPUs"


def gpu_process_finding(lines: list[str], own_pid: int) -> str | None:
    """From `nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader` lines."""
    others = []
    for line in lines:
        pid, _, name = (part.strip() for part in line.partition(","))
        if pid.isdigit() and int(pid) != own_pid:
            others.append(f"{Path(name).name or '?'} (pid {pid})")
    if not others:
        return None
    return f"{len(others)} other GPU process{'es' if len(others) > 1 else ''}: {', '.join(others[:3])}"


def governor_finding(governors: list[str]) -> str | None:
    slow = sorted({g for g in governors if g and g != "performance"})
    return f"CPU frequency governor {'/'.join(slow)}" if slow else None


def _gpu_lines(run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def _governors(root: Path = CPUFREQ) -> list[str]:
    out = []
    for path in sorted(root.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        try:
            out.append(path.read_text().strip())
        except OSError:
            continue
    return out


def findings() -> list[str]:
    """What makes this machine noisy right now (empty when nothing does)."""
    found = [
        load_finding(os.getloadavg()[0], os.cpu_count() or 1) if hasattr(os, "getloadavg") else None,
        gpu_process_finding(_gpu_lines(), os.getpid()),
        governor_finding(_governors()),
    ]
    return [f for f in found if f]


def advice(found: list[str]) -> str | None:
    """The one line a sweep prints before it starts, or None on a quiet machine."""
    if not found:
        return None
    todo = ["wait for the other jobs or stop them"]
    if any(f.startswith("CPU frequency governor") for f in found):
        todo.append("set the governor to performance (sudo cpupower frequency-set -g performance)")
    return (
        f"noise check: machine busy ({'; '.join(found)}): timings will be noisier and need more rounds to decide; "
        f"{', '.join(todo)}, then re-run (or go on and let the intervals show it)"
    )
