"""The decision's JSON: what `crossover --json` prints and a report's sidecar keeps — one TypedDict per record and
one function writing it (`*_json`), and `decision_from_json` reading a decision back.

The JSON keys are the contract the addendum, the plot and `check-reports` read back. Figures are stored exact
(never pre-rounded) except the effect sizes of the candidate-cap table, so every text formats the one stored number
(harness.analysis.figures).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, NotRequired, TypedDict, cast

import pandas as pd

from harness.analysis.curve import Crossover, CrossoverOutcome, Direction, format_ci
from harness.analysis.decision_record import (
    CapOption,
    Decision,
    DecisionResult,
    PointTest,
    Withheld,
    deciding_families,
)
from harness.analysis.dispatch_evidence import POINT_FIELDS
from harness.analysis.figures import json_exact, json_rounded
from harness.analysis.policy import Action, Move, Side, WithheldWhy
from harness.analysis.rounds_hint import BUDGET_ROUNDS
from harness.analysis.stats import DECIDED, Verdict, family_labels
from harness.runs.summary_columns import SummaryCol


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
    chance: NotRequired[float | None]  # additive (2026-12): the simulated chance at `affordable` rounds


class FamilyJSON(CrossoverJSON):
    """One shape family's decision (runs with several families)."""

    family: str
    recommended_cap: int | None
    action: Action
    reason: str
    candidate_caps: list[CapJSON]
    tests: list[TestJSON]
    decides: bool


class WithheldJSON(TypedDict):
    """The decision JSON's `withheld` field: what the plot's title says was held back."""

    move: Move
    cap: int
    why: WithheldWhy


class OptionsJSON(TypedDict):
    """The analysis options as recorded next to a result, so it can be re-derived (pipeline.Options.settings)."""

    excludes: dict[str, str]
    confidence: float
    margin: float
    grid: int
    interpolation: str


class SettingsJSON(OptionsJSON):
    """What a decision record states beside the decision (pipeline.Analysis.as_json): the options, the cap in force
    and the A/A arm's noise."""

    current_default: int | None
    cap_env: str
    noise_scale: float | None
    aa_points: int
    aa_beyond_margin: list[str]


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


def crossover_json(c: Crossover) -> CrossoverJSON:
    return {
        # exact, as every figure of the record: the text formats these (figures.dff), never a pre-rounded copy
        "crossover_dff": json_exact(c.dff),
        "ci_low": json_exact(c.ci_low),
        "ci_high": json_exact(c.ci_high),
        "outcome": c.outcome,
        "ci_method": c.ci_method,
        "ci_text": format_ci(c) if c.outcome != "no_points" else None,
        "gap": list(c.gap) if c.gap else None,
        "next_dff": c.next_dff,
        "crossings": [
            {
                "dff": json_exact(x.dff),
                "direction": x.direction,
                "between": list(x.between),
                "ci_low": json_exact(x.ci_low),
                "ci_high": json_exact(x.ci_high),
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
                    "effect": json_rounded(s.effect, 5),
                    "ci_low": json_rounded(s.ci_low, 5),
                    "ci_high": json_rounded(s.ci_high, 5),
                }
                for s in option.switched
            ],
            "effect": json_rounded(option.effect, 5),
            "ci_low": json_rounded(option.ci_low, 5),
            "ci_high": json_rounded(option.ci_high, 5),
        }
        for option in caps
    ]


def withheld_json(w: Withheld) -> WithheldJSON:
    return {"move": w.move, "cap": w.cap, "why": w.why}


RATIO_OF_MEDIANS: Final = "ratio_of_medians"  # a point's JSON field; sidecars before it called it `ratio`
# a summary row (DataFrame.to_dict("records")): its cells have their column's dtype, which no type checker sees
Cells = Mapping[Any, Any]


def ratio_of_medians(point: Mapping[str, object]) -> float | None:
    """A point's median fused / median fallback from its JSON record, whichever name the record uses."""
    value = point.get(RATIO_OF_MEDIANS, point.get(SummaryCol.RATIO))
    return float(value) if isinstance(value, int | float | str) else None  # JSON: a number, or null


