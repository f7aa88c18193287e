"""Calibration of the decision engine on SYNTHETIC sweeps with drawn truths (tests/support/simulation.py): curved truths
on sparse (mlxcel-like) and dense (layer) grids, several families, drift the arms do not share, 15% outliers, runs that
were not interleaved, flat truths. Replicate counts are modest; every bound allows 2 Monte-Carlo standard errors.
`python -m tests.support.calibration` prints the whole table."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from harness.analysis.decision.curve import family_curve, find_crossover
from harness.analysis.decision.pipeline import Options, analyse
from harness.analysis.points.inputs import LoadedInput
from harness.analysis.points.stats import estimate_family
from tests.support.calibration import (
    CHECK_REGIMES,
    DENSE16,
    PROTOCOL_REGIMES,
    REGIMES,
    ProtocolScore,
    Score,
    check_pairs,
    estimate,
    fixed,
    markdown_table,
    protocol_scores,
    replicated,
    run_engine,
    score,
    score_protocol,
)
from tests.support.simulation import SPARSE, Regime, as_samples, simulate

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
    drift): the drift model's widening holds per-point coverage near 0.90 (issue 18 item 9; the batch-means widening
    reached 0.79–0.82, no widening 0.69–0.75). Since issue 29 the model widens only where the runs lean towards drift
    (a 4th round must not lower power under white runs): 0.86–0.93 at n = 10, the price of that power; the decision's
    own guarantees (crossover coverage, false actions) are tested above."""
    sc = _score(name, 10)
    _at_least(sc, sc.point_coverage, 0.85)


def test_outliers_at_3_rounds_rarely_move_the_cap_on_a_flat_truth():
    """15% of runs slowed by 10–20%, 3 rounds: at most 3% of sweeps move the cap (issue 18 item 11; the earlier
    engine: 6.0%, before split arms lost their interval: 3.7%; 2.2% ± 0.2% on 4000 sweeps). An arm with all its
    runs slowed alike remains invisible at one point."""
    sc = score(REGIMES["sparse flat 15% outliers"], 3, 2000, seed=303)  # 2000 sweeps: the rate is near 2–3%
    assert sc.action_rate <= 0.03, sc


@pytest.mark.parametrize("n", [3, 5, 10])
def test_check_does_not_fail_two_sweeps_of_one_truth(n):
    """`check`'s gate (regression.judge_decision) on SYNTHETIC pairs of sweeps of one truth: drawn curved truths fail
    only where the truth contradicts the baseline's decision (the baseline kept a cap the truth loses at beyond δ:
    false fails 0 of 200 at 3, 5, 10 rounds); the issue-35 truth with fused ≈ +1% at 8192 under cap 4096 (9 of 20
    pairs failed before) fails none; a truth where fallback wins by exactly δ at the cap fails at about the test's
    level (.040 .055 .055 on 200: scripts/decision_calibration.py --rounds 3 5 10 --sweeps 200 --check-pairs)."""
    pairs = 120
    bound = 0.05 + 2 * np.sqrt(0.05 * 0.95 / pairs)
    for name in (
        "same truth, curved (drawn), cap 8192",
        "same truth, fused +1% at 8192, cap 4096",
        "same truth, fused −1% at 8192, cap 8192",
    ):
        regime, moved, default = CHECK_REGIMES[name]
        result = check_pairs(regime, n, pairs, seed=31 + n, moved=moved, default=default)
        assert result.false_fails <= bound, (name, result)
        if (
            name != "same truth, curved (drawn), cap 8192"
        ):  # no truth here contradicts the baseline: every fail is false
            assert result.contradicted == 0.0 and result.fails == result.false_fails, (name, result)


