"""Per-point statistics on SYNTHETIC samples (tests/synthetic_sweeps.py): verdicts, null points, pairing, spread."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import InputError
from harness.stats import analyse_points, bootstrap_ratio, parse_excludes, relative_spread, summarize
from tests.synthetic_sweeps import synthetic_samples


def test_verdicts_follow_the_ci():
    samples = synthetic_samples({1024: 1.10, 4096: 1.0, 8192: 0.90}, rounds=10, noise=0.01, seed=1)
    summary = summarize(samples, seed=3).set_index("dff")
    assert list(summary["verdict"]) == ["fused", "tie", "fallback"]
    for dff, ratio in ((1024, 1.10), (8192, 0.90)):
        row = summary.loc[dff]
        assert row["ci_low"] < row["ratio"] < row["ci_high"]
        assert abs(row["ratio"] - ratio) < 0.03
        assert row["p_value"] < 0.01
    assert summary.loc[4096, "ci_low"] < 1.0 < summary.loc[4096, "ci_high"]
    assert summary["paired"].all()
    assert not summary["unstable"].any()


def test_same_seed_same_numbers_and_other_seed_differs():
    samples = synthetic_samples({2048: 1.02}, rounds=6, seed=2)
    assert summarize(samples, seed=7).equals(summarize(samples, seed=7))
    (a,), (c,) = analyse_points(samples, seed=7), analyse_points(samples, seed=8)
    assert not np.array_equal(a.replicates, c.replicates)
    assert a.row["ratio"] == c.row["ratio"]  # the point estimate does not depend on resampling


def test_non_affine_and_failed_probe_are_null():
    samples = synthetic_samples({1024: 1.2, 2048: 1.2}, rounds=4, seed=3)
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
    samples = synthetic_samples({1024: 1.2}, rounds=4, seed=4)
    summary = summarize(samples, excludes=parse_excludes(["synthetic-layer=wrong checkpoint"]))
    assert summary["verdict"].iloc[0] == "null"
    assert summary["reason"].iloc[0] == "excluded by the user: wrong checkpoint"
    with pytest.raises(InputError, match="no point has this model name"):
        summarize(samples, excludes=parse_excludes(["typo-model"]))


def test_a_failed_run_unpairs_the_point_and_an_empty_arm_is_null():
    samples = synthetic_samples({1024: 1.1, 2048: 1.1}, rounds=5, seed=5)
    failed = (samples["dff"] == 1024) & (samples["arm"] == "fused") & (samples["round"] == 2)
    samples.loc[failed, ["status", "tok_s"]] = ["fail", np.nan]
    samples.loc[(samples["dff"] == 2048) & (samples["arm"] == "fallback"), "status"] = "fail"
    summary = summarize(samples).set_index("dff")
    assert not summary.loc[1024, "paired"] and summary.loc[1024, "n_fused"] == 4
    assert summary.loc[1024, "n_failed"] == 1 and summary.loc[1024, "verdict"] == "fused"
    assert summary.loc[2048, "verdict"] == "null" and "no ok fallback run" in summary.loc[2048, "reason"]


def test_null_arm_gives_the_noise_floor_and_spread_flags_unstable_points():
    quiet = summarize(synthetic_samples({1024: 1.1}, rounds=12, noise=0.005, seed=6, with_null_arm=True))
    assert abs(quiet["null_ratio"].iloc[0] - 1.0) < 0.01
    assert not quiet["unstable"].iloc[0]
    noisy = summarize(synthetic_samples({1024: 1.1}, rounds=12, noise=0.08, seed=6))
    assert noisy["unstable"].iloc[0]
    assert noisy["fused_spread"].iloc[0] > 0.05


def test_relative_spread_is_sigma_over_mu_for_normal_noise():
    values = np.random.default_rng(0).normal(100.0, 3.0, size=20000)
    assert relative_spread(values) == pytest.approx(0.03, rel=0.05)


def test_paired_bootstrap_cancels_shared_drift():
    """Round drift shared by both arms widens the unpaired CI, not the paired one."""
    rng = np.random.default_rng(0)
    drift = np.exp(rng.normal(0, 0.05, size=12))
    fallback = 100 * drift * np.exp(rng.normal(0, 0.002, size=12))
    fused = 103 * drift * np.exp(rng.normal(0, 0.002, size=12))
    paired = bootstrap_ratio(fused, fallback, True, 2000, np.random.default_rng(1))
    unpaired = bootstrap_ratio(fused, fallback, False, 2000, np.random.default_rng(1))
    assert np.ptp(np.quantile(paired, [0.025, 0.975])) < 0.5 * np.ptp(np.quantile(unpaired, [0.025, 0.975]))