def test_json(test: PointTest) -> TestJSON:
    return {
        "dff": test.dff,
        "model": test.model,
        "question": test.question,
        "level": test.level,
        "bound": json_exact(test.bound),
        "passed": test.passed,
    }


def point_json(row: Cells, family: str, test: PointTest | None = None) -> PointJSON:
    """One point; `test`: the one-sided test the overall decision read at its Dff (then `decides` is true)."""
    point: PointJSON = {
        "model": str(row["model"]),
        "dff": int(row["dff"]),
        "family": family,
        SummaryCol.FALLBACK_TOK_S: json_exact(row[SummaryCol.FALLBACK_TOK_S]),
        SummaryCol.FUSED_TOK_S: json_exact(row[SummaryCol.FUSED_TOK_S]),
        # summary.csv's `ratio` column, named here for what it is: median fused / median fallback (mlxcel's number)
        RATIO_OF_MEDIANS: json_exact(row[SummaryCol.RATIO]),
        SummaryCol.ESTIMATE: json_exact(row[SummaryCol.ESTIMATE]),  # the geometric-mean ratio the interval is about
        SummaryCol.CI_LOW: json_exact(row[SummaryCol.CI_LOW]),
        SummaryCol.CI_HIGH: json_exact(row[SummaryCol.CI_HIGH]),
        SummaryCol.METHOD: str(row[SummaryCol.METHOD]) if isinstance(row[SummaryCol.METHOD], str) else "",
        SummaryCol.VERDICT: cast(Verdict, str(row[SummaryCol.VERDICT])),  # one of VERDICTS (inputs checks a summary's)
        SummaryCol.UNSTABLE: bool(row[SummaryCol.UNSTABLE]),
        SummaryCol.N_FALLBACK: int(row[SummaryCol.N_FALLBACK]),
        SummaryCol.N_FUSED: int(row[SummaryCol.N_FUSED]),
        SummaryCol.NULL_RATIO: json_rounded(row[SummaryCol.NULL_RATIO], 5),
        SummaryCol.OUTLIERS: str(row[SummaryCol.OUTLIERS]) if isinstance(row[SummaryCol.OUTLIERS], str) else "",
        SummaryCol.REASON: str(row[SummaryCol.REASON]),
        "decides": test is not None,
        "decision_test": None if test is None else test_json(test),
    }
    return {**point, **dispatch_json(row)} if isinstance(row.get("dispatch"), str) and row["dispatch"] else point


# the summary columns point_json and dispatch_json read
POINT_JSON_COLUMNS = {
    "model",
    "dff",
    SummaryCol.FALLBACK_TOK_S,
    SummaryCol.FUSED_TOK_S,
    SummaryCol.RATIO,
    SummaryCol.ESTIMATE,
    SummaryCol.CI_LOW,
    SummaryCol.CI_HIGH,
    SummaryCol.METHOD,
    SummaryCol.VERDICT,
    SummaryCol.UNSTABLE,
    SummaryCol.N_FALLBACK,
    SummaryCol.N_FUSED,
    SummaryCol.NULL_RATIO,
    SummaryCol.OUTLIERS,
    SummaryCol.REASON,
    *POINT_FIELDS,
}


def _optional(row: Cells, column: str) -> Any:
    value = row.get(column)
    return None if value is None or (isinstance(value, float) and not math.isfinite(value)) else value


def dispatch_json(row: Cells) -> DispatchJSON:
    """What the dispatch verification and the token counts say about a command-workload point
    (harness.analysis.dispatch_evidence.POINT_FIELDS): `dispatch` (verified | declined | predicted | unverified), the
    parity figures, tokens per arm. Points of built-in workloads have none of these."""
    return {
        "dispatch": str(row["dispatch"]),
        "dispatch_note": str(_optional(row, "dispatch_note") or ""),
        "parity_class": str(_optional(row, "parity_class") or ""),
        "parity_calls": _count(row, "parity_calls"),
        "parity_calls_over": _count(row, "parity_calls_over"),
        "fused_vs_ref_worst": _parity_figure(row, "fused_vs_ref_worst"),
        "fused_vs_ref_median": _parity_figure(row, "fused_vs_ref_median"),
        "fused_vs_truth_worst": _parity_figure(row, "fused_vs_truth_worst"),
        "fused_vs_truth_median": _parity_figure(row, "fused_vs_truth_median"),
        "tokens_fallback": json_rounded(_optional(row, "tokens_fallback"), 1),
        "tokens_fused": json_rounded(_optional(row, "tokens_fused"), 1),
        "tokens_differ": str(_optional(row, "tokens_differ")).lower() in ("true", "1"),
    }


