"""Rounds to a decision, by simulation: the until-decided protocol (harness.analysis.rounds.decision_value) and the
fixed one run on the same simulated measurements, through the same estimator (`estimate_family` inside
`sweep_drift.estimate_in_passes`: a sweep's rounds lie in two passes over the grid, each point's interval widened by
the drift of one arm the passes cannot exclude) and the same decision engine (`decide_curves`) the summary and
`crossover` run. Estimated as one pass, the cost model promised decisions the sweep's own analysis does not reach.

Two users. `moecal plan` and `sweep --dry-run` simulate the stopping rule at an expected curve and per-run noise to
say how many rounds (hence how much device time) a decision should take, and the sweep repeats it after its first
pass with the measured estimates as the truth. The calibration simulations (tests/support/until_decided.py) run both
protocols on drawn curved truths with drift and outliers and score them against the truth.

A `RunSource` hands out each point's runs in the order the protocol asks for them, so a source with drift sees the
until-decided protocol's late rounds late (they pay for the drift since the first pass, as on a real device).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from harness.analysis.decision.curve import Curve
from harness.analysis.decision.decide import StagedFamily, decide_curves
from harness.analysis.points import sweep_drift
from harness.analysis.points.stats import FULL_PRECISION_FLOOR, Comparison, estimate_family
from harness.analysis.rounds.decision_value import Key, Outcome, StopRule, next_step
from harness.policy import Policy

DEFAULT_NOISE = 0.01  # ln tok/s spread of one run when nothing was measured yet (1%: mlxcel's GB10 sweeps)
DEFAULT_SLOPE = 0.06  # a in ln ratio = a·(C/d − 1), mid-range of the simulated truths (tests/support/simulation.py)


class RunSource(Protocol):
    def draw(self, family: int, point: int, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """ln tok/s of `rounds` more interleaved rounds at one point, (fused, fallback), in the order they run."""


@dataclass
class WhiteNoise:
    """Runs around a known ln ratio per (family, point) with independent noise: the expected-cost model."""

    truth: np.ndarray  # (families, points) true ln ratio fused/fallback
    noise: float
    rng: np.random.Generator

    def draw(self, family: int, point: int, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        fused = self.truth[family, point] + self.noise * self.rng.standard_normal(rounds)
        return fused, self.noise * self.rng.standard_normal(rounds)


@dataclass(frozen=True, kw_only=True)
class Simulated:
    """One simulated sweep's outcome: the decision, the rounds each point got, why it stopped, looks used."""

    outcome: Outcome
    rounds: np.ndarray  # (families, points)
    stop: str
    looks: int


