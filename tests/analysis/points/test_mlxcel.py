"""mlxcel sweep CSV import/export and input sniffing, on the docs/design.md §6 example and SYNTHETIC edits of it."""

from __future__ import annotations

import json

import pytest

from harness.analysis.decision.pipeline import Options, analyse
from harness.analysis.points.inputs import load_input
from harness.errors import InputError
from harness.output.tables.summary_table import CONSOLE_ROWS
from harness.runs.mlxcel_csv import import_run_dir, read_mlxcel, to_mlxcel_csv
from tests.support.helpers import cli
from tests.support.synthetic_sweeps import DESIGN_EXAMPLE_CSV, design_example

EXTRA_ROWS = (
    "gpt-oss-20b-mxfp4,2880,mxfp4,90.10,90.30,90.20,90.20,90.00,90.40,90.10,90.10,0.9989\n"
    "deepseek-v2-lite-4bit,1408,affine,NA,NA,NA,NA,NA,NA,NA,NA,NA\n"
    "qwen3-30b-a3b-4bit,768,affine,80.1,NA,80.3,80.2,95.2,95.0,NA,95.1,1.1858\n"
)


def test_import_pairs_runs_by_index_and_keeps_the_header(tmp_path):
    imported = read_mlxcel(design_example(tmp_path))
    samples = imported.samples
    assert len(samples) == 4 * 2 * 3 and (samples["status"] == "ok").all()
    assert sorted(samples["round"].unique()) == [0, 1, 2]
    llama = samples[(samples["model"] == "llama-4-scout-17b-4bit") & (samples["round"] == 1)]
    assert dict(zip(llama["arm"], llama["tok_s"], strict=True)) == {"fallback": 21.64, "fused": 21.37}
    assert imported.provenance["host"] == "gb10"
    assert "MLX 0.32.1" in imported.provenance["notes"]
    assert imported.skipped == []


def test_na_rows_are_skipped_with_a_reason_and_non_affine_rows_are_null(tmp_path):
    path = tmp_path / "sweep.csv"
    path.write_text(DESIGN_EXAMPLE_CSV + EXTRA_ROWS)
    imported = read_mlxcel(path)
    assert any("deepseek-v2-lite-4bit (dff 1408): all runs NA" in line for line in imported.skipped)
    assert any("fallback_run2, fused_run3 NA" in line for line in imported.skipped)
    summary = analyse(load_input(path)).summary.set_index("model")
    # deepseek_v2 never runs the fused kernel (its name says the family): an A/A point, whatever its runs
    assert summary.loc["deepseek-v2-lite-4bit", "verdict"] == "null"
    assert "never runs the fused kernel" in summary.loc["deepseek-v2-lite-4bit", "reason"]
    assert summary.loc["deepseek-v2-lite-4bit", "n_skipped"] == 6
    assert summary.loc["gpt-oss-20b-mxfp4", "verdict"] == "null"
    assert "mxfp4 is not affine" in summary.loc["gpt-oss-20b-mxfp4", "reason"]
    qwen = summary.loc["qwen3-30b-a3b-4bit"]
    assert (qwen["n_fallback"], qwen["n_fused"], qwen["paired"]) == (2, 2, False)
    assert qwen["verdict"] == "insufficient"  # 2 runs per arm: too few for an interval


def test_export_reproduces_the_mlxcel_rows(tmp_path):
    path = design_example(tmp_path)
    loaded = load_input(path)
    exported = to_mlxcel_csv(loaded.samples, analyse(loaded).summary, {})
    data_lines = [line for line in DESIGN_EXAMPLE_CSV.splitlines() if not line.startswith("#")]
    by_dff = lambda lines: sorted(lines[1:], key=lambda line: int(line.split(",")[1]))  # noqa: E731
    assert exported.splitlines()[0] == data_lines[0]
    assert by_dff(exported.splitlines()) == by_dff(data_lines)


