"""SYNTHETIC sweeps with a known truth, for calibrating the decision engine (DESIGN §7). Nothing here was measured;
nothing is written anywhere (arrays in memory only).

One simulated sweep measures a grid of Dff points one after another, each in n interleaved rounds of the two arms
with the arm order rotating every round, like `moecal sweep`. Per run:

    ln tok/s = level(point) + ln ratio(point) [fused only] + drift(time slot) + noise + outlier

- drift: shared by every run in time order, an AR(1) (ρ = 0.9, innovations 0.5%) plus a linear trend of −3% over
  the whole sweep (a machine warming up) — rotation and pairing must cope with it;
- noise: 1% lognormal per run (the spread of the GB10 sweep in DESIGN §6);
- outliers: one run in 20 loses 15% (a background task).

Truths: FLAT (fused == fallback everywhere) and GB10_LIKE (a shallow crossing: 1.04 at Dff 6400 → 0.98 at 8192,
ln ratio linear in Dff between grid points, so linear interpolation is exact and its crossing is CROSSOVER_TRUE).
Everything is vectorised over sweeps: arrays (sweeps, points, rounds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from harness.results import SAMPLE_COLUMNS

DFFS = np.array([1024, 2048, 4096, 6400, 8192, 14336])
FLAT = np.zeros(len(DFFS))
GB10_LIKE = np.log([1.16, 1.12, 1.07, 1.04, 0.98, 0.975])
CROSSOVER_TRUE = float(6400 + np.log(1.04) / (np.log(1.04) - np.log(0.98)) * (8192 - 6400))
CURRENT_DEFAULT = 8192
NOISE = 0.01
AR_RHO = 0.9
AR_INNOVATION = 0.005
TREND = -0.03
OUTLIER_RATE = 1 / 20
OUTLIER_DROP = np.log(0.85)


@dataclass(frozen=True)
class SimulatedSweeps:
    """ln tok/s per arm, (sweeps, points, rounds), and which rounds ran the fused arm first."""

    fused: np.ndarray
    fallback: np.ndarray
    fused_first: np.ndarray  # (rounds,) bool


def simulate(truth: np.ndarray, rounds: int, sweeps: int, seed: int) -> SimulatedSweeps:
    """`sweeps` independent sweeps of the grid with true ln ratios `truth` (module docstring)."""
    rng = np.random.default_rng(seed)
    points = len(truth)
    slots = points * rounds * 2
    innovations = rng.normal(0.0, AR_INNOVATION, size=(sweeps, slots))
    start = rng.normal(0.0, AR_INNOVATION / np.sqrt(1 - AR_RHO**2), size=(sweeps, 1))
    drift = lfilter([1.0], [1.0, -AR_RHO], innovations, axis=1) + start * AR_RHO ** np.arange(1, slots + 1)
    drift += TREND * np.arange(slots) / slots
    drift = drift.reshape(sweeps, points, rounds, 2)
    fused_first = np.arange(rounds) % 2 == 1  # rotate: fallback first in even rounds, fused first in odd ones
    fused_slot = np.broadcast_to(np.where(fused_first, 0, 1)[None, None, :, None], (sweeps, points, rounds, 1))
    fused_drift = np.take_along_axis(drift, fused_slot, 3)
    fallback_drift = np.take_along_axis(drift, 1 - fused_slot, 3)
    level = np.log(1e5 / DFFS[:points])[None, :, None]

    def arm(drift_part: np.ndarray, effect: np.ndarray) -> np.ndarray:
        noise = rng.normal(0.0, NOISE, size=(sweeps, points, rounds))
        outliers = np.where(rng.random((sweeps, points, rounds)) < OUTLIER_RATE, OUTLIER_DROP, 0.0)
        return level + effect + drift_part[..., 0] + noise + outliers

    return SimulatedSweeps(arm(fused_drift, truth[None, :, None]), arm(fallback_drift, 0.0), fused_first)


def as_samples(sim: SimulatedSweeps, sweep: int) -> pd.DataFrame:
    """One simulated sweep as the samples.csv rows `moecal sweep` would have written (a layer workload)."""
    rows = []
    points, rounds = sim.fused.shape[1:]
    for p in range(points):
        for r in range(rounds):
            order = ("fused", "fallback") if sim.fused_first[r] else ("fallback", "fused")
            for position, arm in enumerate(order):
                y = (sim.fused if arm == "fused" else sim.fallback)[sweep, p, r]
                rows.append(
                    {
                        "run_id": "simulated",
                        "backend": "cpu",
                        "device": "simulated device",
                        "workload": "layer",
                        "model": "simulated",
                        "quant_mode": "affine",
                        "d_model": 4096,
                        "dff": int(DFFS[p]),
                        "n_experts": 8,
                        "top_k": 2,
                        "bits": 4,
                        "group_size": 64,
                        "dtype": "float16",
                        "arm": arm,
                        "cap": "",
                        "round": r,
                        "position": position,
                        "tokens": 100,
                        "seconds": 100 / float(np.exp(y)),
                        "tok_s": float(np.exp(y)),
                        "status": "ok",
                        **{c: "" for c in ("rel_rms", "tokens_agree", "dispatch_ok", "error", "timestamp")},
                    }
                )
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
