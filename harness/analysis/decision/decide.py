"""The decision over every shape family of a run: each family's curve, crossover and decision
(harness.analysis.decision.curve, .cap_move), then the overall one. docs/design.md §7:

Several deciding families: a raise needs every family (intersection-union test, no correction); a lower needs one, so
each family's lower test runs at the Bonferroni level 1 − α/k. The overall decision is the most conservative
(smallest) family cap. Drift between points (between_points) widens a layer family's curve before it is read.
Points measured in one visit each, not interleaved (an imported mlxcel sweep CSV), or in passes whose earlier half
holds one round, withhold raise and lower: a drift of one arm cannot be told from a ratio there, or not bounded
(sweep_drift.one_visit_words, one_round_words; issue 36). How each point was measured is read from the summary's
PassCol fields, never from its words (a summary read back restores them: point_summary.pass_columns).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from harness.analysis.decision import decision_words as words
from harness.analysis.decision.cap_move import Sweep, recommend
from harness.analysis.decision.curve import Curve, family_curve, find_crossover
from harness.analysis.decision.decision_record import (
    Decision,
    DecisionResult,
    FamilyDecision,
    Withheld,
    deciding_families,
)
from harness.analysis.decision.vocabulary import Action, WithheldWhy
from harness.analysis.points.between_points import widen_for_scatter
from harness.analysis.points.stats import DECIDED, family_labels
from harness.analysis.points.sweep_drift import marked_unusable, one_visit_words, unusable, unusable_words
from harness.config.schema import kind_meaning, kind_of_family
from harness.policy import Interpolation, Policy
from harness.runs.summary_columns import PassCol, SummaryCol


def stage_families(summary: pd.DataFrame, interpolation: Interpolation = "linear") -> list[StagedFamily]:
    """Each shape family's curve of valid points, as `decide` reads a summary (the allocation of further rounds
    (harness.analysis.rounds.decision_value) perturbs these curves and decides again)."""
    labels = family_labels(summary).to_numpy()
    valid = summary[SummaryCol.VERDICT].isin(DECIDED).to_numpy() if len(summary) else np.array([], bool)
    staged = []
    for family in dict.fromkeys(labels):
        positions = np.flatnonzero((labels == family) & valid)
        positions = positions[np.argsort(summary["dff"].to_numpy()[positions], kind="stable")]
        curve, rounds, notes = family_curve(summary, positions, interpolation)
        rows = tuple(int(i) for i in np.flatnonzero(labels == family))
        unchecked = one_visit_words() if _any_of(summary, PassCol.ONE_VISIT, positions) else ""
        short = _any_of(summary, PassCol.ONE_ROUND_PASS, positions)
        bound, passes = _as_measured(summary, positions) if len(curve.dffs) == len(positions) else (None, 1)
        dropped = summary[PassCol.DROPPED].iloc[positions].tolist() if PassCol.DROPPED in summary else []
        slowed = _slowed(dropped, rounds)
        staged.append(
            StagedFamily(
                family=str(family),
                curve=curve,
                rounds=rounds,
                notes=notes,
                rows=rows,
                unchecked=unchecked,
                short_passes=short,
                bound=bound,
                passes=passes,
                slowed=slowed,
            )
        )
    return staged


def _any_of(summary: pd.DataFrame, column: str, positions: np.ndarray) -> bool:
    """Whether the boolean PassCol `column` holds at any of the positions (a frame without it, a summary made by
    hand: at none)."""
    return column in summary and bool(summary[column].to_numpy(bool)[positions].any())


def _slowed(dropped: Sequence[Sequence[float]], rounds: np.ndarray | None) -> tuple[float, float]:
    """The share of the family's runs the outlier screen dropped and their median ln deviation from the arm's median,
    from each point's PassCol.DROPPED (the deviations of its dropped runs): how often, and by how much, the rounds
    hint's simulated sweeps slow a run. (0, 0) when none was dropped."""
    found = [float(x) for point in dropped for x in point]
    runs = 2.0 * float(np.sum(rounds)) if rounds is not None else 0.0
    if not found or runs <= 0:
        return 0.0, 0.0
    return min(len(found) / runs, 1.0), float(np.log1p(np.median(found)))


