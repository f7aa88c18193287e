"""The kernel benchmark behind `moecal bench-kernels`: µs per MoE layer step and GB/s of weights, fused vs
fallback.

A decode step streams its top_k experts' weights from memory (every layer of a model is visited once per token),
so timing one layer over and over would measure cache, not memory. A bench shape is therefore timed exactly as a
`layer` sweep times a point: the sweep's LayerRunner (harness.measure.workloads.layer) rotates over as many device
copies as its cache rule asks (`copies_for_cache`: between two visits to one copy the others stream at least twice the
last-level cache), each run is a calibrated whole number of rotations lasting at least MIN_SAMPLE_SECONDS, and the
sweep's loop (`harness.measure.protocol.measure_point`) runs the rounds, each path once per round in rotating order. The
reported figure is the median over rounds of seconds per step. GB/s = step_bytes / seconds; frac_of_copy compares
it with the backend's measured copy bandwidth (read + write), the memory ceiling.

Backends that can capture a whole step into one replayable call (`graph`, CUDA graphs) are timed through it, so
the host-side cost of issuing each launch from Python — not part of the kernels, and far smaller in a C++
engine — does not decide the comparison.
"""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from harness.config.shapes import MoeShape
from harness.devices.backends.base import Backend
from harness.measure.protocol import Point, RoundSchedule, RunFailed, measure_point
from harness.measure.workloads.layer import LayerRunner, copies_for_cache
from harness.runs.formats import format_provenance, sheet_cell, write_text_atomic
from harness.runs.rundir import SampleRow, refuse_stored

MIN_SAMPLE_SECONDS = 0.02  # long enough that timer and thread wake-up jitter stay below ~1%


@dataclass(frozen=True)
class BenchRow:
    backend: str
    device: str
    d_model: int
    dff: int
    n_experts: int
    top_k: int
    bits: int
    group_size: int
    dtype: str
    path: str
    variant: str  # the backend's kernel variant (CUDA: block shape, act load, split-K), "default" elsewhere
    us_per_step: float
    us_min: float
    us_max: float
    gb_s: float
    copy_gb_s: float
    frac_of_copy: float
    copies: int
    steps_per_sample: int
    rounds: int


COLUMNS = [f.name for f in fields(BenchRow)]


class _Rows(list[SampleRow]):
    """The rows measure_point writes for one bench shape, kept in memory: a benchmark writes no samples.csv."""


@dataclass(frozen=True)
class _OneLayer:
    """The workload of one bench shape: every path opens on the same LayerRunner (the sweep's layer runner)."""

    runner: LayerRunner

    def open(self, point: Point) -> LayerRunner:
        return self.runner


def bench_shape(
    backend: Backend, shape: MoeShape, paths: list[str], rounds: int, seed: int, copy_gb_s: float
) -> list[BenchRow]:
    """Time every path at one shape (see the module docstring for the protocol); a failed run raises RunFailed."""
    copies = copies_for_cache(shape.weight_bytes_per_step(), backend.cache_bytes())
    runner = LayerRunner(backend, shape, copies, seed, MIN_SAMPLE_SECONDS, paths)  # its calibration is the warm-up
    point = Point(key={}, caps=dict.fromkeys(paths, ""), label=shape.label())
    plan = RoundSchedule(rounds=rounds, warmup_runs=0, order="rotate", seed=seed)
    measured = _Rows()
    measure_point(_OneLayer(runner), point, plan, measured, "", {}, lambda _: None)
    failed = next((row for row in measured if row["status"] != "ok"), None)
    if failed is not None:
        raise RunFailed(str(failed["error"]))
    variant_label = getattr(backend, "variant_label", None)
    variant = variant_label() if variant_label is not None else "default"
    rows = []
    for path in paths:
        per_step = [float(str(r["seconds"])) / float(str(r["tokens"])) for r in measured if r["arm"] == path]
        seconds = statistics.median(per_step)
        gb_s = shape.weight_bytes_per_step() / seconds / 1e9
        rows.append(
            BenchRow(
                backend=backend.name,
                device=backend.device_name(),
                **shape.as_dict(),
                path=path,
                variant=variant,
                us_per_step=seconds * 1e6,
                us_min=min(per_step) * 1e6,
                us_max=max(per_step) * 1e6,
                gb_s=gb_s,
                copy_gb_s=copy_gb_s,
                frac_of_copy=gb_s / copy_gb_s,
                copies=copies,
                steps_per_sample=runner.steps,
                rounds=rounds,
            )
        )
    return rows


def write_csv(path: Path, rows: list[BenchRow], meta: dict) -> None:
    """The rows under a `# key: value` provenance header, written atomically; a stored result is never replaced."""
    refuse_stored(path, "write the benchmark somewhere else (--out)")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    text.write(format_provenance(meta))
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _csv_value(value) for key, value in asdict(row).items()})
    write_text_atomic(path, text.getvalue())


def _csv_value(value: object) -> object:
    return f"{value:.4g}" if isinstance(value, float) else sheet_cell(value)
