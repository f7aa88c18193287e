"""Greedy parity of command workloads, expect_null handling and prediction checks (SYNTHETIC fake benchmark)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from harness.analysis.comparison.backend_defaults import build_defaults, mispredictions, run_checks
from harness.analysis.evidence.parity import EARLY_DIVERGENCE, agreement, parity_by_model, pieces, point_parity
from harness.cli.app import app
from harness.cli.init import init_config
from harness.config.discover import scan
from harness.config.schema import load_config
from harness.measure import sweep_loop as sweeps
from harness.measure import sweep_setup
from harness.runs.formats import read_samples
from tests.support.fake_models import CONFIGS, text_generator_command, write_models
from tests.support.helpers import FIXTURE_PYTHON


def test_pieces_are_token_ids_or_words():
    assert pieces("[151643, 13, 42]") == ["151643", "13", "42"]
    assert pieces("1 2 3") == ["1", "2", "3"]
    assert pieces("The capital, Paris.") == ["The", "capital,", "Paris."]


@pytest.mark.parametrize(
    ("ours", "theirs", "expected"),
    [("a b c", "a b c", (3, 3)), ("a b c", "a x c", (1, 3)), ("a b", "a b c", (2, 3)), ("", "a", (0, 1))],
)
def test_agreement_counts_leading_pieces(ours, theirs, expected):
    assert agreement(ours.split(), theirs.split()) == expected


def test_point_parity_classes():
    rows = pd.DataFrame(
        {"status": ["ok", "ok", "ok", "fail"], "tokens_agree": [8, 3, None, None], "tokens": [8, 8, 8, None]}
    )
    assert point_parity(rows).label == "diverges at token 3 of 8 — EARLY divergence"
    assert point_parity(rows.iloc[[0]]).label == "identical (8 tokens, 1 comparisons)"
    assert point_parity(rows.iloc[[2, 3]]).label == "no parity data"
    late = pd.DataFrame({"status": ["ok"], "tokens_agree": [EARLY_DIVERGENCE + 5], "tokens": [128]})
    assert "EARLY" not in point_parity(late).label


def _config(tmp_path, models: list[str], **workload) -> tuple:
    """An init-style config for the fake benchmark over some of the fake models (tests only, tmp dirs)."""
    found, _ = scan(write_models(tmp_path, {n: CONFIGS[n] for n in models}))
    # the config `moecal init` writes, so these tests exercise it
    data = init_config(found, [], text_generator_command(), "metal", parity_regex="Output: (.*)", tokens=24, rounds=3)
    data["measure"]["warmup_runs"] = 0
    data["workload"].update(workload)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, load_config(path)


def _sweep(config_path, run_dir):
    plan = sweep_setup.prepare(config_path, out=run_dir)
    with sweeps.writing(plan):
        sweeps.execute(plan, lambda message: None)
    return read_samples(run_dir)


def test_sweep_records_parity_and_flags_the_diverging_model(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MLXCEL_BACKEND", "metal")
    config_path, _ = _config(tmp_path, ["phi-3.5-moe-4bit", "qwen3-30b-a3b-4bit"])
    samples = _sweep(config_path, tmp_path / "run")
    parity = parity_by_model(samples)
    # fake phi's fused path emits a different 4th word; the fallback run of each round is the reference
    assert parity["phi-3.5-moe-4bit"].diverges_at == 3 and "EARLY" in parity["phi-3.5-moe-4bit"].label
    assert parity["qwen3-30b-a3b-4bit"].label.startswith("identical (24 tokens")
    # every round's second run is compared with the first run of the same round, every other first run with the
    # previous round's; the point's first run in each pass over the grid (a new runner) has nothing to compare with
    phi = samples[samples["model"] == "phi-3.5-moe-4bit"]
    assert phi["tokens_agree"].notna().sum() == len(phi) - 2
    assert any("parity diverges at token 3 of 24" in line for line in run_checks(tmp_path / "run"))


def test_parity_from_an_output_file(tmp_path):
    writer = "import sys; open(sys.argv[1], 'w').write('[5, 6, 7]'); print('Decode: 9.00 ms (111.1 tok/s)')"
    config_path, _ = _config(tmp_path, ["qwen3-30b-a3b-4bit"])
    data = yaml.safe_load(config_path.read_text())
    data["workload"]["command"] = [*FIXTURE_PYTHON, "-c", writer, "{model_path}/generated.txt"]
    data["workload"]["parity"] = {"output_file": "{model_path}/generated.txt"}
    data["workload"].pop("dispatch_probe", None)
    config_path.write_text(yaml.safe_dump(data))
    samples = _sweep(config_path, tmp_path / "run")
    assert parity_by_model(samples)["qwen3-30b-a3b-4bit"].label == "identical (3 tokens, 4 comparisons)"  # 2 passes


def test_expected_null_points_are_skipped_unless_asked_and_stay_null(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_MLXCEL_BACKEND", "metal")
    config_path, config = _config(tmp_path, ["gpt-oss-20b-mxfp4", "llama-4-scout-17b-16e-4bit"])
    assert {m.name: bool(m.expect_null) for m in config.models} == {
        "gpt-oss-20b-mxfp4": True,
        "llama-4-scout-17b-16e-4bit": True,
    }
    skipped = _sweep(config_path, tmp_path / "skipped")
    assert set(skipped["status"]) == {"skip"} and skipped["error"].str.startswith("expected null:").all()
    args = ["sweep", str(config_path), "--measure-null", "--no-report", "--out", str(tmp_path / "measured")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    measured = read_samples(tmp_path / "measured")
    assert set(measured["status"]) == {"ok"}
    # the fake benchmark never dispatches these: the probe confirms the prediction
    expected = {m.name: m.expect_null for m in config.models}
    assert mispredictions(measured, expected) == {}
    points = build_defaults([tmp_path / "measured"]).points  # measured, and still null points
    assert {(p.model, p.verdict) for p in points} == {(name, "null") for name in expected}
    assert all(p.note.startswith("expected null: ") for p in points)


def test_mispredictions_in_both_directions():
    samples = pd.DataFrame(
        {
            "model": ["eligible", "eligible", "declined", "declined"],
            "arm": ["fused", "fallback", "fused", "fallback"],
            "status": ["ok"] * 4,
            "dispatch_ok": [0, None, 1, None],
        }
    )
    wrong = mispredictions(samples, {"declined": "family x is not wired to the fused kernel"})
    assert wrong["eligible"] == "predicted eligible, but the fused arm never matched the dispatch probe"
    assert wrong["declined"].startswith("predicted null (family x") and wrong["declined"].endswith("dispatched")