def _count(row: Cells, column: str) -> int | None:
    value = _optional(row, column)
    return None if value is None else int(value)


def _parity_figure(row: Cells, column: str) -> float | None:
    """A parity error to 4 significant digits; null when absent or non-finite (JSON has no NaN)."""
    value = _optional(row, column)
    return None if value is None or not math.isfinite(float(value)) else float(f"{float(value):.4g}")


def used_tests(result: DecisionResult) -> dict[tuple[str, int], PointTest]:
    """(family, Dff) → the test the overall decision read there: the deciding families' point tests (a raise needs
    every deciding family, so each one's tests count; a family that does not decide is shown, not relied on)."""
    families = deciding_families(result.families) if result.families else []
    return {(f.family, t.dff): t for f in families for t in f.decision.tests}


def _test_at(used: dict[tuple[str, int], PointTest], family: str, row: Cells) -> PointTest | None:
    """The decision's test at this row's Dff; only valid points (a null point at a tested Dff was not used)."""
    return used.get((family, int(row["dff"]))) if row[SummaryCol.VERDICT] in DECIDED else None


def decision_json(summary: pd.DataFrame, result: DecisionResult, settings: SettingsJSON | None = None) -> DecisionJSON:
    """The machine-readable decision: what `crossover --json` prints and the report's hidden block records."""
    labels = family_labels(summary)
    d = result.decision
    used = used_tests(result)
    # only the columns point_json reads: a million-point summary has forty-odd columns, each cell boxed per row
    records = summary[[c for c in summary.columns if c in POINT_JSON_COLUMNS]].to_dict("records")
    # mypy's extra check refuses a ** item beside keys left out (an open TypedDict could hold one of them, of another
    # type): crossover_json's record holds none of the keys added below
    out: DecisionJSON = {
        **crossover_json(result.crossover),  # type: ignore[typeddict-item]
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
        "drift_between_points": json_rounded(d.drift_between_points, 5),
        "rounds_hint": {
            "dff": d.rounds_dff,
            "rounds": d.rounds_needed,
            "affordable": BUDGET_ROUNDS,
            "chance": json_rounded(d.rounds_chance, 3),
        }
        if d.rounds_dff is not None
        else None,
        # additive (2026-12): what a keep held back, structured, so the plot need not search the reason's words
        "withheld": withheld_json(d.withheld) if d.withheld is not None else None,
    }
    if (
        d.sweep_drift is not None
    ):  # only a two-pass sweep that the test made unusable (stored records stay as they were)
        out["sweep_drift"] = float(f"{d.sweep_drift:.3g}")
    if settings is not None:  # the settings that re-derive it (Analysis.as_json); a bare decision has none
        out = {**out, **settings}
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


def decision_from_json(d: DecisionJSON) -> Decision:
    """The decision read back from its JSON record (a report's sidecar): what it decided and why. The candidate
    caps and point tests stay in the record (`candidate_caps`, `tests`): their readers are the texts, which
    read the JSON; the withheld move comes back as far as the record keeps it (move, cap, why)."""
    held, hint = d.get("withheld"), d.get("rounds_hint")
    return Decision(
        d["action"],
        d["recommended_cap"],
        d["reason"],
        d["apply"],
        drift_between_points=d.get("drift_between_points"),
        rounds_dff=hint.get("dff") if hint else None,
        rounds_needed=hint.get("rounds") if hint else None,
        rounds_chance=hint.get("chance") if hint else None,
        withheld=Withheld(held["move"], held["cap"], held["why"]) if held else None,
        sweep_drift=d.get("sweep_drift"),
    )
