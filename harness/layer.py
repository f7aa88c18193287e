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

import numpy as np

from harness.shapes import MoeShape


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
