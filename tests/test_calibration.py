"""Calibration of the decision engine on SYNTHETIC sweeps with a known truth (tests/simulation.py): DESIGN §7's
promises, checked per regime of 3, 5 and 10 runs per arm with shared drift and 1-in-20 outliers at −15%."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis import Options, analyse
from harness.crossover import Curve, find_crossover
from harness.inputs import LoadedInput
from harness.stats import estimate_family
from tests.calibration import Score, score
from tests.simulation import DFFS, FLAT, GB10_LIKE, as_samples, simulate

SWEEPS = 1000
REGIMES = (3, 5, 10)


@pytest.fixture(scope="module")
def scores() -> dict[tuple[str, int], Score]:
    out = {}
    for n in REGIMES:
        out["flat", n] = score(FLAT, n, SWEEPS, seed=100 + n)
        out["gb10", n] = score(GB10_LIKE, n, SWEEPS, seed=200 + n)
    return out


@pytest.mark.parametrize("n", REGIMES)
@pytest.mark.parametrize("truth", ["flat", "gb10"])
def test_per_point_intervals_hold_their_coverage(scores, n, truth):
    assert scores[truth, n].point_coverage >= 0.93


@pytest.mark.parametrize("n", REGIMES)
def test_crossover_interval_holds_its_coverage(scores, n):
    assert scores["gb10", n].crossover_coverage >= 0.93


@pytest.mark.parametrize("n", REGIMES)
def test_a_flat_truth_almost_never_moves_the_cap(scores, n):
    assert scores["flat", n].action_rate <= 0.03


@pytest.mark.parametrize("n", REGIMES)
def test_crossover_estimate_is_no_worse_than_plain_interpolation(scores, n):
    gb10 = scores["gb10", n]
    assert gb10.median_error <= gb10.plain_median_error


def test_the_summary_runs_the_same_estimate_as_the_simulation():
    """The calibrated array path and `moecal summarize` on the same sweep (as samples.csv rows) agree."""
    sim = simulate(GB10_LIKE, 3, 4, seed=7)
    comparison, _ = estimate_family(sim.fused, sim.fallback, np.ones(sim.fused.shape[:2], bool))
    for sweep in range(4):
        analysis = analyse(LoadedInput(as_samples(sim, sweep), None, {}), Options(current_default=8192))
        summary = analysis.summary
        assert summary["dff"].tolist() == DFFS.tolist()
        np.testing.assert_allclose(summary["ln_estimate"], comparison.theta[sweep], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(summary["se"], comparison.se[sweep], rtol=1e-9)
        keep = np.isfinite(comparison.theta[sweep])
        arrays = (comparison.theta, comparison.se, comparison.df)
        curve = Curve(DFFS[keep].astype(float), *(a[sweep, keep] for a in arrays))
        assert analysis.result.crossover == find_crossover(curve)