class _Sweep:
    """The runs measured so far, NaN-padded to the round cap (what estimate_family reads), and whether each point
    was measured in two passes (its first rounds split over both, as harness.measure.sweep_loop measures them): the
    estimate then reads the earlier and the later half of its rounds as the summary does (sweep_drift
    .first_half_runs)."""

    def __init__(self, source: RunSource, families: int, points: int, max_rounds: int, passes: int):
        self.source = source
        self.fused = np.full((families, points, max_rounds), np.nan)
        self.fallback = np.full_like(self.fused, np.nan)
        self.rounds = np.zeros((families, points), int)
        self.two_passes = np.zeros((families, points), bool)
        self.passes = passes
        self.drift_p: float | None = None  # the pass test of the last `staged` (sweep_drift.combined)

    def first_pass(self, rounds: int) -> None:
        """`rounds` at every point in the sweep's own order (harness.measure.sweep_loop): in two passes, the first
        ⌊n/2⌋ rounds of every point in grid order (family by family), then the rest again in grid order, so a
        drifting source sees each point's halves half a sweep apart. Drawn point by point, the halves were adjacent
        in time and the proof ran on a sweep that is not the one measured (issue 36)."""
        split = self.passes == 2 and rounds >= 2
        self.two_passes[:] = split
        for share in (rounds // 2, rounds - rounds // 2) if split else (rounds,):
            for family, point in np.ndindex(self.rounds.shape):
                self.measure(family, point, share)

    def measure(self, family: int, point: int, rounds: int) -> None:
        start = self.rounds[family, point]
        rounds = min(rounds, self.fused.shape[-1] - start)
        fused, fallback = self.source.draw(family, point, rounds)
        self.fused[family, point, start : start + rounds] = fused
        self.fallback[family, point, start : start + rounds] = fallback
        self.rounds[family, point] += rounds

    def first_halves(self) -> np.ndarray:
        """Each point's earlier half of its runs (sweep_drift.first_half_runs), 0 for a point measured in one pass."""
        return np.where(self.two_passes, self.rounds // 2, 0)

    def comparison(self) -> Comparison:
        """Every point's estimate as the summary makes it (two passes: the drift bound and the pass test included);
        the pass test's p lands in `drift_p`."""
        paired = np.ones(self.rounds.shape, bool)
        comparison, _, p = sweep_drift.estimate_in_passes(
            estimate_family, self.fused, self.fallback, paired, FULL_PRECISION_FLOOR, self.first_halves()
        )
        self.drift_p = None if p is None else sweep_drift.combined([float(x) for x in np.atleast_1d(p)])
        return comparison

    def staged(self, grid: np.ndarray) -> tuple[list[StagedFamily], list[np.ndarray]]:
        """Each family's curve of points with an interval, and which grid point each curve point is."""
        comparison, first = self.comparison(), self.first_halves()
        staged, index = [], []
        for f in range(self.rounds.shape[0]):
            keep = np.flatnonzero(np.isfinite(comparison.se[f]))
            curve = Curve(
                dffs=grid[keep].astype(float),
                theta=comparison.theta[f, keep],
                se=comparison.se[f, keep],
                df=comparison.df[f, keep],
            )
            # as the summary marks it (a pass of one round: point_summary), the move's rule in cap_move.recommend
            short = bool(np.any((first[f] > 0) & (first[f] < sweep_drift.MIN_PASS_ROUNDS)))
            bound = np.broadcast_to(comparison.pass_bound, comparison.se.shape)[f, keep]
            staged.append(
                StagedFamily(
                    family=f"layer family {f}",
                    curve=curve,
                    rounds=self.rounds[f, keep],
                    short_passes=short,
                    bound=bound,
                    passes=self.passes,
                )
            )
            index.append(keep)
        return staged, index


def outcome_of(
    staged: Sequence[StagedFamily], current_default: int | None, policy: Policy, drift_p: float | None = None
) -> Outcome:
    result = decide_curves(staged, current_default, policy, table=False, sweep_drift=drift_p, hint=False)
    return result.decision.action, result.decision.recommended_cap


def fixed(
    source: RunSource,
    grid: np.ndarray,
    families: int,
    rounds: int,
    current_default: int | None,
    policy: Policy = Policy(),
    passes: int = 2,
) -> Simulated:
    """The fixed protocol: `rounds` rounds at every point (in `passes` passes), one look at `policy`."""
    sweep = _Sweep(source, families, len(grid), rounds, passes)
    sweep.first_pass(rounds)
    staged, _ = sweep.staged(grid)
    outcome = outcome_of(staged, current_default, policy, sweep.drift_p)
    return Simulated(outcome=outcome, rounds=sweep.rounds, stop="fixed", looks=1)


def until_decided(
    source: RunSource,
    grid: np.ndarray,
    families: int,
    rule: StopRule,
    current_default: int | None,
    cost: np.ndarray | None = None,
    budget: float | None = None,
) -> Simulated:
    """The until-decided protocol: a first pass of `rule.first_rounds` everywhere, then looks (next_step) until it
    stops, each reading the decision at the rule's look level and its policy's margin (the run's, as the sweep's
    own looks read it: an estimate of the protocol that will run). `cost` (families, points):
    device-seconds of one round (default 1: the result counts rounds); `budget` in the same unit."""
    cost = np.ones((families, len(grid))) if cost is None else cost
    sweep = _Sweep(source, families, len(grid), rule.max_rounds, rule.passes)
    sweep.first_pass(rule.first_rounds)

    # every look reads the one policy: built once, not per engine call
    policy = rule.policy.at(rule.look_confidence)

    def decide(staged: Sequence[StagedFamily]) -> Outcome:
        return outcome_of(staged, current_default, policy, sweep.drift_p)

    spent = float(np.sum(sweep.rounds * cost))
    look = 0
    while True:
        staged, index = sweep.staged(grid)
        grid_point = {(f, i): (f, int(p)) for f, keep in enumerate(index) for i, p in enumerate(keep)}
        rounds_done: dict[Key, int] = {k: int(sweep.rounds[g]) for k, g in grid_point.items()}
        costs = {k: float(cost[g]) for k, g in grid_point.items()}
        left = None if budget is None else budget - spent
        step = next_step(staged, rounds_done, costs, rule, decide, look, left, sweep_drift.unusable(sweep.drift_p))
        look += 1
        if step.stop is not None:
            return Simulated(outcome=step.outcome, rounds=sweep.rounds, stop=step.stop, looks=look)
        for key, rounds in step.rounds.items():
            f, p = grid_point[key]
            sweep.measure(f, p, rounds)
            spent += rounds * float(cost[f, p])


def curve_truth(grid: np.ndarray, crossover: float, slope: float = DEFAULT_SLOPE) -> np.ndarray:
    """ln ratio a·(C/d − 1): fused wins below C, loses above it, bending between the measured points."""
    return slope * (crossover / np.asarray(grid, float) - 1.0)


def expected_rounds(
    truth: np.ndarray,
    grid: np.ndarray,
    noise: float,
    rule: StopRule,
    current_default: int | None,
    sweeps: int = 8,
    seed: int = 0,
) -> np.ndarray:
    """Rounds per point (sweeps, families, points) the until-decided protocol takes at this truth and noise."""
    rng = np.random.default_rng(seed)
    families = truth.shape[0]
    return np.stack(
        [
            until_decided(WhiteNoise(truth, noise, rng), grid, families, rule, current_default).rounds
            for _ in range(sweeps)
        ]
    )
