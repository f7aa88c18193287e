"""What the bytes say before and after measuring (docs/design.md §7): a decode step of batch 1 reads every weight it
uses once, so bytes per token over the device's memory bandwidth bounds its throughput from above.

- **bytes per decode token** from config.json: the experts actually routed (top-k of them, not all), the shared
  expert, attention projections and the LM head, each at its stored width: bits/8 per weight plus one fp16 scale and
  one fp16 bias per group (MLX affine; mxfp4 has an 8-bit scale per 32 and no bias). A `layer` point reads one MoE
  layer's routed experts per step. The KV cache and activations are left out (a short decode context reads little
  of them), so the bound is a floor on bytes and a ceiling on throughput.
- **implied GB/s** of each arm = bytes per token × tok/s, and its fraction of the device's bandwidth (a stated
  spec per GPU, below). An arm above 100% read fewer bytes than the model has or ran faster than memory allows: a
  measurement error (wrong model, a cached or skipped step, a timer bug), flagged, never a result.
- **predicted crossover**: the fused kernel's gain is the fallback's overhead (extra launches, the intermediate
  activations written and read back); once the fallback streams near the bandwidth ceiling there is little
  overhead left to remove, so the crossover is predicted where the fallback's fraction first reaches
  `NEAR_CEILING`. It is shown next to the measured crossover as a check, not used for the decision.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NEAR_CEILING = 0.8  # the fallback's fraction of the bandwidth at which the fused kernel is predicted to stop winning

# Peak memory bandwidth (bytes/s) from the vendors' specifications, matched against the run's device name (the most
# specific name first). A measured figure (`moecal doctor --bandwidth`) is closer to what a kernel can reach.
SPEC_BANDWIDTH: dict[str, float] = {
    "H200": 4.8e12,
    "H100 PCIe": 2.0e12,
    "H100": 3.35e12,
    "A100-SXM4-80GB": 2.039e12,
    "A100": 1.555e12,
    "L40S": 864e9,
    "RTX 4090": 1008e9,
    "GB10": 273e9,
    "MI300X": 5.3e12,
    "M1 Ultra": 800e9,
    "M1 Max": 400e9,
    "M1 Pro": 200e9,
    "M1": 68.25e9,
    "M2 Ultra": 800e9,
    "M2 Max": 400e9,
    "M2 Pro": 200e9,
    "M2": 100e9,
    "M3 Ultra": 819e9,
    "M3 Max": 400e9,
    "M3 Pro": 150e9,
    "M3": 100e9,
    "M4 Max": 546e9,
    "M4 Pro": 273e9,
    "M4": 120e9,
}


@dataclass(frozen=True, kw_only=True)
class DecodeShape:
    """What one decode token reads: the MoE layers' routed and shared experts, and (whole models) the rest."""

    d_model: int
    dff: int
    top_k: int
    layers: int = 1
    shared_dff: int = 0
    bits: int = 4
    group_size: int = 64
    quant_mode: str = "affine"
    attention_weights: int = 0  # per layer: q, k, v, o projections (0 for a one-layer workload)
    head_weights: int = 0  # the LM head (vocab × d_model)


def stored_bytes(weights: float, bits: int, group_size: int, quant_mode: str = "affine") -> float:
    """Bytes of `weights` stored at `bits` with per-group scales (affine: fp16 scale and bias per group;
    mx formats: one 8-bit shared exponent per group)."""
    per_group = 1.0 if quant_mode.startswith("mx") else 4.0
    return weights * bits / 8 + weights / group_size * per_group


def bytes_per_token(shape: DecodeShape) -> float:
    experts = 3 * shape.d_model * shape.dff * shape.top_k + 3 * shape.d_model * shape.shared_dff
    per_layer = stored_bytes(experts, shape.bits, shape.group_size, shape.quant_mode)
    per_layer += stored_bytes(shape.attention_weights, shape.bits, shape.group_size)
    return shape.layers * per_layer + stored_bytes(shape.head_weights, shape.bits, shape.group_size)


def _int(config: Mapping[str, object], key: str, default: int = 0) -> int:
    value = config.get(key)
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


def whole_model_extras(config: Mapping[str, object]) -> tuple[int, int]:
    """(attention weights per layer, LM head weights) from a config.json (its text_config when it nests one);
    0 where the keys are missing (then the bound leaves that part out and says less)."""
    text = config.get("text_config")
    config = text if isinstance(text, Mapping) and "hidden_size" in text else config
    d_model = _int(config, "hidden_size")
    heads = _int(config, "num_attention_heads")
    head_dim = _int(config, "head_dim", d_model // heads if heads else 0)
    kv = _int(config, "num_key_value_heads", heads)
    attention = d_model * head_dim * (2 * heads + 2 * kv)
    return attention, _int(config, "vocab_size") * d_model


def device_bandwidth(device: str) -> tuple[float, str] | None:
    """(bytes/s, where it comes from) for a device name, from SPEC_BANDWIDTH (longest matching name); None when
    the device is not listed."""
    for name in sorted(SPEC_BANDWIDTH, key=len, reverse=True):
        if name.lower() in device.lower():
            return SPEC_BANDWIDTH[name], f"{name} spec {SPEC_BANDWIDTH[name] / 1e9:.0f} GB/s"
    return None


@dataclass(frozen=True, kw_only=True)
class PointPhysics:
    label: str
    dff: int
    bytes_per_token: float
    gbps: dict[str, float]  # arm -> implied GB/s
    fraction: dict[str, float]  # arm -> share of the bandwidth (empty when the bandwidth is unknown)

    @property
    def above_ceiling(self) -> list[str]:
        return [arm for arm, f in self.fraction.items() if f > 1.0]


def point_physics(
    label: str, dff: int, shape: DecodeShape, tok_s: Mapping[str, float], bandwidth: float | None
) -> PointPhysics:
    size = bytes_per_token(shape)
    gbps = {arm: size * rate / 1e9 for arm, rate in tok_s.items() if math.isfinite(rate)}
    fraction = {arm: g * 1e9 / bandwidth for arm, g in gbps.items()} if bandwidth else {}
    return PointPhysics(label=label, dff=dff, bytes_per_token=size, gbps=gbps, fraction=fraction)


def predicted_crossover(points: Sequence[PointPhysics], near: float = NEAR_CEILING) -> float | None:
    """The Dff where the fallback's fraction of the bandwidth first reaches `near`, interpolated in log Dff between
    measured points; None when it never does (or the bandwidth is unknown)."""
    ordered = sorted((p.dff, p.fraction.get("fallback", math.nan)) for p in points)
    ordered = [(d, f) for d, f in ordered if math.isfinite(f)]
    for (d0, f0), (d1, f1) in zip(ordered, ordered[1:], strict=False):
        if f0 < near <= f1:
            share = (near - f0) / (f1 - f0)
            return math.exp(math.log(d0) + share * (math.log(d1) - math.log(d0)))
    if ordered and ordered[0][1] >= near:
        return float(ordered[0][0])
    return None
