"""`moecal plan`'s time estimate, calibrated by the last run of the same config on this machine.

The per-point estimates a workload gives before it runs (bytes moved over a bandwidth, a decode step count) leave
out what dominates a small sweep: JIT compilation, building layers and models, warm-ups, process starts and a
machine shared with other work. On one 2-core VM they predicted 1.6 min for a sweep that took 7.7. The last run of
the same config on the same host and device already measured all of it: its wall time from the start of the sweep
(the provenance `date`, taken when the sweep was prepared) to its last timestamped row, per timed run. The plan
scales that by the number of timed runs it would do, and only from a run of the same kernel code. A run with
fewer than MIN_ROWS rows, or none at all, leaves the model's estimate in place, labelled as such.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from harness.errors import InputError
from harness.runs.formats import SAMPLES_FILE, read_provenance
from harness.runs.provenance_keys import Provenance
from harness.runs.rundir import RunDirectory

MIN_ROWS = 10


@dataclass(frozen=True)
class Calibration:
    run_dir: Path
    rows: int  # timed runs the earlier sweep wrote
    wall_seconds: float  # from its start to its last row

    def estimate(self, timed_runs: int) -> float:
        return self.wall_seconds * timed_runs / self.rows


def _when(text: str) -> dt.datetime | None:
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def run_timing(run_dir: Path) -> Calibration | None:
    """Rows and wall time of one finished-or-not run directory (None when it cannot tell)."""
    run = RunDirectory(run_dir)
    start = _when(str(read_provenance(run.samples).get("date", "")))
    if start is None:
        return None
    try:
        samples = run.read_samples()
    except InputError:  # an unreadable earlier run calibrates nothing; the plan says which estimate it used
        return None
    ok = samples[samples["status"] == "ok"]
    moments = [m for m in map(_when, ok["timestamp"].astype(str)) if m is not None]
    if len(ok) < MIN_ROWS or not moments or max(moments) <= start:
        return None
    return Calibration(run_dir, len(ok), (max(moments) - start).total_seconds())


def last_run(results: Path, meta: Provenance, exclude: Path | None = None) -> Calibration | None:
    """The newest run under `results` of the same config on the same host, backend and device, measured with the
    same kernels (kernel_source_hash): a run of other kernel code times other code. Measured: the stored CPU run
    (other kernels, a busier day) took 81 s for the 198 runs a sweep of today's code did in 47 s."""
    keys = ("config_name", "host", "backend", "device", "kernel_source_hash")
    found: list[tuple[str, Path]] = []
    for samples in results.glob(f"*/{SAMPLES_FILE}"):
        if exclude is not None and samples.parent.resolve() == Path(exclude).resolve():
            continue
        header = read_provenance(samples)
        if all(str(header.get(k, "")) == str(meta.get(k, "")) for k in keys):
            found.append((str(header.get("date", "")), samples.parent))
    for _, run_dir in sorted(found, reverse=True):
        timing = run_timing(run_dir)
        if timing is not None:
            return timing
    return None
