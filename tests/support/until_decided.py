"""SYNTHETIC proof of `--until-decided` (docs/design.md §7): the until-decided protocol and the fixed one on the same
drawn curved truths (tests/support/simulation.py's regimes: sparse mlxcel-like and dense grids, 1-4 families, drift,
outliers), scored against the truth. Nothing is measured or written.

Runs are handed out in time order (`DriftingRuns`), so the rounds the allocation adds late meet the drift since the
first pass, as on a device. `compare` takes the protocols as callables (a RunSource → harness.analysis
.decision_cost.Simulated), so any protocol can be scored on the same sweeps. `python -m tests.support.until_decided
[SWEEPS]` prints the protocols at matched rounds, `--matched` until-decided beside the fixed protocol of equal power
(issue 36), `--floor` why rounds at the deciding point alone buy little in two passes (main, `--help`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from harness.analysis.rounds.decision_cost import (
    RunSource,
    Simulated,
    WhiteNoise,
    _Sweep,
    curve_truth,
    fixed,
    until_decided,
)
from harness.analysis.rounds.decision_value import StopRule
from tests.support.calibration import CURRENT_DEFAULT, _false_action
from tests.support.simulation import (
    DENSE,
    NOISE,
    OUTLIER_DROP,
    SPARSE,
    TREND,
    Regime,
    SimulatedSweeps,
    _ar1,
    draw_truth,
)

MARGIN = 0.01
Protocol = Callable[[RunSource, np.ndarray, int], Simulated]


class DriftingRuns:
    """One sweep's runs in the order they are asked for: level + ln ratio (fused) + shared drift (AR(1) and a −3%
    trend over the sweep's slots) + the regime's per-arm drift + 1% noise + outliers (tests/support/simulation.py's
    model)."""

    def __init__(self, regime: Regime, truth: np.ndarray, rng: np.random.Generator, slots: int):
        self.regime, self.truth, self.rng = regime, truth, rng
        self.shared = _ar1(rng, (slots,)) + TREND * np.arange(slots) / slots
        self.own = {
            "fused": _ar1(rng, (slots,)) if regime.drift in ("per_arm", "fused_only") else np.zeros(slots),
            "fallback": _ar1(rng, (slots,)) if regime.drift == "per_arm" else np.zeros(slots),
        }
        self.slot = 0
        self.done: dict[tuple[int, int], int] = {}  # rounds handed out per point: the arm order rotates on from there

    def _run(self, arm: str, level: float) -> float:
        t = min(self.slot, len(self.shared) - 1)
        self.slot += 1
        outlier = np.log1p(-self.rng.uniform(*OUTLIER_DROP)) if self.rng.random() < self.regime.outlier_rate else 0.0
        return level + self.shared[t] + self.own[arm][t] + NOISE * self.rng.standard_normal() + outlier

    def draw(self, family: int, point: int, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        level = float(np.log(1e5 / self.regime.grid[point]))
        fused, fallback = np.empty(rounds), np.empty(rounds)
        start = self.done.get((family, point), 0)
        self.done[(family, point)] = start + rounds
        for r in range(rounds):  # the arm order rotates every round, across the point's visits
            order = ("fallback", "fused") if (start + r) % 2 == 0 else ("fused", "fallback")
            for arm in order:
                value = self._run(arm, level)
                if arm == "fused":
                    fused[r] = value + self.truth[family, point]
                else:
                    fallback[r] = value
        return fused, fallback


class PrefixRuns:
    """A tests/support/simulation.py sweep's rounds handed out in order, each point's from its first round on: how the
    calibration's protocols (tests/support/calibration.py) read pre-simulated sweeps. Its drift is laid out point after
    point, so rounds added late are not later in time: DriftingRuns is the fairer source for until-decided."""

    def __init__(self, sim: SimulatedSweeps, sweep: int):
        self.sim, self.sweep = sim, sweep
        self.used = np.zeros(sim.truth.shape[1:], int)

    def draw(self, family: int, point: int, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        start = self.used[family, point]
        self.used[family, point] += rounds
        window = slice(start, start + rounds)
        return self.sim.fused[self.sweep, family, point, window], self.sim.fallback[self.sweep, family, point, window]


@dataclass(frozen=True)
class Row:
    regime: str
    protocol: str
    sweeps: int
    rounds_per_sweep: float  # mean rounds (each round runs every arm once) over all points and families
    action_rate: float
    wrong_action: float  # tests/calibration._false_action: a raise or lower the truth does not support
    right_action: float  # power: share of the sweeps whose truth calls for an action that took a supported one
    stops: str


def _wrong(truth: np.ndarray, grid: np.ndarray, outcome: tuple[str, int | None]) -> bool:
    """calibration's false-action rule on one sweep."""
    sim = SimpleNamespace(truth=truth[None], grid=grid)
    result = SimpleNamespace(decision=SimpleNamespace(action=outcome[0], recommended_cap=outcome[1]))
    return _false_action(sim, 0, result, MARGIN)  # type: ignore[arg-type]


