"""`moecal check` exit codes on SYNTHETIC baseline/current sweeps: ok, improved, regressed, changed, incomparable,
corrupt."""

from __future__ import annotations

import json

import pytest

from harness.analysis.pipeline import analyse_path, save_summary
from harness.analysis.regression import check_runs, verdict_flipped
from harness.runs.formats import SAMPLE_COLUMNS
from tests.helpers import run_cli
from tests.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run

CURVE = linear_curve([1024, 2048, 4096, 6144, 8192], 5000)


def _run(tmp_path, name, fused_scale=1.0, fallback_scale=1.0, seed=0, curve=CURVE, **kwargs):
    samples = synthetic_samples(curve, rounds=8, noise=0.01, seed=seed, **kwargs)
    samples.loc[samples["arm"] == "fused", "tok_s"] *= fused_scale
    samples.loc[samples["arm"] == "fallback", "tok_s"] *= fallback_scale
    meta = {**SYNTHETIC_META, "current_default": 4096, "backend": samples["backend"].iloc[0]}  # meta names the rows'
    return write_run(tmp_path / name, samples, meta)


def _check(baseline, current, *extra):
    done = run_cli("check", "--baseline", baseline, "--current", current, "--json", *extra)
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else None), done.stderr


def test_same_sweep_again_passes_and_a_uniform_improvement_passes(tmp_path):
    baseline = _run(tmp_path, "base", seed=1)
    assert check_runs(analyse_path(baseline), analyse_path(_run(tmp_path, "again", seed=1))).exit_code == 0
    code, result, _ = _check(baseline, _run(tmp_path, "faster", 1.1, 1.1, seed=1))
    assert code == 0 and result["status"] == "ok"
    assert all(p["fused"]["change"] == pytest.approx(0.1) for p in result["points"])
    assert all(p["fused"]["significant"] for p in result["points"])


def test_a_significant_drop_beyond_the_threshold_fails(tmp_path):
    baseline = _run(tmp_path, "base", seed=2)
    code, result, _ = _check(baseline, _run(tmp_path, "slower", 0.85, 0.85, seed=2))
    assert code == 1 and result["status"] == "regression"
    assert any("fused tok/s -15.0%" in p for p in result["problems"])
    assert check_runs(analyse_path(baseline), analyse_path(tmp_path / "slower"), max_regression=0.2).exit_code == 0


def test_a_changed_decision_fails(tmp_path):
    baseline = _run(tmp_path, "base", seed=3)
    moved = _run(tmp_path, "moved", seed=3, curve=linear_curve([1024, 2048, 4096, 6144, 8192], 10000))
    result = check_runs(analyse_path(baseline), analyse_path(moved))
    assert result.status == "changed" and result.exit_code == 1
    assert any(p.startswith("decision recommended_cap") for p in result.problems)


@pytest.mark.parametrize(
    ("before", "after", "fails"),
    [
        ("fused", "fallback", True),
        ("fallback", "fused", True),
        ("fused", "null", True),
        ("null", "inconclusive", True),
        ("inconclusive", "fallback", False),  # an interval edging across the margin between two runs of the same code
        ("fused", "equivalent", False),
        ("inconclusive", "inconclusive", False),
    ],
)
def test_only_verdict_flips_noise_cannot_explain_fail(before, after, fails):
    assert verdict_flipped(before, after) is fails


def test_incomparable_inputs_exit_2_and_list_dropped_rows(tmp_path):
    code, result, _ = _check(_run(tmp_path, "cpu", seed=4), _run(tmp_path, "cuda", seed=4, backend="cuda"))
    assert code == 2 and result["status"] == "incomparable"
    assert len(result["dropped"]) == 10
    assert all(
        "backend cpu vs cuda" in row["reason"] or "backend cuda vs cpu" in row["reason"] for row in result["dropped"]
    )


def test_partly_comparable_inputs_join_what_matches(tmp_path):
    baseline = _run(tmp_path, "base", seed=5)
    wider = _run(tmp_path, "wider", seed=5, curve={**CURVE, 12288: 0.8})
    result = check_runs(analyse_path(baseline), analyse_path(wider))
    assert len(result.points) == 5 and result.status == "ok"
    assert [(row["side"], row["dff"]) for row in result.dropped] == [("current", 12288)]
    assert "no point with this model and Dff in the baseline input" in result.dropped[0]["reason"]


