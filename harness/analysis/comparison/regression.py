"""Regression check: a current sweep against a stored baseline, for CI.

Only comparable points are joined: same backend, device, workload, model, quantization and shape (all of
POINT_COLUMNS); every other row is listed as dropped with the columns that differ. A baseline point the current run
lacks fails the check (exit 1, status `missing`) unless `allow_missing`: a gate that silently loses points would pass
a sweep that crashed half-way. Per joined point, each arm's median tok/s change is tested with a Welch interval of
ln tok/s (current vs baseline: two runs share no rounds) — the same comparison `harness.analysis.points.stats` uses for
unpaired points. An arm regresses when it drops by more than `max_regression` *and* that interval lies below 1; with a
summary-only input there are no runs, so a drop beyond the threshold counts on its own.

The decision is compared on the joined points only (a point that exists on one side cannot move the other side's
crossover), against one default in force for both sides — `--current-default`, else the current input's, else the
baseline's — so updating the default between the two runs is not reported as a change. The gate fails on
contradiction, not on jitter (judge_decision): exit 1 when the current data, decided with the baseline's
recommended cap in force, lower it (fallback wins beyond the margin at the largest measured Dff at or below that
cap, one-sided at the decision's level). A raise the current data now support, a lowered decision that moved, or a
verdict flipped between fused and fallback (or to/from null) is a notice: exit 0, exit 1 under `strict`. Exit
codes: 0 ok, 1 regression, contradicted decision, missing points (or a notice under --strict), 2 unusable or
incomparable input. Calibrated on SYNTHETIC sweep pairs: docs/design.md §8, scripts/decision_calibration.py
--check-pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict

import numpy as np
import pandas as pd

from harness.analysis.comparison import point_match
from harness.analysis.decision.decide import decide
from harness.analysis.decision.decision_record import DecisionResult
from harness.analysis.decision.pipeline import Analysis, withheld_reason
from harness.analysis.points.stats import MIN_RUNS, compare_arms, ratio_interval
from harness.runs.formats import COMPARED_ARMS, FALLBACK, FUSED, POINT_COLUMNS, Arm, point_keys
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import MAX_REGRESSION

CheckStatus = Literal["ok", "regression", "contradicted", "changed", "missing", "incomparable"]


class ArmChange(TypedDict):
    """One arm's tok/s at a point, baseline → current: the relative change, its Welch interval (None without runs on
    both sides), whether that excludes no change, and whether it counts as a regression."""

    before: float
    after: float
    change: float
    ci: list[float] | None
    significant: bool | None
    regressed: bool


class CheckedPoint(TypedDict):
    model: str
    dff: int
    fallback: ArmChange
    fused: ArmChange
    ratio_before: float
    ratio_after: float
    verdict_before: str
    verdict_after: str


class DroppedPoint(TypedDict):
    side: str  # baseline | current: the input the point is in
    model: str
    dff: int
    reason: str


class CheckedDecision(TypedDict):
    current_default: NotRequired[int | None]  # only for the current run decided at the baseline's cap
    recommended_cap: int | None
    action: str
    reason: str


class CheckJSON(TypedDict):
    """`check --json`'s record (CheckResult.as_json; the command adds `key_changes`)."""

    status: CheckStatus
    exit_code: int
    problems: list[str]
    notices: list[str]
    points: list[CheckedPoint]
    dropped: list[DroppedPoint]
    decisions: dict[str, CheckedDecision]


@dataclass
class CheckResult:
    status: CheckStatus
    points: list[CheckedPoint] = field(default_factory=list)
    dropped: list[DroppedPoint] = field(default_factory=list)
    decisions: dict[str, CheckedDecision] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why the status is not ok, one line each
    notices: list[str] = field(default_factory=list)  # what changed without failing (fails under --strict)

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "regression": 1, "contradicted": 1, "changed": 1, "missing": 1}.get(self.status, 2)

    def as_json(self) -> CheckJSON:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "problems": self.problems,
            "notices": self.notices,
            "points": self.points,
            "dropped": self.dropped,
            "decisions": self.decisions,
        }


def join_points(baseline: pd.DataFrame, current: pd.DataFrame) -> tuple[list[tuple[int, int]], list[DroppedPoint]]:
    """Row-position pairs of comparable points (harness.analysis.comparison.point_match, on the same machine), and the
    rows dropped from either side with the reason."""
    pairs, base_only, cur_only = point_match.match_points(baseline, current, same_machine=True)
    base_keys, cur_keys = point_match.comparable_keys(baseline, current, True)
    dropped: list[DroppedPoint] = []
    for side, keys, other in (("baseline", base_only, cur_keys), ("current", cur_only, base_keys)):
        for key in keys:
            record = dict(zip(POINT_COLUMNS, key, strict=True))
            dropped.append(
                {
                    "side": side,
                    "model": record["model"],
                    "dff": int(record["dff"]),
                    "reason": _why_unmatched(key, other, side),
                }
            )
    return pairs, dropped


