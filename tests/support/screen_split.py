"""Where step power goes with slowed runs present (issue 36 deliverable 5; docs/design.md §7, "Deliverable 5, the
slowed runs split"): on SYNTHETIC sweeps, the same sweeps drawn twice — once as the regime has them and once with
its slowed runs taken out (the simulator draws the same random numbers either way, so the twin differs only in
the slowdowns) — read at the lowering trigger (the largest measured Dff at or below the cap) over the sweeps whose
truth calls for a lower.

What it separates: how many slowed rounds the outlier screen drops and keeps, how many clean rounds it drops, the
degrees of freedom of the trigger point with and without a slowed round (a point that lost a round keeps its own
variance instead of the family's pooled one), and, for one-pass sweeps, the trigger's one-sided test (fallback
beyond δ at 5%) with each ingredient of stats.estimate_family switched: the screen or the true slowdowns dropped
(an oracle), the dropped point pooled or on its own variance, the within-point drift inflation on or off. Those
counterfactuals rebuild estimate_family's steps from its parts (compare_arms, drift_inflation) and are checked
against it: the variant with every ingredient as the engine has it reproduces the engine's test exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from scipy import stats as scipy_stats

from harness.analysis.points.stats import CONFIDENCE, compare_arms, drift_inflation
from tests.support.calibration import CURRENT_DEFAULT, _in_passes, right_action, run_engine
from tests.support.simulation import Regime, simulate

MARGIN = 0.01


@dataclass(frozen=True)
class ScreenSplit:
    """One regime at one n (module docstring); shares over the sweeps whose truth calls for a lower."""

    lowers: int  # sweeps whose truth calls for a lower
    power: float  # the engine's (the decision is a lower)
    trigger_test: float  # the engine's one-sided test at the trigger point alone
    clean_power: float  # the same sweeps without slowed runs
    slowed_rounds: int  # rounds of the trigger point with a slowed run in either arm
    slowed_dropped: int  # of those, dropped by the screen (the rest are kept and widen or bias the point)
    clean_dropped: int  # rounds without a slowed run that the screen dropped
    clean_rounds: int
    hit: int  # sweeps whose trigger point has a slowed round
    power_hit: float  # the engine's power on those / on the rest
    power_rest: float
    df_hit: float  # median df of the trigger point: with a slowed round / without / in the clean twin
    df_rest: float
    df_clean: float
    # one pass only: the trigger test's power, (screen | oracle, own | pooled, inflation on | off) → power
    variants: dict[tuple[str, str, str], float]

    def lines(self) -> list[str]:
        out = [
            f"lower truths {self.lowers}: power {self.power:.3f} (without slowed runs {self.clean_power:.3f}; the "
            f"trigger's own test {self.trigger_test:.3f}); "
            f"trigger rounds slowed {self.slowed_rounds}, dropped {self.slowed_dropped}, kept "
            f"{self.slowed_rounds - self.slowed_dropped}; clean rounds dropped {self.clean_dropped} of "
            f"{self.clean_rounds}",
            f"trigger with a slowed round {self.hit} sweeps: power {self.power_hit:.3f}, median df {self.df_hit:g}; "
            f"without: power {self.power_rest:.3f}, median df {self.df_rest:g}; no slowed runs: median df "
            f"{self.df_clean:g}",
        ]
        out += [f"trigger test, {' / '.join(key)}: {value:.3f}" for key, value in self.variants.items()]
        return out


def _test_passes(theta: np.ndarray, se: np.ndarray, df: np.ndarray) -> np.ndarray:
    """The lowering trigger's one-sided test: fallback wins beyond δ at 1 − CONFIDENCE (False without an interval)."""
    ok = np.isfinite(se) & (se > 0)
    with np.errstate(all="ignore"):
        t = (theta + math.log1p(MARGIN)) / np.where(ok, se, 1.0)
        quantile = scipy_stats.t.ppf(CONFIDENCE, np.where(ok, df, 1.0))
    passed: np.ndarray = ok & (t < -quantile)
    return passed


def screen_split(regime: Regime, rounds: int, sweeps: int, seed: int) -> ScreenSplit:
    """The split of one regime at `rounds` (module docstring)."""
    sim = simulate(regime, rounds, sweeps, seed)
    clean = simulate(replace(regime, outlier_rate=0.0), rounds, sweeps, seed)
    slowed = np.stack([sim.fused != clean.fused, sim.fallback != clean.fallback]).any(axis=0)  # (s, f, p, r)
    comparison, flagged, _ = _in_passes(sim)
    clean_comparison, _, _ = _in_passes(clean)
    lower = np.array([right_action(sim, s) == "lower" for s in range(sweeps)])
    decided = np.array([r.decision.action == "lower" for r in run_engine(sim, rounds)])
    clean_decided = np.array([r.decision.action == "lower" for r in run_engine(clean, rounds)])
    j, f = int(np.flatnonzero(sim.grid <= CURRENT_DEFAULT)[-1]), 0
    slow_rounds, dropped = slowed[:, f, j][lower], flagged.any(axis=0)[:, f, j][lower]
    hit = slow_rounds.any(axis=-1)
    df_all = comparison.df[:, f, j]
    df = df_all[lower]

    def median(values: np.ndarray) -> float:
        finite = values[np.isfinite(values)]
        return float(np.median(finite)) if finite.size else math.nan

    variants: dict[tuple[str, str, str], float] = {}
    if sim.first_pass is None:
        paired = np.ones(sim.truth.shape, bool)
        for screen, drop in (("screen", flagged.any(axis=0)), ("oracle", slowed)):
            a, b = np.where(drop, np.nan, sim.fused), np.where(drop, np.nan, sim.fallback)
            for pool in ("own", "pooled"):
                together = np.ones(drop.shape[:-1], bool) if pool == "pooled" else ~drop.any(axis=-1)
                result = compare_arms(a, b, paired, pool=together)
                for inflate in ("inflation", "no inflation"):
                    factor = drift_inflation(a - b)[0] if inflate == "inflation" else np.ones(result.se.shape)
                    passed = _test_passes(
                        result.theta[:, f, j],
                        (result.se * np.sqrt(factor))[:, f, j],
                        np.fmax(result.df / factor, 1.0)[:, f, j],
                    )
                    variants[(screen, pool, inflate)] = float(np.mean(passed[lower]))
    return ScreenSplit(
        int(lower.sum()),
        float(np.mean(decided[lower])),
        float(np.mean(_test_passes(comparison.theta[:, f, j], comparison.se[:, f, j], df_all)[lower])),
        float(np.mean(clean_decided[lower])),
        int(slow_rounds.sum()),
        int((slow_rounds & dropped).sum()),
        int((~slow_rounds & dropped).sum()),
        int((~slow_rounds).sum()),
        int(hit.sum()),
        float(np.mean(decided[lower][hit])) if hit.any() else math.nan,
        float(np.mean(decided[lower][~hit])) if (~hit).any() else math.nan,
        median(df[hit]),
        median(df[~hit]),
        median(clean_comparison.df[:, f, j][lower]),
        variants,
    )
