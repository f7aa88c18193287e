"""The decision as a record: what the policy read (candidate caps, point tests), what it decided (action, cap,
what was withheld and why) and its JSON, the one machine-readable form `crossover --json` prints and the report's
sidecar keeps.

Why apart from the engine (harness.analysis.decision, .cap_policy): the output layer and the tests read these
records, never the curve maths; each record has one `*_json` function here, and the JSON keys are the contract the
addendum and `check-reports` read back. Figures are stored exact (never pre-rounded) except the effect sizes of the
candidate-cap table, so every text formats the one stored number (harness.analysis.figures).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import pandas as pd

from harness.analysis.curve import Crossover, CrossoverOutcome, Direction, format_ci
from harness.analysis.decision_words import point_test_words, withheld_words
from harness.analysis.policy import Action, Move, Side, WithheldWhy
from harness.analysis.stats import AFFORDABLE_ROUNDS, DECIDED, Verdict, family_labels
from harness.config.schema import kind_meaning, kind_of_family
from harness.runs.summary_columns import SummaryCol


@dataclass(frozen=True)
class Switch:
    """One measured point that changes path when the cap moves: the new path's tok/s over the old path's."""

    dff: int
    model: str
    to: Side
    effect: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class CapOption:
    """One candidate cap (each differs from its neighbours in which measured points run fused): the points that
    change path against the current default and the aggregate effect over all the family's measured points (the
    geometric mean of every point's tok/s change; a point that keeps its path counts as 1)."""

    cap: int
    switched: tuple[Switch, ...]
    effect: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class PointTest:
    """One one-sided test the policy read at a measured point (the table's `decision test` column shows it)."""

    dff: int
    model: str
    question: Side  # "fused": does fused win beyond 1 + δ (a raise)? "fallback": beyond 1 − δ (a lower)?
    level: float  # one-sided confidence
    bound: float  # the one-sided bound of the ratio: the lower bound for "fused", the upper bound for "fallback"
    passed: bool

    def words(self, margin: float) -> str:
        return point_test_words(self.question, self.passed, self.bound, self.level, margin)


@dataclass(frozen=True)
class Withheld:
    """A raise or lower the decision held back: the move, its cap and why — the A/A comparison lies beyond the
    margin (`because`: the caller's words), the raise rests only on a straight line across an unmeasured gap
    (`gap`, and the Dff to measure next), or another deciding family does not support it (`families`)."""

    move: Move
    cap: int
    why: WithheldWhy
    because: str = ""
    gap: tuple[int, int] | None = None
    measure_next: int | None = None
    families: tuple[str, ...] = ()

    def words(self) -> str:
        """`a raise to 8192 was withheld because …`."""
        return withheld_words(self.move, self.cap, self.why, self.because, self.gap, self.measure_next, self.families)

    def to_json(self) -> WithheldJSON:
        return {"move": self.move, "cap": self.cap, "why": self.why}


class WithheldJSON(TypedDict):
    """The decision JSON's `withheld` field: what the plot's title says was held back."""

    move: Move
    cap: int
    why: WithheldWhy