def _action_due(truth: np.ndarray, grid: np.ndarray) -> bool:
    """The truth calls for an action: fallback wins beyond δ at the largest Dff ≤ the cap in some family (lower), or
    fused beyond δ at the next measured Dff above it in every family (raise)."""
    below, above = np.flatnonzero(grid <= CURRENT_DEFAULT), np.flatnonzero(grid > CURRENT_DEFAULT)
    lower = bool(np.any(truth[:, below[-1]] < -MARGIN))
    raise_ = bool(len(above) and np.all(truth[:, above[0]] > MARGIN))
    return lower or raise_


def compare(regime: Regime, protocols: Mapping[str, Protocol], sweeps: int, seed: int) -> list[Row]:
    """Every protocol on the same `sweeps` truths and the same drift paths (a fresh generator per sweep, seeded
    alike for every protocol)."""
    truths, _ = draw_truth(regime, sweeps, np.random.default_rng(seed))
    slots = len(regime.grid) * 20 * 2 * regime.families
    rows = []
    for name, protocol in protocols.items():
        results = []
        for s in range(sweeps):
            source = DriftingRuns(regime, truths[s], np.random.default_rng([seed, s]), slots)
            results.append(protocol(source, regime.grid, regime.families))
        acted = [r.outcome[0] in ("raise", "lower") for r in results]
        wrong = [_wrong(truths[s], regime.grid, r.outcome) for s, r in enumerate(results)]
        due = [_action_due(truths[s], regime.grid) for s in range(sweeps)]
        right = [a and not w for a, w in zip(acted, wrong, strict=True)]
        stops = {}
        for r in results:
            stops[r.stop] = stops.get(r.stop, 0) + 1
        rows.append(
            Row(
                regime.name,
                name,
                sweeps,
                float(np.mean([r.rounds.sum() for r in results])),
                float(np.mean(acted)),
                float(np.mean(wrong)),
                float(np.sum(np.array(right) & np.array(due)) / max(sum(due), 1)),
                " ".join(f"{k}:{v}" for k, v in sorted(stops.items())),
            )
        )
    return rows


def _fixed(source: RunSource, grid: np.ndarray, families: int, rounds: int, passes: int = 2) -> Simulated:
    return fixed(source, grid, families, rounds, CURRENT_DEFAULT, passes=passes)


def protocols(rule: StopRule = StopRule(), fixed_rounds: tuple[int, ...] = (5, 10)) -> dict[str, Protocol]:
    """The fixed protocols and until-decided, all measured in `rule.passes` passes over the grid."""
    out: dict[str, Protocol] = {
        f"fixed {n}": functools.partial(_fixed, rounds=n, passes=rule.passes) for n in fixed_rounds
    }
    out["until-decided"] = lambda src, grid, fam: until_decided(src, grid, fam, rule, CURRENT_DEFAULT)
    return out


COARSE_DENSE = DENSE[::4]  # 16 points from 512 to 15872: a refined layer sweep's grid, thinned to keep this fast

