"""Two runs of the same sweep (another library pin, harness commit or machine): did the crossover move, and did any
point's fused/fallback ratio change beyond noise?

Per point, the change is the ratio of the two runs' ratios, exp(θ̂_B − θ̂_A) with θ̂ = ln(fused/fallback): the runs
share no rounds, so the two estimates are independent, se² = se_A² + se_B², and the degrees of freedom are
Welch–Satterthwaite's. A point whose interval holds 1 changed within noise.

The crossover shift is (c_B / c_A − 1). Its interval comes from a parametric bootstrap over the per-point estimates:
each draw replaces every point's θ̂ by θ̂ + se·T (T Student-t with the point's degrees of freedom) in both runs,
recomputes each run's crossover the way `harness.analysis.decision.curve` defines it (the first Dff, scanning upward,
where the linearly interpolated θ stops being > 0) and takes the ratio; the interval is the draws' percentile range. Why
not from the two crossover intervals: a test-inversion interval is often open at one end (`[<512, >8192]`), and
intervals do not subtract; the bootstrap propagates exactly the uncertainty those intervals come from, and a draw
whose crossover leaves the measured range makes the interval open on that side instead of being dropped.
tests/analysis/comparison/test_compare.py checks by simulation with a known truth that a pair of runs of one unchanged
truth reads "within noise" at least 95% of the time, and how often a known shift is detected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypedDict

import numpy as np
import pandas as pd

from harness.analysis.comparison.point_match import match_keys
from harness.analysis.decision.curve import Curve, family_curve
from harness.analysis.decision.pipeline import Analysis
from harness.analysis.number_format import json_rounded
from harness.analysis.points.stats import DECIDED, family_labels, t_quantile
from harness.runs.summary_columns import SummaryCol

DRAWS = 4000
SEED = 20260703  # fixed: the same two runs always print the same interval


@dataclass(frozen=True, kw_only=True)
class PointChange:
    model: str
    dff: int
    family: str
    ratio_a: float  # fused/fallback estimate in run A
    ratio_b: float
    change: float  # ratio_b / ratio_a
    ci_low: float
    ci_high: float
    df: float

    @property
    def verdict(self) -> str:
        if not math.isfinite(self.ci_low):
            return "no interval"
        if self.ci_low > 1.0:
            return "fused gained"
        return "fused lost" if self.ci_high < 1.0 else "within noise"


@dataclass(frozen=True, kw_only=True)
class CrossoverShift:
    family: str
    crossover_a: float | None  # the crossover Dff of each run's estimate (None: no crossing in its range)
    crossover_b: float | None
    shift: float | None  # crossover_b / crossover_a − 1
    ci_low: float  # −inf / +inf: open (draws left the measured range on that side)
    ci_high: float
    confidence: float

    @property
    def verdict(self) -> str:
        if self.ci_low > 0:
            return "moved up"
        return "moved down" if self.ci_high < 0 else "within noise"

    def sentence(self) -> str:
        """`the crossover moved −4% [−11%, +5%]: within noise`."""
        if self.shift is None:

            def where(c: float | None) -> str:
                return "none in range" if c is None else f"{c:.0f}"

            return (
                f"no crossover shift: run A crossover {where(self.crossover_a)}, run B {where(self.crossover_b)} "
                f"(a shift needs a crossing in both runs)"
            )
        return (
            f"the crossover moved {_percent(self.shift)} {format_shift_ci(self.ci_low, self.ci_high)} "
            f"({self.crossover_a:.0f} → {self.crossover_b:.0f}, {self.confidence:.0%} bootstrap interval): "
            f"{self.verdict}"
        )


@dataclass(frozen=True, kw_only=True)
class RunComparison:
    """`moecal compare`'s answer: how one run differs from another (crossover shifts by family, ratio changes by
    point). Not stats.Comparison, which is one run's per-point estimate of ln(a/b) for two arms."""

    shifts: tuple[CrossoverShift, ...]
    points: tuple[PointChange, ...]
    unmatched: tuple[str, ...]  # points measured in one run only, `model (Dff n) in A only`

    def as_json(self) -> ComparisonJSON:
        return {
            "crossover": [
                {
                    "family": s.family,
                    "crossover_a": json_rounded(s.crossover_a, 1),
                    "crossover_b": json_rounded(s.crossover_b, 1),
                    "shift": json_rounded(s.shift, 4),
                    "ci_low": json_rounded(s.ci_low, 4),
                    "ci_high": json_rounded(s.ci_high, 4),
                    "confidence": s.confidence,
                    "verdict": s.verdict if s.shift is not None else "no shift",
                    "text": s.sentence(),
                }
                for s in self.shifts
            ],
            "points": [
                {
                    "model": p.model,
                    "dff": p.dff,
                    "family": p.family,
                    "ratio_a": json_rounded(p.ratio_a, 5),
                    "ratio_b": json_rounded(p.ratio_b, 5),
                    "change": json_rounded(p.change, 5),
                    "ci_low": json_rounded(p.ci_low, 5),
                    "ci_high": json_rounded(p.ci_high, 5),
                    "verdict": p.verdict,
                }
                for p in self.points
            ],
            "unmatched": list(self.unmatched),
        }