@dataclass(frozen=True)
class Decision:
    action: Action
    recommended_cap: int | None
    reason: str  # rendered from the fields below (harness.analysis.decision_words), never parsed back
    # the environment line that applies the cap: set by the analysis from the run's CapTarget, never by the engine
    # (None: no variable sets the cap for this workload, or the decision was not made for a run)
    apply: str | None = None
    caps: tuple[CapOption, ...] = ()  # the candidate-cap table the decision was read from
    tests: tuple[PointTest, ...] = ()  # the point tests the decision read, in the order it read them
    # drift between points (between_points): the relative size √τ² added to every point's interval, None when the
    # points scatter no more than their intervals allow
    drift_between_points: float | None = None
    # the rounds hint of a keep: the measured Dff it is about and the runs per arm that give an 80% chance of a
    # decision there (None with a Dff: no affordable number does, stats.AFFORDABLE_ROUNDS)
    rounds_dff: int | None = None
    rounds_needed: int | None = None
    withheld: Withheld | None = None  # the raise or lower a keep held back, and why
    # the two-pass test for drift of one arm (sweep_drift), its p-value when it made the data unusable for a
    # decision (a raise or lower withheld, or none to withhold), None when it was not run or did not reject
    sweep_drift: float | None = None

    @classmethod
    def from_json(cls, d: DecisionJSON) -> Decision:
        """The decision read back from its JSON record (a report's sidecar): what it decided and why. The candidate
        caps and point tests stay in the record (`candidate_caps`, `tests`): their readers are the texts, which
        read the JSON; the withheld move comes back as far as the record keeps it (move, cap, why)."""
        held = d.get("withheld")
        return cls(
            d["action"],
            d["recommended_cap"],
            d["reason"],
            d["apply"],
            drift_between_points=d.get("drift_between_points"),
            rounds_dff=(d.get("rounds_hint") or {}).get("dff"),
            rounds_needed=(d.get("rounds_hint") or {}).get("rounds"),
            withheld=Withheld(held["move"], held["cap"], held["why"]) if held else None,
            sweep_drift=d.get("sweep_drift"),
        )


@dataclass(frozen=True)
class FamilyDecision:
    family: str
    rows: tuple[int, ...]  # positions in the summary
    crossover: Crossover
    decision: Decision
    valid_points: int = 0  # distinct Dffs with an interval the crossover was located from


@dataclass(frozen=True)
class DecisionResult:
    """Per shape family and overall; the overall decision is the most conservative (smallest) family cap."""

    families: tuple[FamilyDecision, ...]
    crossover: Crossover  # of the binding family
    decision: Decision
    binding: str = ""  # the family whose cap is the overall one (its reason is the overall reason's second part)


def deciding_families(families: Sequence[FamilyDecision]) -> list[FamilyDecision]:
    """The families allowed to set the overall cap.

    A family of a kind that decides the cap (its registry entry: `layer`, the kernels at a fixed shape) decides when a
    run has any; whole-model points (`decode`, `command`) then only show the effect on tok/s. A family also needs two
    valid points to locate a crossover: a single point says which path won there, not where the paths cross. If no
    family qualifies, all do.
    """
    kernel = [f for f in families if kind_meaning(kind_of_family(f.family)).decides_cap] or list(families)
    located = [f for f in kernel if f.valid_points >= 2]
    return located or kernel


class CrossingJSON(TypedDict):
    dff: float | None
    direction: Direction
    between: list[int]
    ci_low: float | None
    ci_high: float | None


class CrossoverJSON(TypedDict):
    """A crossover in the decision JSON (top level for the binding family, and per family)."""

    crossover_dff: float | None
    ci_low: float | None  # null: open below
    ci_high: float | None  # null: open above
    outcome: CrossoverOutcome
    ci_method: str
    ci_text: str | None
    gap: list[int] | None
    next_dff: int | None
    crossings: list[CrossingJSON]


class SwitchJSON(TypedDict):
    dff: int
    model: str
    to: Side
    effect: float | None
    ci_low: float | None
    ci_high: float | None


class CapJSON(TypedDict):
    """One row of the candidate-cap table."""

    cap: int
    switched: list[SwitchJSON]
    effect: float | None
    ci_low: float | None
    ci_high: float | None


class TestJSON(TypedDict):
    """One point test the decision read (the table's `decision test` column)."""

    dff: int
    model: str
    question: Side
    level: float
    bound: float | None
    passed: bool


class DispatchJSON(TypedDict):
    """What the dispatch verification and token counts say about a command-workload point (dispatch_json)."""

    dispatch: str  # harness.analysis.dispatch_evidence.DispatchClass
    dispatch_note: str
    parity_class: str
    parity_calls: int | None
    parity_calls_over: int | None
    fused_vs_ref_worst: float | None
    fused_vs_ref_median: float | None
    fused_vs_truth_worst: float | None
    fused_vs_truth_median: float | None
    tokens_fallback: float | None
    tokens_fused: float | None
    tokens_differ: bool


