"""Crossover, its test-inversion interval and the keep/raise/lower policy, on the docs/design.md §6 example (the fixture
tests/fixtures/gb10-design-example.csv) and SYNTHETIC sweeps."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.decision.cap_move import recommend
from harness.analysis.decision.cap_target import CapTarget
from harness.analysis.decision.curve import Curve, acceptance_set, find_crossover
from harness.analysis.decision.decision_json import decision_from_json
from harness.analysis.decision.pipeline import Options, analyse, analyse_path, save_summary
from harness.analysis.points.inputs import LoadedInput
from harness.policy import Policy
from harness.runs.formats import read_provenance
from tests.support.helpers import run_cli
from tests.support.synthetic_sweeps import linear_curve, synthetic_samples, write_run

DESIGN_CSV = Path(__file__).parents[2] / "fixtures" / "gb10-design-example.csv"
JULY_03_CSV = Path(__file__).parents[2] / "fixtures" / "gb10-sweep-2026-07-03.csv"  # mlxcel's published sweep


def _analyse(samples: pd.DataFrame, **options: object):
    return analyse(LoadedInput(samples, None, {}), Options(**options))


def _curve(dffs, ratios, se=0.005, df=20.0, interpolation="linear") -> Curve:
    n = len(dffs)
    return Curve(
        dffs=np.array(dffs, float),
        theta=np.log(ratios),
        se=np.full(n, se),
        df=np.full(n, df),
        interpolation=interpolation,
    )


@pytest.mark.parametrize(("fixture", "ours"), [(JULY_03_CSV, 12879), (DESIGN_CSV, 11905)])
def test_published_gb10_sweeps_keep_8192_with_intervals_that_hold_between_points(fixture, ours):
    """The maintainers' crossovers (7968 on 07-03, 7672 on 07-10) interpolate to llama-4-scout's "break-even at
    8192", an A/A point: llama4 never runs the fused kernel, so both arms ran gather_qmm. Read from the names (no
    model folders beside a published CSV), that point is null; nothing was measured between 6400 and 14336."""
    done = run_cli("crossover", fixture, "--json", "--current-default", "8192")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)  # exactly one JSON object, nothing else on stdout
    assert result["outcome"] == "crossing"
    assert result["crossover_dff"] == pytest.approx(ours, abs=1)
    # the interval reaches the measured Dff around the crossing (… 14336): the line between them is a guess
    assert result["ci_low"] <= 6400 and result["ci_high"] == 14336
    assert (result["action"], result["recommended_cap"]) == ("keep", 8192)
    # the keep rests on the measured neighbours of the cap: 6400 (fallback not shown to win) and 14336 (fused not
    # shown to win); a hint names more rounds only where one of them is undecided, and the gap between them is
    # named as the place to measure
    hint = result["rounds_hint"]
    assert hint is None or hint["dff"] in (6400, 14336)
    assert "between 6400 and 14336" in result["reason"]
    assert result["apply"] == "MLXCEL_FUSED_MOE_MAX_DFF=8192"
    scout = next(p for p in result["points"] if p["model"] == "llama-4-scout-17b-4bit")
    assert scout["verdict"] == "null" and scout["reason"].startswith("A/A point: the name matches llama-4-*")
    caps = {row["cap"]: row for row in result["candidate_caps"]}
    assert [s["model"] for s in caps[14336]["switched"]] == ["mixtral-8x7b-4bit"]


@pytest.mark.parametrize("fixture", [JULY_03_CSV, DESIGN_CSV])
def test_a_line_across_the_unmeasured_gap_does_not_raise_by_itself(fixture):
    """Without llama-4-scout (its fused arm never ran the fused kernel: llama4 is not wired in mlxcel) nothing was
    measured between 6400 and 14336; a straight line across that gap is reported, never acted on."""
    options = Options(current_default=8192, excludes={"llama-4-scout-17b-4bit": "llama4 not wired"})
    d = analyse_path(fixture, options).result.decision
    assert (d.action, d.recommended_cap) == ("keep", 8192)
    assert "between 6400 and 14336: no measured point; measure Dff" in d.reason
    assert "Raise it" not in d.reason and "Keep 8192" in d.reason
    if fixture == DESIGN_CSV:  # fused wins clearly at 6400 there: the line would have raised to 8448
        assert "a raise to 8448 was withheld because no Dff between 6400 and 14336 was measured" in d.reason
        # the same fact as data, which the plot reads (the reason's words are rendered from it)
        assert d.withheld is not None
        assert (d.withheld.move, d.withheld.cap, d.withheld.why, d.withheld.gap) == (
            "raise", 8448, "unmeasured_gap", (6400, 14336)
        )  # fmt: skip
        assert d.withheld.words() in d.reason


def test_log2_interpolation():
    linear = find_crossover(_curve([4096, 16384], [1.1, 1 / 1.1]))
    log2 = find_crossover(_curve([4096, 16384], [1.1, 1 / 1.1], interpolation="log2"))
    assert linear.dff == pytest.approx(10240) and log2.dff == pytest.approx(8192)


def test_acceptance_set_is_fieller_between_two_points():
    """Between two points the set is exactly where |θ̂(x)| ≤ t·se(x); check it on a dense grid."""
    curve = _curve([4096, 8192], [1.03, 0.98], se=0.006, df=8)
    ((low, high),) = acceptance_set(curve)
    theta, se, df = curve.at(np.linspace(4096, 8192, 4001))
    from harness.analysis.points.stats import t_quantile

    inside = np.abs(theta) <= t_quantile(0.95, df) * se
    xs = np.linspace(4096, 8192, 4001)[inside]
    assert low == pytest.approx(xs[0], abs=2) and high == pytest.approx(xs[-1], abs=2)


def test_no_crossing_fused_everywhere():
    analysis = _analyse(synthetic_samples({1024: 1.2, 2048: 1.15, 4096: 1.1}, seed=1), current_default=1024)
    c, d = analysis.result.crossover, analysis.result.decision
    assert c.outcome == "fused_everywhere" and c.dff is None
    assert c.ci_high == math.inf and c.ci_low == 4096  # "above the largest measured Dff", open above
    assert (d.action, d.recommended_cap) == ("raise", 4096)
    assert "unmeasured" in d.reason
    as_json = analysis.as_json()
    assert as_json["crossover_dff"] is None and as_json["ci_high"] is None and as_json["outcome"] == "fused_everywhere"
    assert (
        _analyse(
            synthetic_samples({1024: 1.2, 2048: 1.15, 4096: 1.1}, seed=1), current_default=8192
        ).result.decision.action
        == "keep"
    )


def test_no_crossing_fused_never():
    analysis = _analyse(synthetic_samples({1024: 0.9, 2048: 0.85}, seed=2), current_default=8192)
    c, d = analysis.result.crossover, analysis.result.decision
    assert c.outcome == "fused_never" and c.ci_low == -math.inf and c.ci_high == 1024
    assert (d.action, d.recommended_cap) == ("lower", 768)  # the largest multiple of 256 below 1024
    assert "below the smallest measured Dff 1024" in d.reason
    assert (
        _analyse(synthetic_samples({1024: 0.9, 2048: 0.85}, seed=2), current_default=512).result.decision.action
        == "keep"
    )


def test_multiple_crossings_are_all_reported_and_the_first_decides():
    ratios = {1024: 1.1, 2048: 0.95, 3072: 1.05, 4096: 0.9}
    analysis = _analyse(synthetic_samples(ratios, rounds=10, noise=0.005, seed=3))
    c = analysis.result.crossover
    assert [x.direction for x in c.crossings] == ["down", "up", "down"]
    assert [x.between for x in c.crossings] == [(1024, 2048), (2048, 3072), (3072, 4096)]
    assert c.dff == pytest.approx(c.crossings[0].dff) and 1024 < c.dff < 2048
    assert all(x.ci_low <= x.dff <= x.ci_high for x in c.crossings)
    assert c.ci_low <= c.crossings[0].ci_low and c.ci_high >= c.crossings[-1].ci_high  # the hull of every piece


def test_a_curve_that_starts_below_1_crosses_after_its_winning_region():
    c = find_crossover(_curve([1024, 2048, 4096], [0.95, 1.05, 0.9]))
    assert c.outcome == "crossing" and 2048 < c.dff < 4096
    assert [x.direction for x in c.crossings] == ["up", "down"]  # every crossing stays listed
    assert find_crossover(_curve([1024, 2048], [0.95, 0.9])).outcome == "fused_never"


def test_the_interval_reaches_the_measured_points_around_a_curved_crossing():
    """A narrow Fieller interval around a straight line (se tiny) still spans the bracket of measured points."""
    c = find_crossover(_curve([4096, 8192, 16384], [1.05, 1.01, 0.95], se=0.0005, df=100))
    assert (c.ci_low, c.ci_high) == (8192, 16384) and c.gap == (8192, 16384)
    assert c.gap_text() == f"between 8192 and 16384: no measured point; measure Dff {c.next_dff} next"


CURVE = _curve([4096, 6144, 8192, 10240, 12288], [1.06, 1.03, 1.0, 0.97, 0.94], se=0.004, df=30)


@pytest.mark.parametrize(
    ("current", "action", "cap"),
    [
        (8192, "keep", 8192),  # equivalent at the cap
        (4096, "raise", 6144),  # fused wins beyond 1 + δ at the measured 6144, not at 8192
        # fallback wins beyond 1 − δ at the cap: to the largest measured Dff where fused is not shown worse (8192,
        # equivalent), not to the crossover interval's lower end 6144, where fused wins by 3%
        (12288, "lower", 8192),
        (16384, "lower", 8192),  # above the measured range: judged at the largest measured Dff
        (2048, "raise", 6144),  # below the measured range: fused wins beyond the margin at 4096 and 6144
        (None, "set", 6144),  # no default: the crossover interval's lower end
    ],
)
def test_policy(current, action, cap):
    crossover = find_crossover(CURVE)
    decision = recommend(CURVE, crossover, current, Policy(grid=256))
    assert (decision.action, decision.recommended_cap) == (action, cap), decision.reason
    assert decision.reason.endswith(".")
    assert decision.apply is None  # the engine decides a number; the run's target names the line
    assert CapTarget(env="CAP").setting(decision.recommended_cap) == f"CAP={cap}"


def test_a_withheld_run_keeps_and_says_why():
    decision = recommend(CURVE, find_crossover(CURVE), 12288, withhold="drift larger than the noise model.")
    assert decision.action == "keep" and decision.recommended_cap == 12288
    assert decision.reason.endswith("a lower to 8192 was withheld because drift larger than the noise model.")
    assert (decision.withheld.move, decision.withheld.cap, decision.withheld.why) == ("lower", 8192, "aa_drift")
    assert "Lower it" not in decision.reason  # a reason never says both lower and keep


def test_shape_families_are_decided_separately_and_the_smallest_cap_binds():
    small = synthetic_samples(linear_curve([2048, 4096, 6144, 8192], 5000), d_model=2048, seed=4)
    large = synthetic_samples(linear_curve([2048, 4096, 6144, 8192], 3000), d_model=4096, seed=5)
    analysis = _analyse(pd.concat([small, large], ignore_index=True), current_default=8192)
    families = analysis.result.families
    assert len(families) == 2
    caps = sorted(f.decision.recommended_cap for f in families)
    assert analysis.result.decision.recommended_cap == caps[0]
    assert analysis.result.decision.action == "lower"
    assert "d_model 4096" in analysis.result.decision.reason and "Bonferroni" in analysis.result.decision.reason
    assert "one-sided 97.5%" in analysis.result.decision.reason  # each of two families' policy intervals at 1 − α/2
    assert len(analysis.as_json()["families"]) == 2


def test_a_raise_one_family_does_not_support_is_withheld_as_data():
    """Two layer families at the current cap 4096: one whose fused path wins well past 8192 (it alone would raise),
    one that crosses just above 4096 (keep). One cap serves both, so the overall decision keeps 4096 and records the
    raise it held back, and which family did not support it, as a structured field."""
    dffs = [2048, 4096, 6144, 8192]
    wide = synthetic_samples(linear_curve(dffs, 20000), d_model=2048, seed=6, rounds=12)
    near = synthetic_samples(linear_curve(dffs, 4700), d_model=4096, seed=7, rounds=12)
    result = _analyse(pd.concat([wide, near], ignore_index=True), current_default=4096).result
    assert sorted(f.decision.action for f in result.families) == ["keep", "raise"]
    d = result.decision
    assert (d.action, d.recommended_cap) == ("keep", 4096)
    raised = next(f.decision.recommended_cap for f in result.families if f.decision.action == "raise")
    assert (d.withheld.move, d.withheld.cap, d.withheld.why) == ("raise", raised, "family_disagrees")
    assert any("d_model 4096" in family for family in d.withheld.families)
    assert d.withheld.words() in d.reason


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


def test_summary_csv_round_trip_gives_the_same_decision(tmp_path):
    run_dir = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 2048, 4096, 6144, 8192], 5000), seed=6))
    path = save_summary(analyse_path(run_dir), run_dir / "summary.csv")
    assert read_provenance(path)["summary.margin"] == "0.01"
    from_samples = analyse_path(run_dir)
    from_summary = analyse_path(path)
    numbers = ["dff", "ratio", "estimate", "ci_low", "ci_high", "ln_estimate", "se", "df"]
    assert np.allclose(from_summary.summary[numbers].to_numpy(float), from_samples.summary[numbers].to_numpy(float))
    assert list(from_summary.summary["verdict"]) == list(from_samples.summary["verdict"])
    assert from_summary.result.crossover == from_samples.result.crossover
    assert from_summary.noise_scale is None


def test_recommend_prints_the_decision_only(tmp_path):
    run_dir = write_run(tmp_path / "run", synthetic_samples(linear_curve([1024, 2048, 4096, 6144, 8192], 5000), seed=8))
    done = run_cli("recommend", run_dir, "--current-default", "4096", "--margin", "0.02")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("crossover: Dff ≈ ") and "decision: " in done.stdout
    assert "1 − 2.0%" in done.stdout and "estimate" not in done.stdout.split("decision:")[0]


def test_terminal_tables_fit_80_columns_without_cutting_numbers():
    from rich.console import Console

    from harness.analysis import number_format
    from harness.output.tables.summary_table import print_summary

    wide = synthetic_samples({512: 1.3, 8192: 0.95}, rounds=3, seed=9, d_model=4096)
    wide["model"] = "llama-4-scout-17b-16e-instruct-4bit"  # longer than any column should be
    for summary in (analyse_path(DESIGN_CSV).summary, _analyse(wide).summary):
        console = Console(width=80, record=True, color_system=None)
        print_summary(summary, "title", console)
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= 80
        for _, row in summary.iterrows():
            numbers = (
                number_format.tok_s(row["fallback_tok_s"]),
                number_format.interval(row["ci_low"], row["ci_high"]),
                str(row["verdict"]),
            )
            row_line = next(line for line in lines if line.lstrip().startswith(str(int(row["dff"]))))
            assert all(n in row_line for n in numbers), row_line


def test_two_models_at_one_dff_are_one_curve_point(tmp_path):
    """SYNTHETIC mlxcel CSV: two checkpoints with the same expert size (qwen3 and its VL variant, Dff 768) in one
    command family. They are combined into one curve point (inverse-variance weighted), not a crash."""
    lines = DESIGN_CSV.read_text().splitlines(keepends=True)
    header = next(i for i, line in enumerate(lines) if line.startswith("model,"))
    twin = lines[header + 1].replace("lfm2-8b-a1b-4bit", "lfm2-8b-a1b-twin-4bit").replace("141.92", "140.1")
    path = tmp_path / "twins.csv"
    path.write_text("".join([*lines[: header + 2], twin, *lines[header + 2 :]]))
    analysis = analyse_path(path, Options(current_default=8192))
    family = analysis.result.families[0]
    # 5 points, 4 distinct Dffs, one of them (llama-4-scout, Dff 8192) an A/A point its name gives away
    assert len(analysis.summary) == 5 and family.valid_points == 3
    assert analysis.result.decision.action == "keep"


def test_models_the_config_expected_null_stay_null_in_a_single_run_analysis():
    """SYNTHETIC samples: a run whose provenance records `expect_null` for a model (moecal init's prediction, then
    measured with --measure-null) keeps that model null in summarize/crossover/report too, with the prediction."""
    samples = synthetic_samples(linear_curve([1024, 4096, 8192], 5000), seed=4)
    loaded = LoadedInput(samples, None, {"expect_null": {"synthetic-layer": "mxfp4 quantization"}})
    analysis = analyse(loaded, Options(current_default=4096))
    assert set(analysis.summary["verdict"]) == {"null"}
    assert analysis.summary["reason"].str.contains("expected null: mxfp4 quantization").all()
    assert analysis.options.excludes == {}  # derived from the run, not recorded as a user option


def test_models_that_disagree_at_one_dff_are_not_averaged_into_a_confident_point(tmp_path):
    """SYNTHETIC: a twin of phi-3.5-moe at Dff 6400 whose fused runs are 6% slower (ratio ≈ 0.976 against 1.036):
    Cochran's Q rejects agreement, the random-effects point is wide, and the decision says so."""
    lines = DESIGN_CSV.read_text().splitlines(keepends=True)
    phi = next(line for line in lines if line.startswith("phi-3.5-moe-4bit"))
    fields = phi.split(",")
    fields[0] = "phi-twin-4bit"
    fields[7:11] = [f"{float(v) * 0.94:.2f}" for v in fields[7:11]]
    path = tmp_path / "disagree.csv"
    path.write_text("".join(lines) + ",".join(fields))
    analysis = analyse_path(path, Options(current_default=8192))
    assert "the models at Dff 6400 (phi-3.5-moe-4bit, phi-twin-4bit) disagree" in analysis.result.decision.reason
    summary = analysis.summary
    rows = summary[summary["dff"] == 6400]
    from harness.analysis.decision.curve import family_curve

    curve = family_curve(summary, np.flatnonzero(summary["verdict"] != "null"), "linear")[0]
    pooled_se = curve.se[list(curve.dffs).index(6400)]
    assert pooled_se > 3 * rows["se"].max()  # widened by the spread between them, not narrowed by pooling


