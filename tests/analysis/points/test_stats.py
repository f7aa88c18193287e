"""Per-point statistics on SYNTHETIC samples (tests/support/synthetic_sweeps.py) and the docs/design.md §6 example:
intervals, margin verdicts, pairing vs Welch, outliers, the A/A noise floor, null and insufficient points."""

from __future__ import annotations

import re

import numpy as np
import pytest

from harness.analysis.decision.pipeline import Options, analyse, parse_excludes
from harness.analysis.points.inputs import LoadedInput, load_input
from harness.analysis.points.point_summary import analyse_points, summarize
from harness.analysis.points.stats import (
    classify,
    compare_arms,
    ratio_interval,
    relative_spread,
    row_median,
    split_arms,
)
from harness.errors import InputError
from tests.support.synthetic_sweeps import design_example, synthetic_samples


def test_verdicts_follow_the_interval_and_the_margin():
    ratios = {1024: 1.10, 2048: 1.0, 4096: 1.006, 8192: 0.90}
    summary = summarize(synthetic_samples(ratios, rounds=10, noise=0.002, seed=1)).set_index("dff")
    assert summary["verdict"].to_dict() == {1024: "fused", 2048: "equivalent", 4096: "equivalent", 8192: "fallback"}
    for dff, ratio in ratios.items():
        row = summary.loc[dff]
        assert row["ci_low"] < row["estimate"] < row["ci_high"]
        assert row["ci_low"] <= ratio <= row["ci_high"]
    assert summary["paired"].all() and set(summary["method"]) == {"paired, pooled"}
    wide = summarize(synthetic_samples({2048: 1.012}, rounds=4, noise=0.01, seed=2))
    assert wide["verdict"].iloc[0] == "inconclusive"  # overlaps 1 + δ: neither a win nor equivalence


def test_a_tie_is_never_a_loss():
    samples = synthetic_samples({2048: 1.0, 4096: 1.0}, rounds=5, noise=0.01, seed=3)
    fused = samples["arm"] == "fused"
    samples.loc[fused, "tok_s"] = samples.loc[~fused, "tok_s"].to_numpy()  # identical numbers in both arms
    analysis = analyse(LoadedInput(samples, None, {}), Options(current_default=4096))
    assert set(analysis.summary["verdict"]) == {"equivalent"}
    assert (analysis.summary["ci_high"] > analysis.summary["ci_low"]).all()  # never a zero-width interval
    assert analysis.result.decision.action == "keep"


@pytest.mark.parametrize("rounds", [1, 2])
def test_fewer_than_three_runs_are_insufficient_and_move_nothing(rounds):
    samples = synthetic_samples({1024: 1.3, 2048: 1.2, 4096: 0.8}, rounds=rounds, seed=4)
    analysis = analyse(LoadedInput(samples, None, {}), Options(current_default=2048))
    assert set(analysis.summary["verdict"]) == {"insufficient"}
    assert analysis.summary["ci_low"].isna().all()
    assert "an interval needs 3 per arm" in analysis.summary["reason"].iloc[0]
    assert analysis.result.decision.action == "keep"


def test_the_design_example_is_welch_because_its_runs_were_not_interleaved(tmp_path):
    summary = analyse(load_input(design_example(tmp_path))).summary.set_index("dff")
    measured = summary.drop(index=8192)  # llama-4-scout: an A/A point (llama4 never runs the fused kernel), null
    assert set(measured["method"]) == {"welch, one visit"} and not summary["paired"].any()
    phi = summary.loc[6400]
    assert (round(phi["ci_low"], 3), round(phi["ci_high"], 3)) == (1.025, 1.050)
    assert summary.loc[8192, "verdict"] == "null"
    assert summary.loc[14336, "verdict"] == "fallback" and summary.loc[1792, "verdict"] == "fused"
    assert summary.loc[8192, "ratio"] == pytest.approx(21.32 / 21.64)  # ratio of medians, as mlxcel publishes it


def test_a_point_with_an_unpartnered_round_falls_back_to_welch():
    samples = synthetic_samples({1024: 1.1, 2048: 1.1}, rounds=5, seed=5)
    failed = (samples["dff"] == 1024) & (samples["arm"] == "fused") & (samples["round"] == 2)
    samples.loc[failed, ["status", "tok_s"]] = ["fail", np.nan]
    summary = summarize(samples).set_index("dff")
    assert summary.loc[1024, "method"] == "welch" and summary.loc[1024, "n_failed"] == 1
    assert summary.loc[2048, "method"].startswith("paired")


