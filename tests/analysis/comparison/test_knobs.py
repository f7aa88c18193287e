"""Launch knobs (harness.config.knobs, harness.analysis.comparison.knobs): a sweep over MLXCEL_FUSED_MOE_SGY through the
SYNTHETIC emulation of mlxcel-bench-decode (tests/fixtures/emulated_mlxcel_bench_decode.py, whose SGY truth moves the
crossover up as SGY falls), the shell-environment refusal, and the joint comparison's interval checked by simulation
with a known truth. No number here is a measurement.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from harness.analysis.comparison.knobs import Candidate, _choose, _compare
from harness.analysis.decision.pipeline import analyse_path
from harness.config import knobs as launch_knobs
from tests.support.fake_models import CONFIGS, EMULATED_BENCH, write_models
from tests.support.helpers import FIXTURE_PYTHON, cli, final_table

SGY = launch_knobs.SGY


def _config(tmp_path, knobs: dict | None, rounds: int = 4, backend: str = "cuda", cap: int | None = 8192) -> object:
    mixtral = CONFIGS["mixtral-8x7b-4bit"]
    configs = {n: CONFIGS[n] for n in ("qwen3-30b-a3b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit")}
    configs["mixtral-dff9216"] = {**mixtral, "intermediate_size": 9216}  # a synthetic shape between 6400 and 14336
    models = write_models(tmp_path, configs)
    config = {
        "name": "sgy",
        "backend": backend,
        **({"current_default": cap} if cap is not None else {}),
        "workload": {
            "kind": "command",
            "command": [*FIXTURE_PYTHON, str(EMULATED_BENCH), "-m", "{model_path}", "-p", "Hi", "-n", "40"],
            "env": {"EMULATED_MLXCEL_BACKEND": backend},
        },
        "models": [
            {"name": n, "dff": c.get("moe_intermediate_size") or c["intermediate_size"], "model_path": str(models / n)}
            for n, c in configs.items()
        ],
        "measure": {"rounds": rounds, "warmup_runs": 0},
        **({"knobs": knobs} if knobs else {}),
    }
    path = tmp_path / "sgy.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_sweep_over_two_sgy_values_reports_a_crossover_per_sgy_and_a_joint_recommendation(tmp_path, monkeypatch):
    monkeypatch.delenv(SGY, raising=False)
    config = _config(tmp_path, {SGY: [4, 8]})
    run = tmp_path / "run"
    result = cli("sweep", config, "--out", run, "--report-dir", tmp_path / "reports")
    assert result.returncode == 0, result.stderr
    assert set(final_table(run, analyse_path(run).summary)["ok"]) == {
        8
    }  # the final table is the reference setting's: 4 rounds × 2 arms
    samples = pd.read_csv(run / "samples.csv", comment="#", dtype={"knobs": str})
    assert set(samples["knobs"]) == {f"{SGY}=4", f"{SGY}=8"} and len(samples) == 4 * 2 * 2 * 4
    # interleaved: every round holds every setting × arm of a point, and the first slot rotates between rounds
    first = samples[samples["position"] == 0].groupby(["model", "round"])[["knobs", "arm"]].first()
    assert first.loc["phi-3.5-moe-4bit"].drop_duplicates().shape[0] == 4
    meta = json.loads((run / "meta.json").read_text())
    assert meta["knobs"] == {SGY: [4, 8]} and meta["knob_reference"] == f"{SGY}=8"
    section = (tmp_path / "reports" / f"{meta['run_id']}-knobs.md").read_text()
    assert (tmp_path / "reports" / f"{meta['run_id']}-knobs.png").stat().st_size > 1000
    table = [line for line in section.splitlines() if line.startswith((f"| **{SGY}", f"| {SGY}"))]
    rows = {line.split("|")[1].strip(" *"): line for line in table}
    assert set(rows) == {f"{SGY}=4", f"{SGY}=8"}
    crossover = {k: float(v.split("|")[2]) for k, v in rows.items()}
    # the emulator's truth: SGY 8 crosses at 6000, SGY 4 at 6000 × 2^0.4 ≈ 7917 (between the measured 6400 and 9216)
    assert 768 < crossover[f"{SGY}=8"] < 6400 < crossover[f"{SGY}=4"] < 9216, section
    assert "**Joint recommendation: " in section
    joint = section.split("**Joint recommendation: ")[1]
    assert joint.startswith((f"keep {SGY}=8 with cap", f"set {SGY}=4 with cap")), joint


def test_sgy_set_in_the_shell_refuses_the_sweep_unless_the_config_names_it(tmp_path, monkeypatch):
    config = _config(tmp_path, None, rounds=1)
    monkeypatch.setenv(SGY, "4")
    monkeypatch.setenv("MLXCEL_SOMETHING_ELSE", "1")
    refused = cli("sweep", config, "--dry-run")
    line = refused.stderr.strip()
    assert refused.returncode == 2 and "\n" not in line and f"{SGY}=4 is set in this shell" in line, line
    named = _config(tmp_path, {SGY: [4]}, rounds=1)
    out = tmp_path / "named"
    ok = cli("sweep", named, "--out", out, "--only", "qwen3-30b-a3b-4bit", "--no-report")
    assert ok.returncode == 0, ok.stderr
    assert json.loads((out / "meta.json").read_text())["shell_env"] == {"MLXCEL_SOMETHING_ELSE": "1"}


@pytest.mark.parametrize(
    ("knobs", "problem"),
    [({SGY: [0, 8]}, "outside 1–32"), ({SGY: [8, 8]}, "listed twice"), ({SGY: [True]}, "boolean")],
)
def test_knob_values_the_binary_would_ignore_are_refused(tmp_path, knobs, problem):
    result = cli("sweep", _config(tmp_path, knobs, rounds=1), "--dry-run")
    assert result.returncode == 2 and ": knobs" in result.stderr and problem in result.stderr, result.stderr


def _simulate(truth: float, rounds: int, rng: np.random.Generator, models: int = 4) -> tuple:
    """rounds × models ln tok/s of a reference and a candidate configuration, with drift shared within each round
    (what interleaving cancels) and 0.5% run noise."""
    drift = rng.normal(0, 0.02, size=(rounds, 1))
    base = np.log(np.linspace(20, 150, models))[None, :] + drift
    ref = base + rng.normal(0, 0.005, size=(rounds, models))
    cand = base + math.log(truth) + rng.normal(0, 0.005, size=(rounds, models))
    index = pd.Index(range(rounds), name="round")
    names = [f"m{i}" for i in range(models)]
    ref_frame = pd.DataFrame(ref, index=index, columns=names)
    rows = [
        {"knobs": "K=2", "status": "ok", "model": m, "arm": "fused", "round": r, "tok_s": math.exp(cand[r, j])}
        for r in range(rounds)
        for j, m in enumerate(names)
    ]
    return pd.DataFrame(rows), ref_frame, {m: "fused" for m in names}


def test_joint_comparison_by_simulation_coverage_false_action_and_power():
    """Known truths, 400 sweeps each, 3 settings (so each interval is at the Bonferroni level 1 − 0.05/2): the
    interval covers the true gain ≥ 95% of the time, a setting no faster than the default is chosen in ≤ 5% of
    sweeps, and a 3% faster one in ≥ 80% at 5 rounds. (Printed: coverage, false-action rate, power.)"""
    rng = np.random.default_rng(7)
    level = 1 - 0.05 / 2
    covered = false_action = power = 0
    n = 400

    def compared(truth: float) -> tuple[Candidate, bool]:
        """One simulated sweep at the true gain `truth`: K=2's candidate and whether the choice moves to it."""
        samples, ref, paths = _simulate(truth, 5, rng)
        gain, low, high, rounds = _compare(samples, "K=2", paths, ref, level)
        candidate = Candidate(setting="K=2", cap=8192, gain=gain, ci_low=low, ci_high=high, rounds=rounds)
        return candidate, _choose("K=8", "cap 8192", candidate, 0.01, level)[0] is not None

    for _ in range(n):
        null, acted = compared(1.0)
        covered += null.ci_low <= 1.0 <= null.ci_high
        false_action += acted
        power += compared(1.03)[1]
    print(f"coverage {covered / n:.3f}, false action {false_action / n:.3f}, power {power / n:.3f}")
    assert covered / n >= 0.95 and false_action / n <= 0.05 and power / n >= 0.8


