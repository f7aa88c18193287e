"""Calibration of the decision engine on SYNTHETIC sweeps with drawn truths (tests/simulation.py): curved truths on
sparse (mlxcel-like) and dense (layer) grids, several families, drift the arms do not share, 15% outliers, runs that
were not interleaved, flat truths. Replicate counts are modest; every bound allows 2 Monte-Carlo standard errors.
`python -m tests.calibration` prints the whole table."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from harness.analysis.decision import family_curve, find_crossover
from harness.analysis.inputs import LoadedInput
from harness.analysis.pipeline import Options, analyse
from harness.analysis.stats import estimate_family, rounds_to_decide, t_quantile
from tests.calibration import REGIMES, Score, check_pass_rate, score
from tests.simulation import SPARSE, Regime, as_samples, simulate

SWEEPS = {"sparse": 300, "dense": 120}


def _score(name: str, n: int) -> Score:
    sweeps = SWEEPS["dense" if name.startswith("dense") else "sparse"]
    return score(REGIMES[name], n, sweeps, seed=zlib.crc32(f"{name} {n}".encode()) % 10_000)


def _at_least(sc: Score, share: float, target: float) -> None:
    assert share >= target - 2 * sc.mc_error(target), (share, target, sc)


@pytest.fixture(scope="module")
def curved() -> dict[tuple[str, int], Score]:
    return {(name, n): _score(name, n) for name in ("sparse curved", "dense curved") for n in (3, 10, 40)}


@pytest.mark.parametrize("n", [3, 10, 40])
@pytest.mark.parametrize("grid", ["sparse", "dense"])
def test_crossover_intervals_hold_on_curved_truths_at_every_n(curved, grid, n):
    """Between measured points the true curve bends; the interval must hold as rounds grow, not shrink onto the
    straight line's crossing (the earlier interval: 0.96 at n = 3, 0.02 at n = 40 on the GB10 grid)."""
    sc = curved[f"{grid} curved", n]
    _at_least(sc, sc.crossover_coverage, 0.93)
    _at_least(sc, sc.point_coverage, 0.93)


def test_crossover_coverage_does_not_fall_as_rounds_grow(curved):
    for grid in ("sparse", "dense"):
        few, many = curved[f"{grid} curved", 3], curved[f"{grid} curved", 40]
        assert many.crossover_coverage >= few.crossover_coverage - 2 * few.mc_error(few.crossover_coverage)


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("sparse flat", 3),
        ("sparse flat", 10),
        ("dense flat 4 families", 5),
        ("sparse flat 15% outliers", 10),
        ("sparse flat not interleaved", 3),
        ("sparse flat not interleaved", 10),
    ],
)
def test_a_flat_truth_almost_never_moves_the_cap(name, n):
    sc = _score(name, n)
    assert sc.action_rate <= 0.03 + 2 * sc.mc_error(0.03), sc


@pytest.mark.parametrize(
    "name", ["dense 4 families", "sparse 15% outliers", "sparse not interleaved", "sparse per-arm drift"]
)
def test_hard_regimes_keep_crossover_coverage_and_few_false_actions(name):
    sc = _score(name, 10)
    _at_least(sc, sc.crossover_coverage, 0.93)
    assert sc.false_action <= 0.05 + 2 * sc.mc_error(0.05), sc


def test_a_raise_happens_when_every_family_clearly_wins_at_the_cap():
    """4 families, crossovers 11000–13000, a = .08, cap 8192, 10 rounds: the raise needs every family (an
    intersection-union test, no Bonferroni); the earlier engine raised in 55% of such sweeps."""
    sc = _score("dense 4 families win at 8192", 10)
    _at_least(sc, sc.raise_rate, 0.80)
    assert sc.false_action <= 0.05, sc


@pytest.mark.parametrize(
    "name", ["sparse per-arm drift", "dense per-arm drift", "sparse fused-only drift", "sparse not interleaved"]
)
def test_drift_keeps_per_point_coverage_at_n10(name):
    """Drift the arms do not share (each arm's own, the fused path's alone, or runs not interleaved under shared
    drift): the drift model's widening holds per-point coverage at 0.90 (issue 18 item 9; the batch-means widening
    reached 0.79–0.82, no widening 0.69–0.75)."""
    sc = _score(name, 10)
    _at_least(sc, sc.point_coverage, 0.90)


def test_outliers_at_3_rounds_rarely_move_the_cap_on_a_flat_truth():
    """15% of runs slowed by 10–20%, 3 rounds: at most 3% of sweeps move the cap (issue 18 item 11; the earlier
    engine: 6.0%, before split arms lost their interval: 3.7%; 2.2% ± 0.2% on 4000 sweeps). An arm with all its
    runs slowed alike remains invisible at one point."""
    sc = score(REGIMES["sparse flat 15% outliers"], 3, 2000, seed=303)  # 2000 sweeps: the rate is near 2–3%
    assert sc.action_rate <= 0.03, sc


def test_same_truth_sweep_pairs_pass_check():
    """`check`'s decision rule on two sweeps of the same drawn truth (sparse grid, 5 rounds): ≥ 95% pass."""
    rate = check_pass_rate(Regime("pairs", SPARSE), rounds=5, pairs=150, seed=31)
    assert rate >= 0.95 - 2 * np.sqrt(0.95 * 0.05 / 150), rate


@pytest.mark.parametrize(("ratio", "sigma"), [(1.03, 0.02), (0.975, 0.015), (1.02, 0.01)])
def test_the_rounds_hint_gives_an_80_percent_chance_of_a_decision(ratio, sigma):
    """SYNTHETIC paired differences with a known ratio and per-round sd: the suggested rounds decide (the interval
    clears the nearest margin edge) in about 80% of simulated sweeps, not 50%."""
    theta = np.log(ratio)
    n0 = 3
    needed = rounds_to_decide(theta, sigma / np.sqrt(n0), n0 - 1, n0)
    assert needed is not None and needed > n0
    rng = np.random.default_rng(int(needed))
    d = rng.normal(theta, sigma, size=(4000, needed))
    mean, se = d.mean(axis=1), d.std(axis=1, ddof=1) / np.sqrt(needed)
    half = t_quantile(0.95, needed - 1) * se
    edge = np.log1p(0.01 if ratio > 1 else -0.01)
    decided = (mean - half > edge) if ratio > 1 else (mean + half < edge)
    assert 0.76 <= decided.mean() <= 0.88, (needed, decided.mean())


def test_the_summary_runs_the_same_estimate_as_the_simulation():
    """The calibrated array path and `moecal summarize` on the same sweep (as samples.csv rows) agree."""
    regime = Regime("one", SPARSE)
    sim = simulate(regime, 5, 3, seed=7)
    comparison, _ = estimate_family(sim.fused, sim.fallback, np.ones(sim.truth.shape, bool))
    for sweep in range(3):
        analysis = analyse(LoadedInput(as_samples(sim, sweep), None, {}), Options(current_default=8192))
        summary = analysis.summary
        assert summary["dff"].tolist() == SPARSE.tolist()
        np.testing.assert_allclose(summary["ln_estimate"], comparison.theta[sweep, 0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(summary["se"], comparison.se[sweep, 0], rtol=1e-9)
        curve = family_curve(summary, np.arange(len(summary)), "linear")[0]
        assert analysis.result.crossover == find_crossover(curve)