def test_check_detects_a_crossover_moved_across_the_cap_at_10_rounds():
    """The crossover 25% above the cap moved to 25% below it, 10 rounds: detected in ≥ 80% of pairs where fallback
    then wins by 3% at the cap (.900 on 200), about half where it wins by 2% (.520): the gate asks for a win beyond
    δ = 1% with confidence, so its power is that of the decision's own lower test at the cap."""
    regime, moved, default = CHECK_REGIMES["crossover 10240 → 6144, fused −3% at 8192"]
    result = check_pairs(regime, 10, 120, seed=41, moved=moved, default=default)
    assert result.detected >= 0.80 - 2 * np.sqrt(0.8 * 0.2 / 120), result


def test_under_one_arms_drift_a_flat_truth_rarely_moves_the_cap_on_a_dense_grid():
    """Each arm's own drift on a flat truth, dense grid, 5 rounds: the offsets it gives each point make the family
    scatter more than its intervals allow, and the decision's curve is widened (between_points): 2.5–4% of sweeps
    move the cap (4.5% before issue 29; the sparse grid's 6 points cannot show it: tests/support/calibration.py
    table)."""
    sc = score_protocol(PROTOCOL_REGIMES["dense flat per-arm drift"], fixed(5), 120, seed=29)
    assert sc.wrong_action <= 0.03 + 2 * sc.mc_error(0.03), sc


@pytest.fixture(scope="module")
def sparse_powers() -> dict[int, ProtocolScore]:
    """Sparse curved truths (the same 300 truths at every n: one seed), white noise around a shared drift."""
    return {n: score_protocol(PROTOCOL_REGIMES["sparse curved"], fixed(n), 300, seed=11) for n in (3, 4, 5)}


@pytest.fixture(scope="module")
def two_pass_powers() -> dict[int, ProtocolScore]:
    """The same truths, noise and drift as sparse_powers, each point's rounds in two passes over the grid."""
    regime = PROTOCOL_REGIMES["sparse curved, two passes"]
    return {n: score_protocol(regime, fixed(n), 300, seed=11) for n in (3, 4, 5, 10)}


@pytest.mark.parametrize("passes", ["one pass", "two passes"])
def test_more_rounds_do_not_lower_power_under_white_noise(passes, sparse_powers, two_pass_powers):
    """The same truths at 3, 4, 5 (and 10) rounds: power does not fall. One pass measured 0.51, 0.58, 0.59 (before
    issue 29 the drift model's widening, applied to white runs too, gave 0.51, 0.46, 0.43). Two passes: the drift
    bound (sweep_drift.drift_trend's τ²) is loose with few rounds and tightens as they grow, so power rises with them
    (.28 .37 .39 .55 on 400 sweeps, scripts/decision_calibration.py)."""
    powers = sparse_powers if passes == "one pass" else two_pass_powers
    rounds = sorted(powers)
    for few, more in zip(rounds, rounds[1:], strict=False):
        a, b = powers[few], powers[more]
        assert b.power >= a.power - 2 * a.mc_error(a.power, a.actionable), (few, a, more, b)


def test_a_lower_never_switches_a_clear_fused_win(sparse_powers):
    """A lower goes to the largest measured Dff where fused is not shown worse: it switches a measured point where
    fused truly wins beyond δ only through a false 'worse' (measured 0–0.7%; 11–24% when it went to the crossover
    interval's lower end)."""
    for sc in sparse_powers.values():
        assert sc.over_lower <= 0.01 + 2 * sc.mc_error(0.01), sc


