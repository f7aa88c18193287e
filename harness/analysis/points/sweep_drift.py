"""Drift of one arm across a whole sweep, seen by measuring every point twice: two passes over the grid.

Why: a drift the two arms do not share and that is slow against one point's runs (a background load, a thermal
state, a clock governor settling) moves every run of a point alike. Neither the point's own spread
(stats.drift_inflation) nor the family's scatter (between_points) can tell it from a real ratio: a constant offset
of one arm *is* a ratio, and a smooth wander looks like a smooth Dff-dependent ratio. On flat truths such drift made
simulated one-pass sweeps act (raise or lower) in 7-16% of sweeps at 3-10 rounds, and a step of the fused arm by 2%
half way through in 24-94% at 3-40 rounds (tests/support/calibration.py, issue 29); no test on one pass of points in
grid order had the power to see it at 3 rounds (a pooled AR(1) likelihood ratio and a within-point trend F test were
tried: no better than their level).

What a single pass cannot show, a second visit does. `moecal sweep` splits the rounds of every point over two passes
over the grid (the first ⌊n/2⌋ rounds of every point, then the rest, both in grid order: each point's visits half a
sweep apart; samples.csv's `pass` column says which). The mean of a point then averages two distant states of the
drift, and the passes can be compared: without drift of one arm the two passes of a point estimate the same ln ratio
(shared drift cancels within a round); with it they differ. Three uses, all on a family's paired points with runs in
both passes, each read as two halves in time order (a point's leading `first` runs: ⌊n/2⌋, its first pass in a
fixed sweep, first_half_runs; 0: one pass, nothing changes), here called its passes:

- centre_passes: the drift both arms share moves a point's two passes apart; the per-arm outlier screen
  (stats.screen_outliers) would read that shift as spread and drop fewer slowed runs. Each pass is shifted by its
  shared move before screening (paired differences are unchanged).
- drift_trend: the drift estimated, not only bounded (issue 36): a trend in run time (a polynomial, its order by
  the family's points) fitted to the points' pass differences, each point's mean corrected by it, and the variance
  the trend's uncertainty, the visit-to-visit drift around it (τ², the variance of a visit's offset) and the
  trend's own spread over the sweep add to its standard error, τ² at the largest value the family's residuals
  cannot exclude at the decision's level (DRIFT_BOUND_LEVEL), not at its point estimate.
- residual test: whether the residuals leave a trend of the next order along the sweep (drift_trend); rejected, the
  trend steps up that order where the points allow it, and rejected there too (at SWEEP_DRIFT_ALPHA, Bonferroni
  over the families) the drift bends more than the model can fit, the data are unusable for a decision: keep, said
  in the reason and in `sweep_drift` of the record, and measure again. Passes that merely disagree (a step of one
  arm between them, a drift the trend and τ² absorb) decide: before issue 36 an F test of the passes' agreement
  made such sweeps unusable (a 16-point grid under slow drift: .38/.83/.99 of
  sweeps at 5/10/20 rounds), though deciding on them with the bound acted no more often on flat truths.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Protocol, TypeGuard, TypeVar

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from harness.analysis.points.stats import MAD_TO_SIGMA, row_median
from harness.runs.formats import cell_numbers
from harness.thresholds import CONFIDENCE


class _Estimate(Protocol):
    """What estimate_in_passes reads of stats.Comparison (a dataclass it replaces fields of)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @property
    def theta(self) -> np.ndarray: ...
    @property
    def se(self) -> np.ndarray: ...


