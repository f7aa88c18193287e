"""Drift between the points of a family: do the point estimates scatter more than their own intervals allow?

Why: a drift the two arms do not share and that is slow against one point's runs (a background load, a thermal
state, a clock governor settling) moves every run of a point alike. The point's own spread cannot show it, nor can
its run-to-run correlation (stats.drift_inflation) at 3 runs, and more rounds do not average it away. On a flat
truth such an offset looked like a real win or loss: simulated sweeps acted (raised or lowered) in 9–13% of flat
truths at 3–40 rounds (tests/support/calibration.py, issue 29). What still shows it is the family: offsets that come and
go from point to point make the curve wiggle.

The test needs no shape of the curve beyond monotonicity in Dff, in either direction (points are in Dff order): the
weighted monotone (isotonic) fit is the projection onto a cone that holds any monotone truth, so its weighted
residual sum of squares is at most that of the truth, χ² with k degrees of freedom without drift (F with the
points' df when their variances are estimated). A family whose scatter exceeds that at 5% has drift between points;
its variance τ² is then estimated by moments — Σ r²/(se² + τ²) = k − L, L the fit's number of level sets (the
isotonic fit's degrees of freedom, Meyer & Woodroofe 2000) — and added to every point's se², with Satterthwaite
degrees of freedom. A family without drift (and a monotone truth) is widened in at most 5% of sweeps; a truth that
is not monotone in Dff is widened too: conservative, and said. Applied to the decision's curve only (decide_curves):
a point's own interval and verdict stay what its runs say.
"""

from __future__ import annotations

import numpy as np
from scipy import stats as scipy_stats

SCATTER_ALPHA = 0.05
MIN_POINTS = 4  # fewer points: a monotone fit absorbs almost all scatter, there is nothing to test


def monotone_fit(y: np.ndarray, w: np.ndarray, increasing: bool) -> tuple[np.ndarray, int]:
    """Weighted isotonic regression of y (pool adjacent violators) and its number of level sets."""
    sign = 1.0 if increasing else -1.0
    values: list[float] = []
    weights: list[float] = []
    sizes: list[int] = []
    for yi, wi in zip((sign * y).tolist(), w.tolist(), strict=True):
        values.append(yi)
        weights.append(wi)
        sizes.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            total = weights[-2] + weights[-1]
            merged = (values[-2] * weights[-2] + values[-1] * weights[-1]) / total
            size = sizes[-2] + sizes[-1]
            del values[-1], weights[-1], sizes[-1]
            values[-1], weights[-1], sizes[-1] = merged, total, size
    return sign * np.repeat(values, sizes), len(values)


def scatter_excess(theta: np.ndarray, se: np.ndarray, df: np.ndarray) -> tuple[float, float, float]:
    """(τ², its degrees of freedom, p) for one family's points in Dff order (NaN entries ignored); τ² = 0 and p = 1
    when the scatter fits the points' own intervals or there are fewer than MIN_POINTS."""
    ok = np.isfinite(theta) & np.isfinite(se) & (se > 0)
    k = int(ok.sum())
    if k < MIN_POINTS:
        return 0.0, np.inf, 1.0
    y, s, d = theta[ok], se[ok], df[ok]
    w = 1.0 / s**2
    fits = [monotone_fit(y, w, up) for up in (True, False)]
    fit, levels = min(fits, key=lambda f: float(np.sum(w * (y - f[0]) ** 2)))
    resid2 = (y - fit) ** 2
    ss = float(np.sum(w * resid2))
    p = float(scipy_stats.f.sf(ss / k, k, float(np.median(d))))
    residual_df = k - levels
    if p >= SCATTER_ALPHA or residual_df < 1:
        return 0.0, np.inf, p
    low, high = 0.0, float(np.max(resid2))
    for _ in range(60):  # Σ r²/(se² + τ²) falls as τ² grows: bisection
        mid = (low + high) / 2
        if np.sum(resid2 / (s**2 + mid)) > residual_df:
            low = mid
        else:
            high = mid
    return high, float(residual_df), p


def widen_for_scatter(theta: np.ndarray, se: np.ndarray, df: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """One family's points (in Dff order) widened by its drift between points: (se, df, τ²); unchanged when τ² = 0."""
    tau2, tau_df, _ = scatter_excess(theta, se, df)
    if tau2 <= 0:
        return se, df, 0.0
    total = se**2 + tau2
    return np.sqrt(total), total**2 / (se**4 / df + tau2**2 / tau_df), tau2