def _why_unmatched(key: tuple[str, ...], others: list[tuple[str, ...]], side: str) -> str:
    """Name the differing columns of the closest point on the other side (same model and Dff if there is one)."""
    other_side = "current" if side == "baseline" else "baseline"
    model, dff = POINT_COLUMNS.index("model"), POINT_COLUMNS.index("dff")
    same = [o for o in others if o[model] == key[model] and o[dff] == key[dff]]
    if not same:
        return f"no point with this model and Dff in the {other_side} input"
    differing = [
        f"{column} {a or '(empty)'} vs {b or '(empty)'}"
        for column, a, b in zip(POINT_COLUMNS, key, same[0], strict=True)
        if a != b
    ]
    return "not comparable: " + "; ".join(differing)


def _arm_runs(analysis: Analysis, key: tuple[str, ...], arm: Arm) -> np.ndarray | None:
    if analysis.samples is None:
        return None
    samples = analysis.samples
    mine = samples[(samples["arm"] == arm) & (samples["status"] == "ok")]
    runs: np.ndarray = mine["tok_s"].to_numpy(float)[np.array([k == key for k in point_keys(mine)], dtype=bool)]
    return runs


def _arm_change(
    baseline: Analysis, current: Analysis, positions: tuple[int, int], arm: Arm, max_regression: float
) -> ArmChange:
    before = float(baseline.summary[f"{arm}_tok_s"].iloc[positions[0]])
    after = float(current.summary[f"{arm}_tok_s"].iloc[positions[1]])
    change = after / before - 1.0 if before > 0 and np.isfinite(after) else float("nan")
    key = point_keys(current.summary.iloc[[positions[1]]]).iloc[0]
    runs_before, runs_after = _arm_runs(baseline, key, arm), _arm_runs(current, key, arm)
    ci: list[float] | None = None
    significant = None  # unknown without runs on both sides
    if runs_before is not None and runs_after is not None and min(len(runs_before), len(runs_after)) >= MIN_RUNS:
        width = max(len(runs_before), len(runs_after))
        after_y, before_y = (
            np.pad(np.log(r), (0, width - len(r)), constant_values=np.nan)[None, :] for r in (runs_after, runs_before)
        )
        welch = compare_arms(after_y, before_y, paired=False, pool=False)
        interval = ratio_interval(welch.theta, welch.se, welch.df, current.options.policy.confidence)
        _, low, high = (float(v[0]) for v in interval)
        ci = [low - 1.0, high - 1.0]
        significant = high < 1.0 or low > 1.0
    regressed = bool(change < -max_regression and significant is not False)
    return {
        "before": before,
        "after": after,
        "change": change,
        "ci": ci,
        "significant": significant,
        "regressed": regressed,
    }


def verdict_flipped(before: str, after: str) -> bool:
    """A point's verdict changed in a way worth a notice: a win beyond the margin moved to the other path, or the
    point became (or stopped being) null — the arms now run the same code. `inconclusive` / `equivalent` ↔
    `fused` / `fallback` is an interval edging across the margin between two runs of the same code, shown in the
    table only. Neither fails the gate on its own: a flip that contradicts the baseline's decision (fallback now
    winning at or below its cap) fails through judge_decision, which tests it at the decision's level."""
    if before == after:
        return False
    return "null" in (before, after) or {before, after} == {"fused", "fallback"}


@dataclass(frozen=True, kw_only=True)
class DecisionFindings:
    """What the current data say about the baseline's decision: `contradicted` fails the gate (exit 1), `notices`
    are printed and fail only under --strict."""

    contradicted: tuple[str, ...] = ()
    notices: tuple[str, ...] = ()