def test_a_setting_without_runs_in_two_rounds_keeps_the_reference():
    rng = np.random.default_rng(1)
    samples, ref, paths = _simulate(1.05, 5, rng)
    gain, low, high, rounds = _compare(samples[samples["round"] == 0], "K=2", paths, ref, 0.95)
    assert rounds == 1 and math.isnan(gain)
    chosen, reason = _choose("K=8", "cap 8192", None, 0.01, 0.95)
    assert chosen is None and reason.startswith("keep K=8 with cap 8192: no other setting has runs")
    empty = _compare(samples, "K=2", paths, ref.iloc[:, :0], 0.95)
    assert math.isnan(empty[0])


def _setting(ratios: dict[int, float], seed: int = 3):
    from harness.analysis.decision.pipeline import Options, analyse
    from harness.analysis.points.inputs import LoadedInput
    from tests.support.synthetic_sweeps import synthetic_samples

    samples = synthetic_samples(ratios, rounds=8, noise=0.005, seed=seed)
    return analyse(LoadedInput(samples, None, {}), Options(current_default=8192))


def test_a_setting_where_fused_loses_at_every_measured_dff_says_lower_below_them_or_disable():
    """Issue 35 on rocm: SYNTHETIC ratios 0.94–0.98 at every Dff under cap 8192. The engine lowers (fallback wins
    beyond the margin at 8192) to the largest Dff where fused is not shown worse — 1408 here, also a loss — so the row
    says lower below the smallest measured Dff or disable, with the grid step below 1408 as its cap; not keep 8192,
    not lower 1408."""
    from harness.analysis.comparison.knobs import setting_cap_words, setting_decision

    analysis = _setting({1408: 0.995, 2048: 0.97, 4096: 0.96, 8192: 0.94})
    assert analysis.result.decision.action == "lower"
    row = setting_decision(analysis)
    assert (row.action, row.cap, row.below_all) == ("lower", 1280, True)
    assert row.words.startswith("fused loses at every measured Dff (ratio ")
    assert row.words.endswith(
        "lower to below the smallest measured Dff 1408 (cap 1280), or disable (MLXCEL_FUSED_MOE=0)"
    )
    assert setting_cap_words(row) == "cap 1280 (below every measured Dff; or disable, MLXCEL_FUSED_MOE=0)"
    # fused winning somewhere: the engine's own lower stands
    mixed = setting_decision(_setting({1408: 1.05, 2048: 1.03, 4096: 0.97, 8192: 0.94}))
    assert mixed.action == "lower" and not mixed.below_all and mixed.words == f"lower 8192 → {mixed.cap}"
    assert mixed.cap in (2048, 1408)