@pytest.mark.parametrize("order", ["forward", "two_passes"])
def test_the_summary_runs_the_same_estimate_as_the_simulation(order):
    """The calibrated array path and `moecal summarize` on the same sweep (as samples.csv rows, with their `pass`
    when measured in two passes) agree; a one-pass sweep is exactly estimate_family's."""
    regime = Regime("one", SPARSE, order=order)
    sim = simulate(regime, 5, 3, seed=7)
    comparison, drift_p = estimate(sim)
    if order == "forward":
        assert drift_p is None
        exact, _ = estimate_family(sim.fused, sim.fallback, np.ones(sim.truth.shape, bool))
        np.testing.assert_array_equal(comparison.se, exact.se)
    named_any = False
    for sweep in range(3):
        analysis = analyse(LoadedInput(as_samples(sim, sweep), None, {}), Options(current_default=8192))
        summary = analysis.summary
        assert summary["dff"].tolist() == SPARSE.tolist()
        np.testing.assert_allclose(summary["ln_estimate"], comparison.theta[sweep, 0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(summary["se"], comparison.se[sweep, 0], rtol=1e-9)
        # the method names the drift bound of two passes by its variance factor (none in one pass)
        factors = np.broadcast_to(comparison.pass_bound, comparison.se.shape)[sweep, 0]
        for method, factor in zip(summary["method"], factors, strict=True):
            named = f"two passes: drift bound ×{factor:.1f}" in method
            assert named == (order == "two_passes" and factor >= 1.05), (method, factor)
        named_any |= any("drift bound" in m for m in summary["method"])
        curve = family_curve(summary, np.arange(len(summary)), "linear")[0]
        assert analysis.result.crossover == find_crossover(curve)
        assert analysis.sweep_drift == (None if drift_p is None else pytest.approx(float(drift_p[sweep, 0])))
    assert named_any == (order == "two_passes")  # not vacuous: some two-pass point was widened


def test_two_passes_keep_a_step_of_one_arm_from_moving_the_cap():
    """A flat truth whose fused arm gets 2% faster half way through the sweep (a governor or thermal state settling),
    10 rounds: measured in one pass the later points look like fused wins and the cap moves in about half the sweeps
    (55% measured on 400); with each point's rounds split over two passes over the grid (sweep_drift) each point
    averages both states, the passes' difference is read as a trend in time and bounded: 0-1%
    (tests/support/calibration.py table)."""
    one = score_protocol(PROTOCOL_REGIMES["sparse flat step 2%"], fixed(10), 150, seed=31)
    two = score_protocol(PROTOCOL_REGIMES["sparse flat step 2%, two passes"], fixed(10), 150, seed=31)
    assert one.wrong_action >= 0.3, one
    assert two.wrong_action <= 0.03 + 2 * two.mc_error(0.03), two


def test_the_two_pass_test_rarely_withholds_a_decision_without_drift():
    """Curved truths without drift of one arm, two passes, 5 rounds: the residual test (sweep_drift.drift_trend) makes
    the data unusable (a withheld action: power lost) in about its level of sweeps (1%)."""
    sim = simulate(PROTOCOL_REGIMES["sparse curved, two passes"], 5, 300, seed=37)
    withheld = np.mean([r.decision.sweep_drift is not None for r in run_engine(sim, 5)])
    assert withheld <= 0.01 + 2 * np.sqrt(0.01 * 0.99 / 300), withheld


def test_two_passes_keep_each_arms_own_drift_from_moving_the_cap_at_5_rounds():
    """A flat truth under each arm's own drift, 5 rounds: one pass moves the cap in about 11% of sweeps (400 measured),
    two passes (centred, widened by the drift they cannot exclude, tested) in about 0.3-0.7%
    (scripts/decision_calibration.py)."""
    one = score_protocol(PROTOCOL_REGIMES["sparse flat per-arm drift"], fixed(5), 200, seed=41)
    two = score_protocol(PROTOCOL_REGIMES["sparse flat per-arm drift, two passes"], fixed(5), 200, seed=41)
    assert one.wrong_action >= 0.05, one
    assert two.wrong_action <= 0.03 + 2 * two.mc_error(0.03), two


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("sparse flat per-arm drift, two passes", 3),
        ("sparse flat per-arm drift, two passes", 4),
        ("sparse flat slow per-arm drift, two passes", 3),
        ("sparse flat slow per-arm drift, two passes", 5),
        ("sparse 3 families flat slow drift, two passes", 4),
        ("sparse flat step 2%, two passes", 3),
        ("sparse flat bending drift 8%, two passes", 5),
    ],
)
def test_drift_of_one_arm_rarely_moves_the_cap_at_few_rounds(name, n):
    """Issue 29's ≤ 3% at every n, at the rounds where it was not met: each arm's own drift at 3-4 rounds, the same
    drift 5x slower (its memory outlasts the sweep: both passes share most of its offset) and a 2% step of the fused
    arm at 3 rounds. Widening every point by the largest drift variance the passes cannot exclude
    (then sweep_drift.between_passes; since issue 36 drift_trend's τ² around the trend), measured on 400 sweeps:
    .018 .003; .028 .015; .005; .020 (before: .055 .037; .085 .087; .043; .055). A drift of the fused arm that bends
    8% by the sweep's end, 5 rounds: .044 ± .007 → .026 ± .006 (800 sweeps, seed 7) once every point visited in
    both passes is corrected and widened and the trend's spread over the sweep is in the variance (drift_trend)."""
    sc = score_protocol(PROTOCOL_REGIMES[name], fixed(n), 300, seed=zlib.crc32(f"{name} {n}".encode()) % 10_000)
    assert sc.wrong_action <= 0.03 + 2 * sc.mc_error(0.03), sc


