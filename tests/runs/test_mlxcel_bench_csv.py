"""`moecal import-mlxcel --fallback A.csv --fused B.csv`: mlxcel's scripts/bench_decode.sh CSVs, one per arm and run.

The header and the row layout (quoted prompt, trailing SKIP:/FAIL: token on rows without numbers) are
bench_decode.sh's, as in mlxcel's published benchmarks/cuda_gb10_2026-07-03.csv; every number here is SYNTHETIC.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.support.fake_models import CONFIGS, write_models
from tests.support.helpers import cli

HEADER = (
    "model,model_path,prompt_tokens,generated_tokens,prefill_ms,prefill_tok_s,decode_ms,decode_tok_s,date,hardware,"
    "mlx_version,build_type,max_tokens,prompt,prompt_target_len"
)
PROMPT = '"Hello, how are you today?"'


def _row(model: str, generated: int, tok_s: float, date: str = "2026-07-03", version: str = "0.3.3") -> str:
    decode_ms = 1000.0 * generated / tok_s
    return (
        f"{model},./models/{model},36,{generated},9.77,3685.82,{decode_ms:.2f},{tok_s:.2f},{date},"
        f"NVIDIA_GB10_122GB,{version},release,100,{PROMPT},"
    )


def _files(tmp_path: Path, arm: str, tok_s: dict[str, float], runs: int = 3, **row: str) -> list[Path]:
    out = []
    for run in range(runs):
        path = tmp_path / f"cuda_gb10_2026-07-03_{arm}{run}.csv"
        lines = [HEADER]
        for i, (model, value) in enumerate(tok_s.items()):
            lines.append(_row(model, 60 + i, value * (1 + 0.002 * run), **row))
        failed = "deepseek-v3-4bit,./models/deepseek-v3-4bit/,,,,,,,2026-07-03,NVIDIA_GB10_122GB,0.3.3,release,100,"
        lines.append(failed + f"{PROMPT},,FAIL:bench")
        path.write_text("\n".join(lines) + "\n")
        out.append(path)
    return out


def _args(fallback: list[Path], fused: list[Path]) -> list[object]:
    return [*(a for p in fallback for a in ("--fallback", p)), *(a for p in fused for a in ("--fused", p))]


def test_bench_decode_csvs_become_one_run_with_token_counts(tmp_path):
    models = write_models(tmp_path, {n: CONFIGS[n] for n in ("qwen3-30b-a3b-4bit", "mixtral-8x7b-4bit")})
    fallback = _files(tmp_path, "fallback", {"qwen3-30b-a3b-4bit": 100.0, "mixtral-8x7b-4bit": 40.0})
    fused = _files(tmp_path, "fused", {"qwen3-30b-a3b-4bit": 107.0, "mixtral-8x7b-4bit": 36.0})
    run = tmp_path / "run"
    result = cli("import-mlxcel", *_args(fallback, fused), "--models", models, "--out", run)
    assert result.returncode == 0, result.stderr
    assert "12 runs imported" in result.stdout and "deepseek-v3-4bit: no deepseek-v3-4bit/config.json" in result.stdout
    samples = pd.read_csv(run / "samples.csv", comment="#")
    assert set(samples["tokens"]) == {60, 61} and set(samples["dff"]) == {768, 14336}
    meta = json.loads((run / "meta.json").read_text())
    assert (meta["backend"], meta["library_pin"], meta["prompt"]) == (
        "cuda",
        "mlxcel 0.3.3",
        "Hello, how are you today?",
    )
    decision = json.loads(cli("crossover", run, "--json").stdout)
    ratios = {p["model"]: round(p["ratio_of_medians"], 2) for p in decision["points"]}
    assert ratios == {"qwen3-30b-a3b-4bit": 1.07, "mixtral-8x7b-4bit": 0.9}


def test_pairs_from_another_build_prompt_or_day_are_refused(tmp_path):
    models = write_models(tmp_path, {"qwen3-30b-a3b-4bit": CONFIGS["qwen3-30b-a3b-4bit"]})
    fallback = _files(tmp_path, "fallback", {"qwen3-30b-a3b-4bit": 100.0}, runs=1)
    for field, row in (("date", {"date": "2026-07-04"}), ("mlx_version", {"version": "0.3.4"})):
        fused = _files(tmp_path, f"fused-{field}", {"qwen3-30b-a3b-4bit": 107.0}, runs=1, **row)
        result = cli("import-mlxcel", *_args(fallback, fused), "--models", models, "--out", tmp_path / field)
        line = result.stderr.strip()
        assert result.returncode == 2 and "\n" not in line and f": {field}: line 2:" in line, line
        assert not (tmp_path / field).exists()
    other_prompt = tmp_path / "prompt.csv"
    other_prompt.write_text(fallback[0].read_text().replace("how are you", "who are you", 1))
    result = cli("import-mlxcel", *_args(fallback, [other_prompt]), "--models", models, "--out", tmp_path / "p")
    assert result.returncode == 2 and ": prompt: line 2:" in result.stderr
    one_arm = cli("import-mlxcel", "--fused", fallback[0], "--models", models, "--out", tmp_path / "x")
    assert one_arm.returncode == 2 and "need both arms" in one_arm.stderr


# Today's layout (bench_decode.sh since 2026-09, as in mlxcel's benchmarks/metal_m1ultra_2026-09-08.csv and, with the
# two ROCm columns, benchmarks/rocm_strixhalo-gfx1151_2026-09-30.csv): `mlxcel_version` in place of `mlx_version`,
# then the commits. Every number below is SYNTHETIC.
NEW_HEADER = HEADER.replace("mlx_version", "mlxcel_version") + ",mlxcel_commit,mlx_commit"
ROCM_HEADER = NEW_HEADER + ",mlx_rocm_overlay_commit,hip_version"


def _today(tmp_path: Path, name: str, tok_s: dict[str, float], build: str, header: str = NEW_HEADER) -> Path:
    path = tmp_path / name
    lines = [header]
    for i, (model, value) in enumerate(tok_s.items()):
        lines.append(_row(model, 128, value * (1 + 0.003 * i), version="0.7.0") + "," + build)
    failed = "deepseek-v3-4bit,./models/deepseek-v3-4bit/,,,,,,,2026-07-03,NVIDIA_GB10_122GB,0.7.0,release,100,"
    lines.append(failed + f"{PROMPT},,{build},FAIL:bench")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_todays_layout_is_read_and_its_build_kept_in_meta_and_the_written_csv(tmp_path):
    models = write_models(tmp_path, {n: CONFIGS[n] for n in ("qwen3-30b-a3b-4bit", "mixtral-8x7b-4bit")})
    speeds = {"fallback": {"qwen3-30b-a3b-4bit": 100.0, "mixtral-8x7b-4bit": 40.0}}
    speeds["fused"] = {"qwen3-30b-a3b-4bit": 108.0, "mixtral-8x7b-4bit": 37.0}
    build = "2fcdbe5f,81ba1c6a,75915908,7.15.26333"
    files = {
        arm: [
            _today(
                tmp_path,
                f"rocm_strixhalo-gfx1151_{arm}{r}.csv",
                {m: v * (1 + 0.004 * r) for m, v in s.items()},
                build,
                ROCM_HEADER,
            )
            for r in range(3)
        ]
        for arm, s in speeds.items()
    }
    run = tmp_path / "run"
    result = cli("import-mlxcel", *_args(files["fallback"], files["fused"]), "--models", models, "--out", run)
    assert result.returncode == 0, result.stderr
    meta = json.loads((run / "meta.json").read_text())
    assert (meta["mlxcel_version"], meta["mlxcel_commit"], meta["mlx_commit"]) == ("0.7.0", "2fcdbe5f", "81ba1c6a")
    assert (meta["mlx_rocm_overlay_commit"], meta["hip_version"]) == ("75915908", "7.15.26333")
    assert meta["library_pin"] == "mlxcel 0.7.0 (2fcdbe5f) / MLX 81ba1c6a / ROCm overlay 75915908 / HIP 7.15.26333"
    out = tmp_path / "sum.csv"
    assert cli("summarize", run, "--mlxcel", out).returncode == 0
    written = pd.read_csv(out, comment="#", dtype=str)
    assert list(written.columns[-5:]) == [
        "mlxcel_version",
        "mlxcel_commit",
        "mlx_commit",
        "mlx_rocm_overlay_commit",
        "hip_version",
    ]
    assert set(written["mlx_commit"]) == {"81ba1c6a"}
    back = json.loads(cli("crossover", out, "--json").stdout)
    assert {p["model"]: round(p["ratio_of_medians"], 2) for p in back["points"]} == {
        "qwen3-30b-a3b-4bit": 1.08,
        "mixtral-8x7b-4bit": 0.93,
    }


def test_a_pair_from_two_commits_or_two_layouts_is_refused(tmp_path):
    models = write_models(tmp_path, {"qwen3-30b-a3b-4bit": CONFIGS["qwen3-30b-a3b-4bit"]})
    fallback = _today(tmp_path, "cuda_gb10_fallback.csv", {"qwen3-30b-a3b-4bit": 100.0}, "30ab5a39,9a795735")
    for column, fused_build in (("mlxcel_commit", "1b6a5773-dirty,9a795735"), ("mlx_commit", "30ab5a39,e9463bb0")):
        fused = _today(tmp_path, f"cuda_gb10_fused_{column}.csv", {"qwen3-30b-a3b-4bit": 107.0}, fused_build)
        result = cli(
            "import-mlxcel", "--fallback", fallback, "--fused", fused, "--models", models, "--out", tmp_path / column
        )
        line = result.stderr.strip()
        assert result.returncode == 2 and "\n" not in line and f": {column}: line 2:" in line, line
        assert "Traceback" not in result.stderr and not (tmp_path / column).exists()
    old = _files(tmp_path, "old", {"qwen3-30b-a3b-4bit": 107.0}, runs=1, version="0.7.0")
    mixed = cli("import-mlxcel", "--fallback", fallback, "--fused", old[0], "--models", models, "--out", tmp_path / "m")
    assert mixed.returncode == 2 and ": mlxcel_commit: line 2:" in mixed.stderr, mixed.stderr


def test_written_mlxcel_csv_naming_two_builds_is_refused(tmp_path):
    path = tmp_path / "sweep.csv"
    path.write_text(
        "model,dff,quant_mode,fallback_run1,fallback_median,fused_run1,fused_median,fused_over_fallback,"
        "mlxcel_version,mlxcel_commit,mlx_commit\n"
        "a,768,affine,10,10,11,11,1.1,0.7.0,30ab5a39,9a795735\n"
        "b,14336,affine,10,10,9,9,0.9,0.7.0,1b6a5773,9a795735\n"
    )
    result = cli("crossover", path)
    assert result.returncode == 2 and f"{path}: mlxcel_commit: line 3: '1b6a5773'" in result.stderr, result.stderr


def test_each_file_pair_is_a_pass_and_a_single_pair_is_one_visit(tmp_path):
    """The i-th --fallback and --fused files are pass i (samples.csv `pass`), and each point's runs pair by pass (the
    summary's method says so); a single pair records no pass (issue 36)."""
    models = write_models(tmp_path, {n: CONFIGS[n] for n in ("qwen3-30b-a3b-4bit", "mixtral-8x7b-4bit")})
    tok_s = {"fallback": {"qwen3-30b-a3b-4bit": 100.0, "mixtral-8x7b-4bit": 40.0}}
    tok_s["fused"] = {"qwen3-30b-a3b-4bit": 107.0, "mixtral-8x7b-4bit": 36.0}
    for runs in (3, 1):
        root = tmp_path / f"pairs{runs}"
        root.mkdir()
        files = {arm: _files(root, arm, values, runs=runs) for arm, values in tok_s.items()}
        run = root / "run"
        result = cli("import-mlxcel", *_args(files["fallback"], files["fused"]), "--models", models, "--out", run)
        assert result.returncode == 0, result.stderr
        samples = pd.read_csv(run / "samples.csv", comment="#")
        ok = samples[samples["status"] == "ok"]
        if runs == 1:
            assert ok["pass"].isna().all()
            continue
        assert (ok["pass"] == ok["round"] + 1).all() and set(ok["pass"]) == {1, 2, 3}
        decision = json.loads(cli("crossover", run, "--json").stdout)
        assert {p["method"].split(",")[0] for p in decision["points"]} == {"paired by file pair"}