@pytest.mark.parametrize(
    ("row", "field", "problem"),
    [
        ("bad,1792,affine,1,2,x,2,3,3,3,3,1.5", "fallback_run3", "line 4: 'x' is neither a number nor NA"),
        ("bad,-5,affine,1,2,3,2,3,3,3,3,1.5", "dff", "line 4: -5 is not a positive integer"),
        ("bad,1792,affine,1,2,0,2,3,3,3,3,1.5", "fallback_run3", "line 4: throughput must be finite and > 0"),
        ("bad,1792,affine,1,2,3,2,3,NaN,3,3,1.5", "fused_run2", "line 4: throughput must be finite and > 0"),
        ("bad,1792,affine,1,2,3,2,3,3,inf,3,1.5", "fused_run3", "line 4: throughput must be finite and > 0"),
    ],
)
def test_corrupt_values_name_file_field_and_line(tmp_path, row, field, problem):
    path = tmp_path / "bad.csv"
    path.write_text(DESIGN_EXAMPLE_CSV.splitlines(keepends=True)[2] + row + "\n")
    path.write_text("# h\n# host: x\n" + path.read_text())
    with pytest.raises(InputError) as caught:
        read_mlxcel(path)
    assert (caught.value.source, caught.value.field) == (str(path), field)
    assert problem in caught.value.problem


def test_unknown_or_missing_inputs_are_input_errors(tmp_path):
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not a samples.csv, summary.csv or mlxcel"):
        load_input(other)
    with pytest.raises(InputError, match="neither is there"):
        load_input(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        load_input(tmp_path / "missing.csv")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text(DESIGN_EXAMPLE_CSV + "extra-model,1024,affine,1,2,3,2,4,5,6,5,2.5,surplus,fields\n")
    with pytest.raises(InputError, match="cannot parse as CSV: .* Expected 12 fields"):
        load_input(ragged)
    header = "model,dff,quant_mode,fallback_run1,fallback_median,fused_run1,fused_median,fused_over_fallback\n"
    ragged.write_text(header + "a,1024,affine,1,1,2,2,2,surplus,fields\n")  # pandas would index by the extras
    with pytest.raises(InputError, match="more fields than the header"):
        load_input(ragged)


def test_import_command_writes_a_run_directory_and_refuses_to_overwrite(tmp_path):
    csv_path, run_dir = design_example(tmp_path), tmp_path / "run"
    done = cli("import-mlxcel", csv_path, "--out", run_dir, "--backend", "metal", "--library-pin", "MLX 0.32.1")
    assert done.returncode == 0, done.stderr
    loaded = load_input(run_dir)
    assert loaded.provenance["backend"] == "metal" and loaded.provenance["library_pin"] == "MLX 0.32.1"
    assert set(loaded.samples["backend"]) == {"metal"}
    with pytest.raises(InputError, match="already holds a samples.csv"):
        import_run_dir(csv_path, run_dir)


def test_a_file_of_many_points_prints_a_bounded_table(tmp_path):
    """SYNTHETIC: 260 models in one family; the terminal table stops at CONSOLE_ROWS and says how many more (a
    100,000-row table took a minute to draw), while --json still carries every point."""
    lines = [
        "model,dff,quant_mode,fallback_run1,fallback_run2,fallback_run3,fallback_median,"
        "fused_run1,fused_run2,fused_run3,fused_median,fused_over_fallback"
    ]
    for i in range(CONSOLE_ROWS + 60):
        dff = 256 * (1 + i % 48)
        fused = 100 * (1.1 - dff / 24576)
        lines.append(
            f"m{i},{dff},affine,100.1,99.9,100.0,100.0,{fused + 0.1:.2f},{fused - 0.1:.2f},{fused:.2f},{fused:.2f},1"
        )
    csv = tmp_path / "many.csv"
    csv.write_text("\n".join(lines) + "\n")
    done = cli("crossover", csv)
    assert done.returncode == 0, done.stderr
    assert "… and 60 more points of command" in done.stdout
    assert done.stdout.count("\n m") <= CONSOLE_ROWS  # rows start with the Dff column, then the model name
    as_json = cli("crossover", csv, "--json")
    assert len(json.loads(as_json.stdout)["points"]) == CONSOLE_ROWS + 60


def test_a_sweep_csv_measured_in_one_visit_per_point_withholds_a_move(tmp_path):
    """mlxcel's sweep CSV measures each arm's runs of a model back to back, once: a drift of one arm moves them all
    alike and reads as a ratio, so the raise the design example's wins at 1792 and 6400 would give at cap 4096 is
    withheld, naming the remedy (issue 36)."""
    loaded = load_input(design_example(tmp_path))
    analysis = analyse(loaded, Options(current_default=4096))
    decision = analysis.result.decision
    assert decision.action == "keep" and decision.recommended_cap == 4096
    assert decision.withheld is not None and decision.withheld.move == "raise"
    assert "drift of one arm not excluded: one visit per point" in decision.reason
    assert "second --fallback/--fused pair at another time" in decision.reason
    measured = analysis.summary[analysis.summary["verdict"] != "null"]
    assert set(measured["method"]) == {"welch, one visit"}
