"""`moecal import-mlxcel X.jsonl` (issue 37): mlxcel's scripts/engine_bench_rounds.py JSONL, its `-null` arm as the A/A
arm, each (path, prompt length) its own point, the margin derived from the null arm. The file is SYNTHETIC, written in
the script's record layout (a header line, then `[engine-bench]` records with arm/round/started added)."""

from __future__ import annotations

import json
import random

import pytest

from harness.analysis.points.null_margin import from_null
from harness.cli.analysis_options import build_options
from harness.runs.formats import read_samples
from tests.support.helpers import cli


def _jsonl(path, rounds=5) -> None:
    noise = random.Random(3)
    header = {"kind": "header", "model": "models/mlx/qwen3-30b-a3b-4bit", "bin": "target/release/mlxcel-bench-engine",
              "arms": {"fused": ["--x"], "gather": ["--y"], "other": []}, "prompt_tokens": [256, 8192],
              "max_tokens": 128, "rounds": rounds, "host": "gb10", "time": 1791331200.0}  # fmt: skip
    lines = [{**header, "sdpa_deterministic": None}]
    for r in range(rounds):
        for arm, speed in (("fused", 110.0), ("gather", 100.0), ("gather-null", 100.0), ("other", 50.0)):
            for prompt in (256, 8192):
                tok_s = speed * (0.9 if prompt == 8192 else 1.0) * (1 + noise.gauss(0, 0.003))
                lines.append({"path": "cli", "prompt_target_len": prompt, "ttft_ms": 10.0, "decode_tok_s": tok_s,
                              "label": arm, "arm": arm, "round": r, "started": 0.0})  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_engine_bench_rounds_jsonl_imports_with_its_null_arm(tmp_path):
    source = tmp_path / "rounds.jsonl"
    _jsonl(source)
    run = tmp_path / "run"
    args = ["import-mlxcel", source, "--out", run, "--fused-arm", "fused", "--fallback-arm", "gather", "--dff", "768"]
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert "skipped: arm other" in done.stdout
    samples = read_samples(run / "samples.csv")
    assert set(samples["arm"]) == {"fused", "fallback", "null"}
    assert set(samples["model"]) == {"qwen3-30b-a3b-4bit@cli-pp256", "qwen3-30b-a3b-4bit@cli-pp8192"}
    meta = json.loads((run / "meta.json").read_text())
    assert meta["margin_from_null"] is True and meta["host"] == "gb10"
    derived = from_null(samples)
    assert derived is not None and build_options(None, inputs=[run]).policy.margin == pytest.approx(derived.margin)
    assert cli("crossover", run, "--json").returncode == 0


@pytest.mark.parametrize(
    ("text", "problem"),
    [("{not json\n", "not JSON"), ('{"arm": "fused"}\n', "no engine_bench_rounds.py header"),
     ('{"kind": "header", "model": "m"}\n{"arm": "fused", "round": 0}\n', "not an [engine-bench] record")],
)  # fmt: skip
def test_a_bad_jsonl_is_one_line_naming_the_problem(tmp_path, text, problem):
    source = tmp_path / "bad.jsonl"
    source.write_text(text)
    args = ["--fused-arm", "fused", "--fallback-arm", "gather", "--dff", "768", "--out", tmp_path / "r"]
    result = cli("import-mlxcel", source, *args)
    assert result.returncode == 2 and problem in result.stderr and "\n" not in result.stderr.strip(), result.stderr
