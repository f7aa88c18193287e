"""Per-point statistics: the fused/fallback ratio with a small-sample-valid interval, the A/A noise floor, verdicts.

Pure functions on arrays (arrays in, arrays/dataclasses out; ValueError on bad input); the samples DataFrame
becomes summary rows in harness.analysis.points.point_summary, which calls this core. family_labels, the one DataFrame
helper here, is the shape-family label every layer that groups a summary shares.
Choices, and why (docs/design.md §7):
- Work on y = ln(tok/s): ratios become differences and multiplicative noise becomes additive.
- Interleaved rounds (our sweeps: every ok run has its partner of the same round, and rows carry their position in
  the round) → per-round paired differences d = y_fused − y_fallback; θ̂ = mean d. Drift shared by a round cancels.
  Anything else (imported mlxcel CSVs, whose runs were not interleaved; a round whose partner failed) → Welch on the
  two arms' y. The data decide, not the file format: a row without a `position` was not measured in a round.
- Variance of d: pooled over the paired points of a shape family when Bartlett's test (1%) finds their variances
  homogeneous — at 3–5 rounds a per-point variance has 2–4 degrees of freedom and t quantiles of 2.8–4.3, pooling
  buys back most of that — else per point. t quantiles with the matching degrees of freedom (Welch–Satterthwaite).
  A run's variance is floored at the precision of the input (precision_step: tok/s written with 2 decimals are
  rounded by up to ±0.005, a uniform error of variance 0.01²/12, relative to the value), and never below the
  resolution of 6 significant digits, so identical runs cannot give an interval of width 0.
- Drift the arms do not share (drift_inflation, drift_variance): each point's runs in time order are modelled as
  white noise plus an AR(1) drift; the likelihood-weighted average over a grid of drift models, fitted on the
  family's points together, says how much more the point mean varies than its runs' spread shows → where the runs
  lean towards drift (likelihood ratio at 50%, or the batch-means test) each se is widened by that ratio (at least
  1) and its degrees of freedom divided by it; `method` names it when a batch-means F test at 5% finds the drift.
  Needs 4 runs per point. Drift between points, which no point's runs show, is the decision's (between_points).
- Outliers: a run more than 6 robust σ (1.4826·MAD) from its arm's median drops its round (Welch: the run); σ is
  essentially the family's (see screen_outliers: with 3 runs an arm's own MAD is unusable either way), and a point
  that lost a run keeps its own variance. Dropped runs are listed in the summary (`outliers`). An arm of 3 runs
  with a run more than 5 σ *faster* than its median (two slowed runs moved the median: split_arms) gives no
  interval.
- Fewer than 3 ok runs in an arm (or fewer than 2 left after screening) → `insufficient`, no interval.
- A/A arm (`null`, the fallback measured again): φ² = mean over points of (θ̂_AA / se_AA)². φ² > 1 means the
  runs drift more than the model sees; every standard error is then multiplied by φ (`noise_scale`). An A/A
  interval (at the model's se) lying entirely beyond 1 ± δ flags the run (`aa_beyond_margin`); the policy then
  withholds raise/lower.
- Margin δ: `fused` / `fallback` only when the interval lies entirely beyond 1 ± δ, `equivalent` when it lies
  entirely inside, else `inconclusive`. A tie is never a loss. `null`: dispatch probe never matched, quantization
  not affine, or excluded by the user — reported, never used for the crossover.
- `ratio` stays the ratio of medians (what mlxcel sweeps publish, and what the mlxcel export writes); `estimate` =
  exp(θ̂) is the statistic the interval, the verdict and the crossover use.
"""

from __future__ import annotations

import contextlib
import itertools
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, get_args, overload

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from harness.config.kind_meaning import WHOLE_MODEL_FAMILY
from harness.config.schema import kind_meaning
from harness.thresholds import CONFIDENCE, MARGIN

