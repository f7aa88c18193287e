"""`moecal compare` / `moecal history`: the crossover shift and per-point changes between two runs.

Real data: tests/fixtures/gb10-sweep-2026-07-03.csv is mlxcel's published GB10 sweep
(docs/benchmark_results/fused-moe-decode-dff-sweep-gb10-2026-07-03.csv in github.com/chiuchris/mlxcel, MIT,
copied unchanged below a two-line source header); tests/fixtures/gb10-design-example.csv is the 07-10 sweep
of the design example.
Calibration: SYNTHETIC sweeps (tests/support/simulation.py) with a known truth, analysed exactly as a run is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.comparison.two_runs import crossover_shift, first_crossings, point_change
from harness.analysis.decision.curve import Curve
from harness.analysis.points.stats import estimate_family
from tests.support.helpers import cli
from tests.support.simulation import Regime, simulate

FIXTURES = Path(__file__).parents[2] / "fixtures"
JULY_03 = FIXTURES / "gb10-sweep-2026-07-03.csv"
JULY_10 = FIXTURES / "gb10-design-example.csv"


# a fixed GB10-like truth (a shallow crossing: 1.04 at Dff 6400 → 0.98 at 8192), SYNTHETIC, on the simulator of
# tests/support/simulation.py without outliers: the shift test is about the crossover's noise, not about screening
DFFS = np.array([1024, 2048, 4096, 6400, 8192, 14336])
GB10_LIKE = np.log([1.16, 1.12, 1.07, 1.04, 0.98, 0.975])
REGIME = Regime("compare", DFFS, outlier_rate=0.0)


def _curves(truth: np.ndarray, rounds: int, sweeps: int, seed: int) -> list[Curve]:
    ln_ratio = np.broadcast_to(truth, (sweeps, 1, len(DFFS)))
    sim = simulate(REGIME, rounds, sweeps, seed, truth=(ln_ratio, np.full((sweeps, 1), np.nan)))
    fused, fallback = sim.fused[:, 0], sim.fallback[:, 0]
    comparison, _ = estimate_family(fused, fallback, np.ones(fused.shape[:2], bool))
    return [
        Curve(dffs=DFFS.astype(float), theta=comparison.theta[s], se=comparison.se[s], df=comparison.df[s])
        for s in range(sweeps)
    ]


def _shift_rates(truth_b: np.ndarray, pairs: int = 150, rounds: int = 5) -> tuple[float, float, float]:
    """(share 'within noise', share moved down, coverage of the true shift) over simulated pairs A (GB10_LIKE), B."""
    a, b = _curves(GB10_LIKE, rounds, pairs, seed=11), _curves(truth_b, rounds, pairs, seed=12)
    truth = first_crossings(DFFS.astype(float), np.vstack([GB10_LIKE, truth_b]))
    true_shift = truth[1] / truth[0] - 1
    results = [crossover_shift("sim", x, y, 0.95, draws=800, seed=i) for i, (x, y) in enumerate(zip(a, b, strict=True))]
    usable = [r for r in results if r.shift is not None]
    within = np.mean([r.verdict == "within noise" for r in usable])
    down = np.mean([r.verdict == "moved down" for r in usable])
    covered = np.mean([r.ci_low <= true_shift <= r.ci_high for r in usable])
    return float(within), float(down), float(covered)


def test_no_change_reads_within_noise_at_least_95_percent() -> None:
    """Two runs of one truth: the shift interval holds 0 in ≥ 95% of pairs (false-action rate ≤ 5%)."""
    within, down, covered = _shift_rates(GB10_LIKE)
    print(f"no change: within noise {within:.3f}, false 'moved' {1 - within:.3f}, coverage {covered:.3f}")
    assert within >= 0.95
    assert covered >= 0.95


def test_a_real_shift_is_seen_and_covered() -> None:
    """Fused 3% slower everywhere in run B moves the true crossover from ≈7.5k to ≈4.9k (−35%)."""
    within, down, covered = _shift_rates(GB10_LIKE - 0.03)
    print(f"shift −35%: power (moved down) {down:.3f}, coverage {covered:.3f}")
    assert covered >= 0.9
    assert down >= 0.5  # power at 5 rounds; more rounds give more


def test_point_change_is_welch_on_ln() -> None:
    change, low, high, df = point_change(math.log(1.10), 0.01, 4, math.log(1.21), 0.01, 4, 0.95)
    assert change == pytest.approx(1.1)
    assert df == pytest.approx(8.0)
    half = 2.306004 * math.sqrt(2) * 0.01  # t(0.975, 8)
    assert math.log(high / change) == pytest.approx(half, rel=1e-4)
    assert math.log(change / low) == pytest.approx(half, rel=1e-4)


def test_first_crossings_follow_the_crossover_definition() -> None:
    dffs = np.array([1000.0, 2000.0, 3000.0])
    theta = np.array([[0.1, -0.1, -0.2], [-0.1, 0.1, -0.1], [0.1, 0.2, 0.3], [0.1, -0.1, 0.1]])
    out = first_crossings(dffs, theta)
    assert out[0] == pytest.approx(1500.0)
    assert out[1] == -math.inf and out[2] == math.inf
    assert out[3] == pytest.approx(1500.0)  # the first down-crossing, not the later up one


def test_compare_of_the_two_gb10_sweeps() -> None:
    """07-03 vs 07-10 on the points both measured: 12879 → 11905 (−7.6%), inside an interval that holds 0. The
    A/A points the model names give away (llama-4-scout: llama4 never runs the fused kernel; qwen3 on a July binary
    ignored the cap) are null in both and not compared; with llama-4-scout counted as measured it read 8007 → 7711."""
    result = cli("compare", JULY_03, JULY_10)
    assert result.returncode == 0, result.stderr
    assert "the crossover moved −8% [" in result.stdout and ": within noise" in result.stdout
    assert "12879 → 11905" in result.stdout
    data = json.loads(cli("compare", JULY_03, JULY_10, "--json").stdout)
    shift = data["crossover"][0]
    assert shift["shift"] == pytest.approx(11905.2 / 12878.7 - 1, abs=1e-3)
    assert shift["ci_low"] < 0 < shift["ci_high"]
    assert {p["model"] for p in data["points"]} == {"lfm2-8b-a1b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit"}
    assert all(p["ci_low"] <= 1 <= p["ci_high"] for p in data["points"])


def test_history_plots_each_run(tmp_path: Path) -> None:
    out = tmp_path / "history.png"
    result = cli("history", JULY_03, JULY_10, "--out", out, "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["runs"]
    assert [r["outcome"] for r in rows] == ["crossing", "crossing"]  # 07-03 is no "fused never" (issue 18)
    assert out.stat().st_size > 10_000
    again = cli("history", JULY_03, JULY_10, "--out", out)
    assert again.returncode == 2 and "never replaces" in again.stderr


def test_report_previous_states_the_shift_and_each_change(tmp_path: Path) -> None:
    result = cli("report", JULY_10, "--previous", JULY_03, "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    text = next(tmp_path.glob("*.md")).read_text()
    assert "  - command: the crossover moved −8% [" in text
    assert "mixtral-8x7b-4bit (14336): estimate 0.9881 → 0.9839" in text and "change ×0.996 [" in text
    assert cli("check-reports", tmp_path).returncode == 0  # the comparison re-derives from the raw data
