"""The decision's JSON: what `crossover --json` prints and a report's sidecar keeps — one TypedDict per record and
one function writing it (`*_json`), and `decision_from_json` reading a decision back.

The JSON keys are the contract the addendum, the plot and `check-reports` read back. Figures are stored exact
(never pre-rounded) except the effect sizes of the candidate-cap table, so every text formats the one stored number
(harness.analysis.number_format).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NotRequired, TypedDict, TypeVar

import numpy as np
import pandas as pd

from harness.analysis.decision.curve import Crossover, CrossoverOutcome, Direction, format_ci
from harness.analysis.decision.decision_record import (
    CapOption,
    Decision,
    DecisionResult,
    PointTest,
    Withheld,
    deciding_families,
)
from harness.analysis.decision.rounds_hint import BUDGET_ROUNDS
from harness.analysis.decision.vocabulary import Action, Move, Side, WithheldWhy
from harness.analysis.evidence.dispatch_evidence import POINT_FIELDS
from harness.analysis.number_format import json_exact, json_rounded
from harness.analysis.points.stats import DECIDED, Verdict, family_labels
from harness.json_output import finite
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


class PointJSON(TypedDict):
    """One measured point in the decision JSON (points_json); the dispatch fields only on command-workload points.
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
    and why, and the settings that re-derive it (harness.analysis.decision.pipeline.Analysis.as_json). Keys a record of
    an older format lacks are NotRequired and read with .get."""

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
        # exact, as every figure of the record: the text formats these (number_format.dff), never a pre-rounded copy
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


def points_json(
    points: pd.DataFrame, families: Sequence[str], used: Mapping[tuple[str, int], PointTest]
) -> list[PointJSON]:
    """Every point, in the summary's order; `used`: (family, Dff) → the one-sided test the overall decision read
    there (used_tests; such a point `decides`). Each field is made a whole column at a time and each record from the
    columns' values: a million-point summary boxed cell by cell (a dict per row, then a record from it) took
    15 s of `crossover --json`."""
    n = len(points)
    if not n:  # a decision without points (one made on curves, not a summary) may have no columns either
        return []
    verdicts = _column(points, SummaryCol.VERDICT, str)
    tests: list[PointTest | None] = [None] * n
    if used:
        dffs = _column(points, "dff", int)
        tests = [
            used.get((family, dff)) if verdict in DECIDED else None
            for family, dff, verdict in zip(families, dffs, verdicts, strict=True)
        ]
    columns: list[Sequence[object]] = [
        _column(points, "model", str),
        _column(points, "dff", int),
        list(families),
        _numbers(points, SummaryCol.FALLBACK_TOK_S),
        _numbers(points, SummaryCol.FUSED_TOK_S),
        # summary.csv's `ratio` column, named here for what it is: median fused / median fallback (mlxcel's number)
        _numbers(points, SummaryCol.RATIO),
        _numbers(points, SummaryCol.ESTIMATE),  # the geometric-mean ratio the interval is about
        _numbers(points, SummaryCol.CI_LOW),
        _numbers(points, SummaryCol.CI_HIGH),
        _column(points, SummaryCol.METHOD, _text_or_empty),
        verdicts,
        _column(points, SummaryCol.UNSTABLE, bool),
        _column(points, SummaryCol.N_FALLBACK, int),
        _column(points, SummaryCol.N_FUSED, int),
        _numbers(points, SummaryCol.NULL_RATIO, 5),
        _column(points, SummaryCol.OUTLIERS, _text_or_empty),
        _column(points, SummaryCol.REASON, str),
        [test is not None for test in tests],
        [None if test is None else test_json(test) for test in tests],
    ]
    # the dispatch fields only where the point has a dispatch outcome (a command workload's)
    dispatch = points["dispatch"].tolist() if "dispatch" in points.columns else [None] * n
    has_dispatch = [isinstance(value, str) and bool(value) for value in dispatch]
    if any(has_dispatch):
        columns.append([str(value) for value in dispatch])
        columns += [_dispatch_column(points, column, _DISPATCH_VALUES[column]) for column in POINT_FIELDS[1:]]
    keys = (*_POINT_KEYS, *POINT_FIELDS)
    short = keys[: len(_POINT_KEYS)]
    return [
        dict(zip(keys if full else short, values, strict=False))  # type: ignore[misc]
        for values, full in zip(zip(*columns, strict=True), has_dispatch, strict=True)
    ]


_POINT_KEYS = (
    "model",
    "dff",
    "family",
    SummaryCol.FALLBACK_TOK_S,
    SummaryCol.FUSED_TOK_S,
    RATIO_OF_MEDIANS,
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
    "decides",
    "decision_test",
)


def _text_or_empty(value: object) -> str:
    return str(value) if isinstance(value, str) else ""


T = TypeVar("T")


def _column(points: pd.DataFrame, column: str, convert: Callable[[Any], T]) -> list[T]:
    return list(map(convert, points[column].tolist()))


def _numbers(points: pd.DataFrame, column: str, digits: int | None = None) -> list[float | None]:
    """json_exact (json_rounded to `digits`) of every cell of a column: null where it is not finite."""
    values = points[column].to_numpy(dtype=float, na_value=np.nan)
    out: list[float | None] = values.tolist()
    finite = np.isfinite(values)
    for i in np.flatnonzero(~finite).tolist():
        out[i] = None
    if digits is not None:
        for i in np.flatnonzero(finite).tolist():
            out[i] = json_rounded(out[i], digits)
    return out


def _short_float(value: object) -> float | None:
    exact = json_exact(value)
    return None if exact is None else float(f"{exact:.4g}")


# what the dispatch verification and the token counts say about a command-workload point
# (harness.analysis.evidence.dispatch_evidence.POINT_FIELDS), after `dispatch` (verified | declined | predicted |
# unverified): each field with the value it records for a cell (None: the cell is missing or not finite). Points of
# built-in workloads have none of these.
_DISPATCH_VALUES: dict[str, Callable[[object], object]] = {
    "dispatch_note": lambda v: str(v or ""),
    "parity_class": lambda v: str(v or ""),
    "parity_calls": lambda v: None if v is None else int(v),  # type: ignore[call-overload]
    "parity_calls_over": lambda v: None if v is None else int(v),  # type: ignore[call-overload]
    "fused_vs_ref_worst": _short_float,
    "fused_vs_ref_median": _short_float,
    "fused_vs_truth_worst": _short_float,
    "fused_vs_truth_median": _short_float,
    "tokens_fallback": lambda v: json_rounded(v, 1),  # type: ignore[arg-type]
    "tokens_fused": lambda v: json_rounded(v, 1),  # type: ignore[arg-type]
    "tokens_differ": lambda v: str(v).lower() in ("true", "1"),
}


def _dispatch_column(points: pd.DataFrame, column: str, value: Callable[[object], object]) -> list[object]:
    """One dispatch field of every point; a column that is missing or all empty is one value, made once."""
    if column not in points.columns or points[column].isna().all():
        return [value(None)] * len(points)
    return [value(finite(cell)) for cell in points[column].tolist()]


def used_tests(result: DecisionResult) -> dict[tuple[str, int], PointTest]:
    """(family, Dff) → the test the overall decision read there: the deciding families' point tests (a raise needs
    every deciding family, so each one's tests count; a family that does not decide is shown, not relied on)."""
    families = deciding_families(result.families) if result.families else []
    return {(f.family, t.dff): t for f in families for t in f.decision.tests}


def decision_json(summary: pd.DataFrame, result: DecisionResult, settings: SettingsJSON | None = None) -> DecisionJSON:
    """The machine-readable decision: what `crossover --json` prints and the report's hidden block records."""
    labels = family_labels(summary)
    d = result.decision
    used = used_tests(result)
    # mypy's extra check refuses a ** item beside keys left out (an open TypedDict could hold one of them, of another
    # type): crossover_json's record holds none of the keys added below
    out: DecisionJSON = {
        **crossover_json(result.crossover),  # type: ignore[typeddict-item]
        "points": points_json(summary, list(map(str, labels.tolist())), used),
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
        action=d["action"],
        recommended_cap=d["recommended_cap"],
        reason=d["reason"],
        apply=d["apply"],
        drift_between_points=d.get("drift_between_points"),
        rounds_dff=hint.get("dff") if hint else None,
        rounds_needed=hint.get("rounds") if hint else None,
        rounds_chance=hint.get("chance") if hint else None,
        withheld=Withheld(move=held["move"], cap=held["cap"], why=held["why"]) if held else None,
        sweep_drift=d.get("sweep_drift"),
    )