POWER = 0.80  # the rounds hint: the chance that the suggested rounds give a decision
MIN_RUNS = 3
OUTLIER_SIGMAS = 6.0
SPLIT_RUNS = 4  # below this many runs two slowed runs can move an arm's median (split_arms)
FAST_SIGMAS = 5.0  # a run this far above such an arm's median means the median was slowed (split_arms)
OWN_SIGMA_CAP = 1.5  # an arm's own robust σ counts up to this multiple of its family's (screen_outliers)
BARTLETT_ALPHA = 0.01
DRIFT_ALPHA = 0.05  # the batch-means test for drift (drift_inflation)
DRIFT_GATE_ALPHA = 0.50  # the likelihood-ratio test that lets the drift model widen an interval (drift_inflation)
MAD_TO_SIGMA = 1.4826  # scales the median absolute deviation to σ for normally distributed noise
RESOLUTION = 1e-6  # tok/s are stored with 6 significant digits: smaller relative differences are not resolved
# the per-arm variance floor of runs known at full precision (simulated, or not read back from a CSV)
FULL_PRECISION_FLOOR: tuple[float, float] = (RESOLUTION**2, RESOLUTION**2)
Verdict = Literal["fused", "fallback", "equivalent", "inconclusive", "insufficient", "null"]
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)
DECIDED: tuple[Verdict, ...] = ("fused", "fallback", "equivalent", "inconclusive")  # verdicts that carry an interval


# --- the array core: everything below works on (..., points, runs) arrays of y = ln tok/s, NaN where absent -----


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """θ̂ = mean ln(a/b) per point with its standard error and degrees of freedom (NaN where not estimable)."""

    theta: np.ndarray
    se: np.ndarray
    df: np.ndarray
    pooled: np.ndarray  # bool: the variance is the family's pooled one
    drift: np.ndarray | float = 1.0  # variance inflation for runs that drift (drift_inflation), 1: none seen
    drift_found: np.ndarray | bool = False  # the batch-means test found drift (named in the point's method)
    # the variance factor of the drift bound of two passes (sweep_drift.drift_trend, named in the method), 1: none
    pass_bound: np.ndarray | float = 1.0


def screen_outliers(arm_ys: Sequence[np.ndarray], sigmas: float = OUTLIER_SIGMAS) -> np.ndarray:
    """Boolean mask (arms, ..., points, runs): runs farther than `sigmas` robust σ from their arm's median.

    σ is the family's robust σ — 1.4826·MAD of the absolute residuals of every arm and point (exact zeros, the
    median itself at odd n, left out) — or the arm's own, if larger, up to OWN_SIGMA_CAP times the family's. With 3
    runs an arm's own MAD is one spacing between two values: often tiny, often large enough to hide a −15% run;
    the family's is stable. The cap still lets a genuinely noisier point keep most of its extra spread.
    """
    ys = np.stack(arm_ys)
    with np.errstate(all="ignore"), _quiet():
        resid = np.abs(ys - row_median(ys)[..., None])
        own = MAD_TO_SIGMA * row_median(resid)[..., None]
        family = family_sigma(resid)[None, ..., None, None]
        sigma = np.fmax(family, np.fmin(own, OWN_SIGMA_CAP * family))
    flagged: np.ndarray = resid > sigmas * np.fmax(sigma, RESOLUTION)
    return flagged


def family_sigma(resid: np.ndarray) -> np.ndarray:
    """The family's robust σ (...) from absolute residuals from the arms' medians (arms, ..., points, runs):
    1.4826·MAD over every arm and point, exact zeros (the median itself at odd n) left out."""
    with np.errstate(all="ignore"), _quiet():
        nonzero = np.where(resid > 0, resid, np.nan)
        flat = np.moveaxis(nonzero, 0, -3).reshape(*nonzero.shape[1:-2], -1)
        return MAD_TO_SIGMA * np.nanmedian(flat, axis=-1)


