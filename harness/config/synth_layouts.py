"""The tensors each MoE family's loader expects in an MLX-format checkpoint, written out per family.

A synthetic checkpoint must load in mlx-lm and mlxcel exactly like a real export of its family, so every tensor
name and shape here restates the family's model code (mlx-lm's `models/<family>.py`, after `sanitize`: experts
already stacked into `switch_mlp.{gate,up,down}_proj` of shape (experts, out, in)). A family not in LAYOUTS is
refused rather than guessed: a missing tensor fails the load, an extra one is silently ignored by some loaders and
fatal in others. tests/config/test_synth.py checks every layout against mlx-lm's own modules, name by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from harness.errors import InputError

# linear/embed: a float matrix that is quantized when the source quantizes it; expert: stacked expert projections;
# norm: ones; bias: zeros-mean small values; conv: a depthwise conv kernel; router_bias: float32 zeros (lfm2).
Kind = Literal["linear", "embed", "expert", "norm", "bias", "conv", "router_bias"]


@dataclass(frozen=True)
class TensorSpec:
    """One tensor before quantization: `module` is its module path (what `quantization` overrides are keyed by)."""

    module: str
    leaf: str  # "weight" or "bias"
    shape: tuple[int, ...]
    kind: Kind

    @property
    def name(self) -> str:
        return f"{self.module}.{self.leaf}"


@dataclass(frozen=True)
class DecoderStyle:
    """How one attention-decoder family differs from Mixtral's layout (the common ancestor of the others)."""

    moe: str  # the MoE block's attribute name in a decoder layer
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: Literal["none", "head", "full"] = "none"  # qwen3: per head_dim; olmoe: over all heads
    layer_norm: bool = False  # phimoe: LayerNorm (weight and bias) instead of RMSNorm
    lm_head_bias: bool = False
    always_untied: bool = False  # phimoe has no tie_word_embeddings
    tied_default: bool = False  # olmoe ties the LM head unless the config says otherwise
    shared_expert: bool = False  # qwen2_moe: a dense shared expert with a sigmoid gate
    attention_bias_key: bool = False  # olmoe: q/k/v/o biases follow the config's `attention_bias`


def _linear(module: str, out_dim: int, in_dim: int, bias: bool = False) -> list[TensorSpec]:
    specs = [TensorSpec(module, "weight", (out_dim, in_dim), "linear")]
    return specs + ([TensorSpec(module, "bias", (out_dim,), "bias")] if bias else [])


def _norm(module: str, dim: int, with_bias: bool = False) -> list[TensorSpec]:
    specs = [TensorSpec(module, "weight", (dim,), "norm")]
    return specs + ([TensorSpec(module, "bias", (dim,), "bias")] if with_bias else [])


def _glu(prefix: str, dim: int, hidden: int) -> list[TensorSpec]:
    """A dense SwiGLU MLP (gate/up: dim → hidden, down: hidden → dim)."""
    return [*_linear(f"{prefix}.gate_proj", hidden, dim), *_linear(f"{prefix}.up_proj", hidden, dim)] + _linear(
        f"{prefix}.down_proj", dim, hidden
    )


def _experts(prefix: str, experts: int, dim: int, dff: int) -> list[TensorSpec]:
    """The stacked routed experts (SwitchGLU): gate/up (E, Dff, dim), down (E, dim, Dff)."""
    return [
        TensorSpec(f"{prefix}.switch_mlp.gate_proj", "weight", (experts, dff, dim), "expert"),
        TensorSpec(f"{prefix}.switch_mlp.up_proj", "weight", (experts, dff, dim), "expert"),
        TensorSpec(f"{prefix}.switch_mlp.down_proj", "weight", (experts, dim, dff), "expert"),
    ]


# The most decoder layers a layout is built for: released MoE decoders have at most ~100, and a plan builds ~20 tensor
# specs per layer before the disk check, so 10^7 layers would take gigabytes of memory just to be refused.
MAX_LAYERS = 4096


def count(config: dict, key: str, default: int | None = None) -> int:
    """A positive integer layout key of config.json (`default` when absent or null). Anything else is an InputError
    naming `config.json` and the key (the caller names the folder): a missing or fractional head count would
    otherwise surface as a KeyError, a zero one as a division by zero."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise InputError("config.json", key, "required for this family's layout but missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value).is_integer() or value <= 0:
        raise InputError("config.json", key, f"expected a positive integer, got {value!r}")
    if key == "num_hidden_layers" and value > MAX_LAYERS:
        raise InputError("config.json", key, f"{int(value)} layers: at most {MAX_LAYERS} (use --layers to cut it)")
    return int(value)


def _ints(config: dict, *keys: str) -> list[int]:
    return [count(config, k) for k in keys]


def _is_sparse(config: dict, layer: int) -> bool:
    """qwen3_moe's rule (mlx-lm): a layer is MoE unless listed in mlp_only_layers or off the decoder_sparse_step."""
    step = int(config.get("decoder_sparse_step") or 1)
    return layer not in (config.get("mlp_only_layers") or []) and (layer + 1) % step == 0