def test_the_cap_line_belongs_to_the_run_target_not_the_engine():
    """The engine decides a number; the run's target names the variable. A built-in run that did not record
    cap_env gets no line (mlxcel's variable does not leak into CPU runs); a command run gets its kind's default."""
    assert CapTarget.of_run({"workload": "layer"}).setting(4096) is None
    assert CapTarget.of_run({"workload": "command"}).setting(4096) == "MLXCEL_FUSED_MOE_MAX_DFF=4096"
    assert CapTarget.of_run({"workload": "command", "cap_env": "OTHER_CAP"}).setting(4096) == "OTHER_CAP=4096"
    assert CapTarget.of_run({"cap_env": ""}).setting(4096) is None
    assert CapTarget(env="X").setting(None) is None


@pytest.mark.parametrize("path", [DESIGN_CSV, JULY_03_CSV])
def test_the_decision_reads_back_from_its_json_record(path):
    """Decision.from_json (what a report's sidecar gives back) keeps what was decided and why: action, cap, reason,
    apply line, rounds hint, drift between points and the withheld move (move, cap, why) — the JSON through a
    json.dumps round trip, as the sidecar stores it."""
    analysis = analyse_path(path, Options(current_default=8192))
    decided = analysis.result.decision
    back = decision_from_json(json.loads(json.dumps(analysis.as_json())))
    assert (back.action, back.recommended_cap, back.reason, back.apply) == (
        decided.action,
        decided.recommended_cap,
        decided.reason,
        decided.apply,
    )
    assert (back.rounds_dff, back.rounds_needed) == (decided.rounds_dff, decided.rounds_needed)
    assert back.drift_between_points == pytest.approx(decided.drift_between_points, abs=1e-5)
    held = decided.withheld
    assert (back.withheld and (back.withheld.move, back.withheld.cap, back.withheld.why)) == (
        held and (held.move, held.cap, held.why)
    )