def _as_measured(summary: pd.DataFrame, positions: np.ndarray) -> tuple[np.ndarray, int]:
    """Each point's drift-bound variance factor and the family's passes, from the summary's PassCol columns (the
    analysis of the runs carries them; a summary read back restores them, point_summary.pass_columns): what the rounds
    hint needs to tell a point's per-run noise from the bound, and to simulate the sweep in passes. A frame without
    them (a summary made by hand) was measured in one pass with no bound."""
    if PassCol.DRIFT_BOUND not in summary:
        return np.ones(len(positions)), 1
    bound = summary[PassCol.DRIFT_BOUND].to_numpy(float)[positions]
    return bound, 2 if _any_of(summary, PassCol.TWO_PASSES, positions) else 1


@dataclass(frozen=True, kw_only=True)
class StagedFamily:
    """One shape family's curve before its decision (what decide builds from a summary, simulations directly)."""

    family: str
    curve: Curve
    rounds: np.ndarray | None = None
    notes: tuple[str, ...] = ()
    rows: tuple[int, ...] = ()
    # why a drift of one arm is not excluded at the curve's points ('' when the passes check it:
    # sweep_drift.one_visit_words): raise and lower are withheld
    unchecked: str = ""
    # measured in passes, a point's earlier half of one round: a move needs 2·MIN_PASS_ROUNDS rounds at the points it
    # reads (cap_move.recommend; sweep_drift.one_round_words)
    short_passes: bool = False
    # the rounds hint's model of how the points were measured (cap_move.Sweep): each point's drift-bound variance
    # factor in se² (None: none) and the passes over the grid
    bound: np.ndarray | None = None
    passes: int = 1
    # the share of the family's runs the outlier screen dropped and their median slowdown (ln): the rounds hint's
    # simulated sweeps slow as many
    slowed: tuple[float, float] = (0.0, 0.0)


def _no_families(result: DecisionResult) -> DecisionResult:
    return DecisionResult(families=(), crossover=result.crossover, decision=result.decision)