def decoder_layout(style: DecoderStyle, n_experts_key: str, dff_key: str) -> Callable[[dict], list[TensorSpec]]:
    """The layout function of an attention decoder family: embeddings, per layer attention + norms + MoE block,
    final norm and (unless tied) the LM head."""

    def layout(config: dict) -> list[TensorSpec]:
        dim, heads, layers, vocab, experts, dff = _ints(
            config, "hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", n_experts_key, dff_key
        )
        kv_heads = count(config, "num_key_value_heads", heads)
        head_dim = count(config, "head_dim", dim // heads or 1)
        qkv_bias, o_bias = style.qkv_bias, style.o_bias
        if style.attention_bias_key:
            qkv_bias = o_bias = bool(config.get("attention_bias", False))
        specs = [TensorSpec("model.embed_tokens", "weight", (vocab, dim), "embed")]
        for i in range(layers):
            p = f"model.layers.{i}"
            specs += _linear(f"{p}.self_attn.q_proj", heads * head_dim, dim, qkv_bias)
            specs += _linear(f"{p}.self_attn.k_proj", kv_heads * head_dim, dim, qkv_bias)
            specs += _linear(f"{p}.self_attn.v_proj", kv_heads * head_dim, dim, qkv_bias)
            specs += _linear(f"{p}.self_attn.o_proj", dim, heads * head_dim, o_bias)
            if style.qk_norm != "none":
                full = style.qk_norm == "full"
                specs += _norm(f"{p}.self_attn.q_norm", heads * head_dim if full else head_dim)
                specs += _norm(f"{p}.self_attn.k_norm", kv_heads * head_dim if full else head_dim)
            specs += _norm(f"{p}.input_layernorm", dim, style.layer_norm)
            specs += _norm(f"{p}.post_attention_layernorm", dim, style.layer_norm)
            block = f"{p}.{style.moe}"
            if style.moe == "mlp" and not _is_sparse(config, i):
                specs += _glu(block, dim, count(config, "intermediate_size"))
                continue
            specs += _linear(f"{block}.gate", experts, dim)
            specs += _experts(block, experts, dim, dff)
            if style.shared_expert:
                specs += _glu(f"{block}.shared_expert", dim, count(config, "shared_expert_intermediate_size"))
                specs += _linear(f"{block}.shared_expert_gate", 1, dim)
        specs += _norm("model.norm", dim, style.layer_norm)
        tied = bool(config.get("tie_word_embeddings", style.tied_default)) and not style.always_untied
        if not tied:
            specs += _linear("lm_head", vocab, dim, style.lm_head_bias)
        return specs

    return layout


def lfm2_moe_layout(config: dict) -> list[TensorSpec]:
    """LFM2-MoE: short-conv and attention layers (`layer_types`), the first `num_dense_layers` with a dense MLP,
    the rest MoE with a float32 expert bias; the LM head is always the tied embedding."""
    dim, heads, layers, vocab, experts, dff = _ints(
        config, "hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size", "num_experts"
    ) + _ints(config, "moe_intermediate_size")
    kv_heads = count(config, "num_key_value_heads", heads)
    head_dim = dim // heads or 1
    attention = set(config.get("full_attn_idxs") or [])
    attention |= {i for i, t in enumerate(config.get("layer_types") or []) if t == "full_attention"}
    conv_bias = bool(config.get("conv_bias", False))
    specs = [TensorSpec("model.embed_tokens", "weight", (vocab, dim), "embed")]
    for i in range(layers):
        p = f"model.layers.{i}"
        if i in attention:
            specs += _norm(f"{p}.self_attn.q_layernorm", head_dim) + _norm(f"{p}.self_attn.k_layernorm", head_dim)
            specs += _linear(f"{p}.self_attn.q_proj", heads * head_dim, dim)
            specs += _linear(f"{p}.self_attn.k_proj", kv_heads * head_dim, dim)
            specs += _linear(f"{p}.self_attn.v_proj", kv_heads * head_dim, dim)
            specs += _linear(f"{p}.self_attn.out_proj", dim, heads * head_dim)
        else:
            specs.append(TensorSpec(f"{p}.conv.conv", "weight", (dim, count(config, "conv_L_cache"), 1), "conv"))
            if conv_bias:
                specs.append(TensorSpec(f"{p}.conv.conv", "bias", (dim,), "bias"))
            specs += _linear(f"{p}.conv.in_proj", 3 * dim, dim, conv_bias)
            specs += _linear(f"{p}.conv.out_proj", dim, dim, conv_bias)
        block = f"{p}.feed_forward"
        if i < int(config.get("num_dense_layers") or 0):
            specs += _glu(block, dim, count(config, "intermediate_size"))
        else:
            specs += _linear(f"{block}.gate", experts, dim)
            specs += _experts(block, experts, dim, dff)
            if config.get("use_expert_bias"):
                specs.append(TensorSpec(block, "expert_bias", (experts,), "router_bias"))
        specs += _norm(f"{p}.operator_norm", dim) + _norm(f"{p}.ffn_norm", dim)
    return specs + _norm("model.embedding_norm", dim)


LAYOUTS: dict[str, Callable[[dict], list[TensorSpec]]] = {
    "mixtral": decoder_layout(DecoderStyle("block_sparse_moe"), "num_local_experts", "intermediate_size"),
    "phimoe": decoder_layout(
        DecoderStyle(
            "block_sparse_moe", qkv_bias=True, o_bias=True, layer_norm=True, lm_head_bias=True, always_untied=True
        ),
        "num_local_experts",
        "intermediate_size",
    ),
    "qwen3_moe": decoder_layout(DecoderStyle("mlp", qk_norm="head"), "num_experts", "moe_intermediate_size"),
    "qwen2_moe": decoder_layout(
        DecoderStyle("mlp", qkv_bias=True, shared_expert=True), "num_experts", "moe_intermediate_size"
    ),
    "olmoe": decoder_layout(
        DecoderStyle("mlp", qk_norm="full", tied_default=True, attention_bias_key=True),
        "num_experts",
        "intermediate_size",
    ),
    "lfm2_moe": lfm2_moe_layout,
}
