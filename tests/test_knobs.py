"""Launch knobs (harness.config.knobs, harness.analysis.knobs): a sweep over MLXCEL_FUSED_MOE_SGY through the SYNTHETIC
emulation of mlxcel-bench-decode (tests/fixtures/emulated_mlxcel_bench_decode.py, whose SGY truth moves the crossover
up as SGY falls), the shell-environment refusal, and the joint comparison's interval checked by simulation with a
known truth. No number here is a measurement.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from harness.analysis.knobs import Candidate, _choose, _compare
from harness.analysis.pipeline import analyse_path
from harness.config import knobs as launch_knobs
from harness.measure.sweep_loop import quick_table
from tests.fake_models import CONFIGS, EMULATED_BENCH, write_models
from tests.helpers import cli

SGY = launch_knobs.SGY


def _config(tmp_path, knobs: dict | None, rounds: int = 4) -> object:
    mixtral = CONFIGS["mixtral-8x7b-4bit"]
    configs = {n: CONFIGS[n] for n in ("qwen3-30b-a3b-4bit", "phi-3.5-moe-4bit", "mixtral-8x7b-4bit")}
    configs["mixtral-dff9216"] = {**mixtral, "intermediate_size": 9216}  # a synthetic shape between 6400 and 14336
    models = write_models(tmp_path, configs)
    config = {
        "name": "sgy",
        "backend": "cuda",
        "current_default": 8192,
        "workload": {
            "kind": "command",
            "command": [sys.executable, "-I", str(EMULATED_BENCH), "-m", "{model_path}", "-p", "Hi", "-n", "40"],
            "env": {"EMULATED_MLXCEL_BACKEND": "cuda"},
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
    assert set(quick_table(run, analyse_path(run).summary)["ok"]) == {
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
    for _ in range(n):
        samples, ref, paths = _simulate(1.0, 5, rng)
        gain, low, high, rounds = _compare(samples, "K=2", paths, ref, level)
        covered += low <= 1.0 <= high
        false_action += (
            _choose("K=8", 8192, Candidate("K=2", 8192, gain, low, high, rounds), 0.01, level)[0] is not None
        )
        samples, ref, paths = _simulate(1.03, 5, rng)
        gain, low, high, rounds = _compare(samples, "K=2", paths, ref, level)
        power += _choose("K=8", 8192, Candidate("K=2", 8192, gain, low, high, rounds), 0.01, level)[0] is not None
    print(f"coverage {covered / n:.3f}, false action {false_action / n:.3f}, power {power / n:.3f}")
    assert covered / n >= 0.95 and false_action / n <= 0.05 and power / n >= 0.8


def test_a_setting_without_runs_in_two_rounds_keeps_the_reference():
    rng = np.random.default_rng(1)
    samples, ref, paths = _simulate(1.05, 5, rng)
    gain, low, high, rounds = _compare(samples[samples["round"] == 0], "K=2", paths, ref, 0.95)
    assert rounds == 1 and math.isnan(gain)
    chosen, reason = _choose("K=8", 8192, None, 0.01, 0.95)
    assert chosen is None and reason.startswith("keep K=8 with cap 8192: no other setting has runs")
    empty = _compare(samples, "K=2", paths, ref.iloc[:, :0], 0.95)
    assert math.isnan(empty[0])