REGIMES = (
    Regime("sparse 1 family", SPARSE),
    Regime("sparse 3 families", SPARSE, families=3),
    Regime("sparse flat, per-arm drift", SPARSE, drift="per_arm", flat=True),
    Regime("sparse 2 families, per-arm drift", SPARSE, families=2, drift="per_arm"),
    Regime("sparse 1 family, 15% outliers", SPARSE, outlier_rate=0.15),
    Regime("sparse 4 families", SPARSE, families=4),
    Regime("dense 1 family", COARSE_DENSE),
)


FIXED_ROUNDS = (3, 5, 10, 20)  # the fixed protocols until-decided is matched against

# issue 36: each regime with a curved truth (power) and a flat one (false actions), sparse and on the dense grid
MATCHED = (
    Regime("sparse 1 family", SPARSE),
    Regime("sparse 1 family, flat", SPARSE, flat=True),
    Regime("sparse 3 families", SPARSE, families=3),
    Regime("sparse 3 families, flat", SPARSE, families=3, flat=True),
    Regime("dense 1 family", COARSE_DENSE),
    Regime("dense 1 family, flat", COARSE_DENSE, flat=True),
)


def fixed_at_power(power: float, fixed_rows: list[Row]) -> float | None:
    """Rounds per sweep of a fixed protocol with `power`: linear between the two fixed round counts whose powers
    bracket it (power grows with rounds; a non-monotone stretch, Monte Carlo noise, is read at its first crossing);
    None outside the measured range (the table then says below the fewest or beyond the most)."""
    ordered = sorted(fixed_rows, key=lambda r: r.rounds_per_sweep)
    for low, high in zip(ordered, ordered[1:], strict=False):
        if low.right_action <= power <= high.right_action and high.right_action > low.right_action:
            share = (power - low.right_action) / (high.right_action - low.right_action)
            return low.rounds_per_sweep + share * (high.rounds_per_sweep - low.rounds_per_sweep)
        if power == low.right_action:
            return low.rounds_per_sweep
    return None


def matched(
    sweeps: int, seed: int = 36, regimes: tuple[Regime, ...] = MATCHED, rule: StopRule = StopRule()
) -> list[str]:
    """Until-decided beside the fixed protocol of equal power (issue 36: matched power, not matched rounds): per
    regime its rounds per sweep and power, the fixed rounds that reach that power (fixed_at_power over
    FIXED_ROUNDS) and the ratio; the false-action rate of both (a flat truth: every action is false). Every
    protocol is measured in `rule.passes` passes (1: the counterfactual without the two passes' drift bound)."""
    lines = [
        "| regime | until-decided rounds | power | false actions | stops | fixed n: power, false actions "
        "| fixed rounds at equal power | ratio |",
        "|---|--:|--:|--:|---|---|--:|--:|",
    ]
    for regime in regimes:
        rows = compare(regime, protocols(rule, FIXED_ROUNDS), sweeps, seed)
        until, fixed_rows = rows[-1], rows[:-1]
        wrong = "action_rate" if regime.flat else "wrong_action"
        fixed_words = "; ".join(
            f"{n}: {'—' if regime.flat else f'{r.right_action:.2f}'}, {getattr(r, wrong):.3f}"
            for n, r in zip(FIXED_ROUNDS, fixed_rows, strict=True)
        )
        at = None if regime.flat else fixed_at_power(until.right_action, fixed_rows)
        if regime.flat:
            equal, ratio = "—", "—"
        elif at is None:
            below = until.right_action < min(r.right_action for r in fixed_rows)
            equal, ratio = ("< fixed 3" if below else "> fixed 20"), "—"
        else:
            equal, ratio = f"{at:.1f}", f"{until.rounds_per_sweep / at:.2f}"
        lines.append(
            f"| {regime.name} | {until.rounds_per_sweep:.1f} | {'—' if regime.flat else f'{until.right_action:.2f}'} "
            f"| {getattr(until, wrong):.3f} | {until.stops} | {fixed_words} | {equal} | {ratio} |"
        )
    return lines


