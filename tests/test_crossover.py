"""Crossover, its CI and the keep/raise/lower policy, on the DESIGN §6 example and SYNTHETIC sweeps."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import Options, analyse, analyse_path, write_summary
from harness.crossover import Crossover, all_crossings, decision_points, find_crossover, recommend
from harness.inputs import LoadedInput
from harness.results import read_provenance
from tests.helpers import run_cli
from tests.synthetic_sweeps import design_example, linear_curve, synthetic_samples, write_run


def _analyse(samples: pd.DataFrame, **options: object):
    return analyse(LoadedInput(samples, None, {}), Options(**options))


def test_design_example_crossover_is_7672_with_a_ci_and_an_action(tmp_path):
    done = run_cli("crossover", design_example(tmp_path), "--json", "--current-default", "8192")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # exactly one JSON object, nothing else on stdout
    assert result["crossover_dff"] == pytest.approx(7672, rel=0.01)
    assert result["ci_low"] < result["crossover_dff"] < result["ci_high"]
    assert result["crossings"] == [{"dff": pytest.approx(7672, rel=0.01), "direction": "down", "between": [6400, 8192]}]
    assert result["action"] in ("keep", "raise", "lower") and result["reason"]
    assert result["apply"] == f"MLXCEL_FUSED_MOE_MAX_DFF={result['recommended_cap']}"
    assert result["recommended_cap"] % 256 == 0
    assert [p["dff"] for p in result["points"]] == [1792, 6400, 8192, 14336]
    assert {"model", "dff", "ratio", "ci_low", "ci_high", "verdict", "reason"} <= set(result["points"][0])


def test_log2_interpolation():
    dffs, ratios = np.array([4096, 16384]), np.array([1.1, 0.9])
    assert decision_points(dffs, ratios, "log2")[0] == pytest.approx(8192)  # halfway in log2 between 2^12 and 2^14
    assert decision_points(dffs, ratios, "linear")[0] == pytest.approx(10240)


def test_no_crossing_fused_everywhere():
    analysis = _analyse(synthetic_samples({1024: 1.2, 2048: 1.15, 4096: 1.1}, seed=1), current_default=1024)
    c, d = analysis.result.crossover, analysis.result.decision
    assert c.outcome == "fused_everywhere" and c.dff is None
    assert c.ci_high == math.inf and c.ci_low == 4096  # "above the largest measured Dff", open above
    assert (d.action, d.recommended_cap) == ("raise", 4096)
    assert "every measured Dff" in d.reason and "unmeasured" in d.reason
    as_json = analysis.as_json()
    assert as_json["crossover_dff"] is None and as_json["ci_high"] is None and as_json["outcome"] == "fused_everywhere"
    keep = recommend(c, current_default=8192)
    assert keep.action == "keep"  # the current cap already covers every measured Dff, where fused wins


def test_no_crossing_fused_never():
    analysis = _analyse(synthetic_samples({1024: 0.9, 2048: 0.85}, seed=2), current_default=8192)
    c, d = analysis.result.crossover, analysis.result.decision
    assert c.outcome == "fused_never" and c.ci_low == -math.inf and c.ci_high == 1024
    assert (d.action, d.recommended_cap) == ("lower", 768)  # the largest multiple of 256 below 1024
    assert "never beats" in d.reason
    assert recommend(c, current_default=512).action == "keep"


def test_multiple_crossings_are_all_reported_and_the_first_decides():
    ratios = {1024: 1.1, 2048: 0.95, 3072: 1.05, 4096: 0.9}
    analysis = _analyse(synthetic_samples(ratios, rounds=10, noise=0.005, seed=3))
    c = analysis.result.crossover
    assert [x.direction for x in c.crossings] == ["down", "up", "down"]
    assert [x.between for x in c.crossings] == [(1024, 2048), (2048, 3072), (3072, 4096)]
    assert c.dff == pytest.approx(c.crossings[0].dff)
    assert 1024 < c.dff < 2048


def test_curve_that_starts_losing_is_fused_never_even_if_it_wins_later():
    dffs, ratios = np.array([1024, 2048, 4096]), np.array([0.95, 1.05, 0.9])
    assert decision_points(dffs, ratios)[0] == -math.inf
    assert [x.direction for x in all_crossings(dffs, ratios)] == ["up", "down"]


def _crossover(dff: float, low: float, high: float) -> Crossover:
    return Crossover("crossing", dff, low, high, (), "bootstrap", 1024, 16384)


@pytest.mark.parametrize(
    ("current", "action", "cap"),
    [(8000, "keep", 8000), (4096, "raise", 7424), (7450, "keep", 7450), (12000, "lower", 7424), (None, "set", 7424)],
)
def test_policy(current, action, cap):
    decision = recommend(_crossover(8000, 7500, 8600), current, grid=256, cap_env="CAP")
    assert (decision.action, decision.recommended_cap) == (action, cap)
    assert decision.reason.endswith(".")
    assert decision.apply == (f"CAP={cap}" if cap is not None else None)


def test_policy_with_an_open_lower_bound_goes_below_the_measured_range():
    decision = recommend(_crossover(1500, -math.inf, 2100), 8192, grid=256)
    assert (decision.action, decision.recommended_cap) == ("lower", 768)
    assert "open below" in decision.reason


def test_summary_only_input_uses_the_pointwise_band():
    dffs = np.array([1024, 2048, 4096])
    c = find_crossover(
        dffs, np.array([1.1, 1.02, 0.9]), ci_bounds=(np.array([1.08, 0.99, 0.88]), np.array([1.12, 1.05, 0.92]))
    )
    assert c.ci_method == "pointwise"
    assert c.ci_low < c.dff < c.ci_high


def test_shape_families_are_decided_separately_and_the_smallest_cap_binds():
    small = synthetic_samples(linear_curve([2048, 4096, 6144, 8192], 5000), d_model=2048, seed=4)
    large = synthetic_samples(linear_curve([2048, 4096, 6144, 8192], 3000), d_model=4096, seed=5)
    analysis = _analyse(pd.concat([small, large], ignore_index=True), current_default=8192)
    families = analysis.result.families
    assert len(families) == 2
    caps = sorted(f.decision.recommended_cap for f in families)
    assert analysis.result.decision.recommended_cap == caps[0]
    assert analysis.result.decision.action == "lower"
    assert "d_model=4096" in analysis.result.decision.reason
    assert len(analysis.as_json()["families"]) == 2


def test_kernel_families_decide_and_a_single_decode_point_does_not():
    layer = synthetic_samples(linear_curve([2048, 4096, 6144, 8192], 5000), d_model=2048, seed=6)
    # one whole-model decode point at a small Dff where fused clearly loses: alone it would say "fused never wins"
    decode = synthetic_samples({768: 0.9}, workload="decode", d_model=2048, seed=7)
    analysis = _analyse(pd.concat([layer, decode], ignore_index=True), current_default=8192)
    assert len(analysis.result.families) == 2
    layer_family = next(f for f in analysis.result.families if f.family.startswith("layer"))
    assert analysis.result.decision == layer_family.decision
    assert 4000 < analysis.result.crossover.dff < 6000
    only_decode = _analyse(decode, current_default=8192)
    assert only_decode.result.crossover.outcome == "fused_never"


def test_ci_covers_the_true_crossover_in_most_simulations():
    """SYNTHETIC: 60 seeded sweeps of a known linear ratio curve crossing 1.0 at Dff 6000 (1% noise, 6 rounds)."""
    true, hits, widths = 6000.0, 0, []
    for seed in range(60):
        samples = synthetic_samples(linear_curve(range(3072, 9217, 1024), true), rounds=6, noise=0.01, seed=seed)
        c = _analyse(samples, seed=seed).result.crossover
        hits += c.ci_low <= true <= c.ci_high
        widths.append(c.ci_high - c.ci_low)
    assert hits / 60 >= 0.85
    assert np.median(widths) < 2500  # and the interval is informative, not trivially wide


def test_summary_csv_round_trip_and_its_pointwise_decision(tmp_path):
    run_dir = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 2048, 4096, 6144, 8192], 5000), seed=6))
    path = write_summary(run_dir)
    assert path == run_dir / "summary.csv"
    assert read_provenance(path)["summary.n_resamples"] == "2000"
    from_samples = analyse_path(run_dir)
    from_summary = analyse_path(path)
    numbers = ["dff", "ratio", "ci_low", "ci_high"]
    assert np.allclose(from_summary.summary[numbers].to_numpy(float), from_samples.summary[numbers].to_numpy(float))
    assert list(from_summary.summary["verdict"]) == list(from_samples.summary["verdict"])
    assert from_summary.result.crossover.ci_method == "pointwise"
    assert from_summary.result.crossover.dff == pytest.approx(from_samples.result.crossover.dff)
