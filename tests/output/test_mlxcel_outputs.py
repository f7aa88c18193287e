"""What a report leaves for mlxcel beside the addendum: the runs in mlxcel's sweep layout (read back to the same
decision), the switch_layers.rs patch (applies to a tree), and the terminal table agreeing with the addendum.

All runs here are SYNTHETIC (tests.support.synthetic_sweeps, a known ratio curve with seeded noise) and the mlxcel tree
is a FIXTURE written below: a few lines mimicking mlxcel's published declarations, not mlxcel's source.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pandas as pd
import pytest

from harness.analysis.decision.pipeline import Options, analyse_path
from harness.output.addendum.report_data import read_sidecar
from harness.output.mlxcel_source import SWITCH_LAYERS, cap_patch, known_defaults, read_source
from harness.output.report_files import write_report
from tests.support.helpers import cli, final_table, run_cli
from tests.support.synthetic_sweeps import SYNTHETIC_META, linear_curve, synthetic_samples, write_run

# FIXTURE: shaped like mlxcel's src/models/switch_layers.rs and src/lib/mlx-cpp/CMakeLists.txt (declaration lines
# as published in mlxcel 0.4.2); everything else in the real files is left out.
FIXTURE_SWITCH_LAYERS = """\
// FIXTURE for moecal's tests: mimics the two declarations of mlxcel's src/models/switch_layers.rs.
/// Metal default for the fused decode-MoE expert-intermediate (Dff) upper bound.
const FUSED_MOE_MAX_DFF_METAL: i32 = 4096;

/// CUDA default for the same bound.
const FUSED_MOE_MAX_DFF_CUDA: i32 = 8192;

pub(crate) fn fused_moe_max_dff_from(env: Option<&str>, metal_available: bool) -> i32 {
    env.and_then(|s| s.parse::<i32>().ok()).filter(|v| *v > 0).unwrap_or(if metal_available {
        FUSED_MOE_MAX_DFF_METAL
    } else {
        FUSED_MOE_MAX_DFF_CUDA
    })
}
"""
FIXTURE_CMAKE = """\
# FIXTURE: mimics how mlxcel's src/lib/mlx-cpp/CMakeLists.txt pins MLX.
  FetchContent_Declare(
    mlx
    GIT_REPOSITORY "https://github.com/ml-explore/mlx.git"
    GIT_TAG 57c66cac7cb3e5b1eb350488a61f1506b40d39f8)