def test_an_outlier_drops_its_round_and_is_listed():
    samples = synthetic_samples({1024: 1.05, 2048: 1.05, 4096: 1.05}, rounds=5, noise=0.005, seed=6)
    hit = (samples["dff"] == 2048) & (samples["arm"] == "fused") & (samples["round"] == 3)
    samples.loc[hit, "tok_s"] *= 0.85
    summary = summarize(samples).set_index("dff")
    assert summary.loc[2048, "outliers"].startswith("fused r3 (-1")
    assert summary.loc[2048, "method"] == "paired"  # a point that lost a round keeps its own variance
    assert summary.loc[2048, "ci_low"] <= 1.05 <= summary.loc[2048, "ci_high"]
    assert summary.loc[1024, "outliers"] == ""


def test_the_aa_arm_widens_intervals_when_runs_drift_more_than_the_model_sees():
    quiet = analyse_points(synthetic_samples({1024: 1.1, 2048: 1.0}, rounds=8, seed=0, with_null_arm=True))
    assert quiet.aa_points == 2 and quiet.noise_scale < 1.5 and quiet.aa_beyond_margin == ()
    # the A/A arm drifts by itself, by a known offset per point spanning its whole window: what no model of the runs
    # within a point can see (run-to-run drift is drift_variance's), and what the A/A arm is there for
    offset = {1024: 0.03, 2048: -0.04, 4096: 0.05, 8192: -0.02}
    samples = synthetic_samples({d: 1.0 for d in offset}, rounds=8, noise=0.002, seed=7, with_null_arm=True)
    null = samples["arm"] == "null"
    samples.loc[null, "tok_s"] *= np.exp(samples.loc[null, "dff"].map(offset))
    drifting, calm = analyse_points(samples), analyse_points(samples[~null])
    # by hand: each A/A comparison reads its offset against a standard error the model puts at the calm one's
    # (noise 0.002 → se ≈ 0.001), so φ ≈ rms(offsets) / se ≈ 0.0367 / 0.001; the offsets dwarf the noise
    expected_phi = np.sqrt(np.mean(np.square(list(offset.values())))) / calm.summary["se"].to_numpy()
    assert drifting.noise_scale == pytest.approx(expected_phi.mean(), rel=0.15)
    # every point's standard error, and so its interval, is widened by that factor; the estimates do not move
    assert drifting.summary["se"].to_numpy() == pytest.approx(calm.summary["se"].to_numpy() * expected_phi, rel=0.15)
    calm_width, drifting_width = (
        np.log(s["ci_high"] / s["ci_low"]).to_numpy() for s in (calm.summary, drifting.summary)
    )
    assert drifting_width == pytest.approx(calm_width * expected_phi, rel=0.15)
    assert drifting.summary["estimate"].to_numpy() == pytest.approx(calm.summary["estimate"].to_numpy(), rel=1e-12)


def test_an_aa_comparison_beyond_the_margin_withholds_raise_and_lower():
    samples = synthetic_samples({1024: 1.3, 2048: 1.25, 4096: 1.2}, rounds=6, noise=0.003, seed=8, with_null_arm=True)
    samples.loc[(samples["arm"] == "null") & (samples["dff"] == 4096), "tok_s"] *= 0.9
    analysis = analyse(LoadedInput(samples, None, {}), Options(current_default=1024))
    assert analysis.aa_beyond_margin == ("synthetic-layer (Dff 4096)",)
    d = analysis.result.decision
    assert d.action == "keep" and "Raise it to" not in d.reason
    # fused truly wins at 2048 and 4096 (1.25, 1.2): the raise withheld goes to either, as the A/A's φ allows
    assert re.search(r"a raise to (2048|4096) was withheld because the A/A comparison", d.reason), d.reason


def test_non_affine_and_failed_probe_are_null():
    samples = synthetic_samples({1024: 1.2, 2048: 1.2}, rounds=4, seed=9)
    samples.loc[samples["dff"] == 1024, "quant_mode"] = "mxfp4"
    fused_2048 = (samples["dff"] == 2048) & (samples["arm"] == "fused")
    samples.loc[fused_2048, "dispatch_ok"] = "0"
    summary = summarize(samples).set_index("dff")
    assert (summary["verdict"] == "null").all()
    assert "mxfp4 is not affine" in summary.loc[1024, "reason"]
    assert "dispatch probe never matched" in summary.loc[2048, "reason"]
    samples.loc[fused_2048 & (samples["round"] == 0), "dispatch_ok"] = "1"  # one match: the fused path did run
    assert summarize(samples).set_index("dff").loc[2048, "verdict"] == "fused"


def test_exclusions_carry_the_reason_and_unknown_names_are_input_errors():
    samples = synthetic_samples({1024: 1.2}, rounds=4, seed=10)
    summary = summarize(samples, excludes=parse_excludes(["synthetic-layer=wrong checkpoint"]))
    assert summary["verdict"].iloc[0] == "null"
    assert summary["reason"].iloc[0] == "excluded by the user: wrong checkpoint"
    with pytest.raises(ValueError, match="typo-model: no point has this model name"):
        summarize(samples, excludes={"typo-model": "x"})  # statistics are pure: ValueError
    with pytest.raises(InputError, match="--exclude: typo-model: no point has this model name"):
        analyse(LoadedInput(samples, None, {}), Options(excludes=parse_excludes(["typo-model"])))


