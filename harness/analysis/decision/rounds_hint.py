"""How many rounds per arm give a keep an 80% chance of a decision, by simulating the sweep that would follow the
hint (docs/design.md §7, issue 36).

A keep's hint names N: a fresh sweep of the same truth at N rounds per arm (`--rounds N`, new noise) decides at the
point the keep turns on with a chance of at least POWER. The chance is read off simulated sweeps at N, each drawn
from what the current one measured and passed through the summary's own estimator
(sweep_drift.estimate_in_passes around stats.estimate_family: the passes centred, the outlier screen, the drift
bound re-derived from the new runs at N, the pass test); the decision engine's own point tests then say whether
each decided (cap_move hands in `decided`: the one-sided tests of `_read`, the one-round-pass rule, withheld
moves). So the hint and until-decided's stopping rule (decision_value, decision_cost) read one engine on one
estimator.

What is drawn, per simulated sweep and point (posterior under flat priors, so a point's uncertainty is its own):
- the per-run noise, separated from the part of the standard error more rounds cannot shrink: se² = σ²/n · F,
  where F is the variance factor of the drift bound of two passes (Comparison.pass_bound, the summary's field
  PassCol.DRIFT_BOUND); σ² is drawn as σ̂²·df/χ²_df (at 3 rounds σ is known to about a factor of 2);
- the truth θ ~ θ̂ + (σ/√n)·z: the estimate's uncertainty from its runs' noise, not the bound's upper end;
- N new rounds per arm at that truth and noise, split ⌊N/2⌋ / ⌈N/2⌉ over two passes when the sweep had two;
- outliers: each new run slowed, as often and by as much as the runs the screen dropped from the current sweep
  (Measured.slowed, .slowdown: the summary's outliers column), so the screen drops their rounds and unpools their
  points as it will in the sweep that follows (drawn without them, named hints at n = 5 decided in .56 of followed
  sweeps with 1 run in 20 slowed).
- a drift of one arm (two passes only): each visit of a point (its pass) moves the fused arm's runs by an offset of
  variance τ̂², the visit-to-visit drift around the trend the current passes estimated (sweep_drift.drift_trend, read
  back from the bound: _visit_drift), and the truth's uncertainty gains what that drift left in θ̂. The trend itself
  is not drawn: a polynomial of the fitted order in run time is removed exactly by the estimator at N. Before
  this the simulated sweeps carried none and under slow drift of one arm the hint was optimistic; how far it still
  is: scripts/decision_calibration.py --hint, docs/design.md §7.

Why not the closed form it replaces (issue 29's decision_chance): it took the drift-inflated standard error for
the truth's uncertainty, so its chance could never pass Φ(gap/se) however many rounds; at 3 rounds in two passes,
where the bound multiplies the variance by about 3.7 on 6 points, it said "no affordable number decides" in 86% of
sparse keeps, truths 3-4% past the margin that 20 rounds decided included (issue 36). Here the bound at N is whatever
the estimator makes of N new rounds.

Common random numbers: each N reads prefixes of one draw of runs, so the chance grows with N as the truth does and
the search over HINT_ROUNDS can bisect; one fixed seed, so the same data always give the same hint (check-reports
re-derives it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from harness.analysis.points import sweep_drift
from harness.analysis.points.stats import FULL_PRECISION_FLOOR, POWER, estimate_family

BUDGET_ROUNDS = 20  # the most rounds per arm a hint names: measure.max_rounds' default, until-decided's round cap
# the N a hint may name ("about N"): a coarse ladder keeps the search to 3-4 simulations of SIMS sweeps
HINT_ROUNDS = (4, 5, 6, 8, 10, 12, 15, BUDGET_ROUNDS)
SIMS = 200  # simulated sweeps per N: Monte Carlo error of the chance about ±.03 at 80%
SCREEN = 50  # the first sweeps of the draw, read at the ladder's top first: a chance below SCREEN_BELOW there
SCREEN_BELOW = 0.6  # (3.5 Monte Carlo errors under 80% at 50 sweeps) withholds without simulating the rest
SEED = 36

# (θ̂, se, df) of every simulated sweep's points (sims, points), the pass test's verdict per sweep (sims,: True where
# the passes disagree: unusable) and N → whether each simulated sweep decided (sims,)
Decided = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int], np.ndarray]


@dataclass(frozen=True, kw_only=True)
class Measured:
    """A family's points as the current sweep measured them: estimate, standard error, degrees of freedom and rounds
    per arm, the drift bound's variance factor in se² (1: none), whether the rounds lay in two passes, and the runs
    the outlier screen dropped: their share of the family's runs and their typical slowdown (ln, ≤ 0)."""

    theta: np.ndarray
    se: np.ndarray
    df: np.ndarray
    rounds: np.ndarray
    bound: np.ndarray
    passes: int = 1
    slowed: float = 0.0
    slowdown: float = 0.0

    def usable(self) -> bool:
        return bool(np.all(np.isfinite(self.se) & (self.se > 0) & (self.rounds >= 1)))