def split_arms(arm_ys: Sequence[np.ndarray], kept: Sequence[np.ndarray], sigmas: float = FAST_SIGMAS) -> np.ndarray:
    """Points (..., points) where an arm with fewer than SPLIT_RUNS runs left after screening (`kept`) has a run
    more than `sigmas` of the family's robust σ (of the unscreened `arm_ys`) *faster* than the arm's median.

    Why: the median-based screen survives ⌊(n − 1)/2⌋ slowed runs. With 3 or 4 runs two slowed runs move the median
    too, the clean run then sits far above it, often not quite 6 σ (the slowdowns also widen σ), and the arm's mean
    is off by most of a slowdown while its spread, pooled with the calm points, looks ordinary: flat truths with 15%
    slowed runs moved the cap in 3.7% of sweeps at 3 rounds. Outliers are slowdowns, so only the fast side is read
    at this lower threshold: one slow run (mlxcel's published 768 and 6400 points) keeps its interval.

    Why only 3-run arms and 5 σ: the family σ (a MAD of residuals from each arm's median) reads about 0.73 of the
    true σ at 4 runs, so a 4 σ rule flagged 3–9% of clean 4-run points (14–27% of sweeps lost a point) and about
    1% of clean 3-run points; at 5 σ on 3-run arms clean noise loses 0.1–0.5% of points, and the flat truth with
    15% slowed runs still moves the cap in only 2.6% of sweeps (tests/analysis/points/test_stats.py,
    tests/analysis/decision/test_calibration.py)."""
    ys = np.stack(arm_ys)
    with np.errstate(all="ignore"), _quiet():
        family = family_sigma(np.abs(ys - row_median(ys)[..., None]))[..., None]
        split = [
            (np.nanmax(y, axis=-1) - row_median(y) > sigmas * np.fmax(family, RESOLUTION))
            & (np.sum(~np.isnan(y), axis=-1) < SPLIT_RUNS)
            for y in kept
        ]
    split_any: np.ndarray = np.any(split, axis=0)
    return split_any


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """All-NaN slices are expected (missing arms, absent points); numpy's warnings about them are not news."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def compare_arms(
    a: np.ndarray,
    b: np.ndarray,
    paired: np.ndarray | bool,
    pool: np.ndarray | bool = True,
    floor: tuple[np.ndarray | float, np.ndarray | float] = FULL_PRECISION_FLOOR,
) -> Comparison:
    """ln(a/b) per point: paired (per-round differences) where `paired`, else Welch; arrays (..., points, runs).

    Paired points of one family (the `points` axis) allowed to `pool` share a pooled variance when Bartlett's test
    at 1% does not reject equal variances; the others (and Welch points) keep their own. `floor`: the smallest
    per-run variance of each arm's ln tok/s (..., points), the input's precision (precision_floor).
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.ndim < 2:
        raise ValueError(f"arms must have the same (..., points, runs) shape, got {a.shape} and {b.shape}")
    paired = np.broadcast_to(np.asarray(paired, bool), a.shape[:-1])
    with np.errstate(all="ignore"), _quiet():
        d = a - b
        n_d = np.sum(~np.isnan(d), axis=-1)
        floor_a, floor_b = (np.fmax(np.asarray(f, float), RESOLUTION**2) for f in floor)
        var_d = np.fmax(np.nanvar(d, axis=-1, ddof=1), floor_a + floor_b)
        n_a, n_b = np.sum(~np.isnan(a), axis=-1), np.sum(~np.isnan(b), axis=-1)
        va = np.fmax(np.nanvar(a, axis=-1, ddof=1), floor_a) / n_a
        vb = np.fmax(np.nanvar(b, axis=-1, ddof=1), floor_b) / n_b
        welch_se2 = va + vb
        welch_df = welch_se2**2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))
        welch_theta = np.nanmean(a, axis=-1) - np.nanmean(b, axis=-1)
        usable = paired & (n_d >= 2) & np.broadcast_to(np.asarray(pool, bool), paired.shape)
        dfi = np.where(usable, n_d - 1, 0).astype(float)
        pooled = usable & _homogeneous(var_d, dfi)
        pooled_var = np.sum(dfi * np.where(usable, var_d, 0), axis=-1, keepdims=True) / np.sum(dfi, -1, keepdims=True)
        pooled_df = np.sum(dfi, axis=-1, keepdims=True)
        paired_var = np.where(pooled, pooled_var, var_d)
        paired_df = np.where(pooled, pooled_df, n_d - 1)
        theta = np.where(paired, np.nanmean(d, axis=-1), welch_theta)
        se = np.where(paired, np.sqrt(paired_var / n_d), np.sqrt(welch_se2))
        df = np.where(paired, paired_df, welch_df)
        estimable = np.where(paired, n_d >= 2, (n_a >= 2) & (n_b >= 2))
    nan = np.full(theta.shape, np.nan)
    return Comparison(
        theta=np.where(estimable, theta, nan),
        se=np.where(estimable, se, nan),
        df=np.where(estimable, df, nan),
        pooled=pooled & estimable,
    )