def test_the_replication_rule_needs_each_pass_on_the_moves_side():
    """The replication rule measured for issue 29 (tests.support.calibration.replicated, docs/design.md §7; not in the
    decision): a move stands only when each pass on its own lies beyond 1 ± share·δ at the points the move was
    tested at. On SYNTHETIC flat sweeps under a slow drift of each arm it only ever turns a move into keep."""
    sim = simulate(PROTOCOL_REGIMES["sparse flat slow per-arm drift, two passes"], 3, 100, seed=43)
    # as measured then: before issue 36's rule that withholds every move at 3 rounds (a pass of one round)
    plain, ruled = run_engine(sim, 3, one_round_rule=False), run_engine(sim, 3, replication=0.0, one_round_rule=False)
    assert all(b.decision.action in (a.decision.action, "keep") for a, b in zip(plain, ruled, strict=True))
    moved = [r for r in plain if r.decision.action in ("raise", "lower")]
    assert moved, "the slow drift moves the cap in some of 100 sweeps (measured 2.8% of 400)"
    result = moved[0]
    sign = 1.0 if result.decision.action == "raise" else -1.0
    question = "fused" if sign > 0 else "fallback"
    family = next(f for f in result.families if f.decision.action == result.decision.action)
    at = [SPARSE.tolist().index(t.dff) for t in family.decision.tests if t.question == question]
    passes = np.zeros((len(result.families), len(SPARSE), 2))
    passes[:, at] = sign * 0.015
    assert replicated(result, passes, SPARSE, share=0.0)
    assert not replicated(result, passes, SPARSE, share=2.0)  # each pass must lie beyond 2% then
    passes[:, at, 1] = -sign * 0.001  # the second pass points the other way
    assert not replicated(result, passes, SPARSE, share=0.0)
    passes[:, at, 1] = np.nan  # every run of a pass dropped: nothing replicates
    assert not replicated(result, passes, SPARSE, share=0.0)


def test_the_replication_rule_leaves_one_pass_sweeps_alone():
    sim = simulate(PROTOCOL_REGIMES["sparse flat slow per-arm drift"], 3, 40, seed=47)
    plain, ruled = run_engine(sim, 3), run_engine(sim, 3, replication=2.0)
    assert [r.decision for r in plain] == [r.decision for r in ruled]


