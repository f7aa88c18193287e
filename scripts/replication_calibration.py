"""What replication buys (issue 37), on SYNTHETIC sweeps (tests/support/simulation.py): per regime, the wrong-action
rate and the power of one session's decision against a move confirmed by two sessions — two sweeps of the same truth
with independent noise and drift, moved only when both decide the same direction
(harness.analysis.comparison.replication), to the more conservative (smaller) of their caps. Nothing is measured and
nothing is written.

    .venv/bin/python scripts/replication_calibration.py                        # 5 rounds, 200 sweeps, four regimes
    .venv/bin/python scripts/replication_calibration.py --rounds 3 --sweeps 100 --regime "sparse flat"
"""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: tests.support.calibration

from tests.support.calibration import REGIMES, print_regime_table, right_action, run_engine, wrong_action  # noqa: E402
from tests.support.simulation import draw_truth, simulate  # noqa: E402

DEFAULT_REGIMES = ("sparse curved", "sparse per-arm drift", "sparse flat", "sparse flat 15% outliers")


def confirmed(a, b):
    """Session a's result, moved only when session b decides the same direction (to the smaller cap)."""
    if a.decision.action == "keep" or a.decision.action != b.decision.action:
        return replace(a, decision=replace(a.decision, action="keep", recommended_cap=None))
    caps = [c for c in (a.decision.recommended_cap, b.decision.recommended_cap) if c is not None]
    return replace(a, decision=replace(a.decision, recommended_cap=min(caps) if caps else None))


def score(name: str, rounds: int, sweeps: int, seed: int) -> str:
    regime = REGIMES[name]
    truth = draw_truth(regime, sweeps, np.random.default_rng(seed))
    first, second = (simulate(regime, rounds, sweeps, seed + k, truth) for k in (1, 2))
    one, two = run_engine(first, rounds), run_engine(second, rounds)
    both = [confirmed(a, b) for a, b in zip(one, two, strict=True)]
    right = [right_action(first, s) for s in range(sweeps)]
    moves = [s for s in range(sweeps) if right[s] != "keep"]
    cells = []
    for results in (one, both):
        wrong = float(np.mean([wrong_action(first, s, r) for s, r in enumerate(results)]))
        power = float(np.mean([results[s].decision.action == right[s] for s in moves])) if moves else math.nan
        error = math.sqrt(max(wrong * (1 - wrong), 0.0) / sweeps)
        cells.append(f"{wrong:6.3f} ±{error:5.3f} {power:6.3f}")
    return f"{name:28} {rounds:>6} {sweeps:>6} {len(moves):>5}   " + "   ".join(cells)


def main() -> None:
    print_regime_table(
        __doc__,
        DEFAULT_REGIMES,
        f"{'regime':28} {'rounds':>6} {'sweeps':>6} {'moves':>5}   "
        "one session: wrong ±mc power   replicated: wrong ±mc power",
        score,
    )


if __name__ == "__main__":
    main()
