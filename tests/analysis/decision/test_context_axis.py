"""The context axis (issue 37): `init --context 512 --context 8192` writes `prompt_tokens: [512, 8192]` and
`--prompt-tokens {prompt_tokens}`; the sweep measures every depth as its own points and shape family (a crossover per
depth), and the addendum says whether one cap fits every depth. The benchmark is the SYNTHETIC emulation
(tests/fixtures/emulated_mlxcel_bench_decode.py: a deeper context dilutes the fused gain, its crossover stays)."""

from __future__ import annotations

import json

import pytest
import yaml

from harness.analysis.decision.context_axis import depth_statement
from harness.config.schema import load_config, parse_config
from harness.runs.formats import read_samples
from tests.support.fake_models import bench_command, write_models
from tests.support.helpers import cli


def _family(depth: int, action: str, cap: int | None) -> dict:
    return {"family": f"command ctx{depth}", "action": action, "recommended_cap": cap}


def test_the_statement_says_whether_one_cap_fits_every_depth():
    same = depth_statement([_family(512, "keep", 8192), _family(8192, "keep", 8192)], 8192)
    assert same == "One cap fits every depth (512 tokens: keep 8192; 8192 tokens: keep 8192)."
    split = depth_statement([_family(8192, "lower", 6144), _family(512, "keep", 8192)], 6144)
    assert split.startswith("The depths disagree (512 tokens: keep 8192; 8192 tokens: lower 6144)")
    assert "the cap that holds at every depth is 6144, bound by the 8192-token context" in split
    assert depth_statement([{"family": "command", "action": "keep", "recommended_cap": 8192}], 8192) is None


def test_the_axis_must_reach_the_command():
    base = {"name": "x", "models": [{"name": "m", "dff": 768, "model_path": "/m"}]}
    workload = {"kind": "command", "command": ["b", "-m", "{model_path}"], "prompt_tokens": [512, 8192]}
    with pytest.raises(Exception, match="no \\{prompt_tokens\\}"):
        parse_config({**base, "workload": workload}, "c.yaml")
    unfilled = {"kind": "command", "command": ["b", "--prompt-tokens", "{prompt_tokens}"]}
    with pytest.raises(Exception, match="give the depths"):
        parse_config({**base, "workload": unfilled}, "c.yaml")


def test_init_writes_the_axis_and_the_sweep_decides_per_depth(tmp_path):
    models = write_models(tmp_path)
    config = tmp_path / "c.yaml"
    args = ["--models", models, "--bench", bench_command(), "--backend", "cuda", "--out", config]
    done = cli("init", *args, "--context", "512", "--context", "8192")
    assert done.returncode == 0, done.stderr
    loaded = load_config(config)
    assert loaded.workload.prompt_tokens == [512, 8192] and "{prompt_tokens}" in loaded.workload.command
    data = yaml.safe_load(config.read_text())
    data["measure"].update(warmup_runs=0, rounds=3)
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    run = tmp_path / "run"
    swept = cli("sweep", config, "--out", run, "--only", "qwen3-30b-a3b-4bit", "--no-report")
    assert swept.returncode == 0, swept.stderr
    samples = read_samples(run / "samples.csv")
    timed = samples[samples["status"] == "ok"]
    assert set(timed["dtype"]) == {"ctx512", "ctx8192"} and json.loads((run / "meta.json").read_text())[
        "context_axis"
    ] == [512, 8192]
    result = json.loads(cli("crossover", run, "--json").stdout)
    assert {f["family"] for f in result["families"]} == {"command ctx512", "command ctx8192"}
    reports = tmp_path / "reports"
    assert cli("report", run, "--out", reports).returncode == 0
    text = "".join(p.read_text() for p in reports.rglob("*.md"))
    assert "- Context: One cap fits every depth" in text or "- Context: The depths disagree" in text
    july = cli("init", *args[:-1], tmp_path / "july.yaml", "--bench", "true", "--context", "512")
    assert july.returncode == 2 and "offers no --prompt-tokens" in july.stderr, july.stderr
