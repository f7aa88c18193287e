"""Two passes over the grid (harness/analysis/points/sweep_drift.py, harness/measure/sweep_loop.py): the pass-agreement
test and what the decision does with it, on SYNTHETIC per-round differences and simulated sweeps (nothing measured)."""

from __future__ import annotations

import time
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from harness.analysis.decision.curve import Curve
from harness.analysis.decision.decide import StagedFamily, decide_curves
from harness.analysis.decision.decision_json import decision_json
from harness.analysis.decision.pipeline import Options, analyse
from harness.analysis.points.inputs import LoadedInput
from harness.analysis.points.stats import FULL_PRECISION_FLOOR, estimate_family, screen_outliers
from harness.analysis.points.sweep_drift import (
    SWEEP_DRIFT_ALPHA,
    _passes,
    _screened_passes,
    centre_passes,
    drift_trend,
    estimate_in_passes,
    residual_test,
)
from harness.analysis.rounds.decision_value import StopRule
from harness.measure import sweep_loop
from harness.measure.allocation import allocate
from harness.measure.protocol import RoundSchedule
from harness.runs.formats import SAMPLE_COLUMNS
from tests.support.calibration import PROTOCOL_REGIMES, estimate
from tests.support.simulation import as_samples, simulate
from tests.support.synthetic_sweeps import SYNTHETIC_META, write_run