class _Decided(Protocol):
    """What marked_unusable reads of decision_record.Decision (a dataclass it replaces fields of)."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    @property
    def reason(self) -> str: ...


# stats.Comparison and decision_record.Decision, as type variables bound to what is read of them: this module imports
# neither layer it serves
C = TypeVar("C", bound=_Estimate)
D = TypeVar("D", bound=_Decided)

SWEEP_DRIFT_ALPHA = 0.01  # at 5% it withheld 3-5% of right actions on curved truths without drift, for little
# drift_trend: the one-sided level of the upper bound on τ², the decision's own (thresholds.CONFIDENCE): a raise
# or lower has to stand under any drift of one arm the two passes cannot exclude at the level it is taken at
DRIFT_BOUND_LEVEL = CONFIDENCE
MIN_TREND_POINTS = 3  # points in both passes a trend is fitted on (fewer: τ² read about zero, no trend)
QUADRATIC_TREND_POINTS = 8  # from this many, the trend bends (_trend_order)
MAX_TREND_ORDER = 3  # the highest order drift_trend steps up to where the residual test finds a bend
_POWERS = np.arange(1, MAX_TREND_ORDER + 2)  # the trend's columns t, t², t³ and the test's next one
ROUND_SIGMAS = 4.0  # a round further than this many robust σ from its point's median d is left out of the test
ONE_VISIT = "one visit"  # a point's method when each arm's runs were measured back to back, once (one_visit_words)
ONE_ROUND_PASS = "a pass of one round"  # a point's method when a half of its passes holds one round (one_round_words)
MIN_PASS_ROUNDS = 2  # rounds in each half of a point's passes that a raise or lower needs (one_round_words)
PASS_COLUMN = "pass"  # samples.csv: 1 or 2, the pass over the grid a run belongs to ("" for a one-pass sweep);
# 1..k for k imported bench_decode.sh file pairs


def first_half_runs(rows: pd.DataFrame, mine: np.ndarray, point: np.ndarray, n_points: int) -> np.ndarray:
    """Per point measured in both passes, how many of the `mine` rows (one arm's ok runs; `point`: each row's point
    index) form the earlier half of its runs: ⌊n/2⌋, which is the first pass of a fixed sweep; 0 where the point has
    no run in one of the passes (a one-pass sweep, an imported sweep CSV, a point that refinement added later).
    Imported bench_decode.sh CSVs label each `--fallback/--fused` file pair a pass (1, 2, 3, …): the halves are then
    the earlier and the later ⌊k/2⌋ and ⌈k/2⌉ pairs.

    Why halves and not the pass labels: `--until-decided` adds its rounds after both passes, labelled as the second,
    and a point's passes then grew unequal (1 round against 19). The upper bound on τ² (drift_trend) rests on
    the smaller one, so it stayed as loose as after the first pass however many rounds were added (simulated sparse
    curved truths, `python -m tests.support.until_decided 60`, each look a pass over the grid: power .19 on the labels,
    .50 on halves). Re-drawn at ⌊n/2⌋ in time order, the halves stay equal and still lie apart in time: the earlier
    holds the first pass, the later the latest rounds."""
    if PASS_COLUMN not in rows:
        return np.zeros(n_points, int)
    label = cell_numbers(rows[PASS_COLUMN])[mine]
    point = point[mine]
    labelled = ~np.isnan(label)
    runs = np.bincount(point[labelled], minlength=n_points)
    # a point is in two passes or more (an imported bench_decode.sh file pair per pass) when its labels differ
    low, high = (np.full(n_points, bound) for bound in (np.inf, -np.inf))
    np.minimum.at(low, point[labelled], label[labelled])
    np.maximum.at(high, point[labelled], label[labelled])
    return np.where(high > low, runs // 2, 0)


def passes_of(rows: pd.DataFrame, mine: np.ndarray, point: np.ndarray, n_points: int) -> np.ndarray:
    """Distinct pass labels among each point's `mine` rows (0 without the column): with one run per pass, a point's
    runs can be paired by pass (point_summary: imported bench_decode.sh file pairs)."""
    if PASS_COLUMN not in rows:
        return np.zeros(n_points, int)
    label = cell_numbers(rows[PASS_COLUMN])[mine]
    labelled = ~np.isnan(label)
    pairs = np.unique(np.stack([point[mine][labelled], label[labelled]]), axis=1)
    return np.bincount(pairs[0].astype(int), minlength=n_points)


def one_visit_words() -> str:
    """Why a raise or lower read from points measured in one visit each is withheld, and the remedy."""
    return (
        "drift of one arm not excluded: one visit per point (each arm's runs were measured back to back, once, so a "
        "slow drift of one arm moved all of them alike and reads as a ratio); measure a second --fallback/--fused "
        "pair at another time and import the pairs together (each pair is a pass, whose agreement the decision tests)"
    )


def one_round_words() -> str:
    """Why a raise or lower read from points whose earlier half of passes holds one round is withheld, and the remedy.

    Why: with one round in a pass, each point's pass difference rests on single runs, so the bound on τ² (between
    passes) is loose where it matters and a slow drift of one arm still acts: dense-grid flat truths under each
    arm's own drift at 3 rounds (a first pass of one round) moved the cap in 7.5% of sweeps (issue 36)."""
    return (
        "drift of one arm not excluded: a pass of one round per point (the passes' agreement rests on single runs); "
        f"measure at least {2 * MIN_PASS_ROUNDS} rounds ({MIN_PASS_ROUNDS} per pass), or import at least "
        f"{2 * MIN_PASS_ROUNDS} file pairs"
    )


