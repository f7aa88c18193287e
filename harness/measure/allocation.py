"""`moecal sweep --until-decided`: after the first pass, rounds go only where they can still change the decision
(harness.analysis.rounds.decision_value), until it is settled, the budget is spent or no affordable round can change it.

Each look re-analyses the run directory with the engine `moecal crossover` runs (so a resumed sweep picks up where
it stopped), reads the decision at the look level 1 − α/K, maps every curve point back to the measured points
behind it, and prices one more round there from the point's own rows (wall time between its runs: process starts
and model loads included, which a command workload's `seconds` leaves out). What it did is recorded in meta.json
under `until_decided`, which the report and the console show.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

import numpy as np
import pandas as pd

from harness.analysis.decision.decide import StagedFamily, decide_curves, stage_families
from harness.analysis.decision.decision_record import DecisionResult
from harness.analysis.decision.pipeline import Analysis, analyse_path, withheld_reason
from harness.analysis.points.stats import DECIDED
from harness.analysis.points.sweep_drift import unusable
from harness.analysis.rounds.decision_cost import WhiteNoise
from harness.analysis.rounds.decision_cost import until_decided as simulate_until_decided
from harness.analysis.rounds.decision_value import (
    Key,
    Outcome,
    StopRule,
    final_stop,
    flipped,
    next_step,
    outcome_words,
    settle_words,
)
from harness.analysis.rounds.run_options import recorded_options
from harness.config.duration import parse_duration
from harness.config.schema import Measure
from harness.errors import InputError
from harness.measure.protocol import Point
from harness.runs.provenance_keys import UNTIL_DECIDED
from harness.runs.run_meta import RunMeta, with_look_level
from harness.runs.rundir import RunDirectory
from harness.runs.summary_columns import SummaryCol

RECORD = UNTIL_DECIDED  # the meta.json key (harness.runs.provenance_keys)


class UntilDecidedJSON(TypedDict):
    """meta.json's `until_decided` (Allocation.as_record): how the loop stopped and why, its looks and their
    decisions, the stop rule's limits, the time and runs it spent, and the rounds each point got."""

    stop: str
    reason: str
    settled: bool
    flipped: bool
    looks_decisions: list[str]
    looks: int
    max_looks: int
    max_rounds: int
    first_rounds: int
    budget_s: float | None
    spent_s: float
    extra_runs: int
    expected_extra_s_after_first_pass: float | None
    action: str  # the final look's action ('' before a look)
    cap: int | None
    rounds: dict[str, int]


@dataclass
class Allocation:
    """What the until-decided loop did: the record meta.json keeps."""

    rule: StopRule
    budget_s: float | None
    looks: int = 0
    stop: str = ""
    outcome: Outcome = ("", None)  # the final look's: the decision of all the runs at the look level
    history: list[Outcome] = field(default_factory=list)  # every look's decision, in order (this sweep's looks)
    to_settle: str = ""  # what would settle a decision the loop did not settle (decision_value.settle_words)
    # a final keep's hint names no rounds per arm within the round cap (more than the cap, or none up to its budget)
    keep_undecided: bool = False
    spent_s: float = 0.0
    extra_runs: int = 0
    expected_extra_s: float | None = None  # after the first pass: simulated device time still to a decision
    rounds: dict[str, int] = field(default_factory=dict)

    def as_record(self) -> UntilDecidedJSON:
        stop = final_stop(self.stop, self.history, self.keep_undecided) if self.stop else ""
        went_back = flipped(self.history)
        reason = self.rule.describe(stop, self.history) if stop else ""
        if went_back and stop != "flipped":
            reason += f"; the decision flipped across looks ({' → '.join(outcome_words(o) for o in self.history)})"
        settled = stop == "decided"
        return {
            "stop": stop,
            "reason": reason + ("" if settled or not self.to_settle else f"; to settle it: {self.to_settle}"),
            "settled": settled,
            "flipped": went_back,
            "looks_decisions": [outcome_words(o) for o in self.history],
            "looks": self.looks,
            "max_looks": self.rule.looks,
            "max_rounds": self.rule.max_rounds,
            "first_rounds": self.rule.first_rounds,
            "budget_s": self.budget_s,
            "spent_s": round(self.spent_s, 1),
            "extra_runs": self.extra_runs,
            "expected_extra_s_after_first_pass": self.expected_extra_s,
            "action": self.outcome[0],
            "cap": self.outcome[1],
            "rounds": self.rounds,
        }


