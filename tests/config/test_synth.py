"""`moecal synth`: synthetic checkpoints of each family load in mlx-lm (MLX's CPU build), generate greedy tokens,
carry the expert shapes and quantization the loader expects, and are found by `moecal init` as synthetic.

Source folders are tiny, labelled test configs (tests/support/synth_sources.py); the weights are random by design."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.config.discover import FAMILIES, read_model, read_synth_sidecar
from harness.measure import synth_writer
from tests.support.helpers import cli
from tests.support.synth_sources import CONFIGS, source_folder

mlx_lm = pytest.importorskip("mlx_lm", reason="mlx-lm (the dev extra) loads the synthetic checkpoints")
MOE_BLOCK = {"mixtral": "block_sparse_moe", "phimoe": "block_sparse_moe", "lfm2_moe": "feed_forward"}


def _greedy(path: Path, tokens: int = 4) -> str:
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = mlx_lm.load(str(path))  # strict: every tensor name and shape must match the model
    return mlx_lm.generate(model, tokenizer, "w3 w4 w5", max_tokens=tokens, sampler=make_sampler(0.0))


def _switch_layers(path: Path, family: str) -> list:
    model, _ = mlx_lm.load(str(path))
    block = MOE_BLOCK.get(family, "mlp")
    return [getattr(layer, block).switch_mlp for layer in model.layers if hasattr(getattr(layer, block), "switch_mlp")]


@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_every_family_loads_generates_and_has_the_expert_layout_the_loader_expects(tmp_path, family):
    source = source_folder(tmp_path / "src", family)
    done = cli("synth", "--like", source, "--dff", "64,96", "--dtype", "float32", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "disk" in done.stdout and "memory" in done.stdout  # the plan comes first
    dff_key = FAMILIES[family].dff
    for dff in (64, 96):
        path = tmp_path / "out" / f"{family}-tiny-dff{dff}"
        config = json.loads((path / "config.json").read_text())
        assert config[dff_key] == dff and config["num_hidden_layers"] == 3
        assert (path / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
        text = _greedy(path)
        assert len(text.split()) >= 1 and all(word.startswith("w") for word in text.split())
        assert _greedy(path) == text  # greedy decoding of the same weights is deterministic
        layers = _switch_layers(path, family)
        assert layers, "no MoE layer loaded"
        experts = config[FAMILIES[family].n_experts]
        for switch in layers:
            for name, out_dim, in_dim in (("gate_proj", dff, 64), ("up_proj", dff, 64), ("down_proj", 64, dff)):
                projection = getattr(switch, name)
                assert (projection.bits, projection.group_size) == (4, 32)  # quantized like the source
                assert projection.weight.shape == (experts, out_dim, in_dim * 4 // 32)
                assert str(projection.weight.dtype) == "mlx.core.uint32"
                assert projection.scales.shape == (experts, out_dim, in_dim // 32)
                assert str(projection.scales.dtype) == "mlx.core.float32"


def test_init_finds_synthetic_checkpoints_at_their_dff(tmp_path):
    source = source_folder(tmp_path / "src", "mixtral")
    out = tmp_path / "models"
    assert cli("synth", "--like", source, "--dff", "64,96", "--dtype", "float32", "--out", out).returncode == 0
    done = cli("init", "--models", out, "--bench", "echo", "--backend", "cpu", "--out", tmp_path / "c.yaml")
    assert done.returncode == 0, done.stderr
    import yaml

    models = yaml.safe_load((tmp_path / "c.yaml").read_text())["models"]
    assert [(m["dff"], m["family"]) for m in models] == [(64, "mixtral (synthetic)"), (96, "mixtral (synthetic)")]
    assert all("expect_null" not in m for m in models)
    assert models[0]["synthetic"] == "random weights shaped like mixtral-tiny, 3 of 3 layers, seed 0"


def test_layers_seed_and_shards(tmp_path):
    """--layers cuts the decoder (a layer's weights do not depend on how many were kept); the same seed writes the
    same bytes; a small shard limit writes several shards with an index that mlx-lm follows."""
    source = source_folder(tmp_path / "src", "lfm2_moe")
    common = ("--like", source, "--dff", "64", "--dtype", "float32")
    assert cli("synth", *common, "--layers", "2", "--out", tmp_path / "a").returncode == 0
    assert cli("synth", *common, "--layers", "2", "--out", tmp_path / "b", "--shard-gb", "0.0001").returncode == 0
    a, b = tmp_path / "a" / "lfm2_moe-tiny-dff64", tmp_path / "b" / "lfm2_moe-tiny-dff64"
    config = json.loads((a / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["layer_types"] == ["conv", "full_attention"]
    assert read_synth_sidecar(a)["content_hash"] == read_synth_sidecar(b)["content_hash"]
    assert (a / "model.safetensors").is_file()
    index = json.loads((b / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert _greedy(a) == _greedy(b)


def test_refusals_are_one_line(tmp_path):
    gpt = tmp_path / "gpt"
    gpt.mkdir()
    config = {"model_type": "gpt_oss", "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 2}
    (gpt / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    done = cli("synth", "--like", gpt, "--dff", "64", "--out", tmp_path / "o")
    assert done.returncode == 2 and "no synthetic layout for family 'gpt_oss'" in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    # a 6-bit down projection needs Dff % 16 == 0 in mlxcel's fused kernel
    six = source_folder(tmp_path / "src", "mixtral")
    spec = json.loads((six / "config.json").read_text())
    for layer in range(3):
        spec["quantization"][f"model.layers.{layer}.block_sparse_moe.switch_mlp.down_proj"] = {"bits": 6}
    (six / "config.json").write_text(json.dumps(spec))
    done = cli("synth", "--like", six, "--dff", "72", "--out", tmp_path / "o")
    assert done.returncode == 2 and "6-bit down_proj needs Dff divisible by 16" in done.stderr
    assert not (tmp_path / "o").exists()
    done = cli("synth", "--like", six, "--dff", "72", "--out", tmp_path / "o", "--allow-declined", "--dry-run")
    assert done.returncode == 0 and "DECLINED" in done.stdout
    done = cli("synth", "--like", six, "--dff", "96", "--out", tmp_path / "o", "--dtype", "float32")
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "o" / "mixtral-tiny-dff96" / "config.json").read_text())["quantization"]
    assert written["model.layers.2.block_sparse_moe.switch_mlp.down_proj"] == {"group_size": 32, "bits": 6}
    assert read_model(tmp_path / "o" / "mixtral-tiny-dff96").quant.projections["down"] == {(6, 32)}


def test_a_plan_that_does_not_fit_is_refused_before_writing(tmp_path, monkeypatch):
    source = source_folder(tmp_path / "src", "mixtral")
    monkeypatch.setattr(synth_writer, "free_bytes", lambda folder: (1000, 1 << 40))
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "o")
    assert done.returncode == 2 and "on disk" in done.stderr and not (tmp_path / "o").exists()


def test_bad_dff_is_one_line_and_a_crash_leaves_no_folder(tmp_path, monkeypatch):
    source = source_folder(tmp_path / "src", "mixtral")
    done = cli("synth", "--like", source, "--dff", "64,x", "--out", tmp_path / "o")
    assert done.returncode == 2 and done.stderr.startswith("error: --dff: 64,x:") and "Traceback" not in done.stderr

    def crash(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(synth_writer._ShardWriter, "flush", crash)
    done = cli("synth", "--like", source, "--dff", "64", "--out", tmp_path / "o", "--dtype", "float32")
    assert done.returncode == 2 and "No space left on device" in done.stderr
    assert list((tmp_path / "o").iterdir()) == []  # neither the checkpoint nor its partial folder