def _masks(shape: tuple[int, ...], first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first pass, second pass) masks (..., points, runs); both empty where first == 0."""
    column = np.arange(shape[-1])
    first = np.broadcast_to(np.asarray(first), shape[:-1])[..., None]
    return (column < first) & (first > 0), (column >= first) & (first > 0)


def centre_passes(a: np.ndarray, b: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arms' ln tok/s (..., points, runs) with each pass moved by its shared shift: of the two arms' shifts (a
    pass's median against the arm's median), the larger, since a slowed run lowers one arm and the drift both share
    moves both. With one or two runs in a pass the mean of the two shifts would carry half of a slowdown into the
    other arm, where it looked like a fast run (the point then lost its interval; simulated: power .46 → .41 at 3
    rounds); without centring the passes' shift halved the slowed runs dropped (15% slowed runs: power .36 → .24).
    Only points with two runs in each pass are centred.

    A row holds a point's ok runs (point_summary's arm matrices: a failed run is never gathered) and NaN after them
    where the family's widest point has more; every median here is row_median's, of a row's runs alone, as the
    outlier screen takes them."""
    out_a, out_b = np.array(a, float), np.array(b, float)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        whole = [row_median(y)[..., None] for y in (out_a, out_b)]
        masks = _masks(out_a.shape, first)
        # a pass of one run: its shift is that run's own deviation, slowdown included (centred, flat truths with 15%
        # slowed runs acted in 5.0% of sweeps at 3 rounds, 3.5% without)
        runs = [np.sum(mask & ~np.isnan(out_a), axis=-1, keepdims=True) for mask in masks]
        both = (runs[0] >= 2) & (runs[1] >= 2)
        for mask in masks:
            moved = [row_median(np.where(mask, y, np.nan))[..., None] - m for y, m in zip((a, b), whole, strict=True)]
            shift = np.where(both, np.nan_to_num(np.fmax(*moved)), 0.0)
            out_a, out_b = out_a - np.where(mask, shift, 0.0), out_b - np.where(mask, shift, 0.0)
    return out_a, out_b


def _screened(d: np.ndarray) -> np.ndarray:
    """d without the rounds far from their point's median (a slowed run the arm-level screen let through): one such
    round in a pass of one or two decides the test alone (5% of runs slowed by 10-20% made it reject 12-17% of
    sweeps without drift at 3 rounds). σ: 1.4826·MAD of the family's rounds around their points' medians. NaN in d:
    no round (padding after a point's ok runs, a round the outlier screen dropped), left out of every median."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        resid = d - row_median(d)[..., None]
        family = np.abs(resid).reshape(*resid.shape[:-2], -1)  # the family's rounds in one row
        sigma = MAD_TO_SIGMA * row_median(family)[..., None, None]
        return np.where(np.abs(resid) > ROUND_SIGMAS * sigma, np.nan, d)


def _passes(d: np.ndarray, first: np.ndarray) -> dict[str, np.ndarray]:
    """Per point: each pass's count and mean, the within-pass sum of squares and its degrees of freedom, and whether
    the point has a run in each pass; s2 the within-pass variance pooled over the family's usable points."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        passes = [np.where(mask, d, np.nan) for mask in _masks(d.shape, first)]
        counts = [np.sum(~np.isnan(x), axis=-1) for x in passes]
        means = [np.nanmean(x, axis=-1) for x in passes]
        within = sum(np.nansum((x - m[..., None]) ** 2, axis=-1) for x, m in zip(passes, means, strict=True))
        dof = sum(np.maximum(c - 1, 0) for c in counts)
        usable = (counts[0] >= 1) & (counts[1] >= 1)
        s2 = np.sum(np.where(usable, within, 0.0), axis=-1) / np.sum(np.where(usable, dof, 0), axis=-1)
    return {"n1": counts[0], "n2": counts[1], "m1": means[0], "m2": means[1], "dof": dof, "usable": usable, "s2": s2}