def judge_decision(
    before: DecisionResult, at_cap: DecisionResult | None, after: DecisionResult, default: int | None, margin: float
) -> DecisionFindings:
    """The gate's decision rule (docs/design.md §8), one function for `check` and its calibration (tests/calibration).

    `before`: the baseline decided at the default in force; `at_cap`: the current data decided with the baseline's
    recommended cap as the cap in force (None when the baseline recommends none); `after`: the current data decided
    at the default in force, as the baseline was.

    Contradicted: the current data, given the baseline's cap, lower it — fallback wins beyond the margin at the
    largest measured Dff at or below that cap, the decision's own one-sided lower test at its own level (Bonferroni
    over deciding families), so the gate fails exactly where a sweep would act against the baseline. Why not compare
    the two decisions: two sweeps of one truth near the margin's edge raise to neighbouring grid steps about as often
    as not (issue 35: a truth with fused ≈ +1% at 8192 under cap 4096 failed 9 of 20 pairs), and that is the same
    evidence, not a contradiction. Notices: a raise the current data now support (beyond the baseline's cap), a
    lower they would make but held back, and a lowered baseline decision that moved (the lower went elsewhere, or
    is gone)."""
    cap = before.decision.recommended_cap
    contradicted: list[str] = []
    notices: list[str] = []
    if at_cap is not None and cap is not None:
        now = at_cap.decision
        if now.action == "lower":
            tests = [t for f in at_cap.families for t in f.decision.tests if t.question == "fallback" and t.passed]
            where = "; ".join(f"{t.model} Dff {t.dff}: {t.words(margin)}" for t in tests)
            contradicted.append(
                f"the current data contradict the baseline's cap {cap}: at or below it {where} "
                f"(decided with cap {cap} in force, the current data lower it to {now.recommended_cap})"
            )
        elif now.action == "raise":
            notices.append(
                f"a raise is now supported: decided with the baseline's cap {cap} in force, the current data raise it "
                f"to {now.recommended_cap} (exit 0; --strict fails on it)"
            )
        elif now.withheld is not None and now.withheld.move == "lower":
            notices.append(f"the current data would lower the baseline's cap {cap}, but {now.withheld.words()}")
    old, new = before.decision, after.decision
    if old.action == "lower" and (new.action, new.recommended_cap) != (old.action, old.recommended_cap):
        notices.append(
            f"the lowered decision moved: the baseline lowered {default} → {old.recommended_cap}; the current data "
            f"alone: {new.action} → {new.recommended_cap}"
        )
    return DecisionFindings(contradicted=tuple(contradicted), notices=tuple(notices))


def _subset_decision(analysis: Analysis, rows: list[int], current_default: int | None) -> DecisionResult:
    policy = analysis.options.policy
    summary = analysis.summary.iloc[rows].reset_index(drop=True)
    return decide(summary, current_default, policy, withheld_reason(analysis.aa_beyond_margin, policy.margin))


def check_runs(
    baseline: Analysis,
    current: Analysis,
    max_regression: float = MAX_REGRESSION,
    allow_missing: bool = False,
    strict: bool = False,
) -> CheckResult:
    pairs, dropped = join_points(baseline.summary, current.summary)
    if not pairs:
        return CheckResult("incomparable", dropped=dropped, problems=["no comparable points between the inputs"])
    result = CheckResult("ok", dropped=dropped)
    regressions, flips = [], []
    missing = [
        f"{row['model']} dff {row['dff']}: in the baseline, missing from the current run ({row['reason']})"
        for row in dropped
        if row["side"] == "baseline"
    ]
    for base_row, cur_row in pairs:
        point = current.summary.iloc[cur_row]
        arms = {arm: _arm_change(baseline, current, (base_row, cur_row), arm, max_regression) for arm in COMPARED_ARMS}
        verdicts = (str(baseline.summary[SummaryCol.VERDICT].iloc[base_row]), str(point[SummaryCol.VERDICT]))
        result.points.append(
            {
                "model": str(point["model"]),
                "dff": int(point["dff"]),
                "fallback": arms[FALLBACK],  # COMPARED_ARMS, in their order
                "fused": arms[FUSED],
                "ratio_before": float(baseline.summary[SummaryCol.ESTIMATE].iloc[base_row]),
                "ratio_after": float(point[SummaryCol.ESTIMATE]),
                "verdict_before": verdicts[0],
                "verdict_after": verdicts[1],
            }
        )
        for arm in COMPARED_ARMS:
            if arms[arm]["regressed"]:
                regressions.append(
                    f"{point['model']} dff {int(point['dff'])}: {arm} tok/s {arms[arm]['change']:+.1%} "
                    f"(threshold -{max_regression:.0%})"
                )
        if verdict_flipped(*verdicts):
            flips.append(f"{point['model']} dff {int(point['dff'])}: verdict {verdicts[0]} → {verdicts[1]}")
    default = current.current_default if current.current_default is not None else baseline.current_default
    rows = [c for _, c in pairs]
    before = _subset_decision(baseline, [b for b, _ in pairs], default)
    after = _subset_decision(current, rows, default)
    cap = before.decision.recommended_cap
    at_cap = _subset_decision(current, rows, cap) if cap is not None else None
    findings = judge_decision(before, at_cap, after, default, current.options.policy.margin)
    result.decisions = {
        side: {"recommended_cap": d.decision.recommended_cap, "action": d.decision.action, "reason": d.decision.reason}
        for side, d in (("baseline", before), ("current", after))
    }
    if at_cap is not None:
        d = at_cap.decision
        result.decisions["current_at_baseline_cap"] = {
            "current_default": cap,
            "recommended_cap": d.recommended_cap,
            "action": d.action,
            "reason": d.reason,
        }
    result.notices = [*findings.notices, *flips]
    missing = [] if allow_missing else missing
    changed = result.notices if strict else []
    result.problems = regressions + list(findings.contradicted) + changed + missing
    result.status = (
        "regression"
        if regressions
        else "contradicted"
        if findings.contradicted
        else "changed"
        if changed
        else "missing"
        if missing
        else "ok"
    )
    return result
