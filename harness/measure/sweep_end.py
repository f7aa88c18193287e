"""The end of a sweep as measured: the run read back and analysed once, at the options its report records, into what
the terminal shows (the final table, the bandwidth check, the until-decided record) — writing nothing.

harness.output.sweep_result.finish writes the summary and the reports from it: `measure` may not import `output`
(docs/design.md §2), and the table is shown before anything is written, so a refused addendum leaves it on screen."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.analysis.decision.pipeline import Analysis, Options, analyse
from harness.analysis.evidence import dispatch_evidence
from harness.analysis.evidence.physics_prior import PointPhysics, predicted_crossover
from harness.analysis.points.inputs import samples_input
from harness.analysis.rounds.run_options import policy_options
from harness.measure.physics_points import sweep_physics
from harness.measure.sweep_loop import quick_table, recorded_samples, why_no_result
from harness.runs.provenance_keys import UNTIL_DECIDED
from harness.runs.rundir import RunDirectory

if TYPE_CHECKING:
    import pandas as pd

    from harness.measure.sweep_setup import PreparedSweep


@dataclass(frozen=True, kw_only=True)
class NoResult:
    """Why a finished sweep has nothing to analyse: not one ok run (harness.measure.sweep_loop.why_no_result)."""

    message: str
    failed: bool  # some run failed (the sweep did not do its job), rather than every point skipped


@dataclass(frozen=True, kw_only=True)
class Bandwidth:
    """Bytes per decode token, implied GB/s and share of the device's bandwidth per point of the final table
    (harness.measure.physics_points): a point above the ceiling is a measurement error."""

    points: list[PointPhysics]
    source: str  # where the device's bandwidth figure comes from; '' when the device is not listed
    device: str
    predicted_crossover: float | None  # where the fallback nears the ceiling (physics_prior.predicted_crossover)


@dataclass(frozen=True, kw_only=True)
class AnalysedSweep:
    """A sweep with results, analysed once: the final table, summary.csv, the addendum and the mlxcel CSV are all of
    this one analysis (tests/test_one_analysis.py counts)."""

    # the run's policy (the targets its config set) at the level its until-decided looks read, where it has one
    # (docs/design.md §7): the one reader every later analysis of the run defaults through
    options: Options
    analysis: Analysis
    table: pd.DataFrame  # the final table (harness.measure.sweep_loop.quick_table)
    bandwidth: Bandwidth
    until_decided: Mapping[str, Any] | None  # meta.json's record of the until-decided loop, where it ran
    # a sweep that measured something new and left a model without any ok run did not do its job; '' otherwise
    every_run_failed: str


@dataclass(frozen=True, kw_only=True)
class SweepEnd:
    """A finished sweep's run directory, how many runs this sweep added, and what they came to."""

    run_dir: Path
    runs_written: int  # 0: nothing new measured, so nothing is re-reported (`moecal report` does that)
    samples: Path
    meta: Path
    outcome: AnalysedSweep | NoResult


def conclude(plan: PreparedSweep, written: int) -> SweepEnd:
    """Read and analyse the finished sweep of `plan`, which wrote `written` new runs; writes nothing. samples.csv
    and meta.json are read once each, and what was read is handed to every check, the analysis and the table."""
    run = RunDirectory(plan.run_dir)
    samples = recorded_samples(plan.run_dir)
    if no_result := why_no_result(samples):  # nothing to summarize: an addendum would state an unsupported decision
        message, failed = no_result
        return _end(plan, written, run, NoResult(message=message, failed=failed))
    assert samples is not None  # why_no_result names a run without samples.csv
    record = run.read_record()
    options = policy_options(record.policy, at_look_level=True)
    verification = dispatch_evidence.read_record(plan.run_dir)
    analysis = analyse(samples_input(run.samples, samples, record.provenance, verification or None), options)
    table = quick_table(analysis.summary, samples, record.provenance, verification)
    allocation = record.provenance.get(UNTIL_DECIDED)
    analysed = AnalysedSweep(
        options=options,
        analysis=analysis,
        table=table,
        bandwidth=_bandwidth(plan, table),
        until_decided=allocation if isinstance(allocation, dict) else None,
        every_run_failed=every_run_failed(samples) if written else "",
    )
    return _end(plan, written, run, analysed)


def _end(plan: PreparedSweep, written: int, run: RunDirectory, outcome: AnalysedSweep | NoResult) -> SweepEnd:
    return SweepEnd(
        run_dir=plan.run_dir, runs_written=written, samples=run.samples, meta=run.meta_path, outcome=outcome
    )


def _bandwidth(plan: PreparedSweep, table: pd.DataFrame) -> Bandwidth:
    """The bandwidth check of the final table's medians (harness.analysis.evidence.physics_prior)."""
    medians = {
        (str(r["model"]), int(r["dff"])): {"fused": float(r["fused"]), "fallback": float(r["fallback"])}
        for r in table.to_dict("records")
    }
    device = str(plan.meta.get("device") or "")
    physics, source = sweep_physics(plan.points, medians, device)
    return Bandwidth(points=physics, source=source, device=device, predicted_crossover=predicted_crossover(physics))


def every_run_failed(samples: pd.DataFrame) -> str:
    """'' when every model has an ok run or none failed; else one line naming the first model whose every run
    failed, with its first error (skips, e.g. expect_null models, are not failures)."""
    names = []
    for model, rows in samples.groupby("model", sort=False):
        if not (rows["status"] == "ok").any() and (rows["status"] == "fail").any():
            names.append(str(model))
    if not names:
        return ""
    rows = samples[(samples["model"] == names[0]) & (samples["status"] == "fail")]
    others = f" (every run of {', '.join(map(repr, names[1:]))} failed too)" if names[1:] else ""
    line = f"model {names[0]!r}: all {len(rows)} runs failed{others}; first error: {rows['error'].iloc[0]}"
    return " ".join(line.split())[:600]
