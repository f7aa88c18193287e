"""What the run guard looks at, one probe per source, each optional: a probe whose source this host lacks answers
None ("absent", reported), never an error.

Each follows a source: the GPU holders and compilers are lablup/mlxcel's scripts/rocm_gpu_guard.sh's (the entries of
/sys/class/kfd/kfd/proc — the process list `rocm-smi --showpids` reads, so moecal reads the directory rather than
rocm-smi — and /proc/<pid>/comm matched exactly against its compiler list, with a holder whose /proc entry is gone
not counted: the kernel removes a kfd entry from deferred work, after the process was reaped, #2065). On NVIDIA the
holders are `nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader`, and clock-throttle reasons
`nvidia-smi --query-gpu=clocks_throttle_reasons.active --format=csv,noheader` (a bit mask; the thermal and hardware
slowdown bits count, the idle and application-clock bits do not). Load is the 1-minute load average per core. A
suspension gap is a clock that stops during sleep falling behind one that does not: Linux CLOCK_MONOTONIC against
CLOCK_BOOTTIME, macOS CLOCK_UPTIME_RAW against CLOCK_MONOTONIC_RAW (PR #756's fake 40–77% drop came from a Mac that
slept, heated and ran Time Machine mid-run).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

KFD_PROC_DIR = "/sys/class/kfd/kfd/proc"
# rocm_gpu_guard.sh's list: build tools whose memory traffic or CPU load would distort a measurement
COMPILER_RE = (
    r"^(cargo|rustc|clang|clang\+\+|clang-[0-9]+|hipcc|nvcc|cc1|cc1plus|ld|ld\.lld|ld\.gold|ld\.bfd|lld|collect2)$"
)
NVIDIA_APPS = ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader"]
NVIDIA_THROTTLE = ["nvidia-smi", "--query-gpu=clocks_throttle_reasons.active", "--format=csv,noheader"]
# NVML's clocks-throttle reason bits that slow the clocks for heat or the board, not by request or idleness
THROTTLE_BITS = {0x8: "hw slowdown", 0x40: "sw thermal", 0x80: "hw thermal", 0x100: "hw power brake"}
PROBE_TIMEOUT_S = 5.0

Holder = tuple[int, str]  # pid, command name


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def kfd_holders(kfd_dir: str = KFD_PROC_DIR) -> list[Holder] | None:
    """Every process holding the ROCm GPU (a directory per pid); None without the KFD driver."""
    folder = Path(kfd_dir)
    if not folder.is_dir():
        return None
    return [(int(p.name), _comm(int(p.name))) for p in sorted(folder.iterdir()) if p.name.isdigit()]


def _ask(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def parse_compute_apps(text: str) -> list[Holder]:
    """`nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader` lines → holders."""
    holders = []
    for line in text.splitlines():
        pid, _, name = line.partition(",")
        if pid.strip().isdigit():
            holders.append((int(pid.strip()), name.strip()))
    return holders


def nvidia_holders() -> list[Holder] | None:
    text = _ask(NVIDIA_APPS)
    return None if text is None else parse_compute_apps(text)


def parse_throttle(text: str) -> list[str]:
    """The slowdown reasons in `clocks_throttle_reasons.active` answers (one hex mask per GPU)."""
    reasons = []
    for line in text.split():
        try:
            mask = int(line.strip(), 16)
        except ValueError:
            continue
        reasons += [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    return sorted(set(reasons))


def throttle_reasons() -> list[str] | None:
    text = _ask(NVIDIA_THROTTLE)
    return None if text is None else parse_throttle(text)


def compilers(pattern: str = COMPILER_RE, proc: str = "/proc") -> list[Holder] | None:
    """Running compilers (/proc/<pid>/comm matched exactly); None where there is no /proc."""
    root = Path(proc)
    if not (root / "self").exists():
        return None
    regex = re.compile(pattern)
    found = []
    for entry in root.iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
            except OSError:
                continue
            if regex.match(comm):
                found.append((int(entry.name), comm))
    return sorted(found)


def load_per_core() -> float | None:
    try:
        return os.getloadavg()[0] / (os.cpu_count() or 1)
    except (OSError, AttributeError):
        return None


def clock_pair() -> tuple[int, int] | None:
    """(a clock that keeps counting through sleep, one that stops during it) on this platform, or None."""
    if sys.platform.startswith("linux") and hasattr(time, "CLOCK_BOOTTIME"):
        return time.CLOCK_BOOTTIME, time.CLOCK_MONOTONIC
    if sys.platform == "darwin" and hasattr(time, "CLOCK_UPTIME_RAW"):
        return time.CLOCK_MONOTONIC_RAW, time.CLOCK_UPTIME_RAW
    return None


def clocks() -> tuple[float, float] | None:
    pair = clock_pair()
    return None if pair is None else (time.clock_gettime(pair[0]), time.clock_gettime(pair[1]))
