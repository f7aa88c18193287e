"""TEST HELPER — tiny source model folders (config.json + a WordLevel tokenizer, no weights) for every family that
`moecal synth` writes. The configs keep each family's real keys and structure (from the published configs of
Mixtral-8x7B, Phi-3.5-MoE, Qwen3-30B-A3B, Qwen1.5-MoE-A2.7B, OLMoE-1B-7B and LFM2-8B-A1B) at toy sizes, quantized
4-bit group 32 like an mlx-lm export (with the 8-bit router overrides mlx-lm writes for qwen3_moe and lfm2_moe)."""

from __future__ import annotations

import json
from pathlib import Path

VOCAB = 64
QUANT = {"group_size": 32, "bits": 4, "mode": "affine"}
COMMON = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3}
COMMON |= {"vocab_size": VOCAB, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512}

CONFIGS: dict[str, dict] = {
    "mixtral": {"intermediate_size": 128, "num_local_experts": 4, "num_experts_per_tok": 2},
    "phimoe": {
        "intermediate_size": 128,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "original_max_position_embeddings": 512,
    },
    "qwen3_moe": {
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [0],
        "head_dim": 16,
        "tie_word_embeddings": False,
        "norm_topk_prob": True,
    },
    "qwen2_moe": {
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 64,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "tie_word_embeddings": False,
    },
    "olmoe": {"intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "tie_word_embeddings": False},
    "lfm2_moe": {
        "intermediate_size": 96,
        "moe_intermediate_size": 32,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "use_expert_bias": True,
        "num_dense_layers": 1,
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "layer_types": ["conv", "full_attention", "conv"],
    },
}
ROUTER_OVERRIDE = {"qwen3_moe": "mlp.gate", "lfm2_moe": "feed_forward.gate"}


def write_tokenizer(folder: Path) -> None:
    """A WordLevel tokenizer over words w0 … w63 (split on whitespace) with the files mlx-lm's loader reads."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {f"w{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="w0"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "w0", "eos_token": "w1", "bos_token": None}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))


def source_folder(root: Path, family: str, quantized: bool = True, **overrides: object) -> Path:
    """`root/<family>-tiny` with config.json and the tokenizer (what `moecal synth --like` reads)."""
    folder = root / f"{family}-tiny"
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": family, "torch_dtype": "bfloat16", **COMMON, **CONFIGS[family], **overrides}
    if quantized:
        quant = dict(QUANT)
        if family in ROUTER_OVERRIDE:
            for layer in range(config["num_hidden_layers"]):
                quant[f"model.layers.{layer}.{ROUTER_OVERRIDE[family]}"] = {"group_size": 64, "bits": 8}
        config["quantization"] = config["quantization_config"] = quant
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    write_tokenizer(folder)
    return folder