def test_without_drift_the_test_rejects_at_its_level_and_unusable_needs_two_orders_to_fail():
    """White per-round differences, 6 points, the first ⌊n/2⌋ rounds in the first pass: at 5% the linear trend's
    test rejects at its level (below it at 3 rounds, where the round screen also drops clean rounds: measured 3.4%);
    at 1% (SWEEP_DRIFT_ALPHA) a rejection steps the trend up an order and only the quadratic's own rejection is
    reported, so white runs are called unusable far less often than the level (issue 36: "unusable" only for drift
    the model cannot fit)."""
    rng = np.random.default_rng(3)
    for n in (3, 5, 10):
        p = residual_test(rng.normal(0.0, 0.014, size=(4000, 6, n)), n // 2)
        assert 0.3 * 0.05 <= np.mean(p < 0.05) <= 1.4 * 0.05, n
        assert np.mean(p < SWEEP_DRIFT_ALPHA) <= 0.2 * SWEEP_DRIFT_ALPHA, n


def _sweep_times(points: int, rounds: int) -> np.ndarray:
    """Each round's time (points, rounds) in a two-pass sweep of one family: the first ⌊n/2⌋ rounds of every point
    in grid order, then the rest (sweep_drift's model of time), as a share of the sweep."""
    first = rounds // 2
    r = np.arange(rounds)
    j = np.arange(points)[:, None]
    t = np.where(r < first, j * first + r, points * first + j * (rounds - first) + r - first)
    return t / (points * rounds)


def test_a_step_and_a_bend_of_one_arm_are_trends_the_model_fits_and_a_late_hard_turn_is_not():
    """SYNTHETIC per-round differences, 6 points, 10 rounds in two passes, 1.4% noise. The fused arm 2% faster in
    the second pass (a governor settling half way): before issue 36 the pass F test called 90% of such sweeps
    unusable; the linear trend fits it. A drift that bends (quadratic in time, 20% by the end) leaves a slope in the
    linear trend's residuals: the trend steps up to a quadratic, which fits it (before, 80% or more of these sweeps
    were unusable). A drift that turns late and hard (quartic in time, 40% by the end, most of it in the last fifth)
    bends more than the quadratic follows: found in about half the sweeps (52% measured at 1,000)."""
    rng = np.random.default_rng(4)
    d = rng.normal(0.0, 0.014, size=(1000, 6, 10))
    step = d.copy()
    step[..., 5:] += 0.02
    assert np.mean(residual_test(step, 5) < SWEEP_DRIFT_ALPHA) <= 0.03
    bend = d + 0.2 * _sweep_times(6, 10) ** 2
    assert np.mean(residual_test(bend, 5) < SWEEP_DRIFT_ALPHA) <= 0.03
    late = d + 0.4 * _sweep_times(6, 10) ** 4
    assert np.mean(residual_test(late, 5) < SWEEP_DRIFT_ALPHA) >= 0.4


def test_a_linear_drift_of_one_arm_is_estimated_and_taken_out_of_the_points():
    """SYNTHETIC flat truth, 6 points, 10 rounds in two passes, the fused arm drifting linearly by 4% over the sweep:
    each point's plain mean carries the drift at its mean time (a slope of 1.6% across the grid, which the points'
    order turns into a Dff-dependent ratio); drift-corrected, the slope is gone to within its noise, and the
    correction's uncertainty is in each point's se (wider than the runs' alone)."""
    rng = np.random.default_rng(8)
    shape = (400, 6, 10)
    fallback = rng.normal(0.0, 0.01, size=shape)
    fused = rng.normal(0.0, 0.01, size=shape) + 0.04 * _sweep_times(6, 10)
    first = np.full(shape[:-1], 5)
    paired = np.ones(shape[:-1], bool)
    plain, _ = estimate_family(fused, fallback, paired, FULL_PRECISION_FLOOR)
    corrected, _, p = estimate_in_passes(estimate_family, fused, fallback, paired, FULL_PRECISION_FLOOR, first)
    slope = [np.mean(c.theta[:, -1] - c.theta[:, 0]) for c in (plain, corrected)]
    assert slope[0] == pytest.approx(0.04 * 25 / 60, abs=0.002)
    assert abs(slope[1]) < 0.002
    assert np.all(corrected.se >= plain.se)
    assert np.mean(p < SWEEP_DRIFT_ALPHA) <= 0.03  # the model fits: not unusable


def test_a_point_whose_earlier_pass_the_round_screen_dropped_keeps_its_drift_correction_and_allowance():
    """SYNTHETIC per-round differences: a drift of one arm of 4% over the sweep, 6 points, 9 rounds (4 in the first
    pass), 1.4% noise; at one point the first pass's 4 rounds lie 15% above its second pass (beyond 4 robust σ of
    the family's rounds), so the round screen leaves that point out of the trend's fit. Its θ̂ still rests on all
    its runs (the arm-level screen keeps them), and so on the drift at both visits: drift_trend corrects it by the
    trend at its runs' mean time and widens it by the same allowance as its neighbours. Before, fitted and
    corrected on the screened rounds alone, such a point decided on its runs (the false raises of the bending drift
    read at the last point, docs/design.md §7)."""
    rng = np.random.default_rng(12)
    d = rng.normal(0.0, 0.014, size=(200, 6, 9)) - 0.04 * _sweep_times(6, 9)
    d[:, 3, :4] += 0.15
    screened = _screened_passes(d, 4)
    assert not np.any(screened["usable"][:, 3])
    trend = drift_trend(screened, None, _passes(d, 4))
    assert np.all(trend.extra[:, 3] > 0)
    assert np.median(trend.extra[:, 3]) == pytest.approx(np.median(trend.extra[:, 2]), rel=0.25)
    lag = 0.04 * (np.mean(_sweep_times(6, 9)[3]) - np.mean(_sweep_times(6, 9)))  # its runs' mean time, from g's mean
    assert np.median(trend.shift[:, 3]) == pytest.approx(-lag, abs=0.004)
    old = drift_trend(screened)  # the screened rounds alone: the point gets nothing
    assert np.all(old.extra[:, 3] == 0) and np.all(old.shift[:, 3] == 0)


def test_a_point_the_screen_left_one_visit_carries_that_visits_offset_whole():
    """SYNTHETIC per-round differences: a drift of one arm of 4% over the sweep, 6 points, 10 rounds (5 in the first
    pass), 1.4% noise; at one point the outlier screen dropped every first-pass round (NaN), so its θ̂ rests on its
    second visit alone. Measured in two passes (`planned`), it is corrected by the trend at that visit's time and
    widened by τ² whole (its visit's offset, not the half a point with both visits carries) plus the correction's
    uncertainty; before, it got neither and decided on its one visit: under a drift of one arm far within the sweep
    that raised the cap in .40-.455 of flat sweeps at 5 rounds (docs/design.md §7, one visit left)."""
    rng = np.random.default_rng(14)
    d = rng.normal(0.0, 0.014, size=(200, 6, 10)) - 0.04 * _sweep_times(6, 10)
    d[:, 4, :5] = np.nan
    runs = _passes(d, 5)
    assert not np.any(runs["usable"][:, 4])
    planned = np.ones((200, 6), bool)
    trend = drift_trend(_screened_passes(d, 5), None, runs, planned)
    assert np.all(trend.extra[:, 4] > trend.extra[:, 3])  # τ² whole against half of it, and a longer lever
    lag = 0.04 * (np.mean(_sweep_times(6, 10)[4, 5:]) - np.mean(_sweep_times(6, 10)))  # its visit, from g's mean
    assert np.median(trend.shift[:, 4]) == pytest.approx(-lag, abs=0.006)
    unplanned = drift_trend(_screened_passes(d, 5), None, runs)  # not known to be two passes: as before
    assert np.all(unplanned.extra[:, 4] == 0) and np.all(unplanned.shift[:, 4] == 0)
    assert np.array_equal(unplanned.extra[:, :4], drift_trend(_screened_passes(d, 5), None, _passes(d, 5)).extra[:, :4])


def test_the_trend_s_spread_over_the_sweep_is_added_where_one_arm_trends():
    """SYNTHETIC per-round differences, 6 points, 10 rounds in two passes, 1.4% noise. θ̂ is the ratio at the sweep's
    mean state; where one arm trends over the sweep that state is one moment's choice, and drift_trend adds the
    variance of the fitted trend over the sweep's runs to every point. A 4% linear drift: about 0.04²/12 (a uniform
    ramp's variance) more than the same runs without it (its cost without drift, the noise correction's remainder, is
    in docs/design.md §7: dense16 curved power .394 → .379 at 5 rounds)."""
    rng = np.random.default_rng(13)
    white = rng.normal(0.0, 0.014, size=(400, 6, 10))
    ramp = white + 0.04 * _sweep_times(6, 10)
    plain, drifting = (drift_trend(_screened_passes(d, 5)) for d in (white, ramp))
    assert np.median(drifting.extra - plain.extra) == pytest.approx(0.04**2 / 12, rel=0.25)


def test_one_slowed_round_does_not_decide_the_test():
    """A round 15% slower (a background task the arm-level screen let through) in a pass of one round."""
    rng = np.random.default_rng(5)
    d = rng.normal(0.0, 0.014, size=(2000, 6, 3))
    d[:, 2, 0] -= 0.15
    assert np.mean(residual_test(d, 1) < 0.05) <= 0.08


def test_nothing_to_test_gives_p_one():
    """One pass only, or every point's first pass dropped: p = 1 (no evidence either way)."""
    d = np.random.default_rng(6).normal(size=(6, 4))
    assert residual_test(d, 4) == 1.0
    d[:, 0] = np.nan
    assert residual_test(d, 1) == 1.0


# SYNTHETIC: a drift far beyond any host's (the fused arm 2.7 times faster by the sweep's end, quartic in time), which
# the sparse grid's quadratic trend cannot follow: what the residual test is left for (28% of sweeps at 10 rounds)
UNFITTABLE = replace(PROTOCOL_REGIMES["sparse flat bending drift 8%, two passes"], bend=1.0, bend_power=4)


def _raising_family() -> list[StagedFamily]:
    """A layer family whose fused arm wins 5% at every measured Dff (a raise from 8192 when usable)."""
    dffs = np.array([768.0, 1792.0, 2880.0, 6400.0, 8192.0, 14336.0])
    curve = Curve(dffs=dffs, theta=np.full(6, 0.05), se=np.full(6, 0.004), df=np.full(6, 12.0))
    return [StagedFamily(family="layer family 0", curve=curve, rounds=np.full(6, 4))]


def test_a_rejected_two_pass_test_withholds_the_action_and_says_so_in_the_record():
    usable = decide_curves(_raising_family(), 8192, table=False, sweep_drift=0.4)
    assert usable.decision.action == "raise" and usable.decision.sweep_drift is None
    withheld = decide_curves(_raising_family(), 8192, table=False, sweep_drift=0.001)
    assert withheld.decision.action == "keep" and withheld.decision.recommended_cap == 8192
    assert withheld.decision.sweep_drift == 0.001
    assert "unusable for a decision" in withheld.decision.reason and "measure again" in withheld.decision.reason
    # the record (`crossover --json`, the report's sidecar) carries the p-value only when the test rejected
    assert decision_json(pd.DataFrame(), withheld)["sweep_drift"] == 0.001
    assert "sweep_drift" not in decision_json(pd.DataFrame(), usable)


def test_a_sweep_whose_drift_the_model_cannot_fit_is_unusable_through_the_pipeline_and_one_pass_rows_are_not_tested():
    """SYNTHETIC sweep rows (a flat truth whose fused arm drifts late and far, UNFITTABLE, 10 rounds in two passes),
    read as samples.csv rows with their `pass`: `crossover` keeps, says why and records the p-value; the same rows
    without `pass` (a one-pass sweep, an imported CSV) are not tested."""
    sim = simulate(UNFITTABLE, 10, 20, seed=5)
    _, drift_p = estimate(sim)
    sweep = int(np.argmin(drift_p[:, 0]))
    assert drift_p[sweep, 0] < SWEEP_DRIFT_ALPHA
    samples = as_samples(sim, sweep)
    analysis = analyse(LoadedInput(samples, None, {}), Options(current_default=8192))
    decision = analysis.result.decision
    assert decision.action == "keep" and "unusable for a decision" in decision.reason
    assert analysis.as_json()["sweep_drift"] == pytest.approx(float(drift_p[sweep, 0]), rel=1e-3)
    one_pass = analyse(LoadedInput(samples.assign(**{"pass": ""}), None, {}), Options(current_default=8192))
    assert one_pass.sweep_drift is None and "sweep_drift" not in one_pass.as_json()


def test_until_decided_stops_on_passes_that_disagree_instead_of_calling_the_forced_keep_settled(tmp_path):
    """The SYNTHETIC unusable sweep as a run directory: the until-decided loop looks once, spends no round (more
    rounds add to the second pass and cannot undo drift between the passes) and stops as `drift`, saying why."""
    sim = simulate(UNFITTABLE, 10, 20, seed=5)
    _, drift_p = estimate(sim)
    samples = as_samples(sim, int(np.argmin(drift_p[:, 0])))
    run = write_run(tmp_path / "run", samples, {**SYNTHETIC_META, "device": samples["device"].iloc[0]})
    said: list[str] = []

    def measure_rounds(point: object, rounds: int) -> int:
        raise AssertionError("no round may be spent on data the pass test called unusable")

    record = allocate(run, [], measure_rounds, StopRule(first_rounds=10), 8192, None, time.monotonic(), said.append)
    assert record.stop == "drift" and record.looks == 1 and record.outcome[0] == "keep"
    assert "two passes disagree" in said[-1]


def test_the_sweep_measures_in_two_passes_unless_told_or_resuming_a_run_without_the_column(tmp_path):
    """measure.passes 2 (default) splits n rounds ⌊n/2⌋ + the rest; 1 round, `passes: 1`, or a resumed samples.csv
    written before the `pass` column: one pass, as the run was started."""
    plan = RoundSchedule(rounds=5, warmup_runs=1, order="rotate", seed=0)

    def sweep(passes: int, rounds: int = 5) -> SimpleNamespace:
        measure = SimpleNamespace(passes=passes)
        return SimpleNamespace(
            plan=replace(plan, rounds=rounds), run_dir=tmp_path, config=SimpleNamespace(measure=measure)
        )

    first, second = sweep_loop.passes(sweep(2))
    assert (first.rounds, first.start, second.rounds, second.start) == (2, 0, 5, 2)
    assert [second.pass_of(r) for r in range(5)] == [1, 1, 2, 2, 2] and plan.pass_of(3) == ""
    assert sweep_loop.passes(sweep(1)) == [plan] and len(sweep_loop.passes(sweep(2, rounds=1))) == 1
    (tmp_path / "samples.csv").write_text("# host: x\n" + ",".join(c for c in SAMPLE_COLUMNS if c != "pass") + "\n")
    assert sweep_loop.passes(sweep(2)) == [plan]


def test_centring_the_passes_lets_the_outlier_screen_see_a_slowed_run_despite_a_shared_shift():
    """Both arms 3% faster in the second pass (drift they share), one fallback run 12% slower, 4 rounds in two passes
    of 2: read around the arms' medians the shift looks like spread and hides the slowdown; centred per pass it is
    flagged in most sweeps, and the paired differences do not change. A pass of one run is not centred."""
    rng = np.random.default_rng(8)
    a = rng.normal(0.0, 0.01, size=(500, 6, 4))
    b = rng.normal(0.0, 0.01, size=(500, 6, 4))
    a[..., 2:] += 0.03
    b[..., 2:] += 0.03
    b[:, 2, 3] += np.log(0.88)
    first = np.full((500, 6), 2)
    centred_a, centred_b = centre_passes(a, b, first)
    np.testing.assert_allclose(centred_a - centred_b, a - b, atol=1e-12)
    before = np.mean(screen_outliers([a, b])[1, :, 2, 3])
    after = np.mean(screen_outliers([centred_a, centred_b])[1, :, 2, 3])
    assert before < 0.2 and after > 0.8, (before, after)  # measured 3.8% and 99.4%
    np.testing.assert_array_equal(centre_passes(a[..., :3], b[..., :3], np.ones((500, 6), int))[0], a[..., :3])


def test_a_move_read_at_points_whose_earlier_pass_holds_one_round_is_withheld_until_they_have_four_rounds():
    """Issue 36: measured in passes with one round in the earlier half (3 rounds), the passes' agreement rests on
    single runs and cannot bound a drift of one arm: the raise is withheld, recorded as `drift_not_excluded` and said
    with the remedy; at 4 rounds (2 per pass) at the points the raise reads, the same curve raises."""
    family = _raising_family()[0]
    short = replace(family, rounds=np.full(6, 3), short_passes=True)
    held = decide_curves([short], 8192, table=False).decision
    assert held.action == "keep" and held.withheld is not None
    assert (held.withheld.move, held.withheld.why) == ("raise", "drift_not_excluded")
    assert "a pass of one round per point" in held.reason and "at least 4 rounds (2 per pass)" in held.reason
    enough = replace(short, rounds=np.array([3, 3, 3, 3, 3, 4]))  # 14336, the one point the raise switches
    assert decide_curves([enough], 8192, table=False).decision.action == "raise"


def test_the_summary_marks_two_pass_points_of_three_rounds_and_the_pipeline_withholds_their_move():
    """SYNTHETIC two-pass sweep rows at 3 rounds (the first pass one round) of curved truths: every point's method
    names the pass of one round, no sweep moves the cap, and those that would have say why in the record."""
    sim = simulate(PROTOCOL_REGIMES["sparse curved, two passes"], 3, 30, seed=3)
    withheld = 0
    for sweep in range(30):
        analysis = analyse(LoadedInput(as_samples(sim, sweep), None, {}), Options(current_default=8192))
        assert analysis.summary["method"].astype(str).str.contains("a pass of one round").all()
        decision = analysis.result.decision
        assert decision.action not in ("raise", "lower"), decision.reason
        if decision.withheld is not None and decision.withheld.why == "drift_not_excluded":
            assert "a pass of one round" in decision.reason
            withheld += 1
    assert withheld >= 3  # 13.5% of such sweeps moved the cap before the rule (scripts/decision_calibration.py)


def test_a_failed_run_reaches_no_pass_median_only_padding_does(monkeypatch):
    """The pass medians (centre_passes, the round screen) take NaN as 'no run': only padding after a point's ok runs
    reaches them, never a failed run, which the arm matrices never gather (point_summary's ok mask). SYNTHETIC
    two-pass sweep: a fused run of one point failed (the point goes unpaired: not centred) and both arms of a round
    of another (paired on its 5 ok runs); the estimates equal those of the sweep with the failed rows deleted."""
    from harness.analysis.points import point_summary, sweep_drift
    from tests.support.synthetic_sweeps import linear_curve, synthetic_samples

    samples = synthetic_samples(linear_curve([2048, 4096, 6144, 8192, 10240, 12288], 9000), rounds=6, seed=3)
    samples["pass"] = (samples["round"] >= 3).astype(int) + 1
    failed = ((samples["dff"] == 4096) & (samples["arm"] == "fused") & (samples["round"] == 1)) | (
        (samples["dff"] == 8192) & (samples["round"] == 4)
    )
    samples.loc[failed, ["status", "tok_s", "error"]] = ["fail", float("nan"), "exit 1"]
    seen: list[tuple[np.ndarray, np.ndarray]] = []
    original = sweep_drift.centre_passes

    def spy(a, b, first):
        seen.append((a, b))
        return original(a, b, first)

    monkeypatch.setattr(sweep_drift, "centre_passes", spy)
    with_failures = point_summary.analyse_points(samples).summary
    ((a, b),) = seen
    for y, ok_runs in ((a, [6, 5, 6, 5, 6, 6]), (b, [6, 6, 6, 5, 6, 6])):
        assert (~np.isnan(y)).sum(axis=-1).tolist() == ok_runs
        assert not np.isnan(y[np.arange(y.shape[-1]) < np.array(ok_runs)[:, None]]).any()  # NaN only after them
    without = point_summary.analyse_points(samples[~failed].reset_index(drop=True)).summary
    assert with_failures["method"].tolist()[1] == "welch" and "two passes" in with_failures["method"].tolist()[3]
    assert with_failures["n_failed"].tolist() == [0, 1, 0, 2, 0, 0]  # counted as failures, estimated without them
    pd.testing.assert_frame_equal(with_failures.drop(columns="n_failed"), without.drop(columns="n_failed"))