class PointJSON(TypedDict):
    """One measured point in the decision JSON (point_json); the dispatch fields only on command-workload points.
    Sidecars before 2026-12 call `ratio_of_medians` `ratio` (read both with ratio_of_medians)."""

    model: str
    dff: int
    family: str
    fallback_tok_s: float | None
    fused_tok_s: float | None
    ratio_of_medians: float | None
    estimate: float | None
    ci_low: float | None
    ci_high: float | None
    method: str
    verdict: Verdict
    unstable: bool
    n_fallback: int
    n_fused: int
    null_ratio: float | None
    outliers: str
    reason: str
    decides: bool
    decision_test: TestJSON | None
    dispatch: NotRequired[str]
    dispatch_note: NotRequired[str]
    parity_class: NotRequired[str]
    parity_calls: NotRequired[int | None]
    parity_calls_over: NotRequired[int | None]
    fused_vs_ref_worst: NotRequired[float | None]
    fused_vs_ref_median: NotRequired[float | None]
    fused_vs_truth_worst: NotRequired[float | None]
    fused_vs_truth_median: NotRequired[float | None]
    tokens_fallback: NotRequired[float | None]
    tokens_fused: NotRequired[float | None]
    tokens_differ: NotRequired[bool]


class RoundsHintJSON(TypedDict):
    dff: int
    rounds: int | None
    affordable: int


class FamilyJSON(CrossoverJSON):
    """One shape family's decision (runs with several families)."""

    family: str
    recommended_cap: int | None
    action: Action
    reason: str
    candidate_caps: list[CapJSON]
    tests: list[TestJSON]
    decides: bool


class DecisionJSON(CrossoverJSON):
    """The machine-readable decision (decision_json): the binding family's crossover, every point, what was decided
    and why, and the settings that re-derive it (harness.analysis.pipeline.Analysis.as_json). Keys a record of an
    older format lacks are NotRequired and read with .get."""

    points: list[PointJSON]
    recommended_cap: int | None
    action: Action
    reason: str
    apply: str | None
    candidate_caps: list[CapJSON]
    tests: list[TestJSON]
    drift_between_points: NotRequired[float | None]
    rounds_hint: NotRequired[RoundsHintJSON | None]
    withheld: NotRequired[WithheldJSON | None]
    sweep_drift: NotRequired[float]
    binding_family: NotRequired[str]
    families: NotRequired[list[FamilyJSON]]
    # the settings (Analysis.as_json)
    current_default: NotRequired[int | None]
    cap_env: NotRequired[str]
    noise_scale: NotRequired[float | None]
    aa_points: NotRequired[int]
    aa_beyond_margin: NotRequired[list[str]]
    excludes: NotRequired[dict[str, str]]
    confidence: NotRequired[float]
    margin: NotRequired[float]
    grid: NotRequired[int]
    interpolation: NotRequired[str]


# --- JSON ---------------------------------------------------------------------------------------------------------


def _number(value: float | None, digits: int) -> float | None:
    """JSON-safe: NaN and ±inf become null."""
    return round(float(value), digits) if value is not None and math.isfinite(value) else None


def _exact(value: object) -> float | None:
    """JSON-safe (NaN and ±inf become null) and never pre-rounded: every text formats the one stored number
    (harness.analysis.figures), so a figure printed twice prints identically."""
    return float(value) if value is not None and math.isfinite(float(value)) else None


def crossover_json(c: Crossover) -> CrossoverJSON:
    return {
        # exact, as every figure of the record: the text formats these (figures.dff), never a pre-rounded copy
        "crossover_dff": _exact(c.dff) if c.dff is not None else None,
        "ci_low": _exact(c.ci_low),
        "ci_high": _exact(c.ci_high),
        "outcome": c.outcome,
        "ci_method": c.ci_method,
        "ci_text": format_ci(c) if c.outcome != "no_points" else None,
        "gap": list(c.gap) if c.gap else None,
        "next_dff": c.next_dff,
        "crossings": [
            {
                "dff": _exact(x.dff),
                "direction": x.direction,
                "between": list(x.between),
                "ci_low": _exact(x.ci_low),
                "ci_high": _exact(x.ci_high),
            }
            for x in c.crossings
        ],
    }