@dataclass(frozen=True, kw_only=True)
class Hint:
    """The rounds a keep needs (None: none up to BUDGET_ROUNDS decides) and the chance at the last N simulated."""

    needed: int | None
    chance: float


class _Draw:
    """One draw of SIMS sweeps' truths and runs at BUDGET_ROUNDS, read at any N ≤ it by prefix."""

    def __init__(self, m: Measured, sims: int, seed: int):
        self.sims = sims
        rng = np.random.default_rng(seed)
        points = len(m.theta)
        df = np.clip(np.where(np.isfinite(m.df), m.df, 1e6), 1.0, 1e6)
        scale = rng.chisquare(df, (sims, points)) / df  # σ² = σ̂²/scale: σ's own uncertainty
        se_runs = m.se / np.sqrt(np.fmax(m.bound, 1.0))
        sigma = se_runs * np.sqrt(m.rounds) / np.sqrt(scale)  # sd of one round's difference
        self.truth = m.theta + se_runs / np.sqrt(scale) * rng.standard_normal((sims, points))
        half = BUDGET_ROUNDS // 2
        # each arm's runs carry half the variance of their difference; pass 2's columns drawn apart from pass 1's so
        # a prefix of each stays one draw at every N
        self.noise = sigma[..., None] / np.sqrt(2.0) * rng.standard_normal((2, 2, sims, points, half))
        # the new runs slowed as often and as much as the screen found in the current ones (drawn last: none slowed,
        # the rest of the draw is unchanged)
        self.noise += np.where(rng.random(self.noise.shape) < m.slowed, m.slowdown, 0.0)
        self.passes = m.passes
        # a drift of one arm as the passes estimated it (drawn last: without one, the rest of the draw is unchanged)
        tau2, share = _visit_drift(m)
        if tau2 > 0:
            self.truth = self.truth + np.sqrt(tau2 * share) * rng.standard_normal((sims, points))
            # the fused arm's runs of one visit (a point's pass) move together
            self.noise[0] += math.sqrt(tau2) * rng.standard_normal((2, sims, points, 1))

    def runs(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(fused, fallback, first) of a sweep of n rounds per arm at every point."""
        if self.passes == 2 and n >= 2:
            first = n // 2
            cols = [np.concatenate([arm[0][..., :first], arm[1][..., : n - first]], axis=-1) for arm in self.noise]
        else:
            first = 0
            cols = [np.concatenate([arm[0], arm[1]], axis=-1)[..., :n] for arm in self.noise]
        fused, fallback = self.truth[..., None] + cols[0], cols[1]
        return fused, fallback, np.full(self.truth.shape, first)


def _visit_drift(m: Measured) -> tuple[float, np.ndarray]:
    """τ̂², the variance of a visit's drift of one arm around the trend as the current sweep's passes estimated it
    (0: one pass, or no point's se carries a drift bound), and each point's share of it in its mean, (n₁² + n₂²)/n².

    Why: without it the simulated sweeps' passes agreed, so the trend and τ² re-derived at N were small, while the
    sweep that follows a hint under a drift of one arm has its own (docs/design.md §7). The summary records the drift
    only as each point's bound factor F (PassCol.DRIFT_BOUND: se² = σ²/n · F), so τ² is read back from it,
    inverting drift_trend: the bound's extra se²(1 − 1/F) is τ² at its upper bound times the point's share, plus the
    trend's uncertainty (the family's smallest, where that part is least, is taken for τ²); with the passes' noise
    term σ²(1/n₁ + 1/n₂) it gives Var(Δ) at its bound, rss/χ²_dof(α), and so the residual sum of squares, whose
    point estimate rss/dof less the noise term is 2τ̂². The point estimate, not a draw from τ²'s posterior: on 5
    degrees of freedom (6 points) that posterior's tail drew drift into nearly every simulated sweep, and on truths
    without drift of one arm the hint then named a number for 1 keep in 169 (16 before; 200 sweeps at 3 rounds)."""
    read = _read_bound(m)
    return (0.0 if read is None else read.tau2), read_share(m.rounds)


def _split(rounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each point's two halves in time order, ⌊n/2⌋ and ⌈n/2⌉ of at least 2 rounds (sweep_drift's passes)."""
    now = np.maximum(rounds, 2)
    return now // 2, now - now // 2


def read_share(rounds: np.ndarray) -> np.ndarray:
    """Each point's share of τ² in its mean, (n₁² + n₂²)/n² over its halves ⌊n/2⌋, ⌈n/2⌉ (at least 2 rounds): 5/9 at
    3, ½ from 4 on even n."""
    early, late = _split(rounds)
    share: np.ndarray = (early**2 + late**2) / (early + late) ** 2
    return share


@dataclass(frozen=True, kw_only=True)
class _Bound:
    """The drift bound of a family's passes, read back from its points (_read_bound): τ² at its upper bound, its
    point estimate, the runs' noise in the pass differences (mean σ²(1/n₁ + 1/n₂)) and the per-round variance."""

    upper: float
    tau2: float
    noise: float
    sigma2: np.ndarray


def _halves(rounds: np.ndarray) -> np.ndarray:
    """1/n₁ + 1/n₂ over each point's halves: the runs' noise in its pass difference, per unit of σ²."""
    early, late = _split(rounds)
    out: np.ndarray = 1.0 / early + 1.0 / late
    return out


def _level_factor(points: int) -> tuple[int, float]:
    """drift_trend's residual degrees of freedom on `points` and the χ² quantile its bound divides the residuals by."""
    dof = sweep_drift.residual_dof(points)
    return dof, float(scipy_stats.chi2.ppf(1.0 - sweep_drift.DRIFT_BOUND_LEVEL, dof))


def _read_bound(m: Measured) -> _Bound | None:
    """_visit_drift's inversion of the bound (None: one pass, or no point's se carries one)."""
    drifted = m.bound > 1.0
    if m.passes != 2 or not np.any(drifted):
        return None
    share = read_share(m.rounds)
    runs_se2 = m.se**2 / np.fmax(m.bound, 1.0)
    sigma2: np.ndarray = runs_se2 * np.maximum(m.rounds, 2)
    upper = float(np.min((m.se[drifted] ** 2 - runs_se2[drifted]) / share[drifted]))
    noise = float(np.mean(sigma2 * _halves(m.rounds)))
    dof, quantile = _level_factor(len(m.theta))
    rss = (2.0 * upper + noise) * quantile
    return _Bound(upper=upper, tau2=max((rss / dof - noise) / 2.0, 0.0), noise=noise, sigma2=sigma2)


def bound_narrowing(m: Measured, after: np.ndarray) -> float:
    """The factor by which τ²'s upper bound (the drift bound's part of every point's se², sweep_drift.drift_trend)
    narrows when the family's points have `after` rounds instead of m.rounds: the residuals' expectation
    (k − q)(2τ̂² + noise) with τ̂² as _visit_drift reads it and the runs' noise at the new halves, read at the bound's
    level as drift_trend reads the measured ones. 1 where nothing is bounded.

    Why τ̂² and not the noise alone: where the passes see a drift of one arm, more rounds narrow only the noise's part
    of the bound (until-decided's pass, harness.analysis.rounds.decision_value.pass_flip, promised the whole of it
    under per-arm drift and bought passes that did not narrow it); where they see none, the bound is the noise read at
    its upper end and narrows as the noise does."""
    read = _read_bound(m)
    if read is None or read.upper <= 0:
        return 1.0
    dof, quantile = _level_factor(len(m.theta))

    def expected_upper(rounds: np.ndarray) -> float:
        noise = float(np.mean(read.sigma2 * _halves(rounds)))
        return max(((2.0 * read.tau2 + noise) * dof / quantile - noise) / 2.0, 0.0)

    now = expected_upper(np.asarray(m.rounds))
    return min(expected_upper(np.asarray(after)) / now, 1.0) if now > 0 else 1.0


def chance(draw: _Draw, n: int, decided: Decided, sims: int | None = None) -> float:
    """The share of the drawn sweeps (the first `sims`; None: all) that, measured at n rounds per arm and estimated
    as the summary estimates, decide (`decided`)."""
    fused, fallback, first = (x[:sims] for x in draw.runs(n))
    paired = np.ones(first.shape, bool)
    comparison, _, p = sweep_drift.estimate_in_passes(estimate_family, fused, fallback, paired, FULL_PRECISION_FLOOR,
                                                      first)  # fmt: skip
    drifted = np.zeros(first.shape[0], bool) if p is None else np.asarray(p) < sweep_drift.SWEEP_DRIFT_ALPHA
    return float(np.mean(decided(comparison.theta, comparison.se, comparison.df, drifted, n)))


def rounds_to_decide(
    m: Measured,
    decided: Decided,
    ladder: Sequence[int] = HINT_ROUNDS,
    power: float = POWER,
    sims: int = SIMS,
    seed: int = SEED,
) -> Hint:
    """The fewest rounds per arm on the ladder above the current rounds whose simulated sweeps decide with at least
    `power` (bisected: the chance grows with N on common random numbers); None with the chance at the ladder's top
    when not even that does (NaN: the sweep already has the ladder's top, nothing is simulated)."""
    now = int(np.max(m.rounds)) if len(m.rounds) else 0
    candidates = [n for n in ladder if n > now]
    if not candidates:
        return Hint(needed=None, chance=math.nan)
    draw = _Draw(m, sims, seed)
    screened = chance(draw, candidates[-1], decided, min(SCREEN, sims))
    if screened < SCREEN_BELOW:
        return Hint(needed=None, chance=screened)
    top = chance(draw, candidates[-1], decided)
    if top < power:
        return Hint(needed=None, chance=top)
    low, high = 0, len(candidates) - 1  # candidates[high] decides; find the first that does
    while low < high:
        mid = (low + high) // 2
        if chance(draw, candidates[mid], decided) >= power:
            high = mid
        else:
            low = mid + 1
    return Hint(needed=candidates[high], chance=top)