def test_baseline_points_missing_from_the_current_run_fail_unless_allowed(tmp_path):
    baseline = _run(tmp_path, "base", seed=5, curve={**CURVE, 12288: 0.8})
    shorter = _run(tmp_path, "shorter", seed=5)
    code, result, _ = _check(baseline, shorter)
    assert code == 1 and result["status"] == "missing"
    assert result["problems"] == [
        "synthetic-layer dff 12288: in the baseline, missing from the current run "
        "(no point with this model and Dff in the current input)"
    ]
    code, result, _ = _check(baseline, shorter, "--allow-missing")
    assert code == 0 and result["status"] == "ok" and result["dropped"][0]["dff"] == 12288


def test_corrupt_input_exits_2_with_file_field_and_problem(tmp_path):
    baseline = _run(tmp_path, "base", seed=6)
    corrupt = _run(tmp_path, "corrupt", seed=6)
    text = (corrupt / "samples.csv").read_text().splitlines()
    fields = text[-1].split(",")
    fields[SAMPLE_COLUMNS.index("tok_s")] = "fast"
    text[-1] = ",".join(fields)
    (corrupt / "samples.csv").write_text("\n".join(text) + "\n")
    code, result, stderr = _check(baseline, corrupt)
    assert code == 2 and result == {"error": stderr.strip().removeprefix("error: "), "exit_code": 2}  # --json
    assert stderr.startswith(f"error: {corrupt / 'samples.csv'}: tok_s: line ")
    assert "'fast' is not a number" in stderr


def test_summary_only_inputs_count_a_drop_beyond_the_threshold_without_runs(tmp_path):
    """Without per-run samples there is no interval for the change, so the threshold alone decides."""
    summaries = []
    for name, scale in (("base", 1.0), ("slower", 0.9)):
        analysis = analyse_path(_run(tmp_path, name, scale, 1.0, seed=7))
        summaries.append(save_summary(analysis, tmp_path / f"{name}-summary.csv"))
    result = check_runs(analyse_path(summaries[0]), analyse_path(summaries[1]))
    assert result.status == "regression"
    assert all(p["fused"]["significant"] is None and p["fused"]["regressed"] for p in result.points)
    assert not any(p["fallback"]["regressed"] for p in result.points)


def test_the_change_interval_is_welch_on_ln_tok_s(tmp_path):
    baseline = analyse_path(_run(tmp_path, "base", seed=9))
    rerun = check_runs(baseline, analyse_path(_run(tmp_path, "rerun", seed=10)))
    assert rerun.status == "ok"
    for point in rerun.points:
        low, high = point["fused"]["ci"]
        assert low < point["fused"]["change"] < high and high - low < 0.05  # 8 runs of 1% noise per side


def test_check_fails_when_the_current_data_alone_would_change_the_cap_in_force(tmp_path):
    """Issue 29: the current sweep (crossover moved from 5000 to 3000) lowers the cap 4096 → 2048 while the baseline
    keeps 4096: that fails whether or not the baseline's cap lies inside the current interval (the fused arm also
    slowed, a regression listed first). `--current-default` sets the cap both sides are decided against: at 8192
    two sweeps of one truth both lower to 4096 (the largest measured Dff where fused is not shown worse), the same
    decision: it passes."""
    baseline = _run(tmp_path, "base", seed=5)
    moved = _run(tmp_path, "moved", seed=6, curve=linear_curve([1024, 2048, 4096, 6144, 8192], 3000))
    code, result, _ = _check(baseline, moved, "--current-default", "4096")
    assert code == 1
    assert (
        "the current data alone would lower the cap 4096 → 2048 (the baseline's decision: keep 4096)"
        in (result["problems"])
    )
    again = _run(tmp_path, "again", seed=7)
    code, result, _ = _check(baseline, again, "--current-default", "8192")
    assert result["decisions"]["baseline"]["action"] == result["decisions"]["current"]["action"] == "lower"
    assert result["decisions"]["current"]["recommended_cap"] == 4096
    assert code == 0 and result["status"] == "ok", result["problems"]