def caps_json(caps: Sequence[CapOption]) -> list[CapJSON]:
    """The candidate-cap table: per cap, the measured points that change path and the aggregate effect."""
    return [
        {
            "cap": option.cap,
            "switched": [
                {
                    "dff": s.dff,
                    "model": s.model,
                    "to": s.to,
                    "effect": _number(s.effect, 5),
                    "ci_low": _number(s.ci_low, 5),
                    "ci_high": _number(s.ci_high, 5),
                }
                for s in option.switched
            ],
            "effect": _number(option.effect, 5),
            "ci_low": _number(option.ci_low, 5),
            "ci_high": _number(option.ci_high, 5),
        }
        for option in caps
    ]


RATIO_OF_MEDIANS = "ratio_of_medians"  # a point's JSON field; sidecars before it called it `ratio`


def ratio_of_medians(point: Mapping[str, object]) -> float | None:
    """A point's median fused / median fallback from its JSON record, whichever name the record uses."""
    value = point.get(RATIO_OF_MEDIANS, point.get(SummaryCol.RATIO))
    return None if value is None else float(value)


def test_json(test: PointTest) -> TestJSON:
    return {
        "dff": test.dff,
        "model": test.model,
        "question": test.question,
        "level": test.level,
        "bound": _exact(test.bound),
        "passed": test.passed,
    }


def point_json(row: Mapping[str, object], family: str, test: PointTest | None = None) -> PointJSON:
    """One point; `test`: the one-sided test the overall decision read at its Dff (then `decides` is true)."""
    return {
        "model": str(row["model"]),
        "dff": int(row["dff"]),
        "family": family,
        SummaryCol.FALLBACK_TOK_S: _exact(row[SummaryCol.FALLBACK_TOK_S]),
        SummaryCol.FUSED_TOK_S: _exact(row[SummaryCol.FUSED_TOK_S]),
        # summary.csv's `ratio` column, named here for what it is: median fused / median fallback (mlxcel's number)
        RATIO_OF_MEDIANS: _exact(row[SummaryCol.RATIO]),
        SummaryCol.ESTIMATE: _exact(row[SummaryCol.ESTIMATE]),  # the geometric-mean ratio the interval is about
        SummaryCol.CI_LOW: _exact(row[SummaryCol.CI_LOW]),
        SummaryCol.CI_HIGH: _exact(row[SummaryCol.CI_HIGH]),
        SummaryCol.METHOD: str(row[SummaryCol.METHOD]) if isinstance(row[SummaryCol.METHOD], str) else "",
        SummaryCol.VERDICT: str(row[SummaryCol.VERDICT]),
        SummaryCol.UNSTABLE: bool(row[SummaryCol.UNSTABLE]),
        SummaryCol.N_FALLBACK: int(row[SummaryCol.N_FALLBACK]),
        SummaryCol.N_FUSED: int(row[SummaryCol.N_FUSED]),
        SummaryCol.NULL_RATIO: _number(row[SummaryCol.NULL_RATIO], 5),
        SummaryCol.OUTLIERS: str(row[SummaryCol.OUTLIERS]) if isinstance(row[SummaryCol.OUTLIERS], str) else "",
        SummaryCol.REASON: str(row[SummaryCol.REASON]),
        "decides": test is not None,
        "decision_test": None if test is None else test_json(test),
        **(dispatch_json(row) if isinstance(row.get("dispatch"), str) and row["dispatch"] else {}),
    }


