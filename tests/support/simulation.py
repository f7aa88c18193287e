"""SYNTHETIC sweeps with a known truth, for calibrating the decision engine (docs/design.md §7). Nothing here was
measured; nothing is written anywhere (arrays in memory only).

Truths are drawn, not chosen: each family of each sweep gets its own curve

    ln ratio(d) = a · (C/d − 1)        (fused wins below the crossover C, loses above it; bends between points)

with C and a drawn uniformly from the regime's ranges, so linear interpolation between measured points is never
exact, and no single curve can be tuned to. FLAT regimes have ln ratio = 0 everywhere.

One simulated sweep measures each family's grid one point after another, each point in n rounds. Interleaved
(like `moecal sweep`): the two arms alternate within a round and the arm order rotates every round. Not interleaved
(like an imported mlxcel CSV): every fallback run of a point, then every fused run. Per run:

    ln tok/s = level(point) + ln ratio(point) [fused only] + drift(time slot, arm) + noise + outlier

- noise: 1% lognormal per run;
- shared drift (every regime): an AR(1) over time slots (ρ = 0.9, innovations 0.5%) plus a linear trend of −3% over
  the sweep (a machine warming up), felt by both arms alike;
- per-arm drift: each arm also gets its own, independent AR(1) (ρ = 0.9, innovations 0.5%; a regime's `own_rho`
  makes it slower at the same stationary size, about 1.15%: ρ = 0.98 wanders over tens of runs, so a point's runs
  share most of their offset and only the spread between points shows it; `own_scale` makes it larger);
- fused-only drift: the fused arm alone gets one (the A/A arm, fallback against fallback, cannot see it);
- a step (`step`) or a bend (`bend`, quadratic in time) of the fused arm's level over the sweep;
- outliers: a share of runs (1 in 20, or 15% in the outlier regime) loses 10–20% (a background task).

Everything is vectorised: arrays (sweeps, families, points, rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.signal import lfilter

from harness.runs.formats import SAMPLE_COLUMNS

SPARSE = np.array([768, 1792, 2880, 6400, 8192, 14336])  # the Dff of mlxcel's published GB10 sweeps
DENSE = np.arange(512, 16385, 256)  # a refined layer sweep's grid (refine_grid 256)
NOISE = 0.01
AR_RHO = 0.9
AR_INNOVATION = 0.005
TREND = -0.03
OUTLIER_DROP = (0.10, 0.20)


@dataclass(frozen=True)
class Regime:
    """How one batch of synthetic sweeps is generated (module docstring)."""

    name: str
    grid: np.ndarray
    families: int = 1
    drift: str = "shared"  # shared | per_arm | fused_only
    interleaved: bool = True
    outlier_rate: float = 1 / 20
    flat: bool = False
    crossover: tuple[float, float] = (2000.0, 13000.0)  # C ~ uniform
    slope: tuple[float, float] = (0.03, 0.12)  # a ~ uniform
    own_rho: float = AR_RHO  # per-slot correlation of each arm's own drift (per_arm, fused_only)
    own_scale: float = 1.0  # its stationary size, as a multiple of the shared drift's (about 1.15%)
    # forward: each point's rounds together, points in grid order; two_passes: the first ⌊n/2⌋ rounds of every point
    # in grid order, then the rest again in grid order (each point measured twice, half a sweep apart); files:
    # mlxcel's bench_decode.sh block order, not interleaved: run r is a fallback file (every point in grid order)
    # then a fused file, one run per point and arm (import-mlxcel --fallback/--fused, one pair per round);
    # arm_files: every fallback file, then every fused file (the user ran one setting's runs, then the other's)
    order: str = "forward"
    # files: whether the import records each file pair as a pass (`pass` column); False: as before issue 36
    file_passes: bool = True
    step: float = 0.0  # a step change of the fused arm's level half way through the sweep (ln units)
    # a drift of the fused arm that bends: bend·(slot/slots)^bend_power (ln units at the sweep's end); squared, more
    # than a linear trend follows (sweep_drift.drift_trend steps up an order); cubed, more than the sparse grid's
    # quadratic follows (its residual test: unusable; issue 36)
    bend: float = 0.0
    bend_power: int = 2
    # curved: a·(C/d − 1); step: fused wins by a constant `win` up to C and loses by it after (issue 36)
    shape: str = "curved"
    win: float = math.log(1.03)


@dataclass(frozen=True)
class SimulatedSweeps:
    """ln tok/s per arm (sweeps, families, points, rounds), the true ln ratios (sweeps, families, points) and the
    true crossover per family (sweeps, families; NaN for a flat truth)."""

    fused: np.ndarray
    fallback: np.ndarray
    truth: np.ndarray
    crossover: np.ndarray
    grid: np.ndarray
    interleaved: bool
    first_pass: int | None = None  # rounds of each point in the first pass (two_passes); None: one pass
    by_pass: bool = False  # not interleaved, but each pass holds one run of each arm: paired by pass (files)


def draw_truth(regime: Regime, sweeps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(ln ratios (sweeps, families, points), crossovers (sweeps, families)) drawn from the regime's ranges."""
    shape = (sweeps, regime.families)
    if regime.flat:
        return np.zeros((*shape, len(regime.grid))), np.full(shape, np.nan)
    crossover = rng.uniform(*regime.crossover, size=shape)
    if regime.shape == "step":
        return np.where(regime.grid < crossover[..., None], regime.win, -regime.win), crossover
    slope = rng.uniform(*regime.slope, size=shape)
    return slope[..., None] * (crossover[..., None] / regime.grid - 1.0), crossover