@pytest.mark.parametrize(
    ("name", "n", "ceiling"),
    [
        ("sparse flat slow drift, bench_decode.sh file pairs", 3, 0.03),
        ("sparse flat slow drift, bench_decode.sh file pairs", 5, 0.03),
        ("sparse flat slow drift, sweep CSV", 3, 0.0),
        ("sparse flat slow drift, sweep CSV", 10, 0.0),
    ],
)
def test_imported_formats_under_slow_drift_of_one_arm_rarely_act_on_a_flat_truth(name, n, ceiling):
    """Each arm's own slow drift (AR(1) ρ = .95 per run, sd 1%), not interleaved (issue 36): file pairs are passes,
    paired by pass and bounded by their agreement (3 pairs: a pass of one round, withheld; 5 pairs: 1.8% of 400
    sweeps); a sweep CSV, one visit per point, never moves the cap (13.3% of sweeps acted at n = 3 before the rule:
    docs/design.md §7)."""
    sc = _score(name, n)
    assert sc.action_rate <= ceiling + 2 * sc.mc_error(ceiling), sc


@pytest.mark.parametrize("n", [10, 20])
def test_slow_drift_of_one_arm_on_a_dense_grid_is_estimated_not_called_unusable(n):
    """Issue 36: each arm's own slow drift (AR(1) ρ = .95 per run, sd 1%) on a 16-point grid, flat truth. The pass F
    test called .825/.990 of these sweeps unusable at 10/20 rounds (200 sweeps), while the bound alone acted on none;
    with the drift estimated (a quadratic trend in time, τ² bounded around it) only the residual test can withhold,
    measured .050/.045 on 200 sweeps (target ≤ 10%; docs/design.md §7), and the cap still does not move."""
    sc = score_protocol(PROTOCOL_REGIMES["dense16 flat slow drift, two passes"], fixed(n), 150, seed=60 + n)
    assert sc.unusable <= 0.10 + 2 * sc.mc_error(0.10), sc
    assert sc.wrong_action <= 0.03 + 2 * sc.mc_error(0.03), sc


@pytest.mark.parametrize("n", [10, 20])
def test_slow_drift_of_one_arm_in_imported_file_pairs_is_estimated_not_called_unusable(n):
    """Issue 36's "unusable in ≤ 10% of drift sweeps at n ≥ 10" for the format mlxcel publishes: bench_decode.sh file
    pairs (each pair a pass) under each arm's own slow drift (AR(1) ρ = .95 per run, sd 1%), flat truth. The pass F
    test called .065/.200 of these sweeps unusable at 10/20 pairs; with the drift estimated .030/.025 (2,000 sweeps,
    `scripts/decision_calibration.py --table`, docs/design.md §7). 150 sweeps: the bound allows 2 Monte-Carlo
    standard errors at 10% (±.024), so it guards the target, not a regression below it: these seeds read .040/.007
    here and .107/.113 on the engine before the drift estimate (4318d72), which passes too."""
    name = "sparse flat slow drift, bench_decode.sh file pairs"
    sc = score_protocol(PROTOCOL_REGIMES[name], fixed(n), 150, seed=70 + n)
    assert sc.unusable <= 0.10 + 2 * sc.mc_error(0.10), sc
    assert sc.wrong_action <= 0.03 + 2 * sc.mc_error(0.03), sc


@pytest.mark.parametrize(
    ("name", "n"),
    [(name, n) for name in ("sparse flat bending drift 8%, two passes", "sparse flat slow per-arm drift, two passes")
     for n in (10, 20)],
)  # fmt: skip
def test_a_drift_the_trend_follows_one_order_up_is_not_called_unusable(name, n):
    """Issue 36's "unusable in ≤ 10% of drift sweeps at n ≥ 10" where the linear trend of the sparse grid falls short:
    a drift of the fused arm that bends (8% by the end, quadratic in time) and each arm's slow wander (ρ = .98 per
    run). Before the trend stepped up an order where its residual test rejects, 400 sweeps read .125/.247 and
    .113/.105 at 10/20 rounds (1f1fe54); now at most .006 at 2,000 sweeps (docs/design.md §7, one order up), with
    no more flat false actions. 150 sweeps: the bounds allow 2 Monte-Carlo standard errors (±.024 at 10%); these
    seeds read .007/0 and 0/0 here, .120/.273 and .060/.133 on 1f1fe54 (the bending drift at 20 rounds fails)."""
    sc = score_protocol(PROTOCOL_REGIMES[name], fixed(n), 150, seed=80 + n)
    assert sc.unusable <= 0.10 + 2 * sc.mc_error(0.10), sc
    assert sc.wrong_action <= 0.03 + 2 * sc.mc_error(0.03), sc