def _optional(row: Mapping[str, object], column: str) -> object:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def dispatch_json(row: Mapping[str, object]) -> DispatchJSON:
    """What the dispatch verification and the token counts say about a command-workload point
    (harness.analysis.dispatch_evidence.POINT_FIELDS): `dispatch` (verified | declined | predicted | unverified), the
    parity figures, tokens per arm. Points of built-in workloads have none of these."""
    out: dict[str, object] = {"dispatch": str(row["dispatch"])}  # filled field by field below: a DispatchJSON
    for column in ("dispatch_note", "parity_class"):
        out[column] = str(_optional(row, column) or "")
    for column in ("parity_calls", "parity_calls_over"):
        value = _optional(row, column)
        out[column] = None if value is None else int(value)
    for column in ("fused_vs_ref_worst", "fused_vs_ref_median", "fused_vs_truth_worst", "fused_vs_truth_median"):
        value = _optional(row, column)
        out[column] = None if value is None or not math.isfinite(float(value)) else float(f"{float(value):.4g}")
    for column in ("tokens_fallback", "tokens_fused"):
        value = _optional(row, column)
        out[column] = None if value is None else _number(float(value), 1)
    out["tokens_differ"] = str(_optional(row, "tokens_differ")).lower() in ("true", "1")
    return out


def used_tests(result: DecisionResult) -> dict[tuple[str, int], PointTest]:
    """(family, Dff) → the test the overall decision read there: the deciding families' point tests (a raise needs
    every deciding family, so each one's tests count; a family that does not decide is shown, not relied on)."""
    families = deciding_families(result.families) if result.families else []
    return {(f.family, t.dff): t for f in families for t in f.decision.tests}


def _test_at(used: dict[tuple[str, int], PointTest], family: str, row: Mapping[str, object]) -> PointTest | None:
    """The decision's test at this row's Dff; only valid points (a null point at a tested Dff was not used)."""
    return used.get((family, int(row["dff"]))) if row[SummaryCol.VERDICT] in DECIDED else None


def decision_json(summary: pd.DataFrame, result: DecisionResult, **settings: object) -> DecisionJSON:
    """The machine-readable decision: what `crossover --json` prints and the report's hidden block records."""
    labels = family_labels(summary)
    d = result.decision
    used = used_tests(result)
    records = summary.to_dict("records")
    out = {
        **crossover_json(result.crossover),
        # rows as plain dicts: a Series per row (iterrows) cost most of `crossover --json` on 10,000 points
        "points": [
            point_json(row, str(label), _test_at(used, str(label), row))
            for row, label in zip(records, labels.tolist(), strict=True)
        ],
        "recommended_cap": d.recommended_cap,
        "action": d.action,
        "reason": d.reason,
        "apply": d.apply,
        "candidate_caps": caps_json(result.decision.caps),
        "tests": [test_json(t) for t in d.tests],
        "drift_between_points": _number(d.drift_between_points, 5) if d.drift_between_points is not None else None,
        "rounds_hint": {"dff": d.rounds_dff, "rounds": d.rounds_needed, "affordable": AFFORDABLE_ROUNDS}
        if d.rounds_dff is not None
        else None,
        # additive (2026-12): what a keep held back, structured, so the plot need not search the reason's words
        "withheld": d.withheld.to_json() if d.withheld is not None else None,
        # only a two-pass sweep that the test made unusable carries it (stored records stay as they were)
        **({"sweep_drift": float(f"{d.sweep_drift:.3g}")} if d.sweep_drift is not None else {}),
        **settings,
    }
    if len(result.families) > 1:
        deciding = {f.family for f in deciding_families(result.families)}
        out["binding_family"] = result.binding
        out["families"] = [
            {
                "family": f.family,
                **crossover_json(f.crossover),
                "recommended_cap": f.decision.recommended_cap,
                "action": f.decision.action,
                "reason": f.decision.reason,
                "candidate_caps": caps_json(f.decision.caps),
                "tests": [test_json(t) for t in f.decision.tests],
                "decides": f.family in deciding,
            }
            for f in result.families
        ]
    return out