def _screened_passes(d: np.ndarray, first: np.ndarray) -> dict[str, np.ndarray]:
    """_passes of d after the round screen: what drift_trend reads."""
    return _passes(_screened(np.asarray(d, float)), first)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DriftTrend:
    """The drift of one arm a family's two passes show, estimated (drift_trend): each point's shift by the trend in
    run time (`shift`: subtract from θ̂), the variance that the trend's uncertainty and the visit-to-visit drift left
    around it add to each point's mean (`extra`), arrays (..., points), and the residual test's p-value (`p` (...):
    does the trend plus random visit offsets fit? 1 where it cannot be tested)."""

    shift: np.ndarray
    extra: np.ndarray
    p: np.ndarray


def _visit_times(p: dict[str, np.ndarray], dff: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Each point's mean run time in each pass (..., points), in rounds from the family's first: `moecal sweep`
    visits the grid in order of Dff in the first pass, then again in the second (module docstring), so the family's
    rounds before a visit are its smaller Dff's rounds of that pass (and the whole first pass, in the second).
    `dff` (..., points): each point's Dff (None: the points are in that order already); the points' own order is
    the reader's (a sweep's samples sort by d_model first, an imported CSV by model), and times read in it made the
    same runs decide differently by path. Family-local: another family's visits between them stretch time alike in
    both passes (what the residual test and the bound answer for)."""
    n1, n2 = (np.where(p["usable"], p[key], 0) for key in ("n1", "n2"))
    order = np.argsort(np.broadcast_to(dff, n1.shape), axis=-1, kind="stable") if dff is not None else None
    if order is not None:
        n1, n2 = (np.take_along_axis(n, order, axis=-1) for n in (n1, n2))
    t1 = np.cumsum(n1, axis=-1) - n1 + (n1 - 1) / 2.0
    t2 = np.sum(n1, axis=-1, keepdims=True) + np.cumsum(n2, axis=-1) - n2 + (n2 - 1) / 2.0
    if order is not None:
        back = np.argsort(order, axis=-1)
        t1, t2 = (np.take_along_axis(t, back, axis=-1) for t in (t1, t2))
    return t1, t2


def _trend_order(k: np.ndarray) -> np.ndarray:
    """The trend's order per family before its residual test: 0 (β = 0) below MIN_TREND_POINTS points in both
    passes, 1 (linear in time) up to QUADRATIC_TREND_POINTS, 2 from there (drift_trend may step one up).
    Each order costs the bound on τ² a degree of freedom: at 6 points that
    widened every interval by a fifth, at 16 by a twentieth, while a bending drift of the dense grid's length was
    what the residual test found in most of its rejections (docs/design.md §7)."""
    return np.where(k >= QUADRATIC_TREND_POINTS, 2, np.where(k >= MIN_TREND_POINTS, 1, 0))


def residual_dof(k: int) -> int:
    """Degrees of freedom of drift_trend's residuals on k points in both passes (τ²'s bound rests on them)."""
    return max(k - int(_trend_order(np.asarray(k))), 1)


def _fit(columns: np.ndarray, used: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of y (..., points) on the used columns (..., points, Q) (`used` (..., Q)): (coefficients
    (..., Q), the inverse normal matrix (..., Q, Q)), 0 for an unused column."""
    x = columns * used[..., None, :]
    normal = np.einsum("...pi,...pj->...ij", x, x) + np.eye(used.shape[-1]) * ~used[..., None, :]
    inverse = np.linalg.pinv(normal)
    return np.einsum("...ij,...j->...i", inverse, np.einsum("...pi,...p->...i", x, y)) * used, inverse


@dataclasses.dataclass(frozen=True, kw_only=True)
class _OrderFit:
    """drift_trend's least squares at one order per family: the coefficients (..., Q), their inverse normal matrix
    (..., Q, Q), the residual sum of squares (...), which columns are fitted (..., Q), and the residual test's
    p-value (...) (1: untestable)."""

    beta: np.ndarray
    inverse: np.ndarray
    rss: np.ndarray
    used: np.ndarray
    p: np.ndarray


