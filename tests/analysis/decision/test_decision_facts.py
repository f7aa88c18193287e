"""The one resolver of decision facts (harness.analysis.decision.decision_facts) and the issue-35 cases it decides.

Every number here is SYNTHETIC (generated from a stated truth with seeded noise, or written out by hand as a table
of the shape the issue describes); nothing was measured.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.analysis.decision.decision_facts import (
    SAME_KERNEL,
    SWITCH_LABEL,
    cap_in_force,
    constant_of,
    constant_words,
    tree_cap,
)
from harness.analysis.decision.pipeline import analyse_path
from harness.errors import InputError
from tests.support.fake_models import write_models
from tests.support.helpers import cli
from tests.support.synthetic_sweeps import write_run
from tests.test_path_equivalence import (
    AA,
    SWITCH,
    Scenario,
    _models,
    _moe,
    _runs,
    _samples,
    _sweep_meta,
    write_bench_files,
)

# --- the cap in force: its sources, in order ------------------------------------------------------------------


def test_the_cap_in_force_comes_from_the_first_source_that_states_it():
    mlxcel_csv = {"backend": "cuda", "source_format": "mlxcel sweep CSV"}
    assert cap_in_force(mlxcel_csv, 4096).value == 4096 and cap_in_force(mlxcel_csv, 4096).source == "--current-default"
    recorded = cap_in_force({**mlxcel_csv, "current_default": "6144"})
    assert (recorded.value, recorded.source) == (6144, "recorded with the mlxcel sweep CSV (current_default)")
    assert cap_in_force({"backend": "metal", "current_default": 4096}).source == "the run's config (current_default)"
    compiled = cap_in_force(mlxcel_csv)
    assert compiled.value == 8192 and "FUSED_MOE_MAX_DFF_CUDA" in compiled.source


def test_rocm_reads_the_cuda_constant_and_metal_its_own():
    rocm = cap_in_force({"backend": "rocm", "cap_env": "MLXCEL_FUSED_MOE_MAX_DFF"})
    assert rocm.value == 8192 and "FUSED_MOE_MAX_DFF_CUDA, which rocm builds share with cuda" in rocm.source
    assert cap_in_force({"backend": "metal"}).value == 4096
    assert (constant_of("rocm"), constant_of("cuda"), constant_of("metal")) == (
        "FUSED_MOE_MAX_DFF_CUDA",
        "FUSED_MOE_MAX_DFF_CUDA",
        "FUSED_MOE_MAX_DFF_METAL",
    )
    assert constant_words("rocm") == "FUSED_MOE_MAX_DFF_CUDA (shared with cuda)"
    assert tree_cap({"cuda": 6144, "metal": 4096}, "rocm") == 6144  # a read tree's CUDA constant is ROCm's cap


def test_an_unknown_cap_is_said_with_how_to_give_it_never_guessed():
    builtin = cap_in_force({"backend": "cuda", "cap_env": ""})  # moecal's own kernels: no compiled-in cap
    assert builtin.value is None and "--current-default" in builtin.missing
    nameless = cap_in_force({"source_format": "mlxcel sweep CSV"})
    assert nameless.value is None and "names no backend" in nameless.missing and "--backend" in nameless.missing
    for bad in ("-3", "inf", "nan", "9" * 20, "x"):  # a bad record is one line naming the field, never a traceback
        with pytest.raises(InputError, match="current_default"):
            cap_in_force({"current_default": bad})


def test_a_switch_point_at_ratio_one_says_what_that_may_mean(tmp_path):
    """A family that ignores the cap, measured at fused = fallback (SYNTHETIC): its ratio is shown, and the reason
    says both arms may have run the fused kernel (an input that does not record MLXCEL_FUSED_MOE=0)."""
    scenario = Scenario("cuda", "flat", ("mixtral",), 5000.0, 1.05, 3)
    models = _models(scenario, tmp_path)
    runs = _runs(scenario, models)
    runs["gemma-4-26b-a4b-4bit"]["fused"] = list(runs["gemma-4-26b-a4b-4bit"]["fallback"])
    run = write_run(tmp_path / "run", _samples(scenario, models, runs, paired=False), _sweep_meta(scenario, models))
    summary = analyse_path(run).summary.set_index("model")
    gemma, qwen = summary.loc["gemma-4-26b-a4b-4bit"], summary.loc["qwen3-next-80b-a3b-4bit"]
    assert gemma["verdict"] == "null" and abs(gemma["estimate"] - 1.0) < 1e-9 and SAME_KERNEL in gemma["reason"]
    assert qwen["reason"].startswith(SWITCH_LABEL) and SAME_KERNEL not in qwen["reason"]  # 1.6: on vs off


# --- issue 35's cases, end to end through the command line ----------------------------------------------------

# cuda: a truth crossing 1 at Dff ≈ 9500, under the 8192 cap → keep 8192
CUDA_CHECKPOINTS = {
    "qwen3-30b-a3b-4bit": _moe("qwen3_moe", 768),
    "lfm2-8b-a1b-4bit": _moe("lfm2_moe", 1792),
    "olmoe-1b-7b-4bit": _moe("olmoe", 1024),
    "phi-3.5-moe-4bit": _moe("phimoe", 6400, "num_local_experts", 4096),
    "qwen2-moe-big-4bit": _moe("qwen2_moe", 9472),
    "mixtral-8x7b-4bit": _moe("mixtral", 14336, "num_local_experts", 4096),
    "qwen3-30b-a3b-6bit": {**_moe("qwen3_moe", 768), "quantization": {"group_size": 64, "bits": 6}},
    "nemotron-h-30b-a3b-4bit": {
        **_moe("nemotron_h", 1856, "n_routed_experts"),
        "moe_shared_expert_intermediate_size": 3712,
    },
    "qwen3.5-35b-a3b-4bit": {**_moe("qwen3_5_moe", 512), "shared_expert_intermediate_size": 512},
    **AA,
    **SWITCH,
}


def _bench_csvs(root: Path, backend: str, ratio_at, runs: int = 3, seed: int = 0) -> dict[str, list[Path]]:
    """bench_decode.sh CSVs (today's layout), one per arm and run, of every checkpoint written under root/models."""
    rng = np.random.default_rng(seed)
    measured = {}
    for name, config in CUDA_CHECKPOINTS.items():
        dff = config.get("moe_intermediate_size") or config["text_config"]["intermediate_size"]
        ratio = 1.0 if name in AA else 1.7 if name in SWITCH or "qwen3.5" in name else ratio_at(dff)
        measured[name] = {
            arm: [4e5 / dff**0.8 * scale * math.exp(rng.normal(0, 0.004)) for _ in range(runs)]
            for arm, scale in (("fallback", 1.0), ("fused", ratio))
        }
    return write_bench_files(measured, root, backend, f"synthetic_{backend}_gfx1151", new_layout=True)


def _import(root: Path, backend: str, ratio_at, name: str, seed: int = 0, runs: int = 3) -> Path:
    models = write_models(root, CUDA_CHECKPOINTS)
    files = _bench_csvs(root, backend, ratio_at, runs=runs, seed=seed)
    args = [a for arm in ("fallback", "fused") for p in files[arm] for a in (f"--{arm}", p)]
    run = root / name
    done = cli("import-mlxcel", *args, "--models", models, "--backend", backend, "--out", run)
    assert done.returncode == 0, done.stderr
    return run


def _crossover(run: Path) -> dict:
    done = cli("crossover", run, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_imported_cuda_csvs_keep_8192_when_the_crossover_lies_above_it(tmp_path):
    """Issue 35: "set 1024" on cuda from imported CSVs whose truth crosses at ≈ 9500 under the 8192 cap."""
    run = _import(tmp_path, "cuda", lambda dff: 1.0 + 0.08 * math.log2(9500 / dff), "cuda-run")
    meta = json.loads((run / "meta.json").read_text())
    assert {"llama-4-scout-17b-16e-4bit", "deepseek-v2-lite-4bit", "nemotron-h-30b-a3b-4bit"} <= set(
        meta["expect_null"]
    )
    assert "qwen3-30b-a3b-6bit" in meta["expect_null"]  # 6-bit gate/up: the fused kernel takes 4/8-bit gate and up
    assert {"gemma-4-26b-a4b-4bit", "qwen3-next-80b-a3b-4bit", "qwen3.5-35b-a3b-4bit"} <= set(meta["cap_ignored"])
    d = _crossover(run)
    assert (d["action"], d["recommended_cap"], d["current_default"]) == ("keep", 8192, 8192)
    # the points measured by switch keep their fused-on-vs-off ratio and interval, out of the cap's decision
    gemma = next(p for p in d["points"] if p["model"] == "gemma-4-26b-a4b-4bit")
    assert gemma["verdict"] == "null" and gemma["reason"].startswith(SWITCH_LABEL)
    assert gemma["ci_low"] is not None and 1.6 < gemma["estimate"] < 1.8  # truth 1.7
    done = cli("check", "--baseline", run, "--current", run, "--json")
    assert done.returncode == 0, done.stdout
    checked = next(p for p in json.loads(done.stdout)["points"] if p["model"] == "gemma-4-26b-a4b-4bit")
    assert checked["ratio_before"] == checked["ratio_after"] == gemma["estimate"]  # point by point, no nan → nan


def test_a_four_point_metal_table_keeps_4096_across_an_unmeasured_range(tmp_path):
    """Issue 35: fused 1.13 at Dff 1024, 0.94 at 6400, nothing between: no move across the gap (crossover ≈ 4591
    by the straight line, which is not evidence)."""
    table = tmp_path / "m1-ultra-2026-10-01.csv"
    rows = {"olmoe-1b-7b-4bit": (1024, 1.13), "phi-3.5-moe-4bit": (6400, 0.94), "mixtral-8x7b-4bit": (14336, 0.92)}
    rows |= {"qwen3-30b-a3b-4bit": (768, 1.15)}
    header = "model,dff,quant_mode," + ",".join(f"{a}_run{i}" for a in ("fallback", "fused") for i in (1, 2, 3))
    lines = [header]
    for name, (dff, ratio) in rows.items():
        base = [100.0, 100.4, 99.7]
        lines.append(f"{name},{dff},affine," + ",".join(f"{v:.2f}" for v in [*base, *(b * ratio for b in base)]))
    table.write_text("\n".join(lines) + "\n")
    run = tmp_path / "metal-run"
    assert cli("import-mlxcel", table, "--backend", "metal", "--out", run).returncode == 0
    d = _crossover(run)
    assert (d["action"], d["recommended_cap"], d["current_default"]) == ("keep", 4096, 4096)


def test_a_rocm_lower_names_the_shared_cuda_constant_and_rewrites_nothing(tmp_path):
    """Issue 35: ROCm reads FUSED_MOE_MAX_DFF_CUDA; a move for ROCm alone is a device-class arm."""
    (tmp_path / "pyproject.toml").write_text("")  # a project: check-reports reads the runs inside it
    # 4 file pairs: each a pass, 2 per half (3 pairs, a pass of one round, withhold any move: issue 36)
    run = _import(tmp_path, "rocm", lambda dff: 1.0 + 0.08 * math.log2(1200 / dff), "rocm-run", seed=1, runs=4)
    d = _crossover(run)
    assert (d["action"], d["current_default"]) == ("lower", 8192)
    out = tmp_path / "reports"
    other = _import(tmp_path / "cuda", "cuda", lambda dff: 1.0 + 0.08 * math.log2(9500 / dff), "cuda-run")
    done = cli("report", run, other, "--out", out)
    assert done.returncode == 0, done.stderr
    (addendum,) = out.glob("*-dff-defaults.md")
    text = addendum.read_text()
    assert "| rocm (`FUSED_MOE_MAX_DFF_CUDA (shared with cuda)`) |" in text
    assert "rocm reads FUSED_MOE_MAX_DFF_CUDA, shared with cuda: not rewritten" in text
    assert "No mlxcel default changes" not in text
    assert not list(out.glob("*-switch_layers.diff"))  # cuda keeps 8192; the shared constant is not rewritten
    (arms,) = out.glob("*-device-defaults.rs")
    assert f'"rocm-gfx1151" => Some({d["recommended_cap"]})' in arms.read_text()
    # check-reports re-derives the defaults addendum from the runs its sidecar names, and fails an edited one
    done = cli("check-reports", out, cwd=tmp_path)
    assert done.returncode == 0 and "check-reports: 1/1 addenda re-derive" in done.stdout, done.stdout
    addendum.write_text(text.replace("**lower**", "**keep**", 1))
    done = cli("check-reports", out, cwd=tmp_path)
    assert done.returncode == 1 and "differs from what its runs re-derive to" in done.stdout, done.stdout


def test_check_reports_re_derives_the_readme_append_to_recipe(tmp_path):
    """Issue 35: check-reports re-derived 0 of 3 addenda made by README's `report --out <mlxcel docs>/data/<id>
    --append-to <design doc>` recipe (the sidecar's CSV link runs through --link-base); each addendum and each block
    inserted in the design doc must check out, and a block edited by hand must fail."""
    project = tmp_path / "moecal"
    project.mkdir()
    (project / "pyproject.toml").write_text("")
    doc = tmp_path / "mlxcel" / "docs" / "benchmark_results" / "fused-moe-decode-kernel-design.md"
    doc.parent.mkdir(parents=True)
    (tmp_path / "mlxcel" / ".git").mkdir()
    doc.write_text("# design\n")
    for seed, backend in enumerate(("cuda", "metal")):
        scenario = Scenario(backend, "curved", ("mixtral", "qwen3_moe"), 5000.0, 1.0, seed)
        models = _models(scenario, tmp_path / backend)
        samples = _samples(scenario, models, _runs(scenario, models), paired=True)
        run = write_run(project / "results" / f"run-{backend}", samples, _sweep_meta(scenario, models))
        out = doc.parent / "data" / run.name
        done = cli("report", run, "--out", out, "--append-to", doc, cwd=project)
        assert done.returncode == 0, done.stderr
    done = cli("check-reports", doc.parent, cwd=project)
    assert done.returncode == 0, done.stdout
    assert "check-reports: 3/3 addenda re-derive" in done.stdout  # two addenda, one design doc with two blocks
    doc.write_text(doc.read_text().replace("**Decision:", "**Decision (edited):", 1))
    done = cli("check-reports", doc.parent, cwd=project)
    assert done.returncode == 1 and "the block of sweep-cuda-curved-2fam-seed0 differs" in done.stdout
