"""`moecal check` exit codes on SYNTHETIC baseline/current sweeps: ok, improved, regressed, changed, incomparable,
corrupt."""

from __future__ import annotations

import json

import pytest

from harness.analysis.comparison.regression import check_runs, verdict_flipped
from harness.analysis.decision.pipeline import analyse_path, save_summary
from harness.runs.formats import SAMPLE_COLUMNS
from tests.support.helpers import cli, run_cli
from tests.support.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run

CURVE = linear_curve([1024, 2048, 4096, 6144, 8192], 5000)


def _run(tmp_path, name, fused_scale=1.0, fallback_scale=1.0, seed=0, curve=CURVE, **kwargs):
    samples = synthetic_samples(curve, rounds=8, noise=0.01, seed=seed, **kwargs)
    samples.loc[samples["arm"] == "fused", "tok_s"] *= fused_scale
    samples.loc[samples["arm"] == "fallback", "tok_s"] *= fallback_scale
    meta = {**SYNTHETIC_META, "current_default": 4096, "backend": samples["backend"].iloc[0]}  # meta names the rows'
    return write_run(tmp_path / name, samples, meta)


def _check(baseline, current, *extra, run=cli):
    """`moecal check --json` in-process (cli); run=run_cli: in a process of its own, as a user runs it."""
    done = run("check", "--baseline", baseline, "--current", current, "--json", *extra)
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else None), done.stderr


def test_same_sweep_again_passes_and_a_uniform_improvement_passes(tmp_path):
    baseline = _run(tmp_path, "base", seed=1)
    assert check_runs(analyse_path(baseline), analyse_path(_run(tmp_path, "again", seed=1))).exit_code == 0
    code, result, _ = _check(baseline, _run(tmp_path, "faster", 1.1, 1.1, seed=1), run=run_cli)  # end to end once
    assert code == 0 and result["status"] == "ok"
    assert all(p["fused"]["change"] == pytest.approx(0.1) for p in result["points"])
    assert all(p["fused"]["significant"] for p in result["points"])


def test_a_significant_drop_beyond_the_threshold_fails(tmp_path):
    baseline = _run(tmp_path, "base", seed=2)
    code, result, _ = _check(baseline, _run(tmp_path, "slower", 0.85, 0.85, seed=2))
    assert code == 1 and result["status"] == "regression"
    assert any("fused tok/s -15.0%" in p for p in result["problems"])
    assert check_runs(analyse_path(baseline), analyse_path(tmp_path / "slower"), max_regression=0.2).exit_code == 0


def test_a_raise_now_supported_is_a_notice_that_fails_only_under_strict(tmp_path):
    """The crossover moved from 5000 to 10000 (cap 4096): the current data raise the baseline's cap. Not a
    contradiction of the baseline's decision (nothing measured at or below its cap now loses): exit 0 with a notice;
    --strict fails on it."""
    baseline = _run(tmp_path, "base", seed=3)
    moved = _run(tmp_path, "moved", seed=3, curve=linear_curve([1024, 2048, 4096, 6144, 8192], 10000))
    result = check_runs(analyse_path(baseline), analyse_path(moved))
    assert result.status == "ok" and result.exit_code == 0, result.problems
    assert any(n.startswith("a raise is now supported: decided with the baseline's cap") for n in result.notices)
    code, strict, _ = _check(baseline, moved, "--strict")
    assert code == 1 and strict["status"] == "changed" and strict["problems"] == strict["notices"]


def test_a_cap_one_grid_step_apart_on_the_same_evidence_passes(tmp_path):
    """Issue 35: two sweeps of one truth whose fused win at 8192 sits at the margin's edge raise the cap 4096 to
    neighbouring measured Dff (6144 and 8192). Neither contradicts the other: exit 0 both ways. The sweep that raised
    less, as the baseline, sees the other's raise as a notice (--strict fails on it); the one that raised more sees
    nothing to fail even under --strict (fused is not shown to lose at or below 8192)."""
    dffs = [1024, 2048, 4096, 6144, 8192]
    less = _run(tmp_path, "less", seed=12, curve={**linear_curve(dffs, 9000), 8192: 1.005})
    more = _run(tmp_path, "more", seed=12, curve={**linear_curve(dffs, 9000), 8192: 1.03})
    forward = check_runs(analyse_path(less), analyse_path(more))
    assert [forward.decisions[s]["recommended_cap"] for s in ("baseline", "current")] == [6144, 8192]
    assert forward.exit_code == 0 and forward.notices[0].startswith("a raise is now supported")
    backward = check_runs(analyse_path(more), analyse_path(less), strict=True)
    assert backward.exit_code == 0 and backward.status == "ok", backward.problems
    assert backward.decisions["current_at_baseline_cap"] == {**backward.decisions["current_at_baseline_cap"],
                                                             "current_default": 8192, "action": "keep"}  # fmt: skip


def test_a_lowered_decision_that_moves_is_a_notice_strict_fails_on(tmp_path):
    """The baseline lowers 8192 → 4096 (crossover 5000); the current (crossover 7000) would lower only to 6144. The
    baseline's cap 4096 is not contradicted (fused wins there): exit 0 with a notice; --strict fails."""
    dffs = [1024, 2048, 4096, 6144, 8192]
    baseline = _run(tmp_path, "base", seed=13)
    later = _run(tmp_path, "later", seed=13, curve=linear_curve(dffs, 7000))
    code, result, _ = _check(baseline, later, "--current-default", "8192")
    assert code == 0 and result["decisions"]["baseline"]["action"] == "lower", result["problems"]
    assert any(n.startswith("the lowered decision moved") for n in result["notices"])
    code, strict, _ = _check(baseline, later, "--current-default", "8192", "--strict")
    assert code == 1 and any(n.startswith("the lowered decision moved: the baseline lowered 8192 → 4096")
                             for n in strict["problems"])  # fmt: skip


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
def test_only_verdict_flips_noise_cannot_explain_are_noticed(before, after, fails):
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


def test_check_fails_when_the_current_data_contradict_the_baselines_cap(tmp_path):
    """The current sweep (crossover moved from 5000 to 3000) decided with the baseline's cap 4096 in force lowers it:
    fallback wins beyond the margin at 4096, at or below that cap — a contradiction, exit 1, the test named (after
    the regression of the fused arm, which slowed too).
    `--current-default` sets the cap both sides are decided against: at 8192 two sweeps of one truth both lower to
    4096 (the largest measured Dff where fused is not shown worse), and at 4096 fused still wins: it passes."""
    baseline = _run(tmp_path, "base", seed=5)
    moved = _run(tmp_path, "moved", seed=6, curve=linear_curve([1024, 2048, 4096, 6144, 8192], 3000))
    code, result, _ = _check(baseline, moved, "--current-default", "4096")
    assert code == 1 and result["status"] == "regression"  # the fused arm also slowed: that is listed first
    (problem,) = [p for p in result["problems"] if p.startswith("the current data contradict")]
    assert problem.startswith("the current data contradict the baseline's cap 4096: at or below it synthetic-layer ")
    assert "Dff 4096: fallback wins beyond 1 − 1.0% (one-sided 95% upper bound" in problem
    assert problem.endswith("(decided with cap 4096 in force, the current data lower it to 2048)")
    again = _run(tmp_path, "again", seed=7)
    code, result, _ = _check(baseline, again, "--current-default", "8192")
    assert result["decisions"]["baseline"]["action"] == result["decisions"]["current"]["action"] == "lower"
    assert result["decisions"]["current"]["recommended_cap"] == 4096
    assert code == 0 and result["status"] == "ok", result["problems"]
