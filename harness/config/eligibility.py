"""Will mlxcel's fused decode-MoE kernel run for this checkpoint? A prediction from config.json alone.

The rules restate mlxcel's `SwitchGLU::forward_fused_kernel` (src/models/switch_layers.rs), which returns None —
and the caller takes the gather_qmm fallback — for: a non-affine mode; gate/up not 4 or 8 bits; down not 4, 6 or 8
bits; gate and up bits that differ; group sizes that differ across gate/up/down; a 6-bit down with Dff not a
multiple of 16. The kernel also runs only for families whose MoE block calls it (WIRED_FAMILIES, from mlxcel's
changelog: the shared SwitchGLU families of 0.3.x). When either arm cannot take the fused path, both arms run the
same code and the point can only ever be a null point; measuring it costs a model load per run for nothing.

A prediction is only a prediction: the dispatch probe of a measured point stays the ground truth, and
harness.analysis.backend_defaults.mispredictions reports where the two disagree.
"""

from __future__ import annotations

from harness.config.discover import DiscoveredModel

# Families whose MoE block calls the shared fused kernel (mlxcel 0.3.x changelog: qwen3_moe, qwen2_moe #308,
# lfm2 #309, qwen3_vl_moe #310, mixtral #311, phi-3.5-moe #312, olmoe #314). Others (llama4, gpt_oss, deepseek,
# granitemoe) keep their own gather path as far as moecal knows; `--measure-null` measures them anyway.
WIRED_FAMILIES = frozenset({"qwen3_moe", "qwen3_vl_moe", "qwen2_moe", "lfm2_moe", "mixtral", "phimoe", "olmoe"})
GATE_UP_BITS = (4, 8)
DOWN_BITS = (4, 6, 8)


def predict_null(model: DiscoveredModel) -> str | None:
    """Why the fused kernel would decline this model (so the point will be null), or None if it should run."""
    quant = model.quant
    if quant.mode == "none":
        return "not quantized: the fused kernel needs affine-quantized experts"
    if quant.mode != "affine":
        return f"{quant.mode} quantization: the fused kernel runs only affine"
    if model.family not in WIRED_FAMILIES:
        return f"family {model.family} is not wired to the fused kernel"
    gate, up, down = (quant.projections[role] for role in ("gate", "up", "down"))
    for role, pairs, allowed in (("gate", gate, GATE_UP_BITS), ("up", up, GATE_UP_BITS), ("down", down, DOWN_BITS)):
        bad = sorted({bits for bits, _ in pairs if bits not in allowed}, key=str)
        if bad:
            return f"{role}_proj at {bad[0]} bits: the fused kernel takes {'/'.join(map(str, allowed))}-bit {role}"
    if {b for b, _ in gate} != {b for b, _ in up}:
        return "gate and up projections have different bits"
    groups = {g for _, g in gate | up | down}
    if len(groups) > 1:
        return f"group sizes differ across gate/up/down ({', '.join(map(str, sorted(groups, key=str)))})"
    if any(bits == 6 for bits, _ in down) and model.dff % 16:
        return f"6-bit down_proj needs Dff divisible by 16 (Dff {model.dff})"
    return None


def model_entry(model: DiscoveredModel) -> dict[str, object]:
    """The config entry `moecal init` writes for a discovered model (shape, quantization, synthetic note), with
    `expect_null` when the kernel is predicted to decline it. Here rather than in the init command so a sweep that
    synthesizes checkpoints builds the same entries without importing a CLI module."""
    entry: dict[str, object] = {
        "name": model.name,
        "model_path": str(model.path.resolve()),
        "family": f"{model.family} (synthetic)" if model.synthetic else model.family,
        "dff": model.dff,
        "d_model": model.d_model,
        "n_experts": model.n_experts,
        "top_k": model.top_k,
        "quant_mode": model.quant.mode,
    }
    if model.quant.bits:
        entry["bits"] = model.quant.bits
    if model.quant.group_size:
        entry["group_size"] = model.quant.group_size
    if model.layers:
        entry["layers"] = model.layers
    if model.shared_dff:
        entry["shared_dff"] = model.shared_dff
    if model.synthetic:
        entry["synthetic"] = synthetic_note(model.synthetic)
    reason = predict_null(model)
    if reason:
        entry["expect_null"] = reason
    return entry


def synthetic_note(record: dict) -> str:
    """How a synthetic checkpoint differs from a real one, for the config and the addendum."""
    return (
        f"random weights shaped like {record.get('like_name')}, {record.get('layers')} of "
        f"{record.get('source_layers')} layers, seed {record.get('seed')}"
    )
