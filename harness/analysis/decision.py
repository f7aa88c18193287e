"""Crossover Dff with an interval that holds between measured points, and the keep/raise/lower policy read from a
table of candidate caps on the measured Dff.

Pure functions over arrays and the summary DataFrame; no I/O (ValueError on bad input). docs/design.md §7:

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
- Policy at the current cap c ("fused when Dff ≤ cap"), on measured points only (candidate_caps lists, per cap,
  which measured points change path and the aggregate effect): **lower** when fallback wins beyond δ at the
  largest measured Dff ≤ c, to the largest measured Dff below it where fused is not measurably worse (so no measured
  point where fused wins is switched); **raise** when fused wins beyond δ at every measured Dff above c up to the
  new cap (never past the measured range); each is a one-sided question, tested one-sided at α (the intervals
  shown stay two-sided); else **keep**, saying about how many rounds give an 80% chance of a
  decision. A straight line across an unmeasured gap never moves the cap: it is reported as a withheld raise.
  Several deciding families: a raise needs every family (intersection-union test, no correction); a lower needs
  one, so each family's lower test runs at the Bonferroni level 1 − α/k. **set**: no current default was given;
  the cap to set is the crossover interval's lower end. A run whose A/A comparison lies beyond the margin gets no
  raise/lower at all (keep, saying which was withheld and why): its drift is larger than its noise model.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.stats import chi2

from harness.analysis import figures
from harness.analysis.between_points import widen_for_scatter
from harness.analysis.decision_words import band as band_words
from harness.analysis.decision_words import family_words, point_test_words, sign_runs
from harness.analysis.stats import (
    AFFORDABLE_ROUNDS,
    DECIDED,
    decision_chance,
    family_labels,
    ratio_interval,
    rounds_to_decide,
    t_quantile,
)
from harness.analysis.sweep_drift import marked_unusable, unusable, unusable_words
from harness.config.schema import DEFAULT_CAP_ENV
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import CONFIDENCE, DEFAULT_GRID, MARGIN

INTERPOLATIONS = ("linear", "log2")
CI_METHOD = "test inversion (Fieller), widened to the measured Dff around it"
HETEROGENEITY_ALPHA = 0.05  # Cochran's Q: models at one Dff disagree


@dataclass(frozen=True)
class Curve:
    """A family's valid points sorted by Dff: θ̂ = ln ratio, its standard error and degrees of freedom."""

    dffs: np.ndarray
    theta: np.ndarray
    se: np.ndarray
    df: np.ndarray
    interpolation: str = "linear"
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


@dataclass(frozen=True)
class Crossing:
    """One sign change of θ̂ between two adjacent measured Dff, with its own test-inversion interval."""

    dff: float
    direction: str  # "down": fused stops winning as Dff grows; "up": fused wins again
    between: tuple[int, int]
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class Crossover:
    outcome: str  # crossing | fused_everywhere | fused_never | no_points
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


@dataclass(frozen=True)
class Switch:
    """One measured point that changes path when the cap moves: the new path's tok/s over the old path's."""

    dff: int
    model: str
    to: str  # fused | fallback
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
    question: str  # "fused": does fused win beyond 1 + δ (a raise)? "fallback": beyond 1 − δ (a lower)?
    level: float  # one-sided confidence
    bound: float  # the one-sided bound of the ratio: the lower bound for "fused", the upper bound for "fallback"
    passed: bool

    def words(self, margin: float) -> str:
        return point_test_words(self.question, self.passed, self.bound, self.level, margin)


@dataclass(frozen=True)
class Decision:
    action: str  # keep | raise | lower | set (no current default was given: the cap to set from scratch)
    recommended_cap: int | None
    reason: str
    apply: str | None  # the environment line that applies the cap (None: no variable sets it for this workload)
    caps: tuple[CapOption, ...] = ()  # the candidate-cap table the decision was read from
    tests: tuple[PointTest, ...] = ()  # the point tests the decision read, in the order it read them
    # drift between points (between_points): the relative size √τ² added to every point's interval, None when the
    # points scatter no more than their intervals allow
    drift_between_points: float | None = None
    # the rounds hint of a keep: the measured Dff it is about and the runs per arm that give an 80% chance of a
    # decision there (None with a Dff: no affordable number does, stats.AFFORDABLE_ROUNDS)
    rounds_dff: int | None = None
    rounds_needed: int | None = None
    # the two-pass test for drift of one arm (sweep_drift), its p-value when it made the data unusable for a
    # decision (a raise or lower withheld, or none to withhold), None when it was not run or did not reject
    sweep_drift: float | None = None


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
        direction = "down" if wins[i] else "up"
        out.append(Crossing(dff, direction, (int(curve.dffs[i]), int(curve.dffs[i + 1])), low, high))
    return tuple(out)