def _homogeneous(var: np.ndarray, dfi: np.ndarray) -> np.ndarray:
    """Bartlett's test across the points axis (last axis here) of the groups with dfi ≥ 1: True where p ≥ 1%."""
    k = np.sum(dfi > 0, axis=-1, keepdims=True)
    total = np.sum(dfi, axis=-1, keepdims=True)
    pooled = np.sum(dfi * np.where(dfi > 0, var, 0), axis=-1, keepdims=True) / total
    log_var = np.where(dfi > 0, np.log(np.where(dfi > 0, var, 1.0)), 0.0)
    statistic = total * np.log(pooled) - np.sum(dfi * log_var, axis=-1, keepdims=True)
    inverse = np.sum(np.where(dfi > 0, 1.0 / np.where(dfi > 0, dfi, 1.0), 0.0), axis=-1, keepdims=True)
    correction = 1.0 + (inverse - 1.0 / total) / (3.0 * (k - 1))
    p = scipy_stats.chi2.sf(statistic / correction, np.maximum(k - 1, 1))
    return np.broadcast_to((k >= 2) & (p >= BARTLETT_ALPHA), var.shape)


def estimate_family(
    a: np.ndarray,
    b: np.ndarray,
    paired: np.ndarray,
    floor: tuple[np.ndarray | float, np.ndarray | float] = FULL_PRECISION_FLOOR,
) -> tuple[Comparison, np.ndarray]:
    """Screen outliers, drop them (a paired point loses the whole round), compare: the whole per-family estimate.

    A point that lost a run keeps its own variance instead of the family's pooled one. A point whose flagged run is
    faster than its arm's median gets no interval: outliers are slowdowns, so most of that arm was slowed (two of
    three runs hit, the clean one looking like the outlier) and the runs left agree on the wrong value.

    Arrays (..., points, runs) of ln tok/s, `paired` (..., points). Returns the comparison and the outlier mask
    (2, ..., points, runs) for arms (a, b). The summary and the calibration simulations both run exactly this.
    """
    arms = (a, b)
    flagged = screen_outliers([a, b])
    paired_runs = np.broadcast_to(np.asarray(paired, bool)[..., None], a.shape)
    drop = flagged.any(axis=0)
    a = np.where(np.where(paired_runs, drop, flagged[0]), np.nan, a)
    b = np.where(np.where(paired_runs, drop, flagged[1]), np.nan, b)
    result = compare_arms(a, b, paired, pool=np.asarray(~flagged.any(axis=(0, -1))), floor=floor)
    # outliers are slowdowns (a background task never speeds a run up): a flagged run *faster* than its arm's median
    # means most of the arm was slowed (two of three runs hit), and what is left cannot be trusted
    with np.errstate(all="ignore"), _quiet():
        fast = np.stack([y > row_median(y)[..., None] for y in arms]) & flagged
    contaminated = fast.any(axis=(0, -1)) | split_arms(arms, (a, b))
    result = Comparison(
        theta=np.where(contaminated, np.nan, result.theta),
        se=np.where(contaminated, np.nan, result.se),
        df=np.where(contaminated, np.nan, result.df),
        pooled=result.pooled & ~contaminated,
    )
    no_drift = (np.ones(paired.shape), np.zeros((*paired.shape[:-1], 1), bool))  # what a kind of point absent gets
    own, own_found = drift_inflation(a - b) if np.any(paired) else no_drift
    both, both_found = drift_inflation(np.concatenate([a, b], axis=-2)) if not np.all(paired) else no_drift
    both = np.fmax(*np.split(both, 2, axis=-1)) if both.shape != paired.shape else both  # Welch: the larger arm's
    inflation, found = np.where(paired, own, both), np.where(paired, own_found, both_found)
    # the drift's share of the variance rests on fewer independent pieces than the runs: about df / inflation
    df = np.fmax(result.df / inflation, 1.0)
    widened = Comparison(
        theta=result.theta,
        se=result.se * np.sqrt(inflation),
        df=df,
        pooled=result.pooled,
        drift=inflation,
        drift_found=found,
    )
    return widened, flagged