def _fit_at(differences: np.ndarray, usable: np.ndarray, gap: np.ndarray, k: np.ndarray, q: np.ndarray) -> _OrderFit:
    """The trend of order q (...) fitted to the pass differences `gap` (..., points) on the columns `differences`
    (..., points, len(_POWERS)), and the residual test: whether the residuals carry the next order's column (what
    the fitted ones explain of it projected out), F on 1 and k − q − 1 degrees of freedom."""
    used = q[..., None] >= _POWERS
    beta, inverse = _fit(differences, used, gap)
    resid = np.where(usable, gap - np.einsum("...pi,...i->...p", differences, beta), 0.0)
    rss = np.sum(resid**2, axis=-1)
    following = q[..., None] + 1 == _POWERS
    column = np.sum(differences * following[..., None, :], axis=-1)
    along = column - np.einsum("...pi,...i->...p", differences, _fit(differences, used, column)[0])
    along = np.where(usable, along, 0.0)
    explained = np.sum(resid * along, axis=-1) ** 2 / np.sum(along**2, axis=-1)
    left = k - q - 1
    value = scipy_stats.f.sf(explained / ((rss - explained) / np.maximum(left, 1)), 1, np.maximum(left, 1))
    testable = (q > 0) & (left >= 1) & np.isfinite(value)
    return _OrderFit(beta=beta, inverse=inverse, rss=rss, used=used, p=np.where(testable, value, 1.0))


def _level_spread(
    times: tuple[np.ndarray, np.ndarray],
    runs: tuple[np.ndarray, np.ndarray],
    beta: np.ndarray,
    used: np.ndarray,
    covariance: np.ndarray,
) -> np.ndarray:
    """The variance of the fitted trend ĝ over the family's runs in time (..., 1), less what the coefficients' own
    noise (`covariance` (..., Q, Q) at their point estimate) adds to it on average, at least 0; `times` and `runs`:
    each point's visit time and runs in each pass (..., points), `beta` (..., Q) the trend's coefficients.

    Why: θ̂ is the ratio at the sweep's mean state of the drift (g's level stays in θ̂; drift_trend), one moment's
    choice where a trend moves one arm over the sweep: at any other moment the sweep measured the ratio differs by
    g(t) − ḡ, and a later run meets the machine in some such state. A drift of the fused arm that bent 8% by the
    sweep's end raised the cap in 3.7% of flat sweeps at 5 rounds without it (every point visited in both passes
    corrected and widened), in 2.6% with it (800 sweeps; docs/design.md §7); the noise correction keeps it near 0
    without drift of one arm (dense16 curved power at 5 rounds .394 before, .348 with the spread uncorrected, .379
    corrected; 200 sweeps)."""
    powers = np.arange(1, used.shape[-1] + 1)
    x = np.stack(times, axis=-1)[..., None] ** powers * used[..., None, None, :]  # (..., points, pass, Q)
    w = np.stack(runs, axis=-1).astype(float)  # (..., points, pass)
    total = np.sum(w, axis=(-2, -1))
    dev = x - (np.einsum("...pv,...pvi->...i", w, x) / total[..., None])[..., None, None, :]
    spread = np.einsum("...pv,...pvi,...pvj->...ij", w, dev, dev) / total[..., None, None]  # the columns' covariance
    level = np.einsum("...i,...ij,...j->...", beta, spread, beta)
    noise = np.einsum("...ij,...ji->...", spread, covariance)
    beyond: np.ndarray = np.fmax(level - noise, 0.0)
    return beyond[..., None]


