"""The addendum's findings about how the run itself was taken, read from its run directory: the guard's evidence
(guard.csv beside samples.csv, harness.measure.guard: how many runs it sampled, which were contended and re-run and
why, the host lock's wait, the probes this host lacked) and a margin derived from the null arm (ADR 0007's rule,
harness.analysis.points.null_margin). Kept apart from the analysis findings: these describe the measurement, not the
decision, and a run without a guard or a derived margin adds nothing."""

from __future__ import annotations

import csv
from pathlib import Path

from harness.analysis.decision.context_axis import depth_statement
from harness.analysis.decision.decision_json import DecisionJSON
from harness.analysis.points import null_margin
from harness.analysis.points.inputs import run_dir_of
from harness.measure.guard import GUARD_FILE
from harness.output.markdown_text import md_text
from harness.runs.rundir import RunDirectory

CONTENDED = "contended:"


def run_findings(raw_data: Path, decision: DecisionJSON) -> list[str]:
    """Findings lines (markdown list items) for the run the addendum's raw data belongs to: whether one cap fits
    every depth of a context axis, the null-arm margin, the guard's evidence."""
    depths = depth_statement(decision.get("families") or [], decision.get("recommended_cap"))
    out = [f"- Context: {md_text(depths)}"] if depths else []
    run_dir = run_dir_of(raw_data)
    if run_dir is None or not RunDirectory(run_dir).is_run():
        return out
    meta = RunDirectory(run_dir).read_meta()
    derived = null_margin.recorded([run_dir])
    if derived is not None:
        out.append(f"- Margin: {md_text(derived.sentence())}.")
    guard = meta.get("guard")
    if isinstance(guard, dict):
        out.append(f"- Guard: {md_text(guard_summary(run_dir, guard))}.")
    return out


def guard_summary(run_dir: Path, guard: dict[str, object]) -> str:
    """One sentence of what the guard saw (or why it was off)."""
    if not guard.get("enabled"):
        return f"off ({guard.get('why', 'not recorded')})"
    rows = _guard_rows(run_dir / GUARD_FILE)
    samples = [r for r in rows if r.get("sample") != "lock"]
    contended = [r for r in samples if r.get("contended") == "1"]
    reasons = sorted({r.get("detail", "") for r in contended})
    lock = next((r.get("detail", "") for r in rows if r.get("sample") == "lock"), "no host lock")
    samples_csv = RunDirectory(run_dir).read_samples()
    marked = int(samples_csv["error"].fillna("").astype(str).str.startswith(CONTENDED).sum())
    absent = guard.get("absent")  # a list of probe names where recorded
    text = f"{len(samples)} samples in {GUARD_FILE}, {len(contended)} contended"
    if marked:
        text += f"; {marked} runs marked contended, excluded and re-run ({'; '.join(reasons[:3])})"
    text += f"; {lock}"
    if isinstance(absent, list) and absent:
        text += f"; probes absent on this host: {', '.join(map(str, absent))}"
    return text


def _guard_rows(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))
