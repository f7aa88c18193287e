"""Adaptive Dff refinement for `layer` workloads and synthetic command sweeps (docs/design.md §7): after the first pass,
add grid points inside the crossover's bracket until the interval (and the bracket) are narrow enough or a run
budget is spent. Each new Dff is the candidate most likely to change the decision (next_dff), else the bisection.

A `layer` sweep can measure any Dff, so where the crossover interval is wide the cheapest way to narrow it is a new
point between the two measured Dff that bracket the crossing (interpolation error and the bracket's width shrink
together). Each step re-analyses the run directory with the same engine as `moecal crossover`, so a resumed sweep
picks up where it stopped: points already refined are measured rows like any other.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from harness.analysis.decision.decide import StagedFamily, decide_curves, stage_families
from harness.analysis.decision.decision_record import FamilyDecision, deciding_families
from harness.analysis.decision.pipeline import Analysis, analyse_path
from harness.analysis.evidence.physics_prior import predicted_crossover
from harness.analysis.rounds.decision_value import Decider, Outcome, StopRule, new_point_flip
from harness.analysis.rounds.run_options import recorded_options
from harness.config.schema import Measure
from harness.measure.physics_points import sweep_physics
from harness.measure.protocol import Point, Workload
from harness.runs.summary_columns import SummaryCol


def refine_target(family: FamilyDecision, grid: int, target_width: float) -> int | None:
    """The next Dff to measure for one family (a multiple of `grid` halving the crossing's bracket), or None when
    both its crossover interval and the bracket are narrower than `target_width` × the crossover, or the bracket
    cannot split. The bracket counts because the interval only covers sampling error *given* straight-line
    interpolation: two far-apart points give a narrow interval around a possibly wrong line, and the true crossing
    can be anywhere between them."""
    c = family.crossover
    if c.outcome != "crossing" or c.dff is None:
        return None
    low = c.min_dff if c.ci_low == -math.inf else c.ci_low
    high = c.max_dff if c.ci_high == math.inf else c.ci_high
    a, b = next(x for x in c.crossings if x.dff == c.dff).between  # the crossing the crossover is
    if max(high - low, b - a) / c.dff <= target_width:
        return None
    middle = round((a + b) / 2 / grid) * grid
    return middle if a < middle < b else None


def next_dff(
    family: FamilyDecision,
    staged: Sequence[StagedFamily],
    decide: Decider,
    grid: int,
    target_width: float,
    rounds: int,
    predicted: float | None = None,
) -> int | None:
    """The next Dff for one family by its value to the decision: among the bracket's midpoint (refine_target), its
    quarter points, the Dff the decision names to measure next and the bandwidth prior's predicted crossover
    (`predicted`, harness.analysis.evidence.physics_prior), the one whose measurement is most likely to
    change the decision (harness.analysis.rounds.decision_value.new_point_flip); the midpoint when none changes it with
    a chance of 5% or more (then narrowing the crossover is all a new point does). None when refine_target says the
    family is narrow enough."""
    middle = refine_target(family, grid, target_width)
    if middle is None:
        return None
    c = family.crossover
    a, b = next(x for x in c.crossings if x.dff == c.dff).between
    candidates = {middle, *(round((a + (b - a) * q) / grid) * grid for q in (0.25, 0.75))}
    if c.next_dff:
        candidates.add(int(c.next_dff))
    if predicted is not None:
        candidates.add(round(predicted / grid) * grid)
    index = next((i for i, s in enumerate(staged) if s.family == family.family), None)
    if index is None:
        return middle
    value = {d: new_point_flip(staged, index, d, rounds, decide) for d in sorted(candidates) if a < d < b}
    best = max(value.values(), default=0.0)
    if best < StopRule.settle_probability or best <= value.get(middle, 0.0):
        return middle  # no candidate is likely to change the decision: narrow the crossover instead
    return min(d for d, v in value.items() if v == best)


def _predicted_crossover(analysis: Analysis, points: Sequence[Point]) -> float | None:
    """Where the measured fallback approaches the device's bandwidth ceiling (harness.analysis.evidence.physics_prior),
    from the summary's median tok/s; None when the device's bandwidth is not known or it never does."""
    summary = analysis.summary
    medians = {
        (str(m), int(d)): {"fallback": float(f)}
        for m, d, f in zip(summary["model"], summary["dff"], summary[SummaryCol.FALLBACK_TOK_S], strict=True)
        if f == f
    }
    physics, _ = sweep_physics(points, medians, str(analysis.provenance.get("device") or ""))
    return predicted_crossover(physics)


def _same_shape(point: Point, row: pd.Series) -> bool:
    """The point belongs to the summary row's family: every key column but Dff agrees (numbers as numbers)."""
    for column in ("workload", "model", "d_model", "top_k", "n_experts", "bits", "group_size", "dtype"):
        mine, theirs = point.key.get(column), row[column]
        try:
            if float(mine) != float(theirs):
                return False
        except (TypeError, ValueError):
            if str(mine) != str(theirs):
                return False
    return True


def refine(
    run_dir: Path,
    workload: Workload,
    points: list[Point],
    measure: Callable[[Point], int],
    settings: Measure,
    current_default: int | None,
) -> int:
    """Measure bisection points (via `measure`, which returns the rows it wrote) until every deciding family's
    crossover interval is narrow enough, no bracket can split, or the next point would exceed the run budget.
    Layer families are refined in a layer sweep, the one `command` family in a command sweep over synthetic
    checkpoints."""
    spent, tried = 0, set()
    while True:
        analysis = analyse_path(run_dir, recorded_options(run_dir, current_default))
        families = deciding_families(analysis.result.families)
        deciding = {f.family for f in families if f.family.startswith(workload.kind)}
        staged = stage_families(analysis.summary, analysis.options.policy.interpolation)

        def decide(curves: Sequence[StagedFamily], analysis: Analysis = analysis) -> Outcome:
            result = decide_curves(curves, analysis.current_default, analysis.options.policy, table=False, hint=False)
            return result.decision.action, result.decision.recommended_cap

        chosen = None
        predicted = _predicted_crossover(analysis, points)
        for family in analysis.result.families:
            if family.family not in deciding:
                continue  # before next_dff: its flip simulations are only worth it for a family that decides
            dff = next_dff(
                family,
                staged,
                decide,
                settings.refine_grid,
                settings.target_crossover_width,
                settings.rounds,
                predicted,
            )
            if dff is None or (family.family, dff) in tried:
                continue
            tried.add((family.family, dff))
            row = analysis.summary.iloc[family.rows[0]]
            template = next((p for p in points if _same_shape(p, row)), None)
            if template is not None and spent + len(template.arms) * settings.rounds > settings.refine_budget_runs:
                return spent  # before point_at: a synth: sweep would make a checkpoint it never measures
            chosen = workload.point_at(template, dff) if template is not None else None
            if chosen is not None and not chosen.skip_reason:
                break
            chosen = None
        if chosen is None or spent + len(chosen.arms) * settings.rounds > settings.refine_budget_runs:
            return spent
        points.append(chosen)
        spent += measure(chosen)