"""
FIXTURE_CARGO = '[package]\nname = "mlxcel"\nversion = "0.4.2"\nedition = "2024"\n'


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    return tmp_path


def fixture_tree(folder):
    (folder / "src/models").mkdir(parents=True)
    (folder / "src/lib/mlx-cpp").mkdir(parents=True)
    (folder / SWITCH_LAYERS).write_text(FIXTURE_SWITCH_LAYERS)
    (folder / "src/lib/mlx-cpp/CMakeLists.txt").write_text(FIXTURE_CMAKE)
    (folder / "Cargo.toml").write_text(FIXTURE_CARGO)
    return folder


def command_run(folder, crossover: float, backend: str = "cpu", current_default: int = 4096, null_dff=None):
    """A SYNTHETIC command-workload run: one model per Dff (as mlxcel sweeps are), fused wins below `crossover`. The
    grid has measured points above 8192, so a raise there rests on measurements (the policy never raises across an
    unmeasured gap)."""
    parts = []
    for dff, ratio in linear_curve([1792, 4096, 6400, 8192, 10240, 12288, 14336], crossover, slope_per_1k=0.03).items():
        one = synthetic_samples({dff: ratio}, rounds=5, noise=0.004, seed=dff, workload="command", backend=backend)
        one["model"] = f"model-{dff}"
        one[["d_model", "n_experts", "top_k", "bits", "group_size"]] = float("nan")
        if dff == null_dff:  # the dispatch probe never matched: both arms ran the same code
            one["dispatch_ok"] = (one["arm"] != "fused").astype(int)
        parts.append(one)
    meta = {**SYNTHETIC_META, "workload": "command", "backend": backend, "current_default": current_default}
    meta["run_id"] = folder.name
    meta["bench_command"] = "mlxcel-bench-decode -m {model_path} -p 'Hello, how are you today?' -n 100"
    meta["arms"] = {"fused": "MLXCEL_FUSED_MOE_MAX_DFF=20000", "fallback": "MLXCEL_FUSED_MOE_MAX_DFF=1"}
    return write_run(folder, pd.concat(parts, ignore_index=True), meta)


def test_the_mlxcel_csv_reads_back_to_the_same_decision(project):
    run = command_run(project / "results" / "run-a", crossover=7000, null_dff=4096)
    md_path, _, decision, _ = write_report(run, project / "reports")
    csv = project / "reports" / "run-a-mlxcel.csv"
    text = csv.read_text()
    header = [line for line in text.splitlines() if not line.startswith("#")][0]
    assert header == (
        "model,dff,quant_mode,fallback_run1,fallback_run2,fallback_run3,fallback_run4,fallback_run5,fallback_median,"
        "fused_run1,fused_run2,fused_run3,fused_run4,fused_run5,fused_median,fused_over_fallback"
    )
    assert text.startswith("# Fused decode-MoE vs fallback Dff crossover sweep (moecal).\n")
    done = cli("crossover", csv, "--json", cwd=project)
    assert done.returncode == 0, done.stderr
    back = json.loads(done.stdout)
    assert (back["action"], back["recommended_cap"]) == (decision.action, decision.recommended_cap)
    assert decision.action == "raise"
    verdicts = {p["dff"]: p["verdict"] for p in back["points"]}
    assert verdicts[4096] == "null"  # the null point stays null without a dispatch column in mlxcel's layout
    # the header's round positions pair the runs by round again: the same estimates and intervals (up to the
    # layout's two decimals), not wider Welch ones
    stored = {p["dff"]: p for p in read_sidecar(md_path)["decision"]["points"]}
    for point in back["points"]:
        if point["verdict"] != "null":
            before = stored[point["dff"]]
            assert point["method"] == before["method"] and point["method"].startswith("paired")
            for key in ("estimate", "ci_low", "ci_high"):
                assert point[key] == pytest.approx(before[key], rel=2e-4)
    assert "[run-a-mlxcel.csv](run-a-mlxcel.csv)" in md_path.read_text()


def test_a_raise_on_cuda_writes_a_patch_that_applies_to_the_tree(project):
    tree = fixture_tree(project / "mlxcel")
    run = command_run(project / "results" / "run-b", crossover=11000, backend="cuda", current_default=8192)
    done = run_cli("report", run, "--out", project / "reports", "--mlxcel-src", tree, cwd=project)
    assert done.returncode == 0, done.stderr
    data = read_sidecar(project / "reports" / "run-b-dff-crossover.md")
    d = data["decision"]
    assert d["action"] == "raise" and d["current_default"] == 8192 and d["recommended_cap"] > 8192
    assert data["mlxcel"]["mlx_pin"] == "57c66cac7cb3e5b1eb350488a61f1506b40d39f8"
    body = (project / "reports" / "run-b-dff-crossover.md").read_text()
    assert f"**Decision: raise 8192 → {d['recommended_cap']}** (`FUSED_MOE_MAX_DFF_CUDA`)" in body
    assert f"Set this constant: `FUSED_MOE_MAX_DFF_CUDA: i32 = {d['recommended_cap']};`" in body
    assert "mlxcel 0.4.2, MLX pin `57c66cac7cb3e5b1eb350488a61f1506b40d39f8`" in body
    patch = project / "reports" / "run-b-switch_layers.diff"
    assert f"patch    → {patch}" in done.stdout
    subprocess.run(["git", "init", "-q", str(tree)], check=True)
    subprocess.run(["git", "-C", str(tree), "apply", str(patch)], check=True)
    text = (tree / SWITCH_LAYERS).read_text()
    assert f"const FUSED_MOE_MAX_DFF_CUDA: i32 = {d['recommended_cap']};" in text
    assert "const FUSED_MOE_MAX_DFF_METAL: i32 = 4096;" in text
    assert cli("check-reports", project / "reports", cwd=project).returncode == 0


@pytest.mark.skipif(shutil.which("patch") is None, reason="needs patch(1)")
def test_without_a_tree_the_patch_targets_the_published_defaults_and_patch_places_it(project):
    tree = fixture_tree(project / "mlxcel")
    diff = cap_patch(known_defaults(), {"metal": 5120, "cuda": 8192})  # cuda unchanged: no hunk for it
    assert "FUSED_MOE_MAX_DFF_CUDA" not in diff and "+const FUSED_MOE_MAX_DFF_METAL: i32 = 5120;" in diff
    subprocess.run(["patch", "-p1", "-s"], input=diff, text=True, cwd=tree, check=True)
    assert read_source(tree).caps == {"metal": 5120, "cuda": 8192}

    run = command_run(project / "results" / "run-e", crossover=11000, backend="cuda", current_default=8192)
    md_path, _, decision, _ = write_report(run, project / "reports")
    assert decision.action == "raise" and "not checked against an mlxcel tree" in md_path.read_text()
    patch = (project / "reports" / "run-e-switch_layers.diff").read_text()
    subprocess.run(["patch", "-p1", "-s"], input=patch, text=True, cwd=tree, check=True)
    assert read_source(tree).caps["cuda"] == decision.recommended_cap


def test_a_tree_without_the_declaration_is_one_error_line(tmp_path):
    tree = fixture_tree(tmp_path / "mlxcel")
    (tree / SWITCH_LAYERS).write_text("const FUSED_MOE_MAX_DFF_METAL: i32 = 4096;\n")
    done = cli("report", tmp_path, "--mlxcel-src", tree, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: ") and "FUSED_MOE_MAX_DFF_CUDA" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_keep_and_a_cpu_run_set_no_constant(project):
    run = command_run(project / "results" / "run-c", crossover=7000)
    md_path, _, decision, _ = write_report(run, project / "reports")
    body = md_path.read_text()
    assert decision.action == "raise" and "Set this constant" not in body
    assert "cpu is not an mlxcel backend: no constant to change" in body
    assert not list((project / "reports").glob("*.diff"))


def test_the_terminal_table_shows_the_addendums_estimate(project):
    run = command_run(project / "results" / "run-d", crossover=7000)
    md_path, _, _, _ = write_report(run, project / "reports")
    estimates = {p["dff"]: p["estimate"] for p in read_sidecar(md_path)["decision"]["points"]}
    table = final_table(run, analyse_path(run).summary)
    for dff, ratio in zip(table["dff"], table["ratio"], strict=True):
        if estimates[dff] is not None:
            assert ratio == pytest.approx(estimates[dff], rel=1e-4)
    assert analyse_path(run, Options()).summary["estimate"].notna().all()


def test_check_reports_on_a_sidecar_whose_raw_data_became_a_summary_names_the_csv_it_cannot_rederive(project):
    """A sidecar that names an exported mlxcel CSV, its raw data pointed at a summary (which holds no runs): a failed
    check that says so, not a crash."""
    run = command_run(project / "results" / "run-a", crossover=7000)
    write_report(run, project / "reports")
    assert cli("summarize", run, "--out", project / "results" / "s.csv", cwd=project).returncode == 0
    sidecar = project / "reports" / "run-a.json"
    record = json.loads(sidecar.read_text())
    assert record["files"]["mlxcel_csv"] == "run-a-mlxcel.csv"
    sidecar.write_text(json.dumps({**record, "raw_data": "results/s.csv"}))
    done = cli("check-reports", project / "reports", cwd=project)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "run-a-mlxcel.csv exports runs its raw data (results/s.csv) does not hold: a summary has none" in done.stdout