def drift_trend(
    p: dict[str, np.ndarray],
    dff: np.ndarray | None = None,
    runs: dict[str, np.ndarray] | None = None,
    planned: np.ndarray | None = None,
) -> DriftTrend:
    """The estimate of a drift of one arm from a family's screened passes (`p`, _screened_passes): model

        d̄ₚ(j) = θⱼ + g(tₚ(j)) + uⱼₚ + noise,  g a polynomial in run time (order _trend_order), uⱼₚ ~ (0, τ²)

    independent visit offsets, so each point's pass difference Δⱼ = d̄₁ − d̄₂ = g(t₁) − g(t₂) + (u₁ − u₂) + noise.
    Every point is visited twice half a sweep apart, so g (but its level) is identified from the Δⱼ by least
    squares, and θⱼ's drift-corrected estimate is the mean minus g's mean over its runs, relative to g's mean over
    the family's points: g's level over the sweep is a constant offset of one arm, which *is* a ratio, and stays in
    θ (no design can split it). τ², from the residuals (E Σr² = (k − q)(2τ² + s²c̄)), is taken at the upper end the
    family cannot exclude at DRIFT_BOUND_LEVEL, as the bound was, and so is the trend's covariance; each point's
    mean gets τ²(n₁² + n₂²)/n² + the variance of its correction + the trend's spread over the sweep (_level_spread:
    which moment's level θ̂ is).

    `p` is what the fit reads (the passes after the round screen); `runs` (default `p`) the passes θ̂ rests on,
    before it: every point with runs in both passes there is corrected and widened, at its runs' times and counts,
    also where the round screen emptied one of its passes (which left such a point out of the fit, and before
    issue 36.5 out of the correction and the allowance too: it decided on its runs alone, the false raises of a
    bending drift read at the last point). Times count every run's slot: a screened round took its time too.
    `planned` (..., points; default: the points with runs in both passes of `runs`): the points measured in two
    passes. One of those whose runs the outlier screen left in one pass only is corrected at that visit's time and
    carries its visit's offset whole (τ² · 1): left out, it decided on that one visit alone, and where one arm
    drifted far within the sweep the screen dropped the other pass as outliers (the 2 first-pass runs of 5 against
    the 3 drifted ones), so the drifted runs raised the cap (docs/design.md §7, one visit left).

    Not taken (issue 36.5, docs/design.md §7): τ̂² at its point estimate with Satterthwaite degrees of freedom for
    the combined variance, calibrated where the visit offsets are independent but acting on 4.5-5.5% of flat
    sweeps at 4 rounds under a drift slow against the sweep, whose offsets at a point's two visits are alike and
    so half hidden from their difference; the bound's margin is what covers that.

    What two visits cannot identify: a drift component periodic with half the sweep (uⱼ₁ = uⱼ₂) moves both visits
    of a point alike and is a Dff-dependent ratio to any reading of the data. The model assumes the visit offsets'
    mean and difference have the same variance (true of drift that decorrelates within half a sweep) and that g's
    unseen part is the polynomial's. The residual test checks what two passes can: that the residuals carry no
    trend of the next order along the sweep (a drift that bends more than g, whose unseen part would bend the curve
    too), F on one degree of freedom against k − q − 1. A rejection at SWEEP_DRIFT_ALPHA steps the order up once
    (where k − q ≥ 3 leaves the next test a degree of freedom) and the fit, the bound and the test are read again
    there; a rejection at that order too (Bonferroni over families) is drift the model cannot fit: unusable_words
    asks for more passes. Why one order up and not unusable at once: a drift of one arm that merely bends (a
    quadratic in time, or a slow wander over a long sweep) was called unusable in up to a quarter of sweeps that
    the quadratic fits, with no false action more once fitted (docs/design.md §7, one order up)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a family without a point in both passes: no trend
        usable = p["usable"]
        runs = p if runs is None else runs
        both = runs["usable"]
        visited = both if planned is None else both | (planned & (runs["n1"] + runs["n2"] > 0))
        n1, n2 = (np.where(usable, p[key], 0) for key in ("n1", "n2"))
        t1, t2 = _visit_times({**runs, "usable": visited}, dff)
        span = np.fmax(np.max(np.where(visited, t2, 0.0), axis=-1, keepdims=True), 1.0)  # times in [0, 1]
        t1, t2 = t1 / span, t2 / span
        gap = np.where(usable, p["m1"] - p["m2"], 0.0)
        k = np.sum(usable, axis=-1)
        q = _trend_order(k)
        differences = np.where(usable[..., None], t1[..., None] ** _POWERS - t2[..., None] ** _POWERS, 0.0)
        fit = _fit_at(differences, usable, gap, k, q)
        # a bend the order cannot follow: one order more where the points leave its own test a degree of freedom
        bends = (fit.p < SWEEP_DRIFT_ALPHA) & (k - q >= 3) & (q < MAX_TREND_ORDER)
        if np.any(bends):
            q = np.where(bends, q + 1, q)
            fit = _fit_at(differences, usable, gap, k, q)
        beta, inverse, rss, used = fit.beta, fit.inverse, fit.rss, fit.used
        dof = np.maximum(k - q, 1)
        upper = rss / scipy_stats.chi2.ppf(1.0 - DRIFT_BOUND_LEVEL, dof)  # Var(Δ) at its bound
        noise = p["s2"] * np.nanmean(np.where(usable, 1.0 / n1 + 1.0 / n2, np.nan), axis=-1)
        tau2 = np.fmax((upper - noise) / 2.0, 0.0)[..., None]
        # the correction and its variance, at every point measured in two passes, by the runs its θ̂ rests on
        v1, v2 = (np.where(visited, runs[key], 0) for key in ("n1", "n2"))
        n = v1 + v2
        means = (v1[..., None] * t1[..., None] ** _POWERS + v2[..., None] * t2[..., None] ** _POWERS) / n[..., None]
        centre = np.nanmean(np.where(both[..., None], means, np.nan), axis=-2, keepdims=True)
        lever = np.where(visited[..., None], means - centre, 0.0) * used[..., None, :]
        shift = np.einsum("...pi,...i->...p", lever, beta)
        inverse = inverse * used[..., None] * used[..., None, :]
        spread = np.einsum("...pi,...ij,...pj->...p", lever, inverse, lever)
        level = _level_spread((t1, t2), (v1, v2), beta, used, (rss / dof)[..., None, None] * inverse)
        extra = tau2 * (v1**2 + v2**2) / n**2 + upper[..., None] * spread + level
    return DriftTrend(
        shift=np.where(visited, shift, 0.0),
        extra=np.where(visited & np.isfinite(extra), extra, 0.0),
        p=fit.p,
    )


def residual_test(d: np.ndarray, first: np.ndarray) -> np.ndarray:
    """p-value (...) of drift_trend's residual test for a family's per-round differences d = y_fused − y_fallback
    (..., points, rounds) in round order, each point's first `first` rounds from the first pass (NaN: a dropped
    round); 1 where it cannot be tested (fewer than MIN_TREND_POINTS + 1 points with a run in each pass)."""
    return drift_trend(_screened_passes(np.asarray(d, float), first)).p


def combined(p_values: Sequence[float]) -> float | None:
    """The sweep's p-value over its families' tests (Bonferroni); None when no family had two passes."""
    return min(1.0, min(p_values) * len(p_values)) if p_values else None


def unusable(p: float | None) -> TypeGuard[float]:
    return p is not None and p < SWEEP_DRIFT_ALPHA


def marked_unusable(decision: D, p: float) -> D:
    """A decision (analysis.decision_record.Decision) made on data the residual test called unusable: its p-value
    recorded (`sweep_drift`), and its reason saying so even where there was no raise or lower to withhold."""
    words = unusable_words(p)
    reason = decision.reason if words in decision.reason else f"{decision.reason} Not decided: {words}."
    return dataclasses.replace(decision, sweep_drift=p, reason=reason)


def unusable_words(p: float) -> str:
    """Why a sweep whose drift the model cannot fit decides nothing, and what would fix it."""
    return (
        f"the two passes over the points disagree in a way a drift of one arm that trends in time cannot explain (the "
        f"pass differences bend along the sweep, p = {p:.2g}): two visits per point cannot tell that drift from a "
        "ratio that changes with Dff, so the data are unusable for a decision; measure again on a quieter machine "
        "(clocks pinned, background jobs stopped), or in shorter sweeps (fewer points per sweep), over which the "
        "drift has less time to bend"
    )


def estimate_in_passes(
    estimate: Callable[..., tuple[C, np.ndarray]],
    a: np.ndarray,
    b: np.ndarray,
    paired: np.ndarray,
    floor: tuple[np.ndarray | float, np.ndarray | float],
    first: np.ndarray,
    dff: np.ndarray | None = None,
) -> tuple[C, np.ndarray, np.ndarray | None]:
    """`estimate(a, b, paired, floor)` (stats.estimate_family) for a family (..., points, runs) whose paired points
    may have two passes (`first` (..., points): runs in the first pass, 0: one pass): the passes centred before the
    outlier screen, each point's θ̂ corrected by the family's drift trend and its se widened by what the trend
    leaves (drift_trend, its visits in order of `dff`, None: the points' order; the variance factor in
    `pass_bound`), and the residual test's p-values (...) (None: no point has two passes, and then exactly the
    one-pass estimate: stored runs and imported CSVs decide as before)."""
    first = np.where(paired, first, 0)
    if not np.any(first):
        return (*estimate(a, b, paired, floor), None)
    centred_a, centred_b = centre_passes(a, b, first)
    result, flagged = estimate(centred_a, centred_b, paired, floor)
    kept = np.where(flagged.any(axis=0), np.nan, centred_a - centred_b)
    trend = drift_trend(_screened_passes(kept, first), dff, _passes(kept, first), first > 0)
    var = result.se**2 + trend.extra
    with np.errstate(all="ignore"):
        factor = np.where(result.se > 0, var / result.se**2, 1.0)
    corrected = dataclasses.replace(result, theta=result.theta - trend.shift, se=np.sqrt(var), pass_bound=factor)
    return corrected, flagged, trend.p