class ShiftJSON(TypedDict):
    """One family's crossover shift as `compare --json` and a report's `previous.comparison` record it."""

    family: str
    crossover_a: float | None
    crossover_b: float | None
    shift: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    verdict: str
    text: str


class ChangeJSON(TypedDict):
    """One point's ratio change from run A to run B (PointChange)."""

    model: str
    dff: int
    family: str
    ratio_a: float | None
    ratio_b: float | None
    change: float | None
    ci_low: float | None
    ci_high: float | None
    verdict: str


class ComparisonJSON(TypedDict):
    crossover: list[ShiftJSON]
    points: list[ChangeJSON]
    unmatched: list[str]


def _percent(value: float) -> str:
    if value == math.inf:
        return "+∞"
    if value == -math.inf:
        return "−∞"
    return f"{value:+.0%}".replace("-", "−")


def format_shift_ci(low: float, high: float) -> str:
    return f"[{_percent(low)}, {_percent(high)}]"


# --- crossover shift ------------------------------------------------------------------------------------------------


def first_crossings(dffs: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """The crossover of each row of θ (draws × points, points sorted by Dff), as `harness.analysis.decision.curve`
    defines it: −inf when fused does not win at the smallest Dff, +inf when it wins everywhere measured."""
    wins = theta > 0
    out = np.full(theta.shape[0], np.inf)
    out[~wins[:, 0]] = -np.inf
    if theta.shape[1] < 2:  # one point (two runs sharing one Dff): no segment to cross in
        return out
    down = wins[:, :-1] & ~wins[:, 1:]
    has = wins[:, 0] & down.any(axis=1)
    i = np.argmax(down, axis=1)[has]
    a, b = theta[has, i], theta[has, i + 1]
    out[has] = dffs[i] + a / (a - b) * (dffs[i + 1] - dffs[i])
    return out


def _draws(curve: Curve, rng: np.random.Generator, draws: int) -> np.ndarray:
    noise = rng.standard_t(np.broadcast_to(curve.df, (draws, len(curve.df))))
    return first_crossings(curve.dffs.astype(float), curve.theta[None, :] + curve.se[None, :] * noise)


def crossover_shift(
    family: str, a: Curve, b: Curve, confidence: float, draws: int = DRAWS, seed: int = SEED
) -> CrossoverShift:
    """The relative crossover shift from run A to run B with its bootstrap interval (module docstring)."""
    estimate = (
        first_crossings(a.dffs.astype(float), a.theta[None, :])[0],
        first_crossings(b.dffs.astype(float), b.theta[None, :])[0],
    )
    found_a, found_b = (float(c) if math.isfinite(c) else None for c in estimate)
    if len(a.dffs) < 2 or len(b.dffs) < 2 or found_a is None or found_b is None:
        return CrossoverShift(
            family=family,
            crossover_a=found_a,
            crossover_b=found_b,
            shift=None,
            ci_low=-math.inf,
            ci_high=math.inf,
            confidence=confidence,
        )
    rng = np.random.default_rng(seed)
    ca, cb = _draws(a, rng, draws), _draws(b, rng, draws)
    with np.errstate(invalid="ignore"):
        shift = np.log(cb) - np.log(ca)  # log(−inf) is nan; both open the same way is nan too
    # where the ratio is undefined, count the draw against both ends: the interval only widens
    alpha = (1.0 - confidence) / 2
    low = np.quantile(np.where(np.isnan(shift), -np.inf, shift), alpha, method="lower")
    high = np.quantile(np.where(np.isnan(shift), np.inf, shift), 1 - alpha, method="higher")
    return CrossoverShift(
        family=family,
        crossover_a=found_a,
        crossover_b=found_b,
        shift=found_b / found_a - 1,
        ci_low=float(np.expm1(low)),
        ci_high=float(np.expm1(high)),
        confidence=confidence,
    )


# --- per-point ratio changes ----------------------------------------------------------------------------------------


def _keys(summary: pd.DataFrame) -> list[tuple[str, ...]]:
    """A point is matched across runs by what it measures, not where (harness.analysis.comparison.point_match): backend
    and device may differ between the runs, the dtype may not."""
    return match_keys(summary, same_machine=False)


def point_change(
    theta_a: float, se_a: float, df_a: float, theta_b: float, se_b: float, df_b: float, confidence: float
) -> tuple[float, float, float, float]:
    """(change, low, high, df): exp(θ_B − θ_A) with its Welch t interval."""
    var = se_a**2 + se_b**2
    df = var**2 / (se_a**4 / df_a + se_b**4 / df_b) if var > 0 else math.inf
    half = float(t_quantile(confidence, df)) * math.sqrt(var)
    diff = theta_b - theta_a
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half), df


