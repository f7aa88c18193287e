"""The curve of one shape family and where it crosses 1.0: θ(x) = ln(fused/fallback) between the measured points,
the acceptance set where the data cannot reject ratio = 1, every crossing, and the crossover with its interval.

Pure functions over arrays; no I/O (ValueError on bad input). docs/design.md §7:

- The curve: θ(x) = ln(fused/fallback) interpolated between neighbouring valid points (linear in Dff by default,
  which reproduces the published numbers; log2 Dff optional). Between points i and i+1 at weight w,
  θ̂(x) = (1−w)θ̂ᵢ + wθ̂ᵢ₊₁ and se² = (1−w)²seᵢ² + w²seᵢ₊₁² (the points are measured independently), with the
  smaller of the two degrees of freedom (conservative). Models sharing a Dff: a random-effects mean (family_curve).
- The crossover is where fused stops winning after the region where it wins: the first down-crossing of θ̂ after
  the first point where fused wins beyond the margin (winning_start); every sign change is listed.
- Its interval: the Dff where |θ̂(x)| ≤ t·se(x) (test inversion; Fieller's interval between a bracketing pair),
  from the winning start on, then widened to the measured Dff at or outside each end — the straight line is only
  a guess between points, and on a curved truth an interval without this widening gets *less* honest as rounds
  grow. Open (±inf, JSON null) where it reaches the end of the measured range. When the crossover's bracket spans
  more than one grid step, it says so ("between 6400 and 14336: no measured point") and names the Dff to measure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy.stats import chi2

from harness.analysis import number_format
from harness.analysis.points.stats import t_quantile
from harness.policy import INTERPOLATIONS, Interpolation, Policy
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import CONFIDENCE

CI_METHOD = "test inversion (Fieller), widened to the measured Dff around it"
HETEROGENEITY_ALPHA = 0.05  # Cochran's Q: models at one Dff disagree
CrossoverOutcome = Literal["crossing", "fused_everywhere", "fused_never", "no_points"]
Direction = Literal["down", "up"]  # down: fused stops winning as Dff grows; up: fused wins again


@dataclass(frozen=True, kw_only=True)
class Curve:
    """A family's valid points sorted by Dff: θ̂ = ln ratio, its standard error and degrees of freedom."""

    dffs: np.ndarray
    theta: np.ndarray
    se: np.ndarray
    df: np.ndarray
    interpolation: Interpolation = "linear"
    labels: tuple[str, ...] = ()  # the model(s) behind each point, for the candidate-cap table

    def __post_init__(self) -> None:
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation must be one of {INTERPOLATIONS}, got {self.interpolation!r}")
        if len(self.dffs) > 1 and np.any(np.diff(self.dffs) <= 0):
            raise ValueError("a curve's Dffs must increase strictly")

    @property
    def x(self) -> np.ndarray:
        return np.log2(self.dffs) if self.interpolation == "log2" else self.dffs.astype(float)

    def to_dff(self, x: np.ndarray | float) -> np.ndarray | float:
        return np.exp2(x) if self.interpolation == "log2" else x

    def at(self, dff: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(θ̂, se, df) at each Dff, interpolated; clamped to the measured range (no extrapolation)."""
        x = self.x
        u = np.clip(np.log2(dff) if self.interpolation == "log2" else np.asarray(dff, float), x[0], x[-1])
        if len(x) == 1:
            shape = np.shape(u)
            return (np.full(shape, self.theta[0]), np.full(shape, self.se[0]), np.full(shape, self.df[0]))
        i = np.clip(np.searchsorted(x, u, side="right") - 1, 0, len(x) - 2)
        w = (u - x[i]) / (x[i + 1] - x[i])
        theta = (1 - w) * self.theta[i] + w * self.theta[i + 1]
        se = np.sqrt((1 - w) ** 2 * self.se[i] ** 2 + w**2 * self.se[i + 1] ** 2)
        df = np.where(w == 0, self.df[i], np.where(w == 1, self.df[i + 1], np.minimum(self.df[i], self.df[i + 1])))
        return theta, se, df


@dataclass(frozen=True, kw_only=True)
class Crossing:
    """One sign change of θ̂ between two adjacent measured Dff, with its own test-inversion interval."""

    dff: float
    direction: Direction
    between: tuple[int, int]
    ci_low: float
    ci_high: float


@dataclass(frozen=True, kw_only=True)
class Crossover:
    outcome: CrossoverOutcome
    dff: float | None  # the decision point (None when there is no crossing)
    ci_low: float  # -inf: open below (the interval reaches the smallest measured Dff)
    ci_high: float  # +inf: open above
    crossings: tuple[Crossing, ...]
    ci_method: str
    min_dff: int | None
    max_dff: int | None
    gap: tuple[int, int] | None = None  # the measured Dff around the crossover when none was measured between them
    next_dff: int | None = None  # the grid multiple inside that gap to measure next (the estimated crossover)

    def gap_text(self) -> str:
        """`between 6400 and 14336: no measured point; measure Dff 11776 next` ('' when the gap is one grid step)."""
        if self.gap is None or self.next_dff is None:
            return ""
        return f"between {self.gap[0]} and {self.gap[1]}: no measured point; measure Dff {self.next_dff} next"


# --- the acceptance set {x : |θ̂(x)| ≤ t·se(x)} --------------------------------------------------------------------


def acceptance_set(curve: Curve, confidence: float = CONFIDENCE) -> list[tuple[float, float]]:
    """Disjoint [low, high] intervals of Dff (sorted) where the data cannot reject ratio = 1."""
    x, a_all, s_all = curve.x, curve.theta, curve.se
    t_all = t_quantile(confidence, curve.df)
    pieces: list[tuple[float, float]] = []
    if len(x) == 1 and abs(a_all[0]) <= t_all[0] * s_all[0]:
        pieces.append((x[0], x[0]))
    x, a_all, s_all, t_all = (np.asarray(v, float).tolist() for v in (x, a_all, s_all, t_all))
    for i in range(len(x) - 1):
        a, b, var_a, var_b = a_all[i], a_all[i + 1], s_all[i] ** 2, s_all[i + 1] ** 2
        t2 = max(t_all[i], t_all[i + 1]) ** 2  # the smaller df: conservative
        q2 = (b - a) ** 2 - t2 * (var_a + var_b)
        q1 = 2 * a * (b - a) + 2 * t2 * var_a
        q0 = a**2 - t2 * var_a
        cuts = sorted({0.0, 1.0, *(r for r in _real_roots(q2, q1, q0) if 0 < r < 1)})
        for w0, w1 in zip(cuts[:-1], cuts[1:], strict=True):
            mid = (w0 + w1) / 2
            if q2 * mid**2 + q1 * mid + q0 <= 0:
                pieces.append((x[i] + w0 * (x[i + 1] - x[i]), x[i] + w1 * (x[i + 1] - x[i])))
    merged: list[list[float]] = []
    for low, high in pieces:
        if merged and low <= merged[-1][1] + 1e-9 * max(1.0, abs(low)):
            merged[-1][1] = max(merged[-1][1], high)
        else:
            merged.append([low, high])
    return [(float(curve.to_dff(low)), float(curve.to_dff(high))) for low, high in merged]


def _real_roots(q2: float, q1: float, q0: float) -> tuple[float, ...]:
    """Real roots of q2·w² + q1·w + q0 (closed form: the acceptance set is solved once per segment per sweep)."""
    if abs(q2) <= 1e-300:
        return (-q0 / q1,) if q1 != 0 else ()
    disc = q1 * q1 - 4 * q2 * q0
    if disc < 0:
        return ()
    root = math.sqrt(disc)
    return ((-q1 - root) / (2 * q2), (-q1 + root) / (2 * q2))


def _to_measured(curve: Curve, low: float, high: float) -> tuple[float, float]:
    """Widen [low, high] to the measured Dff at or outside each end, open (±inf) only where the acceptance set
    itself reaches an end of the measured range.

    Why: the acceptance set is exact only if the curve is the straight line between neighbouring points. A true
    curve that bends between them (ln r = a(C/d − 1) does) puts its crossing elsewhere in the gap, and more rounds
    shrink the set around the wrong place. A monotone true curve crosses 1 somewhere between the last measured point
    above 1 and the first below it, so the bracket of measured points holds it whatever its shape.
    """
    dffs = curve.dffs.astype(float)
    lo, hi = dffs[0], dffs[-1]
    tol = 1e-9 * hi
    widened_low = -math.inf if low <= lo + tol else float(dffs[dffs <= low + tol][-1])
    widened_high = math.inf if high >= hi - tol else float(dffs[dffs >= high - tol][0])
    return widened_low, widened_high


def _component(pieces: list[tuple[float, float]], dff: float, curve: Curve) -> tuple[float, float] | None:
    """The piece holding `dff`, widened to the measured Dff around it (see _to_measured)."""
    for low, high in pieces:
        if low - 1e-6 * abs(low) <= dff <= high + 1e-6 * abs(high):
            return _to_measured(curve, low, high)
    return None


def crossings(curve: Curve, pieces: list[tuple[float, float]]) -> tuple[Crossing, ...]:
    """Every change between fused winning (θ̂ > 0) and not, in increasing Dff, each with its interval."""
    wins = curve.theta > 0
    out = []
    for i in np.flatnonzero(wins[:-1] != wins[1:]):
        x0, x1 = curve.x[i], curve.x[i + 1]
        w = curve.theta[i] / (curve.theta[i] - curve.theta[i + 1])
        dff = float(curve.to_dff(x0 + w * (x1 - x0)))
        low, high = _component(pieces, dff, curve) or (dff, dff)
        direction: Direction = "down" if wins[i] else "up"
        out.append(
            Crossing(
                dff=dff,
                direction=direction,
                between=(int(curve.dffs[i]), int(curve.dffs[i + 1])),
                ci_low=low,
                ci_high=high,
            )
        )
    return tuple(out)


def winning_start(curve: Curve, policy: Policy) -> int | None:
    """Index of the first point where fused wins beyond the margin (else the first with θ̂ > 0; None: nowhere).

    The crossover is where fused stops winning *after* this point: an inconclusive first point just below 1 (the
    2026-07-03 GB10 sweep's Dff 768, 0.995) is noise before the winning region, not "fused never wins"."""
    low = curve.theta - t_quantile(policy.confidence, curve.df) * curve.se
    for candidates in (low > math.log1p(policy.margin), curve.theta > 0):
        if candidates.any():
            return int(np.argmax(candidates))
    return None


def find_crossover(curve: Curve, policy: Policy = Policy()) -> Crossover:
    """The decision point — the first down-crossing after the winning region starts (winning_start) — and its
    interval: the hull of the acceptance set from that start on, widened to the measured Dff around it
    (_to_measured). A noisy point can make the estimated curve cross 1.0 early while the true crossing lies in
    another piece of the set; every crossing keeps its own piece. Open where the set reaches an end of the measured
    range; when the set is empty the crossover lies beyond the end where the estimate points."""
    if len(curve.dffs) == 0:
        return Crossover(
            outcome="no_points",
            dff=None,
            ci_low=-math.inf,
            ci_high=math.inf,
            crossings=(),
            ci_method=CI_METHOD,
            min_dff=None,
            max_dff=None,
        )
    lo, hi = int(curve.dffs[0]), int(curve.dffs[-1])
    pieces = acceptance_set(curve, policy.confidence)
    found = crossings(curve, pieces)
    start = winning_start(curve, policy)
    if start is None:
        high = _to_measured(curve, pieces[0][0], pieces[-1][1])[1] if pieces else lo
        return Crossover(
            outcome="fused_never",
            dff=None,
            ci_low=-math.inf,
            ci_high=high,
            crossings=found,
            ci_method=CI_METHOD,
            min_dff=lo,
            max_dff=hi,
        )
    begin = float(curve.dffs[start])
    after = [(max(low, begin), high) for low, high in pieces if high >= begin]
    low, high = _to_measured(curve, after[0][0], after[-1][1]) if after else (hi, math.inf)
    first = next((c for c in found if c.direction == "down" and c.between[0] >= begin), None)
    if first is None:
        return Crossover(
            outcome="fused_everywhere",
            dff=None,
            ci_low=low,
            ci_high=math.inf,
            crossings=found,
            ci_method=CI_METHOD,
            min_dff=lo,
            max_dff=hi,
        )
    a, b = first.between
    grid = policy.grid
    inside = range(-(-(a + 1) // grid) * grid, b, grid)
    next_dff = min(inside, key=lambda d: abs(d - first.dff)) if len(inside) > 1 else None
    gap = (a, b) if next_dff is not None else None
    return Crossover(
        outcome="crossing",
        dff=first.dff,
        ci_low=low,
        ci_high=high,
        crossings=found,
        ci_method=CI_METHOD,
        min_dff=lo,
        max_dff=hi,
        gap=gap,
        next_dff=next_dff,
    )


def format_ci(crossover: Crossover) -> str:
    """`[7102, 8310]`, with open ends written as `<min` / `>max` measured Dff."""
    return number_format.dff_interval(crossover.ci_low, crossover.ci_high, crossover.min_dff, crossover.max_dff)


def family_curve(
    summary: pd.DataFrame, positions: np.ndarray, interpolation: Interpolation
) -> tuple[Curve, np.ndarray, tuple[str, ...]]:
    """The curve of a family's valid points (sorted by Dff), the rounds per arm behind each curve point, and a note
    per Dff whose models disagree.

    Two points of one family can share a Dff: a command sweep of two checkpoints with the same expert size (say
    qwen3-30b-a3b and its VL variant, both 768), or an mlxcel CSV without d_model. They become one curve point, a
    random-effects mean (DerSimonian–Laird): the between-model variance τ² is added to each model's se² before
    weighting, so two models that disagree (+3% and −3%) give a wide point instead of a confident 1.000; Cochran's
    Q test (5%) says when they disagree. The smaller of their degrees of freedom (conservative), the sum of rounds."""
    rows = summary.iloc[positions]
    dffs = rows["dff"].to_numpy(float)
    theta, se, df = (
        pd.to_numeric(rows[c]).to_numpy(float) for c in (SummaryCol.LN_ESTIMATE, SummaryCol.SE, SummaryCol.DF)
    )
    rounds = np.minimum(rows[SummaryCol.N_FUSED].to_numpy(int), rows[SummaryCol.N_FALLBACK].to_numpy(int))
    models = rows["model"].astype(str).to_numpy()
    unique = np.unique(dffs)
    notes: list[str] = []
    if len(unique) < len(dffs):
        combined = [random_effects(theta[dffs == d], se[dffs == d]) for d in unique]
        for d, (_, _, p) in zip(unique, combined, strict=True):
            if p < HETEROGENEITY_ALPHA:
                notes.append(
                    f"the models at Dff {d:.0f} ({', '.join(models[dffs == d])}) disagree (Cochran's Q, a test of "
                    f"whether they measure one ratio: p = {p:.3f}): their average is widened by the spread between them"
                )
        theta = np.array([x[0] for x in combined])
        se = np.array([x[1] for x in combined])
        df = np.array([np.min(df[dffs == d]) for d in unique])
        rounds = np.array([np.sum(rounds[dffs == d]) for d in unique])
        models = np.array([" + ".join(models[dffs == d]) for d in unique])
        dffs = unique
    return (
        Curve(dffs=dffs, theta=theta, se=se, df=df, interpolation=interpolation, labels=tuple(models)),
        rounds,
        tuple(notes),
    )


def random_effects(theta: np.ndarray, se: np.ndarray) -> tuple[float, float, float]:
    """DerSimonian–Laird: (pooled θ, its se, Cochran's Q p-value; 1.0 for one value)."""
    if len(theta) == 1:
        return float(theta[0]), float(se[0]), 1.0
    w = 1.0 / se**2
    fixed = np.sum(w * theta) / np.sum(w)
    q = float(np.sum(w * (theta - fixed) ** 2))
    k = len(theta)
    tau2 = max(0.0, (q - (k - 1)) / (np.sum(w) - np.sum(w**2) / np.sum(w)))
    w_star = 1.0 / (se**2 + tau2)
    pooled = float(np.sum(w_star * theta) / np.sum(w_star))
    return pooled, float(1.0 / np.sqrt(np.sum(w_star))), float(chi2.sf(q, k - 1))
