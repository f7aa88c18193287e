"""A MoE layer in MLX affine quantized format, on the host (numpy).

Layout (MLX `mx.quantize` convention, transpose=True matmuls): for each expert e and output row o, the input
dimension is split into groups of `group_size`; each uint32 word packs 32/bits quantized values LSB-first, and the
dequantized weight is `q * scale + bias` for the group. Shapes:
  gate_w, up_w  (E, dff, d_model*bits/32) uint32     gate/up scales, biases (E, dff, d_model/group_size)
  down_w        (E, d_model, dff*bits/32) uint32     down scales, biases    (E, d_model, dff/group_size)
Scales and biases are stored as float32 on the host but hold values exactly representable in the activation dtype,
so every backend and the float64 reference see identical numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.config.shapes import MoeShape


@dataclass
class QuantMatrix:
    """One stacked expert matrix (E, out, in) in affine format."""

    w: np.ndarray  # (E, out, in*bits/32) uint32
    scales: np.ndarray  # (E, out, in/group_size) float32, representable in the activation dtype
    biases: np.ndarray  # (E, out, in/group_size) float32, representable in the activation dtype


@dataclass
class QuantLayer:
    shape: MoeShape
    gate: QuantMatrix
    up: QuantMatrix
    down: QuantMatrix

    def nbytes(self) -> int:
        return sum(a.nbytes for m in (self.gate, self.up, self.down) for a in (m.w, m.scales, m.biases))


# Seed streams: a layer and the inputs built from the same seed must still be independent random draws.
_LAYER_STREAM = 0
_INPUT_STREAM = 1


def round_to_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """float32 copy of `array` rounded to the nearest value representable in `dtype` (round half to even).

    Every backend keeps activation-dtype numbers in its own type (mx.bfloat16, __nv_bfloat16, float32 on the CPU);
    rounding on the host first means they all hold exactly the numbers the float64 reference sees. numpy has no
    bfloat16, so that rounding is done on the float32 bit pattern: bf16 is the top 16 bits of an f32.
    """
    values = np.asarray(array, dtype=np.float32)
    if dtype == "float32":
        return values.copy()
    if dtype == "float16":
        return values.astype(np.float16).astype(np.float32)
    if dtype == "bfloat16":
        bits = values.view(np.uint32)
        lsb = (bits >> np.uint32(16)) & np.uint32(1)
        rounded = (bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)
        return rounded.view(np.float32)
    raise ValueError(f"unknown activation dtype {dtype!r}")


def float32_to_bfloat16_bits(xp: Any, values: Any) -> Any:
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even (numpy and CuPy alike)."""
    bits = values.astype(xp.float32).view(xp.uint32)
    rounded = bits + xp.uint32(0x7FFF) + ((bits >> xp.uint32(16)) & xp.uint32(1))
    return (rounded >> xp.uint32(16)).astype(xp.uint16)


def bfloat16_bits_to_float32(xp: Any, bits: Any) -> Any:
    """uint16 bfloat16 bit patterns -> float32 (exact: bf16 is the top half of an f32; numpy and CuPy alike)."""
    return (bits.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)


def _generator(seed: int, stream: int) -> np.random.Generator:
    # SFC64 yields raw 64-bit words ~2x faster than PCG64; packed weights are just raw words, so this dominates
    # the time to build a multi-GB layer.
    return np.random.Generator(np.random.SFC64(np.random.SeedSequence([seed, stream])))


def _random_matrix(rng: np.random.Generator, shape: MoeShape, n_out: int, n_in: int) -> QuantMatrix:
    """Random packed words plus scales/biases sized so that W·v is O(1) for an O(1) input of length n_in.

    Random words give every quantized level with equal probability (variance levels²/12 per value), so a scale
    of ~sqrt(12/n_in)/levels gives weights of standard deviation ~1/sqrt(n_in) and outputs of ~unit size: large
    enough not to vanish, far from the float16 range limit. Scales take both signs (about half negative, as in
    real MLX checkpoints, where a group's scale is negative when its max sits at level 0). The bias centres each
    group (-scale·levels/2) plus a small random offset, so the bias term b·Σv is exercised but does not dominate.
    """
    experts = shape.n_experts
    levels = (1 << shape.bits) - 1
    words_per_row = n_in * shape.bits // 32
    n_words = experts * n_out * words_per_row
    raw = rng.bit_generator.random_raw((n_words + 1) // 2).view(np.uint32)[:n_words]
    groups = (experts, n_out, n_in // shape.group_size)
    spread = np.float32(np.sqrt(12.0 / n_in) / levels)
    sign = np.where(rng.random(groups, dtype=np.float32) < 0.5, np.float32(-1), np.float32(1))
    scales = sign * spread * (np.float32(0.5) + rng.random(groups, dtype=np.float32))
    offset = np.float32(0.1 / np.sqrt(n_in)) * rng.standard_normal(groups, dtype=np.float32)
    biases = -scales * np.float32(levels / 2) + offset
    return QuantMatrix(
        w=raw.reshape(experts, n_out, words_per_row),
        scales=round_to_dtype(scales, shape.dtype),
        biases=round_to_dtype(biases, shape.dtype),
    )


def make_layer(shape: MoeShape, seed: int) -> QuantLayer:
    """A random MoE layer built directly in packed format (no float→quantize pass, so big layers take seconds)."""
    rng = _generator(seed, _LAYER_STREAM)
    return QuantLayer(
        shape=shape,
        gate=_random_matrix(rng, shape, shape.dff, shape.d_model),
        up=_random_matrix(rng, shape, shape.dff, shape.d_model),
        down=_random_matrix(rng, shape, shape.d_model, shape.dff),
    )


def make_inputs(shape: MoeShape, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One decode token: x (d_model,), the router's top_k distinct expert indices (int32) and their scores.

    x ~ N(0, 1) and the scores (a softmax over the selected logits, float32) are rounded to the activation dtype,
    so every backend computes with exactly the reference's numbers (their sum is then 1 only to dtype precision,
    which does not matter: the reference uses the same rounded scores).
    """
    rng = _generator(seed, _INPUT_STREAM)
    x = round_to_dtype(rng.standard_normal(shape.d_model, dtype=np.float32), shape.dtype)
    indices = rng.choice(shape.n_experts, size=shape.top_k, replace=False).astype(np.int32)
    logits = rng.standard_normal(shape.top_k)
    weights = np.exp(logits - logits.max())
    scores = round_to_dtype((weights / weights.sum()).astype(np.float32), shape.dtype)
    return x, indices, scores
