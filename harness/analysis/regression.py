"""Regression check: a current sweep against a stored baseline, for CI.

Only comparable points are joined: same backend, device, workload, model, quantization and shape (all of
POINT_COLUMNS); every other row is listed as dropped with the columns that differ. A baseline point the current run
lacks fails the check (exit 1, status `missing`) unless `allow_missing`: a gate that silently loses points would pass
a sweep that crashed half-way. Per joined point, each arm's median tok/s change is tested with a Welch interval of
ln tok/s (current vs baseline: two runs share no rounds) — the same comparison `harness.analysis.stats` uses for
unpaired points. An arm regresses when it drops by more than `max_regression` *and* that interval lies below 1; with a
summary-only input there are no runs, so a drop beyond the threshold counts on its own.

The decision is compared on the joined points only (a point that exists on one side cannot move the other side's
crossover), and against one current default for both sides — the current input's, else the baseline's — so
updating the default between the two runs is not reported as a change. A decision counts as changed only on
evidence: a point's verdict flipped between fused and fallback (or to/from null), or the baseline's recommended cap
lies outside the current crossover interval, or the current data alone raise or lower the cap in force where the
baseline did not (current_would_change). A recommended cap that moves within that interval while neither sweep acts
is noise (two sweeps of the same machine move it about as often as not) and is reported without failing. The default
both sides are decided against: `--current-default`, else the current input's, else the baseline's. Exit codes: 0 ok,
1 regression or changed decision, 2 unusable or incomparable input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from harness.analysis import point_match
from harness.analysis.curve import format_ci
from harness.analysis.decision import decide
from harness.analysis.decision_record import DecisionResult
from harness.analysis.pipeline import Analysis, withheld_reason
from harness.analysis.stats import MIN_RUNS, compare_arms, ratio_interval
from harness.runs.formats import COMPARED_ARMS, POINT_COLUMNS, Arm, point_keys
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import MAX_REGRESSION

CheckStatus = Literal["ok", "regression", "changed", "missing", "incomparable"]


@dataclass
class CheckResult:
    status: CheckStatus
    points: list[dict[str, object]] = field(default_factory=list)
    dropped: list[dict[str, object]] = field(default_factory=list)
    decisions: dict[str, dict[str, object]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # why the status is not ok, one line each

    @property
    def exit_code(self) -> int:
        return {"ok": 0, "regression": 1, "changed": 1, "missing": 1}.get(self.status, 2)

    def as_json(self) -> dict[str, object]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "problems": self.problems,
            "points": self.points,
            "dropped": self.dropped,
            "decisions": self.decisions,
        }


def join_points(baseline: pd.DataFrame, current: pd.DataFrame) -> tuple[list[tuple[int, int]], list[dict[str, object]]]:
    """Row-position pairs of comparable points (harness.analysis.point_match, on the same machine), and the rows
    dropped from either side with the reason."""
    pairs, base_only, cur_only = point_match.join_points(baseline, current, same_machine=True)
    base_keys, cur_keys = point_match.comparable_keys(baseline, current, True)
    dropped = []
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
    return mine["tok_s"].to_numpy(float)[np.array([k == key for k in point_keys(mine)], dtype=bool)]


def _arm_change(
    baseline: Analysis, current: Analysis, positions: tuple[int, int], arm: Arm, max_regression: float
) -> dict[str, object]:
    before = float(baseline.summary[f"{arm}_tok_s"].iloc[positions[0]])
    after = float(current.summary[f"{arm}_tok_s"].iloc[positions[1]])
    change = after / before - 1.0 if before > 0 and np.isfinite(after) else float("nan")
    key = point_keys(current.summary.iloc[[positions[1]]]).iloc[0]
    runs_before, runs_after = _arm_runs(baseline, key, arm), _arm_runs(current, key, arm)
    out: dict[str, object] = {"before": before, "after": after, "change": change, "ci": None}
    significant = None  # unknown without runs on both sides
    if runs_before is not None and runs_after is not None and min(len(runs_before), len(runs_after)) >= MIN_RUNS:
        width = max(len(runs_before), len(runs_after))
        after_y, before_y = (
            np.pad(np.log(r), (0, width - len(r)), constant_values=np.nan)[None, :] for r in (runs_after, runs_before)
        )
        welch = compare_arms(after_y, before_y, paired=False, pool=False)
        interval = ratio_interval(welch.theta, welch.se, welch.df, current.options.confidence)
        _, low, high = (float(v[0]) for v in interval)
        out["ci"] = [low - 1.0, high - 1.0]
        significant = high < 1.0 or low > 1.0
    out["significant"] = significant
    out["regressed"] = bool(change < -max_regression and significant is not False)
    return out


def verdict_flipped(before: str, after: str) -> bool:
    """A point's verdict changed in a way noise cannot explain: a win beyond the margin moved to the other path, or
    the point became (or stopped being) null — the arms now run the same code. `inconclusive` / `equivalent` ↔
    `fused` / `fallback` is an interval edging across the margin between two runs of the same code, shown in the
    table but not failed on; a real move of the crossover still fails through the recommended cap."""
    if before == after:
        return False
    return "null" in (before, after) or {before, after} == {"fused", "fallback"}


def _consistent(cap: int | None, result: DecisionResult, dffs: np.ndarray) -> bool:
    """The cap agrees with the crossover interval [low, high] (measured Dff after widening), allowing one measured
    step below `low`: a lower goes at or below the interval's lower end by design, so two sweeps of one truth can
    lower to neighbouring measured Dff."""
    c = result.crossover
    if cap is None or c.outcome == "no_points":
        return False
    below = dffs[dffs < c.ci_low]
    low = float(below[-1]) if below.size else -np.inf
    return low <= cap <= c.ci_high


def decision_moved(before: DecisionResult, after: DecisionResult, dffs: np.ndarray) -> str:
    """Why the decision changed beyond noise ('' when it did not): the baseline's recommended cap lies outside the
    current crossover interval while the caps differ or the baseline's own interval held it (the crossover moved
    away from the cap). A cap both sweeps leave outside their intervals is the same decision twice. `dffs`: the
    measured Dff both decisions were made from."""
    old, new = before.decision.recommended_cap, after.decision.recommended_cap
    if _consistent(old, after, dffs) or (old == new and not _consistent(old, before, dffs)):
        return ""
    return (
        f"decision recommended_cap: {old} → {new}; the baseline's cap lies outside the current crossover interval "
        f"{format_ci(after.crossover)}"
    )


def current_would_change(before: DecisionResult, after: DecisionResult, default: int | None) -> str:
    """Why the current data alone would change the cap in force ('' when they would not): at the same default, the
    current sweep raises or lowers and the baseline did not take that action to that cap.

    Why on its own: decision_moved reads intervals, and a current sweep that says "lower 8192 → 2880" while the
    baseline kept 8192 passed it whenever the baseline's cap stayed inside the (wide) current interval — in up to 75
    of 200 simulated pairs with the crossover truly moved 25% (issue 29)."""
    new, old = after.decision, before.decision
    if new.action not in ("raise", "lower") or (new.action, new.recommended_cap) == (old.action, old.recommended_cap):
        return ""
    baseline = f"{old.action} {old.recommended_cap}" if old.action != "keep" else f"keep {default}"
    return (
        f"the current data alone would {new.action} the cap {default} → {new.recommended_cap} "
        f"(the baseline's decision: {baseline})"
    )


def _subset_decision(analysis: Analysis, rows: list[int], current_default: int | None) -> DecisionResult:
    options = analysis.options
    summary = analysis.summary.iloc[rows].reset_index(drop=True)
    return decide(summary, current_default, options.policy, withheld_reason(analysis.aa_beyond_margin, options.margin))


def check_runs(
    baseline: Analysis, current: Analysis, max_regression: float = MAX_REGRESSION, allow_missing: bool = False
) -> CheckResult:
    pairs, dropped = join_points(baseline.summary, current.summary)
    if not pairs:
        return CheckResult("incomparable", dropped=dropped, problems=["no comparable points between the inputs"])
    result = CheckResult("ok", dropped=dropped)
    regressions, changes = [], []
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
                **{arm: arms[arm] for arm in COMPARED_ARMS},
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
            changes.append(f"{point['model']} dff {int(point['dff'])}: verdict {verdicts[0]} → {verdicts[1]}")
    default = current.current_default if current.current_default is not None else baseline.current_default
    before = _subset_decision(baseline, [b for b, _ in pairs], default)
    after = _subset_decision(current, [c for _, c in pairs], default)
    result.decisions = {
        side: {"recommended_cap": d.decision.recommended_cap, "action": d.decision.action, "reason": d.decision.reason}
        for side, d in (("baseline", before), ("current", after))
    }
    dffs = np.unique(current.summary["dff"].iloc[[c for _, c in pairs]].to_numpy(float))
    moved, acted = decision_moved(before, after, dffs), current_would_change(before, after, default)
    changes.extend(why for why in (moved, acted) if why)
    missing = [] if allow_missing else missing
    result.problems = regressions + changes + missing
    result.status = "regression" if regressions else ("changed" if changes else ("missing" if missing else "ok"))
    return result
