"""Drift of one arm across a whole sweep, seen by measuring every point twice: two passes over the grid.

Why: a drift the two arms do not share and that is slow against one point's runs (a background load, a thermal
state, a clock governor settling) moves every run of a point alike. Neither the point's own spread
(stats.drift_inflation) nor the family's scatter (between_points) can tell it from a real ratio: a constant offset
of one arm *is* a ratio, and a smooth wander looks like a smooth Dff-dependent ratio. On flat truths such drift made
simulated one-pass sweeps act (raise or lower) in 7-16% of sweeps at 3-10 rounds, and a step of the fused arm by 2%
half way through in 24-94% at 3-40 rounds (tests/calibration.py, issue 29); no test on one pass of points in grid
order had the power to see it at 3 rounds (a pooled AR(1) likelihood ratio and a within-point trend F test were
tried: no better than their level).

What a single pass cannot show, a second visit does. When the rounds of every point are split over two passes over
the grid (the first ⌊n/2⌋ rounds of every point, then the rest, both in grid order: each point's visits half a
sweep apart), the mean of a point averages two distant states of the drift, and the passes can be compared: without
drift of one arm the two passes of a point estimate the same ln ratio (shared drift cancels within a round); with it
they differ. The test, pooled over the family's points: F = mean over points of (d̄₁ − d̄₂)² / (s²·(1/n₁ + 1/n₂)),
s² the per-round differences' variance within a pass pooled over the points, with (points, Σ(n₁ − 1 + n₂ − 1))
degrees of freedom. Its rejection (at SWEEP_DRIFT_ALPHA, Bonferroni over the families) makes the data unusable for a
decision: keep, said in the reason and in `sweep_drift` of the record, and measure again. Most of the gain is the
averaging, not the test (simulated: false actions 5% instead of 9% at 3 rounds under each arm's own drift).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats as scipy_stats

SWEEP_DRIFT_ALPHA = 0.01  # at 5% it withheld 3-5% of right actions on curved truths without drift, for little
ROUND_SIGMAS = 4.0  # a round further than this many robust σ from its point's median d is left out of the test


def _screened(d: np.ndarray) -> np.ndarray:
    """d without the rounds far from their point's median (a slowed run the arm-level screen let through): one such
    round in a pass of one or two decides the test alone (5% of runs slowed by 10-20% made it reject 12-17% of
    sweeps without drift at 3 rounds). σ: 1.4826·MAD of the family's rounds around their points' medians."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        resid = d - np.nanmedian(d, axis=-1, keepdims=True)
        sigma = 1.4826 * np.nanmedian(np.abs(resid), axis=(-2, -1), keepdims=True)
        return np.where(np.abs(resid) > ROUND_SIGMAS * sigma, np.nan, d)


def pass_difference(d: np.ndarray, first: int) -> np.ndarray:
    """p-value (...) of the two-pass test (module docstring) for a family's per-round differences d = y_fused −
    y_fallback (..., points, rounds) in round order, the first `first` rounds of each point from the first pass
    (NaN: a dropped round). 1 where no point has a run in each pass and three in all (nothing to test)."""
    d = _screened(np.asarray(d, float))
    passes = (d[..., :first], d[..., first:])
    with np.errstate(all="ignore"):
        counts = [np.sum(~np.isnan(x), axis=-1) for x in passes]
        means = [np.nansum(x, axis=-1) / c for x, c in zip(passes, counts, strict=True)]
        within = sum(np.nansum((x - m[..., None]) ** 2, axis=-1) for x, m in zip(passes, means, strict=True))
        dof_point = sum(np.maximum(c - 1, 0) for c in counts)
        usable = (counts[0] >= 1) & (counts[1] >= 1) & (counts[0] + counts[1] >= 3)
        k = np.sum(usable, axis=-1)
        dof = np.sum(np.where(usable, dof_point, 0), axis=-1)
        s2 = np.sum(np.where(usable, within, 0.0), axis=-1) / dof
        gap = (means[0] - means[1]) ** 2 / (1.0 / counts[0] + 1.0 / counts[1])
        ratio = np.sum(np.where(usable, gap, 0.0), axis=-1) / k / s2
        p = scipy_stats.f.sf(ratio, np.maximum(k, 1), np.maximum(dof, 1))
    return np.where((k >= 1) & (dof >= 1) & np.isfinite(p), p, 1.0)
