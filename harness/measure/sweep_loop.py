"""The measurement loop of a prepared sweep (harness/measure/sweep_setup.py): the dispatch verification pass, then
every pending run, here or spread over Ray workers, each row durable as soon as it ends; and what a finished run
holds (`why_no_result`, `quick_table`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from harness.analysis.decision.decision_facts import expected_null
from harness.analysis.evidence import dispatch_evidence
from harness.errors import InputError
from harness.measure import dispatch
from harness.measure.protocol import Point, ProgressHook, RoundSchedule, measure_point
from harness.runs.formats import csv_columns
from harness.runs.provenance_keys import DISPATCH_OVERRIDES, Provenance
from harness.runs.rundir import (
    RunDirectory,
    RunLock,
    SampleWriter,
)
from harness.runs.summary_columns import SummaryCol

if TYPE_CHECKING:  # the analysis (pandas, scipy) loads when a sweep is summarised, not for `moecal plan`
    import pandas as pd

    from harness.measure.allocation import Allocation

from harness.measure.sweep_setup import PreparedSweep


@contextlib.contextmanager
def writing(sweep: PreparedSweep) -> Iterator[None]:
    """Hold the run directory as its one writer (creating it: an unwritable place fails here, before any output)."""
    with RunLock(sweep.run_dir):
        if not sweep.resuming and RunDirectory(sweep.run_dir).is_run():  # another sweep started it since `prepare`
            raise InputError(str(sweep.run_dir), "--out", "already holds a run; continue it with --resume")
        yield


def run(sweep: PreparedSweep, on_run: ProgressHook, workers: str | None, say: ProgressHook) -> int:
    """`execute` under the host's guard for the whole sweep (harness.measure.guard.sweep_hold: the host lock and, on
    macOS, a sleep assertion), first saying what is held; returns the number of rows written."""
    from harness.measure import guard

    with guard.sweep_hold(getattr(sweep.workload, "guard", None), _rocm_host(sweep), say) as held:
        say(f"guard: {held}")
        return execute(sweep, on_run, workers, say)


def _rocm_host(sweep: PreparedSweep) -> bool:
    """Whether the sweep shares mlxcel's ROCm guard lock: a rocm run, or a host with the ROCm KFD driver."""
    from harness.measure.guard_probes import KFD_PROC_DIR

    return sweep.meta.get("backend") == "rocm" or Path(KFD_PROC_DIR).is_dir()


def execute(
    sweep: PreparedSweep, on_run: ProgressHook, workers: str | None = None, say: ProgressHook | None = None
) -> int:
    """Run every pending run (inside `writing(sweep)`); returns the number of rows written. Safe to interrupt:
    `--resume` continues. Writes no file until the first row.

    `workers` (a count or 'auto') spreads whole points over Ray workers (harness.measure.ray_workers); rows still go
    through this process's writer, and each point's rounds run together (one pass). Otherwise the grid is measured
    in the passes of `passes` (two by default). With `measure.until_decided` they are followed by the
    decision-driven rounds (harness.measure.allocation), each look told through `say`."""
    started = time.monotonic()
    written = 0
    record = None
    verify_dispatch(sweep)
    with SampleWriter(sweep.run_dir, sweep.meta, sweep.segment, sweep.policy) as writer:
        done = writer.done_keys()
        if workers is not None:
            from harness.measure.ray_workers import measure_on_workers  # Ray is an optional extra

            for name, on in (
                ("refine_budget_runs", sweep.config.measure.refine_budget_runs),
                ("until_decided", sweep.config.measure.until_decided),
            ):
                if on:
                    raise InputError(
                        str(sweep.config_path),
                        f"measure.{name}",
                        "runs in one process (it reads every look back): drop --workers, or turn it off",
                    )

            return measure_on_workers(sweep, writer, done, on_run, workers)
        plans = passes(sweep)
        for number, plan in enumerate(plans):
            done = writer.done_keys() if number else done  # the rows the first pass wrote are done
            for point in sweep.points:
                written += measure_point(sweep.workload, point, plan, writer, sweep.run_id, done, on_run)
        if sweep.config.measure.refine_budget_runs and sweep.workload.refinable:
            from harness.measure.refine import (
                refine,  # adaptive Dff refinement inside the crossover bracket (docs/design.md §7)
            )

            def measure(point: Point) -> int:
                return measure_point(sweep.workload, point, sweep.plan, writer, sweep.run_id, done, on_run)

            default = sweep.config.current_default
            written += refine(sweep.run_dir, sweep.workload, sweep.points, measure, sweep.config.measure, default)
        if sweep.config.measure.until_decided and why_no_result(recorded_samples(sweep.run_dir)) is None:
            record = _until_decided(sweep, plans[-1], writer, on_run, say or on_run, started)
            written += record.extra_runs
    if record is not None:
        from harness.measure.allocation import save

        save(sweep.run_dir, record)
    return written


