"""The float64 oracle every kernel path is checked against: unpack → dequantize → exact MoE math.

Nothing here is fast or clever on purpose: numpy float64, the textbook formula, no shared code with any kernel.
Weights are dequantized a slab of rows at a time so a 4096×14336 expert never needs a 470 MB float64 copy.
"""

from __future__ import annotations

import numpy as np

from harness.devices.quant_layer import QuantLayer, QuantMatrix

_ROWS_PER_SLAB = 512


def unpack(w: np.ndarray, bits: int) -> np.ndarray:
    """Packed uint32 words (..., n_words) -> quantized levels (..., n_words * 32/bits) as uint8, LSB-first."""
    shifts = np.arange(0, 32, bits, dtype=np.uint32)
    levels = (w[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return levels.reshape(*w.shape[:-1], -1).astype(np.uint8)


def _dequantize_rows(w: np.ndarray, scales: np.ndarray, biases: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """Rows (..., n_words) with their (..., n_groups) scales/biases -> float64 weights (..., n_in)."""
    levels = unpack(w, bits).astype(np.float64)
    grouped = levels.reshape(*levels.shape[:-1], -1, group_size)
    weights = grouped * scales.astype(np.float64)[..., None] + biases.astype(np.float64)[..., None]
    return weights.reshape(levels.shape)


def dequantize(m: QuantMatrix, bits: int, group_size: int, experts: np.ndarray | None = None) -> np.ndarray:
    """The float64 weights (E', out, in) of the stacked matrix, for all experts or the listed ones."""
    select = slice(None) if experts is None else np.asarray(experts)
    return _dequantize_rows(m.w[select], m.scales[select], m.biases[select], bits, group_size)


def _matvec(m: QuantMatrix, expert: int, v: np.ndarray, bits: int, group_size: int) -> np.ndarray:
    """W[expert] @ v in float64, dequantizing a slab of rows at a time."""
    n_out = m.w.shape[1]
    out = np.empty(n_out, dtype=np.float64)
    for start in range(0, n_out, _ROWS_PER_SLAB):
        rows = slice(start, start + _ROWS_PER_SLAB)
        slab = _dequantize_rows(m.w[expert, rows], m.scales[expert, rows], m.biases[expert, rows], bits, group_size)
        out[rows] = slab @ v
    return out


def moe_reference(layer: QuantLayer, x: np.ndarray, indices: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Exact sum_k score_k · Wd_k(silu(Wg_k x) ⊙ Wu_k x) in float64, shape (d_model,)."""
    bits, group_size = layer.shape.bits, layer.shape.group_size
    x64 = np.asarray(x, dtype=np.float64)
    out = np.zeros(layer.shape.d_model, dtype=np.float64)
    for expert, score in zip(np.asarray(indices).tolist(), np.asarray(scores, dtype=np.float64).tolist(), strict=True):
        gate = _matvec(layer.gate, expert, x64, bits, group_size)
        up = _matvec(layer.up, expert, x64, bits, group_size)
        hidden = gate / (1.0 + np.exp(-gate)) * up
        out += score * _matvec(layer.down, expert, hidden, bits, group_size)
    return out


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    """||out - ref|| / ||ref|| in float64; NaN anywhere in `out` (an unwritten poisoned element) gives NaN."""
    ref64 = np.asarray(ref, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(out, dtype=np.float64) - ref64) / np.linalg.norm(ref64))