def test_a_drift_far_within_the_sweep_does_not_raise_the_cap_on_the_runs_of_one_visit():
    """SYNTHETIC, beyond the calibration: the fused arm 40% faster by the sweep's end, most of it in the last fifth
    ("sparse flat late drift 40%, two passes"), 5 rounds (2 + 3 per point). The outlier screen drops a late point's 2
    first-pass runs against its 3 drifted ones; decided on that one visit, the cap rose in .40 (1f1fe54) and .455
    (the trend stepped up an order) of 200 flat sweeps; with the visit's offset carried whole .060 (docs/design.md
    §7, one visit left). 100 sweeps: bound .15, about 3.5 Monte-Carlo errors above .06 and 7 under .40."""
    sc = score_protocol(PROTOCOL_REGIMES["sparse flat late drift 40%, two passes"], fixed(5), 100, seed=91)
    assert sc.wrong_action <= 0.15, sc


def test_the_regime_table_prints_each_regimes_scores_in_one_row():
    """`scripts/decision_calibration.py --table` (docs/design.md §7's regime × n table): a markdown row per regime whose
    cells are protocol_scores' figures at each n, in the doc's notation (0, .xyz, – where undefined: power and
    coverage on a flat truth, unusable in one pass), runs per arm = n × points."""
    names = ["sparse curved, two passes", "sparse flat slow drift, sweep CSV"]
    regimes = [PROTOCOL_REGIMES[name] for name in names]
    lines = list(markdown_table(regimes, [4, 5], 12, seed=3))
    assert lines[0].startswith("| regime | false actions | power |") and len(lines) == 5
    scores = list(protocol_scores(regimes, [fixed(4), fixed(5)], 12, seed=3))
    for line, name, pair in zip(lines[2:4], names, (scores[:2], scores[2:]), strict=True):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[0] == name
        assert [float(x) for x in cells[1].split()] == [round(sc.wrong_action, 3) for sc in pair]
        assert cells[-1] == "24 30"
    curved, flat = (line.strip("|").split("|") for line in lines[2:4])
    assert flat[2].split() == ["–", "–"] and flat[5].split() == ["–", "–"]  # no power, no residual test in one pass
    assert curved[5].split() != ["–", "–"] and "12 SYNTHETIC sweeps per cell, seed 3" in lines[4]


def test_an_interval_rarely_closes_at_the_last_measured_dff_with_the_truth_beyond_it():
    """Issue 36 saw an interval closed at 16384 with the truth at 16522. A crossing beyond the last measured Dff needs
    fused still winning there, so the interval closes there only when the point's own test rejects a ratio of 1: an
    error of at most α/2 of that test (1.3% ± .7% at 3 rounds, 0 at 5, .3% at 10 on 300 SYNTHETIC 16-point sweeps with
    the crossover drawn in 16400–17000), not a fault of the widening to measured Dff, which changes nothing there."""
    regime = Regime("dense16 crossover beyond the grid", DENSE16, crossover=(16400.0, 17000.0), order="two_passes")
    sim = simulate(regime, 5, 300, seed=82)
    closed = [
        math.isfinite(f.crossover.ci_high) and f.crossover.ci_high <= DENSE16[-1]
        for r in run_engine(sim, 5)
        for f in r.families
    ]
    share = float(np.mean(closed))
    assert share <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / len(closed)), share