def passes(sweep: PreparedSweep) -> list[RoundSchedule]:
    """The schedules of the passes over the grid: with `measure.passes: 2` and at least 2 rounds, the first ⌊n/2⌋
    rounds of every point, then every point's remaining rounds (each point's two visits half a sweep apart: drift of
    one arm then shows as passes that disagree, harness.analysis.points.sweep_drift); the rows say which in `pass`. A
    run resumed from a samples.csv written without that column is measured in one pass, as it was started."""
    plan = sweep.plan
    run = RunDirectory(sweep.run_dir)
    columns = csv_columns(run.samples) if run.samples.exists() else []
    recorded = not columns or "pass" in columns
    first = plan.rounds // 2 if sweep.config.measure.passes == 2 and recorded else 0
    if not first:
        return [plan]
    both = dataclasses.replace(plan, first_pass=first)
    return [dataclasses.replace(both, rounds=first), dataclasses.replace(both, start=first)]


def _until_decided(
    sweep: PreparedSweep,
    last: RoundSchedule,
    writer: SampleWriter,
    on_run: ProgressHook,
    say: ProgressHook,
    started: float,
) -> Allocation:
    """The decision-driven rounds after the first pass (harness.measure.allocation), measured with the last pass's
    schedule: their rows belong to the second pass (later visits of the point)."""
    from harness.measure import allocation

    def measure_rounds(point: Point, rounds: int) -> int:
        plan = dataclasses.replace(last, rounds=rounds, start=0)
        return measure_point(sweep.workload, point, plan, writer, sweep.run_id, writer.done_keys(), on_run)

    settings = sweep.config.measure
    previous = RunDirectory(sweep.run_dir).read_meta() or {}
    looks_before = int((previous.get(allocation.RECORD) or {}).get("looks", 0))
    return allocation.allocate(
        sweep.run_dir,
        sweep.points,
        measure_rounds,
        allocation.rule_for(settings, sweep.plan.rounds),
        sweep.config.current_default,
        allocation.budget_seconds(settings.budget),
        started,
        say,
        looks_before,
        on_look=lambda record: writer.update_record(lambda meta: allocation.record_into(meta, record)),
    )


def verify_dispatch(sweep: PreparedSweep) -> None:
    """The untimed dispatch verification pass of a command sweep with `dispatch_check` (harness.measure.dispatch),
    before any timed run; a model found declined becomes a skipped point (unless --measure-null): both its arms run the
    fallback, so timing them costs model loads for a point that is null anyway."""
    settings = sweep.config.workload
    check = getattr(settings, "dispatch_check", None)
    if check is None or not check.enabled:
        return
    sweep.run_dir.mkdir(parents=True, exist_ok=True)
    record = dispatch.verify(sweep.points, sweep.workload.open, settings, sweep.run_dir)
    overrides = dispatch.settle(sweep.points, record, expected_null(sweep.meta))
    if overrides:
        sweep.meta[DISPATCH_OVERRIDES] = overrides
    if sweep.measure_null:
        return
    declined = dispatch_evidence.null_reasons(record, expected_null(sweep.meta))
    for point in sweep.points:
        reason = declined.get(str(point.key["model"]))
        if reason and not point.skip_reason:
            point.skip_reason = f"{reason} (--measure-null measures it)"


