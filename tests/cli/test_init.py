"""`moecal init`: model discovery from config.json, eligibility prediction, a config `sweep --dry-run` accepts.

Model folders are fake (real config.json shapes, no weights) and live in tmp dirs; the benchmark is the SYNTHETIC
emulation tests/fixtures/emulated_mlxcel_bench_decode.py.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from harness.analysis.decision.decision_facts import MLXCEL_DEFAULT_CAPS
from harness.cli.app import app
from harness.config.discover import DiscoveredModel, read_model, scan
from harness.config.eligibility import predict_null
from harness.config.schema import load_config
from harness.devices.backends import detect
from harness.errors import InputError
from tests.support.fake_models import AFFINE_4BIT, CONFIGS, bench_command, write_models
from tests.support.helpers import REPO

# family → (config.json, expected dff, d_model, n_experts, top_k, shared_dff): the published shapes
FAMILY_CASES = {
    "qwen2_moe": (
        {
            "model_type": "qwen2_moe",
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632,
            "num_experts": 60,
            "num_experts_per_tok": 4,
        },
        (1408, 2048, 60, 4, 5632),
    ),
    "olmoe": (
        {
            "model_type": "olmoe",
            "hidden_size": 2048,
            "intermediate_size": 1024,
            "num_experts": 64,
            "num_experts_per_tok": 8,
        },
        (1024, 2048, 64, 8, 0),
    ),
    "lfm2_moe": (
        {
            "model_type": "lfm2_moe",
            "hidden_size": 2048,
            "intermediate_size": 7168,
            "moe_intermediate_size": 1792,
            "num_experts": 32,
            "num_experts_per_tok": 4,
            "num_dense_layers": 2,
        },
        (1792, 2048, 32, 4, 0),
    ),
    "deepseek_v3": (
        {
            "model_type": "deepseek_v3",
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "moe_intermediate_size": 2048,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
        },
        (2048, 7168, 256, 8, 2048),
    ),
    "granitemoe": (
        {
            "model_type": "granitemoe",
            "hidden_size": 1536,
            "intermediate_size": 512,
            "num_local_experts": 40,
            "num_experts_per_tok": 8,
        },
        (512, 1536, 40, 8, 0),
    ),
    "llama4": (CONFIGS["llama-4-scout-17b-16e-4bit"], (8192, 5120, 16, 1, 8192)),
    "gpt_oss": (CONFIGS["gpt-oss-20b-mxfp4"], (2880, 2880, 32, 4, 0)),
    "mixtral": (CONFIGS["mixtral-8x7b-4bit"], (14336, 4096, 8, 2, 0)),
    "qwen3_moe": (CONFIGS["qwen3-30b-a3b-4bit"], (768, 2048, 128, 8, 0)),
}


def _model(tmp_path, config: dict) -> DiscoveredModel:
    folder = tmp_path / "m"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    model = read_model(folder)
    assert isinstance(model, DiscoveredModel), model
    return model


@pytest.mark.parametrize("family", sorted(FAMILY_CASES))
def test_discovery_reads_each_family_with_its_own_keys(tmp_path, family):
    config, expected = FAMILY_CASES[family]
    model = _model(tmp_path, config)
    assert (model.dff, model.d_model, model.n_experts, model.top_k, model.shared_dff) == expected


def test_quantization_from_either_key_and_mixed_overrides(tmp_path):
    assert _model(tmp_path, CONFIGS["gpt-oss-20b-mxfp4"]).quant.mode == "mxfp4"
    mixed = copy.deepcopy(CONFIGS["qwen3-30b-a3b-4bit"])
    del mixed["quantization_config"]
    mixed["quantization"] = {
        "group_size": 64,
        "bits": 4,
        "model.layers.0.mlp.switch_mlp.down_proj": {"group_size": 64, "bits": 6},
        "model.embed_tokens": {"group_size": 64, "bits": 8},  # not an expert projection: ignored
    }
    model = _model(tmp_path, mixed)
    assert model.quant.projections["down"] == {(6, 64)} and model.quant.projections["gate"] == {(4, 64)}
    assert predict_null(model) is None  # 6-bit down is within the fused kernel's rules


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        ({"model.layers.0.mlp.switch_mlp.gate_proj": {"group_size": 64, "bits": 6}}, "gate_proj at 6 bits"),
        ({"model.layers.0.mlp.switch_mlp.down_proj": {"group_size": 32, "bits": 4}}, "group sizes differ"),
        ({"model.layers.0.mlp.switch_mlp.down_proj": {"group_size": 64, "bits": 3}}, "down_proj at 3 bits"),
    ],
)
def test_eligibility_declines_what_the_fused_kernel_declines(tmp_path, override, reason):
    config = copy.deepcopy(CONFIGS["qwen3-30b-a3b-4bit"])
    config["quantization"] = {**AFFINE_4BIT, **override}
    assert reason in predict_null(_model(tmp_path, config))


def test_eligibility_of_the_fake_models(tmp_path):
    found, skipped = scan(write_models(tmp_path))
    predicted = {m.name: predict_null(m) for m in found}
    assert predicted["qwen3-30b-a3b-4bit"] is None and predicted["mixtral-8x7b-4bit"] is None
    assert "mxfp4" in predicted["gpt-oss-20b-mxfp4"]
    assert "llama4 never runs the fused kernel" in predicted["llama-4-scout-17b-16e-4bit"]
    assert [(s.name, s.reason) for s in skipped] == [("llama-3.2-1b-4bit", "no MoE layers (model_type llama)")]
    unquantized = {k: v for k, v in CONFIGS["mixtral-8x7b-4bit"].items() if k != "quantization"}
    assert "not quantized" in predict_null(_model(tmp_path, unquantized))


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"model_type": "mixtral", "hidden_size": 4096', "line 1"),
        (json.dumps({**CONFIGS["mixtral-8x7b-4bit"], "intermediate_size": "big"}), "intermediate_size"),
        (json.dumps({k: v for k, v in CONFIGS["qwen3-30b-a3b-4bit"].items() if k != "num_experts"}), "num_experts"),
        (json.dumps({**CONFIGS["mixtral-8x7b-4bit"], "quantization": {"bits": 4}}), "quantization.bits"),
    ],
)
def test_bad_config_json_names_file_and_key(tmp_path, text, field):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.json").write_text(text)
    with pytest.raises(InputError) as caught:
        read_model(folder)
    assert caught.value.source == str(folder / "config.json") and field in caught.value.field


def test_init_writes_a_config_that_sweep_dry_run_accepts(tmp_path):
    models = write_models(tmp_path)
    out = tmp_path / "mlxcel.yaml"
    runner = CliRunner()
    args = ["init", "--models", str(models), "--bench", bench_command(), "--backend", "cuda", "--out", str(out)]
    result = runner.invoke(app, [*args, "--parity-regex", "Output: (.*)"])
    assert result.exit_code == 0, result.output
    assert "llama-3.2-1b-4bit: skipped — no MoE layers" in result.output
    config = load_config(out)
    assert config.current_default == 8192 and config.workload.parity.regex == "Output: (.*)"
    entries = {m.name: m for m in config.models}
    assert set(entries) == {n for n in CONFIGS if n != "llama-3.2-1b-4bit"}
    mixtral = entries["mixtral-8x7b-4bit"]
    assert (mixtral.dff, mixtral.d_model, mixtral.top_k, mixtral.bits, mixtral.group_size) == (14336, 4096, 2, 4, 64)
    assert mixtral.expect_null is None and "mxfp4" in entries["gpt-oss-20b-mxfp4"].expect_null
    assert "# skipped llama-3.2-1b-4bit: no MoE layers" in out.read_text()
    dry = runner.invoke(app, ["sweep", str(out), "--dry-run", "--out", str(tmp_path / "run")])
    assert dry.exit_code == 0, dry.output
    assert not (tmp_path / "run").exists()
    yaml.safe_load(out.read_text())  # plain YAML for people to edit


def test_init_with_the_default_backend_and_never_over_a_stored_file(tmp_path):
    """`make sweep` calls init without --backend (auto: this platform's GPU backend); its --out never replaces a
    stored result (here a run marked read-only)."""
    models = write_models(tmp_path)
    out = tmp_path / "auto.yaml"
    result = CliRunner().invoke(app, ["init", "--models", str(models), "--bench", bench_command(), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert load_config(out).current_default == MLXCEL_DEFAULT_CAPS.get(detect().platform)
    stored = tmp_path / "stored"
    stored.mkdir()
    (stored / ".stored").write_text("a baseline\n")
    (stored / "meta.json").write_text("{}\n")
    args = ["init", "--models", str(models), "--bench", bench_command(), "--out", str(stored / "meta.json")]
    refused = CliRunner().invoke(app, args)
    assert isinstance(refused.exception, InputError) and "read-only" in str(refused.exception)
    assert (stored / "meta.json").read_text() == "{}\n"


def test_init_without_moe_models_is_one_line_error(tmp_path):
    models = write_models(tmp_path, {"dense": CONFIGS["llama-3.2-1b-4bit"]})
    result = CliRunner().invoke(app, ["init", "--models", str(models), "--out", str(tmp_path / "x.yaml")])
    assert isinstance(result.exception, InputError) and "no MoE model folder found" in str(result.exception)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_sweep_says_which_config_and_why(tmp_path):
    """`make -n` prints the recipe without running it (nothing is built or swept)."""
    models = write_models(tmp_path)

    def recipe(*variables: str) -> str:
        done = subprocess.run(["make", "-n", "sweep", *variables], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    mlxcel = recipe("BENCH=/opt/bin/mlxcel-bench-decode", f"MODELS={models}")
    assert f"calibrating mlxcel — found benchmark /opt/bin/mlxcel-bench-decode and model folders in {models}" in mlxcel
    assert f"moecal init --models {models} --bench '/opt/bin/mlxcel-bench-decode'" in mlxcel
    assert "built-in config for this machine — no mlxcel-bench-decode on PATH" in recipe("BENCH=")
    # MODELS named without a benchmark: one line and exit 2, never the CPU preset in its place
    stopped = subprocess.run(
        ["make", "-n", "sweep", "BENCH=", f"MODELS={models}"], cwd=REPO, capture_output=True, text=True
    )
    assert stopped.returncode == 2 and "moecal sweep" not in stopped.stdout
    assert f"make sweep: MODELS={models} given but no mlxcel-bench-decode on PATH" in stopped.stderr
    no_models = recipe("BENCH=/opt/bin/b", f"MODELS={tmp_path / 'none'}")
    assert "no model folder with config.json" in no_models and "moecal init" not in no_models
    assert "CONFIG=configs/cpu-smoke.yaml given" in recipe("CONFIG=configs/cpu-smoke.yaml", "BENCH=/opt/bin/b")