def rule_for(measure: Measure, first_rounds: int) -> StopRule:
    """The stop rule of a config's `measure:` block, at the policy the sweep records (its confidence and margin)."""
    return StopRule(
        first_rounds=first_rounds,
        max_rounds=max(measure.max_rounds, first_rounds),
        looks=measure.looks,
        policy=measure.policy,
        passes=measure.passes,
    )


def _at_look(analysis: Analysis, rule: StopRule, staged: Sequence[StagedFamily], hint: bool = True) -> DecisionResult:
    """The decision of `staged` (the analysis's curves, or a look's perturbation of them) at the look level, as the
    final analysis of the run reads it: the A/A withholding and the pass test (passes that disagree: keep) included;
    `hint` False for a look's perturbations (only their action and cap are read)."""
    withhold = withheld_reason(analysis.aa_beyond_margin, analysis.options.policy.margin)
    policy = analysis.options.policy.at(rule.look_confidence)
    return decide_curves(
        staged, analysis.current_default, policy, withhold, table=False, sweep_drift=analysis.sweep_drift, hint=hint
    )


def _decider(analysis: Analysis, rule: StopRule) -> Callable[[Sequence[StagedFamily]], Outcome]:
    def decide(staged: Sequence[StagedFamily]) -> Outcome:
        result = _at_look(analysis, rule, staged, hint=False)
        return result.decision.action, result.decision.recommended_cap

    return decide


def _behind(summary: pd.DataFrame, family: StagedFamily, dff: float) -> list[int]:
    """The summary rows a curve point stands for (models of the family that share its Dff and have an interval)."""
    return [
        r
        for r in family.rows
        if float(summary["dff"].iloc[r]) == dff and summary[SummaryCol.VERDICT].iloc[r] in DECIDED
    ]


def _identity(values: Mapping[str, object]) -> tuple[str, str, float, float]:
    """(workload, model, d_model, dff): what tells a sweep's points apart (d_model blank for command workloads)."""
    d_model = pd.to_numeric(pd.Series([values.get("d_model")]), errors="coerce").fillna(0).iloc[0]
    return str(values.get("workload")), str(values.get("model")), float(d_model), float(values.get("dff") or -1)


def _points_of(summary: pd.DataFrame, rows: list[int], points: Sequence[Point]) -> list[Point]:
    wanted = {_identity(summary.iloc[r]) for r in rows}
    return [p for p in points if not p.skip_reason and _identity(p.key) in wanted]


class _PointRows:
    """A samples frame with every row's point identity worked out once (it costs about 0.3 ms a row, and a look asks
    for every point's rows: per call that was points × rows between two timed runs)."""

    def __init__(self, samples: pd.DataFrame):
        self.samples = samples
        rows = samples.to_dict("records")
        self.identity = pd.Series([_identity(row) for row in rows], index=samples.index, dtype=object)

    def of(self, point: Point) -> pd.DataFrame:
        return self.samples[self.identity == _identity(point.key)]


def run_seconds(rows: _PointRows, point: Point) -> float | None:
    """Wall seconds per run at one point: the median gap between its consecutive rows (a run, plus what the runner
    does between runs), else its median timed `seconds`; None when it has no ok row."""
    mine = rows.of(point)
    mine = mine[mine["status"] == "ok"]
    if mine.empty:
        return None
    moments = pd.to_datetime(mine["timestamp"], errors="coerce", utc=True).dropna().sort_values()
    gaps = moments.diff().dt.total_seconds().dropna()
    gaps = gaps[(gaps > 0) & (gaps < 10 * gaps.median())] if len(gaps) else gaps
    if len(gaps):
        return float(gaps.median())
    seconds = pd.to_numeric(mine["seconds"], errors="coerce").dropna()
    return float(seconds.median()) if len(seconds) else None