def recorded_samples(run_dir: Path) -> pd.DataFrame | None:
    """The run's samples.csv, None when it has none (nothing was recorded)."""
    run = RunDirectory(run_dir)
    return run.read_samples() if run.samples.exists() else None


def why_no_result(samples: pd.DataFrame | None) -> tuple[str, bool] | None:
    """Why a finished sweep has nothing to analyse (no samples.csv, `samples` None, or not one ok run), as one line,
    and whether that is a failure (some run failed) rather than every point skipped (nothing fits here); None when
    it has results. The samples as the caller read them: the sweep's end reads the file once for every check."""
    if samples is None:
        return "no run was recorded", False
    statuses = samples["status"].value_counts()
    if statuses.get("ok", 0):
        return None
    failed = samples[samples["status"] == "fail"]
    first = f"; first error: {failed['error'].iloc[0]}" if len(failed) else ""
    counts = f"{statuses.get('fail', 0)} failed, {statuses.get('skip', 0)} skipped"
    return f"no run succeeded ({counts}){first}"[:400].replace("\n", " "), bool(len(failed))


def quick_table(
    summary: pd.DataFrame, samples: pd.DataFrame, meta: Provenance, verification: dispatch_evidence.VerificationRecord
) -> pd.DataFrame:
    """Per point: median tok/s of each arm, the fused/fallback estimate, run counts, the median generated tokens per
    arm and the dispatch the verification pass found (harness.analysis.evidence.dispatch_evidence). The estimate is the
    geometric-mean ratio the summary's interval belongs to (the same number the addendum shows), not a ratio of medians,
    so the terminal and the addendum never disagree: `summary` is the run's analysed summary, the one the caller
    reports (the sweep analyses its run once), of the run whose samples.csv (every setting), meta.json provenance
    and verification record ({} when none) the caller read."""
    import pandas as pd

    from harness.analysis.points.inputs import at_reference_setting

    # a knob sweep's table is its reference setting's, like its summary (the other settings: the knobs report)
    samples = at_reference_setting(samples, meta).fillna({"d_model": 0})
    keys = ["workload", "model", "d_model", "dff"]  # a layer config's decode block shares model names and dffs
    ok = samples[samples["status"] == "ok"]
    table = ok.pivot_table(index=keys, columns="arm", values="tok_s", aggfunc="median").reset_index()
    for arm in ("fallback", "fused"):
        if arm not in table.columns:
            table[arm] = float("nan")
    summary = summary.fillna({"d_model": 0})
    table = table.merge(
        summary[[*keys, SummaryCol.ESTIMATE]].rename(columns={SummaryCol.ESTIMATE: "ratio"}), on=keys, how="left"
    )
    # generated tokens per arm (the binary's count): arms that stopped at different EOS did different work
    tokens = ok.assign(n=pd.to_numeric(ok["tokens"], errors="coerce")).groupby(keys + ["arm"])["n"].median()
    tokens = tokens.unstack("arm").reindex(columns=["fallback", "fused"]).add_prefix("tokens_").reset_index()
    table = table.merge(tokens, on=keys, how="left")
    counts = samples.groupby(keys)["status"].value_counts().unstack(fill_value=0)
    counts = counts.reindex(columns=["ok", "fail", "skip"], fill_value=0).reset_index()
    table = table.merge(counts, on=keys, how="outer").fillna({"ok": 0, "fail": 0, "skip": 0})
    facts = dispatch_evidence.per_model(verification, expected_null(meta))
    table["dispatch"] = [str(fact["dispatch"]) if (fact := facts.get(str(m))) else "" for m in table["model"]]
    return table.sort_values(["workload", "d_model", "dff"])
