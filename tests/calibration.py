"""Run the decision engine on SYNTHETIC simulated sweeps (tests/simulation.py) and score it against the known truth.

Shared by tests/test_calibration.py; nothing is written anywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from harness.crossover import Curve, find_crossover, recommend
from harness.stats import CONFIDENCE, MARGIN, estimate_family, ratio_interval
from tests.simulation import CROSSOVER_TRUE, CURRENT_DEFAULT, DFFS, SimulatedSweeps, simulate


@dataclass(frozen=True)
class Score:
    point_coverage: float  # share of per-point intervals holding the true ratio
    crossover_coverage: float  # share of sweeps whose crossover interval holds the true crossover
    action_rate: float  # share of sweeps whose decision is not `keep`
    median_error: float  # median |estimated − true crossover| (inf where no crossing was estimated)
    plain_median_error: float  # the same for plain linear interpolation of the ratio of medians


def plain_interpolation(sim: SimulatedSweeps) -> np.ndarray:
    """First down-crossing of median(fused)/median(fallback) − 1, linear in Dff (what a spreadsheet does)."""
    ratio = np.median(np.exp(sim.fused), axis=2) / np.median(np.exp(sim.fallback), axis=2)
    out = np.full(len(ratio), np.inf)
    for s, r in enumerate(ratio):
        loses = np.flatnonzero(r <= 1.0)
        if loses.size and loses[0] > 0:
            i = loses[0] - 1
            out[s] = DFFS[i] + (r[i] - 1.0) / (r[i] - r[i + 1]) * (DFFS[i + 1] - DFFS[i])
    return out


def score(truth: np.ndarray, rounds: int, sweeps: int, seed: int, margin: float = MARGIN) -> Score:
    sim = simulate(truth, rounds, sweeps, seed)
    paired = np.ones(sim.fused.shape[:2], bool)
    comparison, _ = estimate_family(sim.fused, sim.fallback, paired)
    _, low, high = ratio_interval(comparison.theta, comparison.se, comparison.df, CONFIDENCE)
    true_ratio = np.exp(truth)[None, :]
    valid = np.isfinite(low)
    point_coverage = float(np.mean(((low <= true_ratio) & (true_ratio <= high))[valid]))
    covered, actions, errors = 0, 0, []
    crossing = bool(np.any(truth > 0) and np.any(truth < 0))
    for s in range(sweeps):
        keep = valid[s]
        curve = Curve(
            DFFS[keep].astype(float), comparison.theta[s, keep], comparison.se[s, keep], comparison.df[s, keep]
        )
        crossover = find_crossover(curve, CONFIDENCE)
        decision = recommend(curve, crossover, CURRENT_DEFAULT, margin=margin, rounds=np.full(keep.sum(), rounds))
        actions += decision.action != "keep"
        covered += crossover.ci_low <= CROSSOVER_TRUE <= crossover.ci_high
        errors.append(abs(crossover.dff - CROSSOVER_TRUE) if crossover.dff is not None else math.inf)
    plain = np.abs(plain_interpolation(sim) - CROSSOVER_TRUE)
    return Score(
        point_coverage,
        covered / sweeps if crossing else math.nan,
        actions / sweeps,
        float(np.median(errors)),
        float(np.median(plain)),
    )
