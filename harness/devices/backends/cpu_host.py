"""What the CPU backend reports about the machine — its name and threads, free memory, last-level cache and copy
bandwidth — without numba.

`moecal plan` needs only these facts to lay out a CPU sweep (points, copies per point, memory, time estimate), and
importing and initialising numba takes seconds, so the plan builds its workload on a CpuHost
(harness.devices.backends.device_facts). CpuBackend inherits every fact from here, so a plan and the sweep it describes
name the same device (the plan's calibration finds earlier runs by that name, harness/measure/plan_estimate.py); only
the copy bandwidth differs: the backend measures it with its own parallel numba kernel, a CpuHost with one numpy copy.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from pathlib import Path

import numpy as np

from harness.runs.provenance import cpu_name

_DEFAULT_CACHE_BYTES = 32 << 20  # used only when neither /sys nor sysconf reports a last-level cache
_SYS_CPU = Path("/sys/devices/system/cpu")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1:] in units else int(text)


def last_level_cache_bytes() -> int:
    """Total last-level cache: each distinct instance of the highest cache level in /sys counted once (a
    2-socket machine has two L3s), else sysconf's L3/L2 figure, else 32 MiB."""
    instances: dict[tuple[int, str], int] = {}
    for index in _SYS_CPU.glob("cpu[0-9]*/cache/index[0-9]*"):
        level, size = _read_int(index / "level"), _read_int(index / "size")
        kind = (index / "type").read_text().strip() if (index / "type").exists() else ""
        if level and size and kind in ("Unified", "Data"):
            shared = (index / "shared_cpu_list").read_text().strip() if (index / "shared_cpu_list").exists() else ""
            instances[(level, shared or str(index))] = size
    if instances:
        top = max(level for level, _ in instances)
        return sum(size for (level, _), size in instances.items() if level == top)
    for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        size = os.sysconf(name) if name in os.sysconf_names else 0
        if size > 0:
            return size
    return _DEFAULT_CACHE_BYTES


def numba_version() -> str:
    try:
        return importlib.metadata.version("numba")
    except importlib.metadata.PackageNotFoundError:
        return ""


class CpuHost:
    """The host CPU's facts as the CPU backend states them (see the module docstring)."""

    name = "cpu"

    def __init__(self) -> None:
        self._bandwidth: dict[int, float] = {}

    def threads(self) -> int:
        """numba's default thread count without importing numba: NUMBA_NUM_THREADS, else the CPUs this process
        may run on (numba.core.config). CpuBackend asks numba itself."""
        env = os.environ.get("NUMBA_NUM_THREADS", "")
        if env.strip().isdigit():
            return int(env)
        return max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)

    def device_name(self) -> str:
        return f"{cpu_name()} ({self.threads()} threads)"

    def device_info(self) -> dict[str, str]:
        return {
            "device": self.device_name(),
            "cpu": cpu_name(),
            "threads": str(self.threads()),
            "numba": numba_version(),
            "llc_bytes": str(self.cache_bytes()),
        }

    def memory_info(self) -> tuple[int, int]:
        """(MemAvailable, MemTotal) from /proc/meminfo; sysconf pages where that file does not exist."""
        try:
            fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
            return int(fields["MemAvailable"].split()[0]) << 10, int(fields["MemTotal"].split()[0]) << 10
        except (OSError, KeyError, ValueError):
            page = os.sysconf("SC_PAGE_SIZE")
            return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    def cache_bytes(self) -> int:
        return last_level_cache_bytes()

    def copy_bandwidth(self, nbytes: int = 1 << 30) -> float:
        """Best of 5 numpy copies of `nbytes`, at most twice the last-level cache (after one that faults the pages
        in): 2·bytes / s. Smaller and single-threaded, so cheaper than the backend's parallel copy and usually below
        it: the plan's per-point times are estimates either way. Measured once per size: a layer workload and its
        decode block ask for it in turn."""
        if nbytes not in self._bandwidth:
            src = np.ones(min(nbytes, 2 * self.cache_bytes()) // 4, dtype=np.float32)
            dst = np.empty_like(src)
            np.copyto(dst, src)
            best = float("inf")
            for _ in range(5):
                start = time.perf_counter()
                np.copyto(dst, src)
                best = min(best, time.perf_counter() - start)
            self._bandwidth[nbytes] = 2 * src.nbytes / best
        return self._bandwidth[nbytes]