def _ar1(rng: np.random.Generator, shape: tuple[int, ...], rho: float = AR_RHO) -> np.ndarray:
    """Stationary AR(1) paths along the last axis, of the stationary size of ρ = AR_RHO with 0.5% innovations."""
    size = AR_INNOVATION / np.sqrt(1 - AR_RHO**2)
    innovations = rng.normal(0.0, size * np.sqrt(1 - rho**2), size=shape)
    start = rng.normal(0.0, size, size=(*shape[:-1], 1))
    return lfilter([1.0], [1.0, -rho], innovations, axis=-1) + start * rho ** np.arange(1, shape[-1] + 1)


def simulate(
    regime: Regime, rounds: int, sweeps: int, seed: int, truth: tuple[np.ndarray, np.ndarray] | None = None
) -> SimulatedSweeps:
    """`sweeps` independent sweeps of the regime (truths drawn unless given as (ln ratios, crossovers))."""
    rng = np.random.default_rng(seed)
    ln_ratio, crossover = truth if truth is not None else draw_truth(regime, sweeps, rng)
    families, points = regime.families, len(regime.grid)
    slots = points * rounds * 2
    shape = (sweeps, families, slots)
    shared = _ar1(rng, shape) + TREND * np.arange(slots) / slots

    def own_drift(applies: bool) -> np.ndarray | float:
        return regime.own_scale * _ar1(rng, shape, regime.own_rho) if applies else 0.0

    own = {
        "fused": own_drift(regime.drift in ("per_arm", "fused_only")),
        "fallback": own_drift(regime.drift == "per_arm"),
    }
    slot = np.arange(slots).reshape(points, rounds, 2)
    if regime.order == "two_passes":
        slot = _two_passes(points, rounds)
    if regime.order == "files":  # run r: the fallback file over the grid, then the fused file
        files = np.arange(slots).reshape(rounds, 2, points)
        fallback_slot, fused_slot = files[:, 0, :].T, files[:, 1, :].T
    elif regime.order == "arm_files":  # every fallback file over the grid, then every fused file
        files = np.arange(slots).reshape(2, rounds, points)
        fallback_slot, fused_slot = files[0].T, files[1].T
    elif regime.interleaved:
        fused_first = np.arange(rounds) % 2 == 1  # rotate: fallback first in even rounds, fused first in odd ones
        fused_slot = np.where(fused_first[None, :], slot[..., 0], slot[..., 1])
        fallback_slot = np.where(fused_first[None, :], slot[..., 1], slot[..., 0])
    else:  # every fallback run of a point, then every fused run
        block = np.arange(points * 2 * rounds).reshape(points, 2, rounds)
        fallback_slot, fused_slot = block[:, 0, :], block[:, 1, :]
    level = np.log(1e5 / regime.grid)[None, None, :, None]

    def arm(name: str, slots_of: np.ndarray, effect: np.ndarray | float) -> np.ndarray:
        drift = shared + own[name]
        noise = rng.normal(0.0, NOISE, size=(sweeps, families, points, rounds))
        hit = rng.random((sweeps, families, points, rounds)) < regime.outlier_rate
        outliers = np.where(hit, np.log1p(-rng.uniform(*OUTLIER_DROP, size=hit.shape)), 0.0)
        return level + effect + drift[..., slots_of] + noise + outliers

    step = np.where(np.arange(slots) >= slots // 2, regime.step, 0.0)[fused_slot]
    step = step + regime.bend * (np.arange(slots) / slots)[fused_slot] ** regime.bend_power
    fused = arm("fused", fused_slot, ln_ratio[..., None] + step)
    fallback = arm("fallback", fallback_slot, 0.0)
    by_pass = regime.order in ("files", "arm_files") and regime.file_passes
    first_pass = rounds // 2 if regime.order == "two_passes" or by_pass else None
    interleaved = regime.interleaved and regime.order not in ("files", "arm_files")
    return SimulatedSweeps(fused, fallback, ln_ratio, crossover, regime.grid, interleaved, first_pass, by_pass)


def _two_passes(points: int, rounds: int) -> np.ndarray:
    """Time slots (points, rounds, 2) of a sweep that measures the first ⌊n/2⌋ rounds of every point in grid order,
    then the remaining rounds of every point again in grid order. Not in reverse order: a reversed second pass
    visits the last points (the largest Dff, next to the cap) twice in a row, where a second visit shows nothing."""
    first = rounds // 2
    out = np.empty((points, rounds, 2), int)
    t = 0
    for p, r in [(p, r) for p in range(points) for r in range(first)] + [
        (p, r) for p in range(points) for r in range(first, rounds)
    ]:
        out[p, r] = (t, t + 1)
        t += 2
    return out


def as_samples(sim: SimulatedSweeps, sweep: int, family: int = 0) -> pd.DataFrame:
    """One simulated family sweep as the samples.csv rows `moecal sweep` would have written (a layer workload)."""
    rows = []
    points, rounds = sim.fused.shape[2:]
    for p in range(points):
        for r in range(rounds):
            order = ("fused", "fallback") if r % 2 == 1 else ("fallback", "fused")
            for position, arm in enumerate(order):
                y = (sim.fused if arm == "fused" else sim.fallback)[sweep, family, p, r]
                rows.append(
                    {
                        "run_id": "simulated",
                        "backend": "cpu",
                        "device": "simulated device",
                        "workload": "layer",
                        "model": "simulated",
                        "quant_mode": "affine",
                        "d_model": 4096,
                        "dff": int(sim.grid[p]),
                        "n_experts": 8,
                        "top_k": 2,
                        "bits": 4,
                        "group_size": 64,
                        "dtype": "float16",
                        "arm": arm,
                        "cap": "",
                        "round": r,
                        "position": position if sim.interleaved else "",
                        "tokens": 100,
                        "seconds": 100 / float(np.exp(y)),
                        "tok_s": float(np.exp(y)),
                        "status": "ok",
                        "pass": "" if sim.first_pass is None else (1 if r < sim.first_pass else 2),
                        **{c: "" for c in ("rel_rms", "tokens_agree", "dispatch_ok", "error", "timestamp")},
                    }
                )
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