def winning_start(curve: Curve, confidence: float = CONFIDENCE, margin: float = MARGIN) -> int | None:
    """Index of the first point where fused wins beyond the margin (else the first with θ̂ > 0; None: nowhere).

    The crossover is where fused stops winning *after* this point: an inconclusive first point just below 1 (the
    2026-07-03 GB10 sweep's Dff 768, 0.995) is noise before the winning region, not "fused never wins"."""
    low = curve.theta - t_quantile(confidence, curve.df) * curve.se
    for candidates in (low > math.log1p(margin), curve.theta > 0):
        if candidates.any():
            return int(np.argmax(candidates))
    return None


def find_crossover(
    curve: Curve, confidence: float = CONFIDENCE, margin: float = MARGIN, grid: int = DEFAULT_GRID
) -> Crossover:
    """The decision point — the first down-crossing after the winning region starts (winning_start) — and its
    interval: the hull of the acceptance set from that start on, widened to the measured Dff around it
    (_to_measured). A noisy point can make the estimated curve cross 1.0 early while the true crossing lies in
    another piece of the set; every crossing keeps its own piece. Open where the set reaches an end of the measured
    range; when the set is empty the crossover lies beyond the end where the estimate points."""
    if len(curve.dffs) == 0:
        return Crossover("no_points", None, -math.inf, math.inf, (), CI_METHOD, None, None)
    lo, hi = int(curve.dffs[0]), int(curve.dffs[-1])
    pieces = acceptance_set(curve, confidence)
    found = crossings(curve, pieces)
    start = winning_start(curve, confidence, margin)
    if start is None:
        high = _to_measured(curve, pieces[0][0], pieces[-1][1])[1] if pieces else lo
        return Crossover("fused_never", None, -math.inf, high, found, CI_METHOD, lo, hi)
    begin = float(curve.dffs[start])
    after = [(max(low, begin), high) for low, high in pieces if high >= begin]
    low, high = _to_measured(curve, after[0][0], after[-1][1]) if after else (hi, math.inf)
    first = next((c for c in found if c.direction == "down" and c.between[0] >= begin), None)
    if first is None:
        return Crossover("fused_everywhere", None, low, math.inf, found, CI_METHOD, lo, hi)
    a, b = first.between
    inside = range(-(-(a + 1) // grid) * grid, b, grid)
    next_dff = min(inside, key=lambda d: abs(d - first.dff)) if len(inside) > 1 else None
    gap = (a, b) if next_dff is not None else None
    return Crossover("crossing", first.dff, low, high, found, CI_METHOD, lo, hi, gap, next_dff)


def format_ci(crossover: Crossover) -> str:
    """`[7102, 8310]`, with open ends written as `<min` / `>max` measured Dff."""
    return figures.dff_interval(crossover.ci_low, crossover.ci_high, crossover.min_dff, crossover.max_dff)


# --- policy -------------------------------------------------------------------------------------------------------


def _finding(curve: Curve, c: Crossover, confidence: float) -> str:
    """The curve in one sentence, every claim computed from the points: where the estimate lies above 1.0, and the
    crossover with its interval (the crossing the interval belongs to; the estimate always lies inside it)."""
    ci = (
        f"{figures.percent(confidence)} CI {format_ci(c)}, which includes the error of interpolating between measured "
        "points"
    )
    where = sign_runs(curve.dffs.tolist(), (curve.theta > 0).tolist())
    if c.outcome == "crossing":
        gap = f"; {c.gap_text()}" if c.gap_text() else ""
        several = "the first downward crossing after fused first leads; " if len(c.crossings) > 1 else ""
        return f"The estimated ratio is {where}; it crosses 1.0 at Dff ≈ {figures.dff(c.dff)} ({several}{ci}{gap})"
    if c.outcome == "fused_everywhere":
        return (
            f"The estimated ratio is {where}, with no downward crossing after fused first leads, so where fused stops "
            f"winning is not located ({ci})"
        )
    return f"The estimated ratio is {where} (where fused stops winning: {ci})"


def candidate_caps(
    curve: Curve, current: int | None, grid: int = DEFAULT_GRID, confidence: float = CONFIDENCE
) -> tuple[CapOption, ...]:
    """One row per cap that sends a different set of measured points to fused: below the smallest measured Dff,
    then each measured Dff (a cap anywhere up to the next measured Dff selects the same paths for measured models)."""
    if len(curve.dffs) == 0:
        return ()
    current = int(curve.dffs[0]) - 1 if current is None else current
    labels = curve.labels or tuple(f"Dff {int(d)}" for d in curve.dffs)
    total = len(curve.dffs)
    half = t_quantile(confidence, curve.df) * curve.se  # one t quantile per point: the table is built per sweep
    out = []
    for cap in [(int(curve.dffs[0]) - 1) // grid * grid, *(int(d) for d in curve.dffs)]:
        moved = np.flatnonzero((curve.dffs > min(cap, current)) & (curve.dffs <= max(cap, current)))
        sign = 1.0 if cap > current else -1.0
        to = "fused" if sign > 0 else "fallback"
        switched = tuple(
            Switch(
                int(curve.dffs[i]),
                labels[i],
                to,
                math.exp(sign * curve.theta[i]),
                math.exp(sign * curve.theta[i] - half[i]),
                math.exp(sign * curve.theta[i] + half[i]),
            )
            for i in moved
        )
        if moved.size:
            theta = sign * float(np.sum(curve.theta[moved])) / total
            # the aggregate's se over the t quantile of the fewest degrees of freedom among the switched points
            width = float(np.max(half[moved] / curve.se[moved])) * float(np.sqrt(np.sum(curve.se[moved] ** 2))) / total
            effect, low, high = math.exp(theta), math.exp(theta - width), math.exp(theta + width)
        else:
            effect, low, high = 1.0, 1.0, 1.0
        out.append(CapOption(cap, switched, effect, low, high))
    return tuple(out)


def _tested(curve: Curve, test: PointTest, margin: float, role: str) -> str:
    """`at Dff 4096 (role) the ratio is 0.9855; fallback not shown to win beyond 1 − 1% (one-sided … bound …)`."""
    i = int(np.flatnonzero(curve.dffs == test.dff)[0])
    return f"at Dff {test.dff} ({role}) the ratio is {figures.ratio(math.exp(curve.theta[i]))}; {test.words(margin)}"


def _point_tests(
    curve: Curve,
    m: int | None,
    above: np.ndarray,
    wins: int,
    lowered: bool,
    bounds: tuple[np.ndarray, np.ndarray],
    passed: tuple[np.ndarray, np.ndarray],
    levels: tuple[float, float],
) -> tuple[PointTest, ...]:
    """The tests the policy read, as data: the lower test at the largest measured Dff at or below the cap, then
    (when it did not lower) the raise test at each measured Dff above the cap up to the first that fails."""
    labels = curve.labels or tuple(f"Dff {int(d)}" for d in curve.dffs)

    def test(i: int, question: int) -> PointTest:
        name = ("fallback", "fused")[question]
        return PointTest(int(curve.dffs[i]), labels[i], name, levels[question], float(bounds[question][i]),
                         bool(passed[question][i]))  # fmt: skip

    out = [test(m, 0)] if m is not None else []
    if not lowered:
        out += [test(int(i), 1) for i in above[: wins + 1]]
    return tuple(out)


def _to_decide(curve: Curve, i: int, margin: float, confidence: float, rounds: np.ndarray) -> tuple[str, int | None]:
    """`about N rounds per arm give an 80% chance of a decision at Dff D` for measured point i, or why no affordable
    number of rounds does; and that N (None: none does)."""
    n = int(rounds[i])
    needed = rounds_to_decide(curve.theta[i], curve.se[i], curve.df[i], n, margin, confidence)
    where = f"Dff {int(curve.dffs[i])}"
    if needed is not None:
        return f"about {needed} rounds per arm at {where} (now {n}) give an 80% chance of a decision", needed
    if not (np.isfinite(curve.se[i]) and curve.se[i] > 0 and n >= 1):
        return f"no number of rounds at {where} can be suggested (its interval has no spread to scale)", None
    chance = float(decision_chance(curve.theta[i], curve.se[i], curve.df[i], n, AFFORDABLE_ROUNDS, margin, confidence))
    return (
        f"no affordable number of rounds is likely to decide at {where}: even {AFFORDABLE_ROUNDS} per arm (now {n}) "
        f"give about a {chance:.0%} chance (the ratio may sit on the margin's edge)",
        None,
    )


def _line_raise(curve: Curve, start: int, level: float, margin: float, grid: int) -> tuple[int, int, int] | None:
    """(cap, a, b): the largest grid multiple above `start` up to which the straight line between the measured Dff
    a < cap < b around it still shows fused winning beyond the margin — a suggestion across an unmeasured gap."""
    nxt = np.flatnonzero(curve.dffs > start)
    if not nxt.size or nxt[0] == 0:
        return None
    a, b = int(curve.dffs[nxt[0] - 1]), int(curve.dffs[nxt[0]])
    above = np.arange(start // grid * grid + grid, b, grid)
    if not above.size:
        return None
    _, low, _ = ratio_interval(*curve.at(above), level)
    wins = np.atleast_1d(low) > 1.0 + margin
    stop = int(np.argmin(wins)) if not wins.all() else len(wins)
    return (int(above[stop - 1]), a, b) if stop else None


def _gap_next(crossover: Crossover, a: int, b: int, grid: int) -> int:
    if crossover.gap == (a, b) and crossover.next_dff is not None:
        return crossover.next_dff
    return max(a + grid, min(b - grid, round((a + b) / 2 / grid) * grid))


def recommend(
    curve: Curve,
    crossover: Crossover,
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    cap_env: str = DEFAULT_CAP_ENV,
    confidence: float = CONFIDENCE,
    margin: float = MARGIN,
    lower_confidence: float | None = None,
    rounds: np.ndarray | None = None,
    withhold: str = "",
    table: bool = True,
) -> Decision:
    """Keep / raise / lower / set for one family from its measured points (module docstring); `withhold` (a
    reason) turns a raise or lower into keep; `table`: attach the candidate-cap table (simulations skip it).
    Raises are tested at `confidence`: a raise needs every family and every point it switches to agree (an
    intersection-union test needs no multiplicity correction); lowers, which any one family can trigger, at
    `lower_confidence`."""
    if grid <= 0:
        raise ValueError(f"grid must be positive, got {grid}")
    lower_level = lower_confidence or confidence
    rounds = np.zeros(len(curve.dffs), int) if rounds is None else rounds
    keep_line = f"{cap_env}={current_default}" if current_default is not None and cap_env else None
    caps = candidate_caps(curve, current_default, grid, confidence) if table else ()
    if crossover.outcome == "no_points":
        reason = "No point with an interval to decide from; nothing changes."
        return Decision("keep", current_default, reason, keep_line)
    finding = _finding(curve, crossover, confidence)
    lo = int(curve.dffs[0])
    below_all = (lo - 1) // grid * grid
    if current_default is None:
        cap = int(crossover.ci_low) if math.isfinite(crossover.ci_low) else below_all
        bound = "the crossover interval's lower end" if math.isfinite(crossover.ci_low) else f"below Dff {lo}"
        reason = f"{finding}; with no current default given, set {cap} ({bound}, a measured Dff or below them all)."
        return Decision("set", cap, reason, f"{cap_env}={cap}" if cap_env else None, caps)
    c = current_default
    # one-sided questions (does fused win beyond δ at every point a raise switches?), so one-sided tests at α
    t_low, t_raise = t_quantile(2 * lower_level - 1, curve.df), t_quantile(2 * confidence - 1, curve.df)
    worse = curve.theta + t_low * curve.se < math.log1p(-margin)
    better = curve.theta - t_raise * curve.se > math.log1p(margin)
    fused_now = np.flatnonzero(curve.dffs <= c)
    above = np.flatnonzero(curve.dffs > c)
    m = int(fused_now[-1]) if fused_now.size else None
    lowered = m is not None and bool(worse[m])
    wins = 0
    while not lowered and wins < above.size and better[above[wins]]:
        wins += 1
    bounds = (np.exp(curve.theta + t_low * curve.se), np.exp(curve.theta - t_raise * curve.se))
    tests = _point_tests(curve, m, above, wins, lowered, bounds, (worse, better), (lower_level, confidence))
    action = None
    if lowered:
        # the largest measured Dff where fused is not shown worse: every measured point the lower switches is one
        # where fallback wins beyond the margin. The crossover interval's lower end (the earlier target) is wide at
        # few rounds and switched clear fused wins in 11-24% of simulated lowers (tests/calibration.py).
        fine = np.flatnonzero(~worse[:m])
        target = int(curve.dffs[fine[-1]]) if fine.size else below_all
        if not fine.size:
            where = f"below the smallest measured Dff {lo}: fallback wins beyond the margin at every one up to {c}"
        else:
            where = "the largest measured Dff below it where fused is not measurably worse"
        evidence = _tested(curve, tests[0], margin, f"the largest measured Dff at or below {c}")
        action = ("lower", int(target), evidence, where)
    elif wins:
        best = int(curve.dffs[above[wins - 1]])
        passed = [t for t in tests if t.question == "fused" and t.passed]
        bounds_text = ", ".join(f"{t.dff}: {figures.ratio(t.bound)}" for t in passed)
        evidence = (
            f"fused wins beyond {band_words(margin, 'fused')} at every measured Dff above {c} up to {best} (one-sided "
            f"{figures.percent(confidence)} lower bounds {bounds_text})"
        )
        where = "the largest measured Dff up to which every measured point shows it"
        if best == int(curve.dffs[-1]):
            where += f"; Dff above {best} are unmeasured"
        action = ("raise", best, evidence, where)
    if action is not None and withhold:
        verb, cap, evidence, where = action
        reason = f"{finding}; {evidence}; a {verb} to {cap} was withheld because {withhold}"
        return Decision("keep", c, reason, keep_line, caps, tests)
    if action is not None:
        verb, cap, evidence, where = action
        reason = f"{finding}; {evidence}. {verb.capitalize()} it to {cap}, {where}"
        line = _line_raise(curve, cap, confidence, margin, grid) if verb == "raise" else None
        if line is not None:
            reason += (
                f" (the straight line from {line[1]} to {line[2]} would go on to {line[0]}, but no Dff between them "
                f"was measured; measure Dff {_gap_next(crossover, line[1], line[2], grid)} next)"
            )
        reason += "."
        return Decision(verb, cap, reason, f"{cap_env}={cap}" if cap_env else None, caps, tests)
    parts = [] if m is not None else [f"no measured Dff is at or below {c}"]
    for test in tests:
        side = (
            "the largest measured Dff at or below" if test.question == "fallback" else "the smallest measured Dff above"
        )
        role = f"{side} {c}"
        parts.append(_tested(curve, test, margin, role))
    undecided = [i for i in ([m] if m is not None else []) + [int(j) for j in above[:1]] if not (worse[i] or better[i])]
    hint, needed = _to_decide(curve, undecided[0], margin, confidence, rounds) if undecided else ("", None)
    hint = f"; {hint}" if hint else ""
    line = _line_raise(curve, c, confidence, margin, grid)
    withheld = ""
    if line is not None:
        measure = _gap_next(crossover, line[1], line[2], grid)
        withheld = (
            f" (a raise to {line[0]} was withheld because no Dff between {line[1]} and {line[2]} was measured: the "
            f"straight line across that gap is not evidence; measure Dff {measure} next)"
        )
    reason = f"{finding}; {'; '.join(parts)}. Keep {c}{withheld}{hint}."
    at = int(curve.dffs[undecided[0]]) if undecided else None
    return Decision("keep", c, reason, keep_line, caps, tests, rounds_dff=at, rounds_needed=needed)


def family_curve(
    summary: pd.DataFrame, positions: np.ndarray, interpolation: str
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
    return Curve(dffs, theta, se, df, interpolation, tuple(models)), rounds, tuple(notes)


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


def deciding_families(families: Sequence[FamilyDecision]) -> list[FamilyDecision]:
    """The families allowed to set the overall cap.

    A `layer` family measures the kernels at a fixed shape, so when a run has any, they decide; whole-model
    `decode` (or `command`) points then only show the effect on tok/s. A family also needs two valid points to locate a
    crossover: a single point says which path won there, not where the paths cross. If no family qualifies, all do.
    """
    kernel = [f for f in families if f.family.startswith("layer")] or list(families)
    located = [f for f in kernel if f.valid_points >= 2]
    return located or kernel


def decide(
    summary: pd.DataFrame,
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    interpolation: str = "linear",
    confidence: float = CONFIDENCE,
    cap_env: str = DEFAULT_CAP_ENV,
    margin: float = MARGIN,
    withhold: str = "",
    sweep_drift: float | None = None,
) -> DecisionResult:
    """Crossover and decision per shape family, then overall (the smallest deciding family cap)."""
    staged = stage_families(summary, interpolation)
    if not staged:
        staged = [StagedFamily("", Curve(np.array([]), np.array([]), np.array([]), np.array([]), interpolation))]
        return _no_families(decide_curves(staged, current_default, grid, confidence, cap_env, margin, withhold))
    return decide_curves(staged, current_default, grid, confidence, cap_env, margin, withhold, sweep_drift=sweep_drift)


def stage_families(summary: pd.DataFrame, interpolation: str = "linear") -> list[StagedFamily]:
    """Each shape family's curve of valid points, as `decide` reads a summary (the allocation of further rounds
    (harness.analysis.decision_value) perturbs these curves and decides again)."""
    labels = family_labels(summary).to_numpy()
    valid = summary[SummaryCol.VERDICT].isin(DECIDED).to_numpy() if len(summary) else np.array([], bool)
    staged = []
    for family in dict.fromkeys(labels):
        positions = np.flatnonzero((labels == family) & valid)
        positions = positions[np.argsort(summary["dff"].to_numpy()[positions], kind="stable")]
        curve, rounds, notes = family_curve(summary, positions, interpolation)
        rows = tuple(int(i) for i in np.flatnonzero(labels == family))
        staged.append(StagedFamily(str(family), curve, rounds, notes, rows))
    return staged


@dataclass(frozen=True)
class StagedFamily:
    """One shape family's curve before its decision (what decide builds from a summary, simulations directly)."""

    family: str
    curve: Curve
    rounds: np.ndarray | None = None
    notes: tuple[str, ...] = ()
    rows: tuple[int, ...] = ()


def _no_families(result: DecisionResult) -> DecisionResult:
    return DecisionResult((), result.crossover, result.decision)


def decide_curves(
    staged: Sequence[StagedFamily],
    current_default: int | None,
    grid: int = DEFAULT_GRID,
    confidence: float = CONFIDENCE,
    cap_env: str = DEFAULT_CAP_ENV,
    margin: float = MARGIN,
    withhold: str = "",
    table: bool = True,
    sweep_drift: float | None = None,
) -> DecisionResult:
    """Each family's crossover and decision, then the overall one (_overall). Lowers are tested at the Bonferroni
    level 1 − α/k over the k deciding families (any one can trigger a lower), raises at the plain level.
    `sweep_drift`: the p-value of the two-pass test for drift of one arm (sweep_drift.pass_difference, Bonferroni
    over the families); below sweep_drift.SWEEP_DRIFT_ALPHA the data are unusable for a decision: keep, say so."""
    if unusable(sweep_drift):
        withhold = "; ".join(filter(None, [withhold, unusable_words(sweep_drift)]))
    # drift between points widens the curve the decision reads (between_points), never a point's own interval; only
    # a layer family's points differ in Dff alone (a decode family's are different models, whose ratios need not
    # be monotone in Dff)
    widened = [
        widen_for_scatter(s.curve.theta, s.curve.se, s.curve.df)
        if s.family.startswith("layer")
        else (s.curve.se, s.curve.df, 0.0)
        for s in staged
    ]
    scatter = [math.sqrt(tau2) if tau2 > 0 else None for _, _, tau2 in widened]
    staged = [
        replace(s, curve=replace(s.curve, se=se, df=df)) if tau2 > 0 else s
        for s, (se, df, tau2) in zip(staged, widened, strict=True)
    ]
    crossovers = [find_crossover(s.curve, confidence, margin, grid) for s in staged]
    draft = [
        FamilyDecision(s.family, (), c, Decision("keep", None, "", None), len(s.curve.dffs))
        for s, c in zip(staged, crossovers, strict=True)
    ]
    lower_confidence = 1.0 - (1.0 - confidence) / len(deciding_families(draft))
    families = []
    for s, crossover, tau in zip(staged, crossovers, scatter, strict=True):
        decision = recommend(
            s.curve,
            crossover,
            current_default,
            grid,
            cap_env,
            confidence,
            margin,
            lower_confidence,
            s.rounds,
            withhold,
            table,
        )
        if tau is not None:
            decision = replace(decision, reason=f"{decision.reason} {_scatter_note(tau)}", drift_between_points=tau)
        if s.notes:
            decision = replace(decision, reason=f"{decision.reason} Note: {'; '.join(s.notes)}.")
        families.append(FamilyDecision(s.family, s.rows, crossover, decision, len(s.curve.dffs)))
    candidates = deciding_families(families)
    binding = min(
        candidates, key=lambda f: math.inf if f.decision.recommended_cap is None else f.decision.recommended_cap
    )
    overall = _overall(binding, candidates, current_default)
    if unusable(sweep_drift):
        overall = marked_unusable(overall, sweep_drift)
    return DecisionResult(tuple(families), binding.crossover, overall, binding.family)


def _scatter_note(tau: float) -> str:
    return (
        f"The measured points scatter more than their own intervals allow (drift between points, or a ratio that is "
        f"not monotone in Dff): ±{tau:.2%} was added to every point's interval before deciding; repeating the points "
        f"next to the cap in a later session tells drift from shape."
    )


def _overall(binding: FamilyDecision, candidates: Sequence[FamilyDecision], current_default: int | None) -> Decision:
    """One cap must serve every deciding family, so the smallest family cap wins: a raise needs every family (each
    tested at the plain level: intersection-union), a lower needs one (each tested at a Bonferroni level)."""
    decision = binding.decision
    if len(candidates) == 1 or decision.recommended_cap is None:
        return decision
    if current_default is not None and decision.action != "set":
        cap = decision.recommended_cap
        action = "keep" if cap == current_default else ("raise" if cap > current_default else "lower")
        decision = replace(decision, action=action)
    k = len(candidates)
    if decision.action == "lower":
        who = (
            f"The shape family {family_words(binding.family)} sets the smallest cap (each of the {k} deciding "
            f"families tests a lower at the stricter level 1 − α/{k}, Bonferroni, because any one of them can "
            "trigger it)"
        )
    elif decision.action == "raise":
        who = (
            f"All {k} deciding families support a raise (each tested at the plain level: every family must agree, so "
            f"no correction is needed); the smallest raised cap holds, set by {family_words(binding.family)}"
        )
    else:
        raisers = [f for f in candidates if f.decision.action == "raise"]
        others = [family_words(f.family) for f in candidates if f.decision.action != "raise"]
        who = f"The shape family {family_words(binding.family)} keeps the cap"
        if raisers:
            smallest = min(f.decision.recommended_cap or 0 for f in raisers)
            who += f" (a raise to {smallest} was withheld because {', '.join(others)} does not support it)"
    return replace(decision, reason=f"{who}. {decision.reason}")


# --- JSON ---------------------------------------------------------------------------------------------------------


def _number(value: float | None, digits: int) -> float | None:
    """JSON-safe: NaN and ±inf become null."""
    return round(float(value), digits) if value is not None and math.isfinite(value) else None


def _exact(value: object) -> float | None:
    """JSON-safe (NaN and ±inf become null) and never pre-rounded: every text formats the one stored number
    (harness.analysis.figures), so a figure printed twice prints identically."""
    return float(value) if value is not None and math.isfinite(float(value)) else None


def crossover_json(c: Crossover) -> dict[str, object]:
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


def caps_json(caps: Sequence[CapOption]) -> list[dict[str, object]]:
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


def test_json(test: PointTest) -> dict[str, object]:
    return {
        "dff": test.dff,
        "model": test.model,
        "question": test.question,
        "level": test.level,
        "bound": _exact(test.bound),
        "passed": test.passed,
    }


def point_json(row: Mapping[str, object], family: str, test: PointTest | None = None) -> dict[str, object]:
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


def dispatch_json(row: Mapping[str, object]) -> dict[str, object]:
    """What the dispatch verification and the token counts say about a command-workload point
    (harness.analysis.dispatch_evidence.POINT_FIELDS): `dispatch` (verified | declined | predicted | unverified), the
    parity figures, tokens per arm. Points of built-in workloads have none of these."""
    out: dict[str, object] = {"dispatch": str(row["dispatch"])}
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


def decision_json(summary: pd.DataFrame, result: DecisionResult, **settings: object) -> dict[str, object]:
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
        # only a two-pass sweep that the test made unusable carries it (stored records stay as they were)
        **({"sweep_drift": float(f"{d.sweep_drift:.3g}")} if d.sweep_drift is not None else {}),
        "rounds_hint": {"dff": d.rounds_dff, "rounds": d.rounds_needed, "affordable": AFFORDABLE_ROUNDS}
        if d.rounds_dff is not None
        else None,
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