def floor(reps: int = 100, seed: int = 36) -> list[str]:
    """Why rounds at the deciding point alone buy little in two passes: the median standard error at Dff 8192 when
    every point has `others` rounds and it alone `deciding` (white noise of 1% per run, a curve crossing at 8000),
    and the drift bound's variance factor there. The bound on τ² (sweep_drift.drift_trend's τ² around the trend)
    rests on the mean of 1/n₁ + 1/n₂ over the family's points and is added to every point's variance whatever its
    own rounds: a floor only rounds at every point lower."""
    lines = ["| grid | rounds elsewhere | rounds at 8192 | median se at 8192 | its runs alone | bound factor |"]
    lines.append("|---|--:|--:|--:|--:|--:|")
    for name, grid in (("sparse", SPARSE), ("dense 16", COARSE_DENSE)):
        at = int(np.flatnonzero(grid == 8192)[0]) if 8192 in grid else int(np.argmin(abs(grid - 8192)))
        truth = curve_truth(grid, 8000.0)[None]
        for others, deciding in ((3, 3), (10, 10), (20, 20), (3, 10), (3, 20), (5, 20)):
            rng = np.random.default_rng(seed)
            se, factor = [], []
            for _ in range(reps):
                sweep = _Sweep(WhiteNoise(truth, NOISE, rng), 1, len(grid), deciding, passes=2)
                sweep.first_pass(others)
                sweep.measure(0, at, deciding - others)
                comparison = sweep.comparison()
                se.append(comparison.se[0, at])
                factor.append(np.broadcast_to(comparison.pass_bound, comparison.se.shape)[0, at])
            # nanmedian: 1 sweep in 100 had no estimate at 8192 with 3 rounds elsewhere and 10 there
            alone, bound = NOISE * np.sqrt(2 / deciding), np.nanmedian(factor)
            lines.append(f"| {name} | {others} | {deciding} | {np.nanmedian(se):.2%} | {alone:.2%} | {bound:.1f} |")
    return lines


def table(sweeps: int, names: tuple[str, ...] = ()) -> list[str]:
    """The protocols at matched rounds on REGIMES (those named in `names`; all by default)."""
    lines = [
        "| regime | protocol | rounds per sweep | action rate | wrong action | power | stops |",
        "|---|---|--:|--:|--:|--:|---|",
    ]
    for regime in (r for r in REGIMES if not names or r.name in names):
        for row in compare(regime, protocols(), sweeps, seed=29):
            lines.append(
                f"| {row.regime} | {row.protocol} | {row.rounds_per_sweep:.1f} | {row.action_rate:.3f} | "
                f"{row.wrong_action:.3f} | {row.right_action:.3f} | {row.stops} |"
            )
    return lines


def main(argv: list[str]) -> None:
    """`python -m tests.support.until_decided [SWEEPS] [REGIME …]`: the protocols at matched rounds (fixed 5 and 10;
    regimes by their REGIMES name, all by default);
    `--matched [--passes 1] [--looks K] [SWEEPS] [REGIME …]` (regimes by their MATCHED name, all by default): at
    matched power; `--floor [REPS]`: the standard error rounds at the deciding point alone reach in two passes."""
    parser = argparse.ArgumentParser(prog="python -m tests.support.until_decided", description=main.__doc__)
    parser.add_argument("--matched", action="store_true", help="until-decided beside the fixed protocol of equal power")
    parser.add_argument("--floor", action="store_true", help="the deciding point's standard error (floor)")
    parser.add_argument("--passes", type=int, default=2, choices=(1, 2), help="passes over the grid (1: no bound)")
    parser.add_argument("--looks", type=int, default=StopRule.looks, help="until-decided's K looks")
    parser.add_argument("sweeps", type=int, nargs="?", help="sweeps per regime (--floor: repetitions)")
    parser.add_argument("regimes", nargs="*", help="the regimes to run, by name (--matched: MATCHED's, else REGIMES')")
    args = parser.parse_args(argv)
    if args.floor:
        print("\n".join(floor(args.sweeps or 100)))
    elif args.matched:
        chosen = tuple(r for r in MATCHED if not args.regimes or r.name in args.regimes)
        rule = StopRule(passes=args.passes, looks=args.looks)
        print("\n".join(matched(args.sweeps or 100, regimes=chosen, rule=rule)))
    else:
        print("\n".join(table(args.sweeps or 200, tuple(args.regimes))))


if __name__ == "__main__":
    main(sys.argv[1:])