def rounds_started(rows: _PointRows, point: Point) -> int:
    """Rounds the point has begun (the next round index to run)."""
    rounds = pd.to_numeric(rows.of(point)["round"], errors="coerce").dropna()
    return int(rounds.max()) + 1 if len(rounds) else 0


def expected_extra_seconds(
    staged: Sequence[StagedFamily], cost: dict[Key, float], rule: StopRule, current_default: int | None
) -> float | None:
    """Device seconds still to a decision, simulated with today's estimates as the truth and their per-round spread
    as the noise (harness.analysis.rounds.decision_cost), when every family shares one grid; None otherwise."""
    grids = {tuple(s.curve.dffs) for s in staged}
    if len(grids) != 1 or not staged or not len(staged[0].curve.dffs):
        return None
    grid = np.array(next(iter(grids)))
    truth = np.stack([s.curve.theta for s in staged])
    rounds = np.stack([np.asarray(s.rounds, float) for s in staged])
    # se·√n is the spread of one round's paired difference; each arm's run carries 1/√2 of it
    noise = float(np.nanmedian(np.stack([s.curve.se for s in staged]) * np.sqrt(rounds / 2)))
    if not (math.isfinite(noise) and noise > 0):
        return None
    price = np.array([[cost.get((f, i), 0.0) for i in range(len(grid))] for f in range(len(staged))])
    rng = np.random.default_rng(0)
    extra = []
    for _ in range(8):
        sim = simulate_until_decided(WhiteNoise(truth, noise, rng), grid, len(staged), rule, current_default)
        extra.append(float(np.sum((sim.rounds - rule.first_rounds) * price)))
    return float(np.mean(extra))


def allocate(
    run_dir: Path,
    points: Sequence[Point],
    measure_rounds: Callable[[Point, int], int],
    rule: StopRule,
    current_default: int | None,
    budget_s: float | None,
    started: float,
    say: Callable[[str], None],
    looks_before: int = 0,
    on_look: Callable[[Allocation], None] | None = None,
) -> Allocation:
    """The loop after the first pass (module docstring). `measure_rounds(point, total_rounds)` runs the point up to
    that many rounds and returns the rows written; `started` is the sweep's time.monotonic() start (the budget
    counts the first pass too); `looks_before` the looks a resumed run already made; `on_look(record)` runs after
    every look, before its rounds are measured (the sweep saves the record there: an interrupted sweep resumes at
    the next look, with the alpha spent so far, and is analysed at the look level)."""
    record = Allocation(rule, budget_s, looks=looks_before)
    while True:
        analysis = analyse_path(run_dir, recorded_options(run_dir, current_default))
        rows = None if analysis.samples is None else _PointRows(analysis.samples)
        staged = stage_families(analysis.summary, analysis.options.policy.interpolation)
        behind: dict[Key, list[Point]] = {}
        for f, family in enumerate(staged):
            for i, dff in enumerate(family.curve.dffs):
                found = _points_of(analysis.summary, _behind(analysis.summary, family, dff), points)
                if found:
                    behind[(f, i)] = found
        cost: dict[Key, float] = {}
        for key, found in behind.items():
            per_run = [run_seconds(rows, p) for p in found] if rows is not None else []
            cost[key] = sum((s or 0.0) * len(p.arms) for s, p in zip(per_run, found, strict=True))
        rounds_done = {k: int(staged[k[0]].rounds[k[1]]) for k in behind}  # type: ignore[index]
        decide = _decider(analysis, rule)
        record.spent_s = time.monotonic() - started
        left = None if budget_s is None else budget_s - record.spent_s
        if record.looks == 0:
            record.expected_extra_s = expected_extra_seconds(staged, cost, rule, analysis.current_default)
            if record.expected_extra_s is not None:
                say(f"until decided: after the first pass, about {record.expected_extra_s / 60:.1f} min more expected")
        step = next_step(staged, rounds_done, cost, rule, decide, record.looks, left, unusable(analysis.sweep_drift))
        if step.stop is None and left is not None and left <= 0:  # the budget is spent: this look is the last
            step = dataclasses.replace(step, stop="budget", rounds={})
        record.looks += 1
        record.outcome = step.outcome
        record.history.append(step.outcome)
        flips = ", ".join(
            f"{behind[k][0].label} {p:.0%}" for k, p in sorted(step.flip.items(), key=lambda x: -x[1]) if p > 0
        )
        say(
            f"look {record.looks}/{rule.looks}: {step.outcome[0]} {step.outcome[1] or ''} at {rule.look_confidence:.4f}"
            + (f"; could still change it: {flips}" if flips else "")
        )
        if step.stop is not None:
            # every stop is read at a look on all the runs measured so far (a spent budget included: the look after
            # the last rounds), so the record's decision is the fixed analysis of the run at the look level
            record.stop = step.stop
            final_decision = _at_look(analysis, rule, staged).decision
            record.to_settle = settle_words(
                final_decision.rounds_dff, final_decision.rounds_needed, final_decision.action, rule.max_rounds
            )
            needs = final_decision.rounds_needed
            hinted = final_decision.action == "keep" and final_decision.rounds_dff is not None
            record.keep_undecided = hinted and (needs is None or needs > rule.max_rounds)
            break
        if on_look is not None:
            on_look(record)
        for key, extra in step.rounds.items():
            for point in behind[key]:
                now = rounds_started(rows, point) if rows is not None else rule.first_rounds
                record.extra_runs += measure_rounds(point, min(now + extra, rule.max_rounds))
    final = _PointRows(RunDirectory(run_dir).read_samples())
    record.rounds = {p.label: rounds_started(final, p) for p in points if not p.skip_reason}
    told = record.as_record()
    say(f"until decided: stopped ({told['stop']}): {told['reason']}")
    return record


