"""`moecal export`: each format checked field by field against what its documentation (or, for mlxcel's
compare_bench_csv.py, its source) says a reader takes. The input is tests/fixtures/gb10-design-example.csv, the GB10
example sweep (an mlxcel sweep CSV; its figures are the stored fixture's, not made up here)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.analysis.comparison.backend_defaults import load_run
from harness.analysis.decision.pipeline import Options, analyse_path
from harness.cli.app import app
from harness.output.bench_export import run_label
from harness.runs.mlxcel_bench_csv import _layout
from tests.support.helpers import run_cli

FIXTURE = Path(__file__).parents[1] / "fixtures" / "gb10-design-example.csv"
GAB_FIELDS = {"name": str, "unit": str, "value": (int, float), "range": str, "extra": str}  # README "Custom"
GAB_REQUIRED = {"name", "unit", "value"}
BMF_FIELDS = {"value", "lower_value", "upper_value"}  # bencher.dev BMF JSON Schema: numbers, `value` required
RUNTIMES = ("metal", "cuda", "rocm", "pylm")  # compare_bench_csv.py: the first `_` field of a harness file name


@pytest.fixture(scope="module")
def decision():
    return analyse_path(FIXTURE).as_json()


@pytest.fixture(scope="module")
def label():
    run = load_run(FIXTURE, Options())
    return run_label(run.analysis.provenance, run.backend, run.device)


def _export(tmp_path: Path, fmt: str) -> Path:
    out = tmp_path / fmt
    result = CliRunner().invoke(app, ["export", "--format", fmt, str(FIXTURE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _ratio_points(decision) -> dict[str, dict]:
    return {f"{p['model']}@{p['dff']}": p for p in decision["points"] if p["verdict"] != "null" and p["estimate"]}


def test_github_action_benchmark_entries_have_the_documented_fields(tmp_path, decision, label):
    entries = json.loads(_export(tmp_path, "github-action-benchmark").read_text())
    assert isinstance(entries, list) and entries
    for entry in entries:
        assert GAB_REQUIRED <= set(entry) <= set(GAB_FIELDS), entry
        for key, kind in GAB_FIELDS.items():
            if key in entry:
                assert isinstance(entry[key], kind) and not isinstance(entry[key], bool), (key, entry)
        assert math.isfinite(entry["value"]) and entry["name"] and entry["unit"]
    names = [e["name"] for e in entries]
    assert len(set(names)) == len(names)  # one series per name
    by_name = {e["name"]: e for e in entries}
    crossover = by_name[f"{label.prefix}/crossover"]
    assert crossover["unit"] == "Dff" and crossover["value"] == decision["crossover_dff"]
    assert f"{decision['ci_low']:.6g}" in crossover["range"] and f"{decision['ci_high']:.6g}" in crossover["range"]
    assert decision["action"] in crossover["extra"]
    points = _ratio_points(decision)
    assert {n.removeprefix(f"{label.prefix}/") for n in names if not n.endswith("/crossover")} == set(points)
    for key, p in points.items():
        entry = by_name[f"{label.prefix}/{key}"]
        assert entry["value"] == p["estimate"] and entry["unit"] == "fused/fallback"
        assert f"[{p['ci_low']:.6g}, {p['ci_high']:.6g}]" in entry["range"]


def test_bencher_metric_format_matches_its_schema(tmp_path, decision, label):
    bmf = json.loads(_export(tmp_path, "bencher").read_text())
    assert isinstance(bmf, dict) and bmf
    for benchmark, measures in bmf.items():
        assert benchmark and isinstance(measures, dict) and measures
        for measure, metric in measures.items():
            assert 0 < len(measure) <= 64  # a measure slug's documented maximum
            assert "value" in metric and set(metric) <= BMF_FIELDS
            assert all(isinstance(v, float | int) and math.isfinite(v) for v in metric.values())
            assert metric.get("lower_value", -math.inf) <= metric["value"] <= metric.get("upper_value", math.inf)
    crossover = bmf[f"{label.prefix}/crossover"]["crossover-dff"]
    assert crossover == {
        "value": decision["crossover_dff"],
        "lower_value": decision["ci_low"],
        "upper_value": decision["ci_high"],
    }
    for key, p in _ratio_points(decision).items():
        metric = bmf[f"{label.prefix}/{key}"]["fused-over-fallback"]
        assert metric == {"value": p["estimate"], "lower_value": p["ci_low"], "upper_value": p["ci_high"]}


def test_compare_bench_csv_pair_reads_as_the_points_ratios(tmp_path, decision, label):
    folder = _export(tmp_path, "compare-bench-csv")
    files = {path.name.split("_")[2]: path for path in folder.glob("*.csv")}
    assert set(files) == {"moecal-fallback", "moecal-fused"}
    arms = {}
    for arm, path in files.items():
        parts = path.name.split("_")
        assert parts[0] in RUNTIMES and parts[1] and "_vlm_" not in path.name  # runtime, host; a text harness
        with path.open(encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            assert _layout(reader.fieldnames) is not None  # bench_decode.sh's columns (moecal's import reads them)
            rows = list(reader)
        for row in rows:  # compare_bench_csv.py drops a row whose decode_tok_s or prompt_tokens is not a number
            float(row["decode_tok_s"]), float(row["prompt_tokens"])
            assert row["model"] and row["hardware"] == label.device
        arms[arm] = {row["model"]: float(row["decode_tok_s"]) for row in rows}
    measured = {f"{p['model']}@{p['dff']}": p for p in decision["points"] if p["verdict"] != "null"}
    assert set(arms["moecal-fused"]) == set(arms["moecal-fallback"]) == set(measured)
    for model, p in measured.items():  # the script's after/before ratio is the point's ratio of medians
        ratio = arms["moecal-fused"][model] / arms["moecal-fallback"][model]
        assert ratio == pytest.approx(p["fused_tok_s"] / p["fallback_tok_s"], rel=1e-12)


def test_json_to_standard_output_and_an_unknown_format(label):
    result = CliRunner().invoke(app, ["export", "--format", "bencher", str(FIXTURE)])
    assert result.exit_code == 0 and "crossover-dff" in json.loads(result.output)[f"{label.prefix}/crossover"]
    done = run_cli("export", "--format", "csv", FIXTURE)
    assert done.returncode == 2 and done.stderr.startswith("error: --format: csv: one of github-action-benchmark")


@pytest.mark.parametrize(
    ("provenance", "version"),
    [
        ({"bench_version": "mlxcel-bench-decode 0.7.0 (2fcdbe5f, MLX 81ba1c6a)"}, "0.7.0"),
        ({"mlxcel_version": "0.7.1-rc.1", "bench_version": "mlxcel 0.6.0"}, "0.7.1-rc.1"),  # the CSV's column first
        ({"bench_version": "mlxcel-bench-decode (no version)"}, ""),
        ({}, ""),
    ],
)
def test_run_label_reads_the_cargo_version(provenance, version):
    assert run_label(provenance, "cuda", "GB10").mlxcel_version == version
