"""MLX arrays for a MoE layer and the `mx.gather_qmm` decode step, shared by the Metal and CPU backends.

The fallback here is deliberately *not* our own design: it is the call sequence MLX engines run for a
quantized MoE block (mlx-lm `SwitchGLU` over `QuantizedSwitchLinear`), so "fused beats fallback" means
"beats what MLX users get today". Only imported when MLX is wanted; `mlx.core` is imported at module top on
purpose, so importing this module without MLX fails loudly instead of at the first step.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from harness.devices.quant_layer import QuantLayer, QuantMatrix

MX_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


@dataclass(frozen=True)
class MlxMatrix:
    """One stacked expert matrix as `QuantizedSwitchLinear` holds it: weight, scales, biases."""

    w: mx.array  # (E, out, in*bits/32) uint32
    scales: mx.array  # (E, out, in/group_size) activation dtype
    biases: mx.array  # (E, out, in/group_size) activation dtype


@dataclass(frozen=True)
class MlxLayer:
    """A MoE layer on an MLX device; `dtype` is the activation dtype every path computes in."""

    gate: MlxMatrix
    up: MlxMatrix
    down: MlxMatrix
    bits: int
    group_size: int
    dtype: str


def mx_dtype(dtype: str) -> mx.Dtype:
    """The MLX dtype for a shape's dtype name; a clear error instead of a KeyError for a typo."""
    if dtype not in MX_DTYPES:
        raise ValueError(f"unknown activation dtype {dtype!r}; choose one of {', '.join(MX_DTYPES)}")
    return MX_DTYPES[dtype]


def to_mx(array: np.ndarray, dtype: str | None = None) -> mx.array:
    """numpy -> mx.array, cast to `dtype` (a MX_DTYPES name) when given; evaluated, so timing excludes it."""
    out = mx.array(array)
    if dtype is not None:
        out = out.astype(mx_dtype(dtype))
    mx.eval(out)
    return out


def to_numpy(array: mx.array) -> np.ndarray:
    """mx.array -> float64 numpy, via float32 because numpy has no bfloat16 (exact for every dtype)."""
    return np.array(array.astype(mx.float32), dtype=np.float64)


def enqueue(array: mx.array) -> mx.array:
    """Start computing `array` without waiting, like a kernel launch: a path returns after enqueueing its work
    and the backend's `synchronize` waits, so a host timer around both measures the device work."""
    mx.async_eval(array)
    return array


def _upload_matrix(matrix: QuantMatrix, dtype: str) -> MlxMatrix:
    # Host scales/biases are float32 values representable in the activation dtype, so the cast is exact.
    scales, biases = to_mx(matrix.scales, dtype), to_mx(matrix.biases, dtype)
    return MlxMatrix(w=to_mx(matrix.w), scales=scales, biases=biases)


def upload_mlx(layer: QuantLayer, dtype: str | None = None) -> MlxLayer:
    """Copy a host layer into MLX arrays. `dtype` overrides the shape's activation dtype (the CPU `library`
    path runs float32 because MLX's CPU bf16/fp16 quantized matmul is inaccurate)."""
    dtype = dtype or layer.shape.dtype
    mx_dtype(dtype)  # validate before copying gigabytes
    return MlxLayer(
        gate=_upload_matrix(layer.gate, dtype),
        up=_upload_matrix(layer.up, dtype),
        down=_upload_matrix(layer.down, dtype),
        bits=layer.shape.bits,
        group_size=layer.shape.group_size,
        dtype=dtype,
    )


def upload_mlx_inputs(
    x: np.ndarray, indices: np.ndarray, scores: np.ndarray, dtype: str
) -> tuple[mx.array, mx.array, mx.array]:
    """One token's inputs: x in the activation dtype, indices uint32 (as mlx-lm's argpartition yields them),
    scores f32."""
    return to_mx(x, dtype), to_mx(np.asarray(indices, dtype=np.uint32)), to_mx(scores, "float32")


def _switch_linear(x: mx.array, matrix: MlxMatrix, indices: mx.array, layer: MlxLayer) -> mx.array:
    """`QuantizedSwitchLinear.__call__`: one gathered quantized matmul against the selected experts."""
    return mx.gather_qmm(
        x,
        matrix.w,
        matrix.scales,
        matrix.biases,
        rhs_indices=indices,
        transpose=True,
        group_size=layer.group_size,
        bits=layer.bits,
    )


def gather_qmm_step(x: mx.array, indices: mx.array, scores: mx.array, layer: MlxLayer) -> mx.array:
    """One decode MoE step the way mlx-lm runs it: (d_model,) in the activation dtype, lazy (not evaluated).

    Mirrors `SwitchGLU.__call__` for one token: x (1, d) is expanded to (1, 1, 1, d) so its batch dims
    broadcast against indices (1, k); gate and up are two gather_qmm launches, `silu(gate) * up` runs in the
    activation dtype, down is a third gather_qmm, then the MoE block's `(y * scores[..., None]).sum(-2)`.
    mlx-lm's router hands over scores in the activation dtype, so they are cast to it here too. For a single
    token (k <= 64 indices) mlx-lm does not sort the indices, so neither do we.
    """
    tokens = x.reshape(1, -1)
    routed = indices.reshape(1, -1)
    expanded = mx.expand_dims(tokens, (-2, -3))
    gate = _switch_linear(expanded, layer.gate, routed, layer)
    up = _switch_linear(expanded, layer.up, routed, layer)
    hidden = (gate * mx.sigmoid(gate)) * up
    down = _switch_linear(hidden, layer.down, routed, layer).squeeze(-2)  # (1, k, d)
    weights = scores.reshape(1, -1, 1).astype(down.dtype)
    return (down * weights).sum(axis=-2).reshape(-1)