def decide_curves(
    staged: Sequence[StagedFamily],
    current_default: int | None,
    policy: Policy = Policy(),
    withhold: str = "",
    table: bool = True,
    sweep_drift: float | None = None,
    hint: bool = True,
) -> DecisionResult:
    """Each family's crossover and decision, then the overall one (_overall). Lowers are tested at the Bonferroni
    level 1 − α/k over the k deciding families (any one can trigger a lower), raises at the plain level.
    `sweep_drift`: the p-value of the two-pass residual test for drift of one arm (sweep_drift.drift_trend, Bonferroni
    over the families); below sweep_drift.SWEEP_DRIFT_ALPHA the data are unusable for a decision: keep, say so.
    `hint`: simulate a keep's rounds hint (rounds_hint; False in the engine's own simulations, which read only the
    action and cap)."""
    if unusable(sweep_drift):
        withhold = "; ".join(filter(None, [withhold, unusable_words(sweep_drift)]))
    unchecked = "; ".join(dict.fromkeys(s.unchecked for s in staged if s.unchecked))
    why: WithheldWhy = "drift_not_excluded" if unchecked else "aa_drift"
    withhold = "; ".join(filter(None, [withhold, unchecked]))
    # drift between points widens the curve the decision reads (between_points), never a point's own interval; only
    # a kernel family's points differ in Dff alone (a whole-model family's are different models, whose ratios need
    # not be monotone in Dff)
    widened = [
        widen_for_scatter(s.curve.theta, s.curve.se, s.curve.df)
        if not kind_meaning(kind_of_family(s.family)).whole_model
        else (s.curve.se, s.curve.df, 0.0)
        for s in staged
    ]
    scatter = [math.sqrt(tau2) if tau2 > 0 else None for _, _, tau2 in widened]
    staged = [
        replace(s, curve=replace(s.curve, se=se, df=df)) if tau2 > 0 else s
        for s, (se, df, tau2) in zip(staged, widened, strict=True)
    ]
    crossovers = [find_crossover(s.curve, policy) for s in staged]
    draft = [
        FamilyDecision(
            family=s.family,
            rows=(),
            crossover=c,
            decision=Decision(action="keep", recommended_cap=None, reason=""),
            valid_points=len(s.curve.dffs),
        )
        for s, c in zip(staged, crossovers, strict=True)
    ]
    lower_confidence = 1.0 - (1.0 - policy.confidence) / len(deciding_families(draft))
    families = []
    for s, crossover, tau in zip(staged, crossovers, scatter, strict=True):
        decision = recommend(
            s.curve,
            crossover,
            current_default,
            policy,
            lower_confidence=lower_confidence,
            rounds=s.rounds,
            withhold=withhold,
            withhold_why=why,
            table=table,
            short_passes=s.short_passes,
            sweep=Sweep(bound=s.bound, passes=s.passes, withhold=s.unchecked, slowed=s.slowed) if hint else None,
        )
        if tau is not None:
            decision = replace(
                decision, reason=f"{decision.reason} {words.scatter_note(tau)}", drift_between_points=tau
            )
        if s.notes:
            decision = replace(decision, reason=f"{decision.reason} {words.curve_notes(s.notes)}")
        families.append(
            FamilyDecision(
                family=s.family, rows=s.rows, crossover=crossover, decision=decision, valid_points=len(s.curve.dffs)
            )
        )
    candidates = deciding_families(families)
    binding = min(
        candidates, key=lambda f: math.inf if f.decision.recommended_cap is None else f.decision.recommended_cap
    )
    overall = _overall(binding, candidates, current_default)
    if unusable(sweep_drift):
        overall = marked_unusable(overall, sweep_drift)
    return DecisionResult(
        families=tuple(families), crossover=binding.crossover, decision=overall, binding=binding.family
    )


def _overall(binding: FamilyDecision, candidates: Sequence[FamilyDecision], current_default: int | None) -> Decision:
    """One cap must serve every deciding family, so the smallest family cap wins: a raise needs every family (each
    tested at the plain level: intersection-union), a lower needs one (each tested at a Bonferroni level). A keep
    that some families would have raised records the smallest such raise as withheld."""
    decision = binding.decision
    if len(candidates) == 1 or decision.recommended_cap is None:
        return decision
    if current_default is not None and decision.action != "set":
        cap = decision.recommended_cap
        action: Action = "keep" if cap == current_default else ("raise" if cap > current_default else "lower")
        decision = replace(decision, action=action)
    held = None
    if decision.action not in ("lower", "raise"):
        raisers = [f for f in candidates if f.decision.action == "raise"]
        others = tuple(words.family_words(f.family) for f in candidates if f.decision.action != "raise")
        if raisers:
            smallest = min(f.decision.recommended_cap or 0 for f in raisers)
            held = Withheld(move="raise", cap=smallest, why="family_disagrees", families=others)
    who = words.binding_family(decision.action, binding.family, len(candidates), held.words() if held else "")
    return replace(decision, reason=f"{who}. {decision.reason}", withheld=held or decision.withheld)


def decide(
    summary: pd.DataFrame,
    current_default: int | None,
    policy: Policy = Policy(),
    withhold: str = "",
    sweep_drift: float | None = None,
) -> DecisionResult:
    """Crossover and decision per shape family, then overall (the smallest deciding family cap)."""
    staged = stage_families(summary, policy.interpolation)
    if not staged:
        empty = np.array([])
        staged = [
            StagedFamily(
                family="", curve=Curve(dffs=empty, theta=empty, se=empty, df=empty, interpolation=policy.interpolation)
            )
        ]
        return _no_families(decide_curves(staged, current_default, policy, withhold))
    return decide_curves(staged, current_default, policy, withhold, sweep_drift=sweep_drift)