# The most rounds per point a look can analyse: the drift model (harness.analysis.points.stats.drift_variance) inverts
# an n × n covariance 80 times per run count n, so a look's cost grows as n³ (at 200 rounds about a second; the
# until-decided simulation at 1000 did not finish in minutes), and at 200 rounds an interval is already ~4.5× narrower
# than at the 10 of a fixed sweep.
MAX_ROUNDS = 200
ROW_BYTES = 4096  # one sample row as an analysis holds it (every column, pandas objects): generous


def rounds_ceiling(points: int, arms: int = 2) -> tuple[int, str]:
    """(the most rounds per point this sweep may ask for, why): MAX_ROUNDS, or fewer when the rows of that many
    rounds of every point would not fit in half the memory available now."""
    import psutil

    available = psutil.virtual_memory().available
    by_memory = int(available // 2 // (max(points, 1) * arms * ROW_BYTES))
    if by_memory < MAX_ROUNDS:
        return max(by_memory, 1), (
            f"the rows of {points} points × {arms} arms must fit in half the {available / 2**30:.1f} GiB available"
        )
    return MAX_ROUNDS, "each look's drift model grows as the cube of a point's rounds"


def check_max_rounds(max_rounds: int, points: int, where: str = "measure.max_rounds") -> None:
    """InputError (one line, before anything runs) when `max_rounds` exceeds rounds_ceiling: 1e12 would allocate
    terabytes at the first look's simulation, 100000 would never finish it."""
    ceiling, why = rounds_ceiling(points)
    if max_rounds > ceiling:
        raise InputError(where, str(max_rounds), f"at most {ceiling} rounds per point ({why})")


def budget_seconds(value: str | float | None) -> float | None:
    return None if value is None else parse_duration(str(value))


def record_into(meta: RunMeta, record: Allocation) -> None:
    """The record in a run's meta.json, and in its policy the level the looks read the decision at (written there
    only: the sweep's end and every later analysis of the run, finished or interrupted, read it from the policy)."""
    meta.provenance[RECORD] = record.as_record()
    meta.policy = with_look_level(meta.policy, record.rule.look_confidence)


def save(run_dir: Path, record: Allocation) -> None:
    """Write the record into meta.json (after the sample writer closed: it rewrites meta.json per row)."""
    run = RunDirectory(run_dir)
    meta = run.read_record()
    record_into(meta, record)
    run.write_record(meta)
