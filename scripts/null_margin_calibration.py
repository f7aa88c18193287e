"""What `measure.margin: from-null` does to decisions (issue 37), on SYNTHETIC sweeps (tests/support/simulation.py):
each sweep's margin is derived as ADR 0007 derives its threshold (harness.analysis.points.null_margin: the widest A/A
per-round delta over every point and round, outlier rounds left out, rounded up to the next 0.5%), the A/A pairs drawn
with the same noise, drift and outliers as the sweep (its flat twin); the engine then decides at that margin, against
the fixed 1% default. Wrong-action rate (judged against the truth at 1%) and power (among truths that call for a move).
Nothing is measured and nothing is written.

    .venv/bin/python scripts/null_margin_calibration.py                    # 5 rounds, 200 sweeps, three regimes
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support.calibration

from harness.analysis.points.null_margin import kept_deltas, round_up  # noqa: E402
from harness.policy import Policy  # noqa: E402
from tests.support.calibration import REGIMES, print_regime_table, right_action, run_engine, wrong_action  # noqa: E402
from tests.support.simulation import SimulatedSweeps, draw_truth, simulate  # noqa: E402

DEFAULT_REGIMES = ("sparse curved", "sparse per-arm drift", "sparse 15% outliers")


def _subset(sim: SimulatedSweeps, index: np.ndarray) -> SimulatedSweeps:
    return replace(
        sim,
        fused=sim.fused[index],
        fallback=sim.fallback[index],
        truth=sim.truth[index],
        crossover=sim.crossover[index],
    )


def _score(sim: SimulatedSweeps, results: list) -> tuple[float, float]:
    right = [right_action(sim, s) for s in range(len(results))]
    moves = [s for s, want in enumerate(right) if want != "keep"]
    wrong = float(np.mean([wrong_action(sim, s, r) for s, r in enumerate(results)]))
    power = float(np.mean([results[s].decision.action == right[s] for s in moves])) if moves else float("nan")
    return wrong, power


def score(name: str, rounds: int, sweeps: int, seed: int) -> str:
    regime = REGIMES[name]
    truth = draw_truth(regime, sweeps, np.random.default_rng(seed))
    sim = simulate(regime, rounds, sweeps, seed + 1, truth)
    twin = simulate(replace(regime, flat=True), rounds, sweeps, seed + 2)  # A/A pairs: fused = fallback in truth
    widest = [np.nanmax(kept_deltas(twin.fallback[s], twin.fused[s])) for s in range(sweeps)]
    margins = np.array([round_up(w) / 100 for w in widest])
    fixed = _score(sim, run_engine(sim, rounds))
    derived: list = [None] * sweeps
    for margin in np.unique(margins):
        index = np.flatnonzero(margins == margin)
        part = run_engine(_subset(sim, index), rounds, policy=Policy(margin=float(min(margin, 0.49))))
        for s, result in zip(index, part, strict=True):
            derived[s] = result
    null = _score(sim, derived)
    low, mid, high = np.percentile(margins * 100, [10, 50, 90])
    return (
        f"{name:24} {mid:5.1f}% ({low:.1f}–{high:.1f})   fixed 1%: wrong {fixed[0]:.3f} power {fixed[1]:.3f}"
        f"   from-null: wrong {null[0]:.3f} power {null[1]:.3f}"
    )


def main() -> None:
    print_regime_table(__doc__, DEFAULT_REGIMES, f"{'regime':24} derived margin, median (10–90%)", score)


if __name__ == "__main__":
    main()