def drift_inflation(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Variance inflation (..., points) for runs that drift, from each point's runs in time order (rounds, or run
    order within an arm) of a family (..., points, runs); 1 where no drift shows, or with fewer than 4 runs.

    A drift the two arms do not share (each arm's own, or the fused path's alone — invisible to the A/A arm) makes
    neighbouring runs alike, and the mean of n runs then varies more than σ²/n. How much more is drift_variance's
    model (fitted on the family's runs); it widens the family's intervals when the runs lean towards drift (the
    model's likelihood ratio over white runs, χ²₂ at DRIFT_GATE_ALPHA = 50%, a lenient gate: a drift too small to
    prove still costs coverage) and never for runs that look white (always widening cost power: a 4th round decided
    less often than 3). Whether drift was *found* (shown to the user) is a batch-means F
    test at DRIFT_ALPHA: the means b₁, b₂ of the first and the last h = ⌊n/2⌋ runs of each point differ by more than
    their noise allows ((b₁ − b₂)²·h/2 against the runs' own variance, pooled over the points: F with (points,
    Σ(n − 1)) degrees of freedom). Returns (inflation (..., points), found (..., 1))."""
    with np.errstate(all="ignore"), _quiet():
        valid = ~np.isnan(y)
        n = np.sum(valid, axis=-1)
        half = n // 2
        order = np.cumsum(valid, axis=-1) - 1  # position among the point's ok runs
        first = np.where(valid & (order < half[..., None]), y, np.nan)
        second = np.where(valid & (order >= (n - half)[..., None]), y, np.nan)
        long_run = (np.nanmean(first, axis=-1) - np.nanmean(second, axis=-1)) ** 2 * half / 2
        usable = n >= 4
        numerator = np.nansum(np.where(usable, long_run, 0), axis=-1)
        own = np.nansum(np.where(usable, np.nanvar(y, axis=-1, ddof=1), 0), axis=-1)
        k = np.sum(usable, axis=-1)
        dof = np.sum(np.where(usable, n - 1, 0), axis=-1)
        ratio = np.nan_to_num(numerator / own, nan=1.0)
        p = scipy_stats.f.sf(ratio, np.maximum(k, 1), np.maximum(dof, 1))
        found = (k >= 1) & (p < DRIFT_ALPHA)
        inflation, evidence = drift_variance(y)
        # the model widens only where the runs lean towards drift (its likelihood ratio over white runs at
        # DRIFT_GATE_ALPHA, or the batch-means test): its average inflation is above 1 even for white runs, and
        # applied always it made a 4th round lower the power of a decision (sparse curved truths: 51% at 3 rounds,
        # 46% at 4, 43% at 5; issue 29)
        applies = found | (scipy_stats.chi2.sf(evidence, 2) < DRIFT_GATE_ALPHA)
    return np.where(applies[..., None], inflation, 1.0), found[..., None]


# the drift models drift_variance weighs: run-to-run correlation ρ of the drift and its share λ of the runs' variance
DRIFT_RHOS = np.linspace(0.0, 0.9, 10)
DRIFT_SHARES = np.linspace(0.0, 0.95, 8)


def drift_variance(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Var(point mean) / (sample variance / n) per point (..., points), at least 1, for a family's runs in time order
    (..., points, runs); 1 for points with fewer than 4 runs. Also the family's evidence for drift (...): twice the
    log-likelihood ratio of the best drift model over white noise (λ = 0), compared with χ²₂ by drift_inflation.

    Why a model: a drift offset spanning a point's whole window moves every run of the point alike, so the point's
    own spread cannot show it, and splitting its runs in two halves (batch means) sees only the part that changes
    within half a window (at 10 rounds about a third of an AR(1) drift's effect on the mean). A drift that wanders and
    comes back shows its size in how alike neighbouring runs are. The runs of each point are modelled as its own
    mean plus white noise plus an AR(1) drift: correlation ρ^|i−j| between runs i and j, a share λ of the variance,
    V = (1 − λ)·I + λ·R_ρ. Each (ρ, λ) of a grid gets its restricted likelihood (REML: the point means profiled out,
    the variance pooled over the family's points), and the inflation of the model, (1'V1/n) / ((tr V − 1'V1/n)/(n − 1)),
    is averaged with those likelihoods as weights (a flat prior over the grid). The average, not the best fit: with
    6 points of 10 runs the best fit is often a strong slow drift fitted to noise (inflation 10 and more for 1 family
    in 10 under white noise), while the average stays near 1 when the runs are white and near the truth when they
    drift. A drift slower than ρ = 0.9 between runs is mostly beyond a 10-run window: it is only partly accounted for.
    """
    with np.errstate(all="ignore"), _quiet():
        valid = ~np.isnan(y)
        n = np.sum(valid, axis=-1)
        # each point's ok runs first, in time order (a dropped run closes its gap: a small error in the lags)
        y = np.take_along_axis(y, np.argsort(~valid, axis=-1, kind="stable"), axis=-1)
        grid = (len(DRIFT_RHOS), len(DRIFT_SHARES))
        loglik, quad = np.zeros((*y.shape[:-2], *grid)), np.zeros((*y.shape[:-2], *grid))
        dof = np.zeros(y.shape[:-2])
        inflation = {}
        for m in np.unique(n[n >= 4]):
            mine = n == m
            z = np.where(mine[..., None], np.nan_to_num(y[..., :m]), 0.0)
            lag = np.abs(np.subtract.outer(np.arange(m), np.arange(m)))
            count = np.sum(mine, axis=-1)
            # Σ over the family's points of z zᵀ: each grid model's quadratic forms summed over the points are
            # traces against it, so the points are visited once per run count, not once per grid model
            scatter = np.einsum("...pi,...pj->...ij", z, z)
            inflation[m] = np.zeros(grid)
            for (i, rho), (j, share) in itertools.product(enumerate(DRIFT_RHOS), enumerate(DRIFT_SHARES)):
                cov = (1 - share) * np.eye(m) + share * rho**lag
                inverse = np.linalg.inv(cov)
                inverse_ones = inverse.sum(axis=-1)
                total = inverse_ones.sum()  # 1'V⁻¹1
                # Σ_p z'V⁻¹z − (1'V⁻¹z)²/1'V⁻¹1 (zero rows, the points of other run counts, add nothing)
                along = np.einsum("i,...ij,j->...", inverse_ones, scatter, inverse_ones)
                quad[..., i, j] += np.sum(inverse * scatter, axis=(-2, -1)) - along / total
                loglik[..., i, j] -= 0.5 * count * (np.linalg.slogdet(cov)[1] + np.log(total))
                mean_var = cov.sum() / m
                inflation[m][i, j] = mean_var / ((m - mean_var) / (m - 1))
            dof += count * (m - 1)
        loglik -= 0.5 * dof[..., None, None] * np.log(quad / dof[..., None, None])
        loglik = np.nan_to_num(loglik, nan=-np.inf)
        evidence = np.nan_to_num(2 * (np.max(loglik, axis=(-2, -1)) - loglik[..., 0, 0]), nan=0.0, neginf=0.0)
        weight = np.exp(loglik - np.max(loglik, axis=(-2, -1), keepdims=True))
        weight /= np.sum(weight, axis=(-2, -1), keepdims=True)
        out = np.ones(n.shape)
        for m, grid_inflation in inflation.items():
            out = np.where(n == m, np.sum(weight * grid_inflation, axis=(-2, -1))[..., None], out)
    return np.where(np.isfinite(out), np.fmax(out, 1.0), 1.0), np.fmax(evidence, 0.0)


