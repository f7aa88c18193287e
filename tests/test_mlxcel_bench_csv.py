"""`moecal import-mlxcel --fallback A.csv --fused B.csv`: mlxcel's scripts/bench_decode.sh CSVs, one per arm and run.

The header and the row layout (quoted prompt, trailing SKIP:/FAIL: token on rows without numbers) are
bench_decode.sh's, as in mlxcel's published benchmarks/cuda_gb10_2026-07-03.csv; every number here is SYNTHETIC.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.fake_models import CONFIGS, write_models
from tests.helpers import cli

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