def test_pooling_follows_bartlett():
    samples = synthetic_samples({1024: 1.1, 2048: 1.1, 4096: 1.1}, rounds=6, noise=0.005, seed=11)
    pooled = summarize(samples)
    assert (pooled["method"] == "paired, pooled").all()
    noisy = (samples["dff"] == 4096) & (samples["arm"] == "fused")
    samples.loc[noisy, "tok_s"] *= np.exp(np.random.default_rng(1).normal(0, 0.08, noisy.sum()))
    mixed = summarize(samples).set_index("dff")
    assert mixed.loc[4096, "method"] == "paired"  # its variance differs: it keeps its own, wider interval
    assert mixed.loc[4096, "ci_high"] - mixed.loc[4096, "ci_low"] > 3 * (
        mixed.loc[1024, "ci_high"] - mixed.loc[1024, "ci_low"]
    )


def test_pure_functions_reject_bad_input():
    with pytest.raises(ValueError, match="same"):
        compare_arms(np.zeros((2, 3)), np.zeros((2, 4)), paired=True)
    with pytest.raises(ValueError, match="margin"):
        classify(0.9, 1.1, margin=0.7)
    with pytest.raises(ValueError, match="confidence"):
        ratio_interval(0.0, 0.01, 5, confidence=1.5)


def test_relative_spread_is_sigma_over_mu_for_normal_noise():
    values = np.random.default_rng(0).normal(100.0, 3.0, size=20000)
    assert relative_spread(values) == pytest.approx(0.03, rel=0.05)


def test_row_median_is_numpys_median_of_each_rows_values_bit_for_bit():
    """The vectorised medians (all points in one sort) must equal np.median of each point's runs exactly: the
    summary's tok/s, spreads and outlier texts are compared byte for byte with what per-point medians gave."""
    rng = np.random.default_rng(3)
    values = np.round(rng.uniform(10.0, 200.0, (400, 6)), 2)
    counts = rng.integers(0, 7, 400)
    padded = np.where(np.arange(6) < counts[:, None], values, np.nan)
    medians, spreads = row_median(padded), relative_spread(padded)
    for row, n, median, spread in zip(values, counts, medians, spreads, strict=True):
        runs = row[:n]
        assert (np.isnan(median) and n == 0) or median == np.median(runs)
        expected = 1.4826 * np.median(np.abs(runs - np.median(runs))) / np.median(runs) if n >= 2 else np.nan
        assert (np.isnan(spread) and np.isnan(expected)) or spread == expected


def test_identical_runs_at_two_decimals_keep_the_rounding_in_their_interval(tmp_path):
    """SYNTHETIC mlxcel CSV whose runs repeat exactly (2 decimals): the interval is at least the rounding error's
    (0.01²/12 per value, relative), not zero wide."""
    from harness.analysis.decision.pipeline import analyse_path
    from harness.analysis.points.stats import precision_step

    assert precision_step(np.array([91.0, 91.66, 90.44])) == pytest.approx(0.01)
    assert precision_step(np.array([1234.5678912345])) == 0.0  # simulated floats: only the 6-digit floor
    path = tmp_path / "identical.csv"
    path.write_text(
        "model,dff,quant_mode,fallback_run1,fallback_run2,fallback_run3,fused_run1,fused_run2,fused_run3\n"
        "synthetic-a,1024,affine,21.00,21.00,21.00,21.50,21.50,21.50\n"
    )
    row = analyse_path(path).summary.iloc[0]
    floor = np.sqrt(((0.01 / 21.0) ** 2 + (0.01 / 21.5) ** 2) / 12 / 3)
    assert row["se"] >= floor * 0.999 and row["ci_high"] > row["ci_low"]


def test_the_slowed_median_rule_rarely_fires_on_clean_noise():
    """SYNTHETIC clean Gaussian runs (no outliers): split_arms must not cost real sweeps their points. A 4 σ rule on
    3–4-run arms flagged 3–9% of clean 4-run points (the family σ reads low at 4 runs); now 4-run arms are never
    flagged and clean 3-run points rarely are."""
    rng = np.random.default_rng(7)
    for runs, ceiling in ((3, 0.01), (4, 0.0)):
        for points in (2, 6):
            a, b = (rng.normal(0.0, 0.003, (3000, points, runs)) for _ in range(2))
            assert split_arms([a, b], [a, b]).mean() <= ceiling, (runs, points)