def noise_scale(aa: Comparison) -> float:
    """φ = sqrt(mean (θ̂_AA/se_AA)²) over the points with an A/A estimate, at least 1 (1 without any)."""
    t = (aa.theta / aa.se)[np.isfinite(aa.theta / aa.se)]
    return float(max(1.0, np.sqrt(np.mean(t**2)))) if t.size else 1.0


@overload
def t_quantile(confidence: float, df: float) -> float: ...
@overload
def t_quantile(confidence: float, df: np.ndarray) -> np.ndarray: ...
def t_quantile(confidence: float, df: np.ndarray | float) -> np.ndarray | float:
    """Two-sided t quantile, of df's shape (a number for a number); NaN degrees of freedom give NaN."""
    if not 0.5 <= confidence < 1.0:
        raise ValueError(f"confidence must be in [0.5, 1), got {confidence}")
    with np.errstate(all="ignore"):
        return scipy_stats.t.ppf(0.5 + confidence / 2.0, df)


def ratio_interval(
    theta: np.ndarray | float, se: np.ndarray | float, df: np.ndarray | float, confidence: float = CONFIDENCE
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THE interval every caller uses: (estimate, low, high) of the ratio = exp(θ ∓ t·se)."""
    half = t_quantile(confidence, df) * np.asarray(se, float)
    theta = np.asarray(theta, float)
    return np.exp(theta), np.exp(theta - half), np.exp(theta + half)


def classify(low: np.ndarray | float, high: np.ndarray | float, margin: float = MARGIN) -> np.ndarray:
    """fused / fallback beyond 1 ± δ, equivalent inside it, inconclusive otherwise (NaN bounds: insufficient)."""
    if not 0.0 <= margin < 0.5:
        raise ValueError(f"margin must be in [0, 0.5), got {margin}")
    low, high = np.asarray(low, float), np.asarray(high, float)
    out = np.full(low.shape, "inconclusive", dtype=object)
    out[low > 1.0 + margin] = "fused"
    out[high < 1.0 - margin] = "fallback"
    out[(low >= 1.0 - margin) & (high <= 1.0 + margin)] = "equivalent"
    out[np.isnan(low) | np.isnan(high)] = "insufficient"
    return out


def precision_step(values: np.ndarray) -> float:
    """The coarsest power of ten every value is a multiple of (0.01 for tok/s written with 2 decimals); 0 when the
    values carry more digits than a text file would (simulated floats)."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    for exponent in range(3, -10, -1):
        step = 10.0**exponent
        scaled = values / step
        if np.all(np.abs(scaled - np.round(scaled)) <= 1e-6):
            return step
    return 0.0


def precision_floor(step: float, tok_s: np.ndarray) -> np.ndarray:
    """Per-run variance of ln tok/s that rounding to `step` adds: (step²/12)/value² (a uniform rounding error)."""
    with np.errstate(all="ignore"):
        return np.nan_to_num((step**2 / 12.0) / np.asarray(tok_s, float) ** 2, nan=0.0)


# --- the DataFrame layer ---------------------------------------------------------------------------------------


def row_median(values: np.ndarray) -> np.ndarray:
    """Median over the last axis of values padded with NaN (NaN where a row has none): what np.median gives on each
    row's values alone, bit for bit (the middle value, or the mean of the two middle ones), for all rows in one
    sort. Why not np.nanmedian: on a file of many points it took most of the analysis, row by row (its masked-array
    path for short rows still took seconds of a million points' outlier screen: every short-row median is this one)."""
    values = np.sort(values, axis=-1)  # NaN last
    n = np.sum(~np.isnan(values), axis=-1)[..., None]
    with np.errstate(all="ignore"):
        low = np.take_along_axis(values, np.maximum((n - 1) // 2, 0), axis=-1)
        high = np.take_along_axis(values, np.maximum(n // 2 - (n == 0), 0), axis=-1)
        return np.where(n > 0, (low + high) / 2.0, np.nan)[..., 0]


def relative_spread(values: np.ndarray) -> np.ndarray:
    """1.4826·MAD/median over the last axis (NaN: absent): a robust coefficient of variation (NaN for fewer than
    two values)."""
    values = np.asarray(values, float)
    median = row_median(values)
    with np.errstate(all="ignore"):
        spread = MAD_TO_SIGMA * row_median(np.abs(values - median[..., None])) / median
    return np.where(np.sum(~np.isnan(values), axis=-1) < 2, np.nan, spread)[()]


FAMILY_FIELDS = ("workload", "d_model", "top_k", "n_experts", "bits", "group_size", "dtype")


def is_context(dtype: object) -> bool:
    """Whether a point's dtype cell names a command's context depth (`ctx8192`, harness.measure.workloads.command)."""
    return isinstance(dtype, str) and dtype.startswith("ctx") and dtype[3:].isdigit()


def family_labels(frame: pd.DataFrame) -> pd.Series:
    """A readable shape-family label per row, starting with the points' kind: a kernel kind's family (its registry
    entry's family_fields, `layer`) is one (d_model, top_k, n_experts, bits, group_size, dtype); a whole-model kind's
    points (`decode`, `command`: one model per Dff) form one family per kind, and per context depth where a
    command's context axis wrote one into `dtype`. Each distinct shape is formatted once:
    a summary of a million points has a handful of families."""

    def label(
        workload: object, d_model: float, top_k: float, n_experts: float, bits: float, group: float, dtype: object
    ) -> str:
        if kind_meaning(workload).family_fields == WHOLE_MODEL_FAMILY:
            # a command's dtype cell names a context depth (`ctx8192`): each depth is its own family
            return f"{workload or 'all'} {dtype}" if is_context(dtype) else str(workload or "all")
        shape = f"d_model={d_model:.0f} top_k={top_k:.0f} experts={n_experts:.0f} q{bits:.0f}g{group:.0f} {dtype}"
        return f"{workload} {shape}"

    if frame.empty:
        return pd.Series([], dtype=str)
    cache: dict[object, str] = {}
    whole: dict[object, bool] = {}  # workload → whether its kind is a whole-model one (asked once per workload)
    labels = []
    for shape in zip(*(frame[field].tolist() for field in FAMILY_FIELDS), strict=True):
        if (is_whole := whole.get(shape[0])) is None:
            is_whole = whole[shape[0]] = kind_meaning(shape[0]).family_fields == WHOLE_MODEL_FAMILY
        # a whole-model kind's family is its name alone: its shape's NaNs would defeat the cache
        key = (shape[0], shape[-1] if is_context(shape[-1]) else "") if is_whole else shape
        text = cache.get(key)
        if text is None:
            text = cache[key] = label(*shape)
        labels.append(text)
    return pd.Series(labels, index=frame.index)
