"""Which MoE path ran: the untimed verification pass of a command sweep (mlxcel's parity probe on), before any
timed run. Each model gets one fused-arm and one fallback-arm run with MLXCEL_FUSED_MOE_PARITY_CHECK=1 (threshold 0:
every call logged); the runs are recorded in `<run>/verification.json`, never as samples, because the probe adds
evals to every MoE call. What the record says per point (verified, declined, predicted, unverified, and the numerical
parity) is read by harness/analysis/evidence/dispatch_evidence.py.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from harness.analysis.evidence.dispatch_evidence import (
    RECORD,
    ParityFigures,
    VerificationEntry,
    VerificationRecord,
    VerificationRun,
    per_model,
    read_record,
    recorded_figure,
    within_limit,
)
from harness.config.schema import CommandSettings, DispatchCheck
from harness.measure.bench_output import ParityCall, decode_path, memory_lines, parity_calls, probe_summaries
from harness.measure.protocol import Point, RunFailed
from harness.measure.workloads.command import CommandRunner
from harness.runs.formats import FALLBACK, FUSED, write_text_atomic


def _nan_worst(value: float) -> tuple[bool, float]:
    """Sort key of the worst error: a NaN (an undefined error) is worse than any number; plain `max` may skip it."""
    return value != value, value


def _figures(calls: list[ParityCall]) -> ParityFigures:
    if not calls:
        return {"calls": 0, "dffs": []}
    ref = [c.fused_vs_ref for c in calls]
    truth = [c.fused_vs_truth for c in calls]
    return {
        "calls": len(calls),
        "dffs": sorted({c.dff for c in calls}),
        "over": sum(not within_limit(c.fused_vs_ref, c.fused_vs_truth) for c in calls),
        "fused_vs_ref_worst": recorded_figure(max(ref, key=_nan_worst)),
        "fused_vs_ref_median": recorded_figure(statistics.median(ref)),
        "fused_vs_truth_worst": recorded_figure(max(truth, key=_nan_worst)),
        "fused_vs_truth_median": recorded_figure(statistics.median(truth)),
    }


def verification_run(runner: CommandRunner, path: str, check: DispatchCheck) -> VerificationRun:
    """One untimed run of `path` with the probe on; what it printed, reduced to what the dispatch needs."""
    env = {check.check_env: "1", check.threshold_env: f"{check.threshold:g}"}
    runner.last_text = ""
    try:
        outcome = runner.run(path, extra_env=env)
    except RunFailed as exc:
        return {"path": path, "env": env, "status": "fail", "error": str(exc)[:400], "calls": 0, "dffs": []}
    text = runner.last_text
    run: VerificationRun = {
        "path": path,
        "env": env,
        "status": "ok",
        "seconds": round(outcome.seconds, 4),
        "tok_s": outcome.tok_s,
        "tokens": outcome.tokens,
        "summary_calls": probe_summaries(text),
        **_figures(parity_calls(text)),
    }
    if path_line := decode_path(text):
        run["decode_path"] = path_line
    if lines := memory_lines(text):
        run["memory"] = lines
    return run


def settle(points: list[Point], record: VerificationRecord, expected_null: dict[str, str]) -> dict[str, str]:
    """The observation overrides the prediction in both directions: a model predicted null whose fused verification
    run logged kernel calls at its Dff is measured after all (its skip lifted); one predicted eligible (or of an
    unknown family) that the kernel declined is skipped (verify_dispatch's existing rule). Returns model → why the
    prediction was overridden, for the run's provenance (`dispatch_overrides`)."""
    facts = per_model(record, expected_null)
    overrides = {}
    for point in points:
        model = str(point.key["model"])
        fact = facts.get(model)
        if fact and fact["dispatch"] == "verified" and model in expected_null:
            point.skip_reason = ""
            overrides[model] = f"predicted null ({expected_null[model]}), but the fused kernel ran: measured"
    return overrides


def verify(
    points: list[Point],
    open_point: Callable[[Point], CommandRunner],
    settings: CommandSettings,
    run_dir: Path,
    on_model: Callable[[str], None] = lambda _: None,
) -> dict[str, VerificationEntry]:
    """Run the verification pass for every model not verified yet in this run directory (resume never repeats
    one), recording each model as soon as its two runs are done. Returns the whole record."""
    check = settings.dispatch_check
    assert check is not None and check.enabled
    record = read_record(run_dir)
    for point in points:
        model = str(point.key["model"])
        if model in record:
            continue
        on_model(model)
        runner = open_point(point)
        try:
            runs = [verification_run(runner, path, check) for path in (FUSED, FALLBACK)]
        finally:
            runner.close()
        record[model] = {"dff": int(point.key["dff"]), "runs": runs}
        write_text_atomic(Path(run_dir) / RECORD, json.dumps({"models": record}, indent=1) + "\n")
    return record