def _valid(summary: pd.DataFrame) -> pd.DataFrame:
    return summary[summary[SummaryCol.VERDICT].isin(DECIDED)]


def point_changes(a: Analysis, b: Analysis, confidence: float) -> tuple[list[PointChange], list[str]]:
    labels_b = family_labels(b.summary)
    valid_a, valid_b = _valid(a.summary), _valid(b.summary)
    rows_a = {k: r for k, (_, r) in zip(_keys(valid_a), valid_a.iterrows(), strict=True)}
    family_of = labels_b.to_dict()  # summary index → family label
    rows_b = {k: (r, family_of[i]) for k, (i, r) in zip(_keys(valid_b), valid_b.iterrows(), strict=True)}
    changes, unmatched = [], []
    for key, (rb, family) in rows_b.items():
        ra = rows_a.get(key)
        if ra is None:
            unmatched.append(f"{rb['model']} (Dff {int(rb['dff'])}) in B only")
            continue
        (theta_a, se_a, df_a), (theta_b, se_b, df_b) = (
            (float(r[SummaryCol.LN_ESTIMATE]), float(r[SummaryCol.SE]), float(r[SummaryCol.DF])) for r in (ra, rb)
        )
        change, low, high, df = point_change(theta_a, se_a, df_a, theta_b, se_b, df_b, confidence)
        changes.append(
            PointChange(
                model=str(rb["model"]),
                dff=int(rb["dff"]),
                family=str(family),
                ratio_a=float(ra[SummaryCol.ESTIMATE]),
                ratio_b=float(rb[SummaryCol.ESTIMATE]),
                change=change,
                ci_low=low,
                ci_high=high,
                df=df,
            )
        )
    unmatched += [f"{r['model']} (Dff {int(r['dff'])}) in A only" for k, r in rows_a.items() if k not in rows_b]
    return sorted(changes, key=lambda p: (p.family, p.dff)), unmatched


# --- both -----------------------------------------------------------------------------------------------------------


def _curves(analysis: Analysis, shared: set[tuple[str, ...]]) -> dict[str, Curve]:
    """Per shape family, the curve of its valid points that the other run measured too."""
    summary = analysis.summary
    labels = family_labels(summary).to_numpy()
    valid = summary[SummaryCol.VERDICT].isin(DECIDED).to_numpy() if len(summary) else np.array([], bool)
    matched = np.array([key in shared for key in _keys(summary)], bool)
    out = {}
    for family in dict.fromkeys(labels):
        positions = np.flatnonzero((labels == family) & valid & matched)
        positions = positions[np.argsort(summary["dff"].to_numpy()[positions], kind="stable")]
        if len(positions):
            out[str(family)] = family_curve(summary, positions, "linear")[0]
    return out


def compare_runs(a: Analysis, b: Analysis, confidence: float, draws: int = DRAWS) -> RunComparison:
    """Run A (the earlier) against run B: one crossover shift per shape family both runs measured, every matched
    point's ratio change. Both crossovers come from the points both runs measured (as `moecal check` compares
    decisions): a point one run lacks would move that run's crossover and read as a shift."""
    shared = set(_keys(_valid(a.summary))) & set(_keys(_valid(b.summary)))
    curves_a, curves_b = _curves(a, shared), _curves(b, shared)
    shifts = tuple(
        crossover_shift(family, curves_a[family], curves_b[family], confidence, draws)
        for family in curves_b
        if family in curves_a
    )
    points, unmatched = point_changes(a, b, confidence)
    return RunComparison(shifts=shifts, points=tuple(points), unmatched=tuple(unmatched))


def render_text(comparison: RunComparison, name_a: str, name_b: str) -> list[str]:
    """The plain-text comparison (what `moecal compare` prints and `report --previous` quotes)."""
    lines = [f"A = {name_a}", f"B = {name_b}"]
    several = len(comparison.shifts) > 1
    for s in comparison.shifts:
        lines.append(f"{s.family}: {s.sentence()}" if several else s.sentence())
    if not comparison.shifts:
        lines.append("no shape family with valid points in both runs: no crossover shift")
    if comparison.points:
        lines.append("per point: fused/fallback in A → B, change B/A with its interval")
        width = max(len(p.model) for p in comparison.points)
        for p in comparison.points:
            lines.append(
                f"  {p.model:<{width}}  Dff {p.dff:>6}  {p.ratio_a:.3f} → {p.ratio_b:.3f}  "
                f"×{p.change:.3f} [{p.ci_low:.3f}, {p.ci_high:.3f}]  {p.verdict}"
            )
    for text in comparison.unmatched:
        lines.append(f"not compared: {text}")
    return lines