def test_the_knob_result_reaches_the_addendum_with_where_to_set_it_and_rows_agree(tmp_path, monkeypatch):
    """The pasted addendum carries the joint (setting, cap) recommendation, each setting's own decision and where to
    set the setting (the variable per run; the compiled-in default in mlx_cxx_kernels.cpp); each setting is decided
    at the plain analysis's cap in force; the joint cap is its setting's row cap; check-reports re-derives it."""
    from harness.analysis.comparison.knobs import analyse_knobs
    from harness.analysis.decision.pipeline import analyse_path

    monkeypatch.delenv(SGY, raising=False)
    (tmp_path / "pyproject.toml").write_text("")  # a project: check-reports may read the run
    run, reports = tmp_path / "run", tmp_path / "reports"
    done = cli("sweep", _config(tmp_path, {SGY: [4, 8]}, rounds=3), "--out", run, "--report-dir", reports)
    assert done.returncode == 0, done.stderr
    result = analyse_knobs(run)
    plain = analyse_path(run)
    assert {a.current_default for a in result.analyses.values()} == {plain.current_default} == {8192}
    assert result.recommended_cap == result.rows[result.recommended].cap
    (addendum,) = reports.glob("*-dff-crossover.md")
    text = addendum.read_text()
    assert f"**Launch knob: {result.reason}" in text.replace("\\", "")
    assert f"Each setting's own decision: `{SGY}=4`: " in text
    assert (
        f"Where to set it: per run: `{result.recommended}` in the environment; the compiled-in default of {SGY} "
        in text
    )
    assert (
        "(8 on cuda): `int sgy = 8;` in src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp (1–32; default 8, ROCm 2)" in text
    )
    checked = cli("check-reports", reports)
    assert checked.returncode == 0 and "1/1 addenda re-derive" in checked.stdout, checked.stdout + checked.stderr


def test_on_rocm_every_setting_is_decided_at_the_plain_analysis_cap_in_force(tmp_path, monkeypatch):
    """A rocm knob sweep whose config names no cap: every setting's row reads the cap in force the plain analysis
    resolves (whatever resolves it: each setting is analysed from the run's own provenance and options), and where to
    set SGY names the ROCm build's compiled-in default, 2."""
    from harness.analysis.comparison.knobs import analyse_knobs
    from harness.analysis.decision.pipeline import analyse_path

    monkeypatch.delenv(SGY, raising=False)
    run = tmp_path / "run"
    config = _config(tmp_path, {SGY: [2, 8]}, rounds=2, backend="rocm", cap=None)
    done = cli(
        "sweep", config, "--out", run, "--only", "qwen3-30b-a3b-4bit", "--only", "phi-3.5-moe-4bit", "--no-report"
    )
    assert done.returncode == 0, done.stderr
    result = analyse_knobs(run)
    assert result.reference == f"{SGY}=2"
    assert {a.current_default for a in result.analyses.values()} == {analyse_path(run).current_default}
    assert f"the compiled-in default of {SGY} (2 on rocm): `int sgy = 2;` in " in result.record("rocm")["where"]
