"""The float64 oracle, checked against hand-made words and against MLX's own dequantize / gather_qmm (f32, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.shapes import MoeShape
from harness.devices.quant_layer import make_inputs, make_layer
from harness.devices.reference import dequantize, moe_reference, rel_err, unpack


def test_unpack_reads_fields_lsb_first() -> None:
    nibbles = np.arange(1, 9, dtype=np.uint32)
    word = np.array([np.sum(nibbles << (4 * np.arange(8, dtype=np.uint32)))], dtype=np.uint32)
    assert unpack(word, 4).tolist() == list(range(1, 9))
    word8 = np.array([0x04030201 | (0xFF << 24)], dtype=np.uint32)
    assert unpack(word8, 8).tolist() == [1, 2, 3, 255]


def test_dequantize_applies_scale_and_bias_per_group() -> None:
    layer = make_layer(MoeShape(128, 64, 2, 1, bits=4, group_size=32), seed=0)
    w = dequantize(layer.up, 4, 32)
    levels = unpack(layer.up.w, 4).astype(np.float64)
    e, row, col = 1, 5, 70  # column 70 is in group 2
    expected = levels[e, row, col] * layer.up.scales[e, row, 2] + layer.up.biases[e, row, 2]
    assert w.dtype == np.float64 and w.shape == (2, 64, 128)
    assert w[e, row, col] == expected
    assert np.array_equal(dequantize(layer.up, 4, 32, experts=np.array([1])), w[1:])


def _dense_moe(layer, x, indices, scores) -> np.ndarray:
    """The same formula on fully dequantized matrices (no slabs): checks moe_reference's bookkeeping."""
    bits, group = layer.shape.bits, layer.shape.group_size
    gate, up, down = (dequantize(m, bits, group) for m in (layer.gate, layer.up, layer.down))
    out = np.zeros(layer.shape.d_model)
    for e, s in zip(indices, scores, strict=True):
        g, u = gate[e] @ x, up[e] @ x
        out += float(s) * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out


def test_moe_reference_matches_the_dense_formula_across_slabs() -> None:
    shape = MoeShape(1088, 576, n_experts=3, top_k=2, bits=8, group_size=32)  # 1088 rows of down: 3 slabs
    layer = make_layer(shape, seed=1)
    x, indices, scores = make_inputs(shape, seed=1)
    assert rel_err(moe_reference(layer, x, indices, scores), _dense_moe(layer, x, indices, scores)) < 1e-14


@pytest.mark.parametrize("bits,group_size", [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)])
def test_dequantize_matches_mx_dequantize(bits: int, group_size: int) -> None:
    mx = pytest.importorskip("mlx.core")
    layer = make_layer(MoeShape(256, 128, 2, 1, bits, group_size), seed=2)
    m = layer.gate
    expected = mx.dequantize(mx.array(m.w), mx.array(m.scales), mx.array(m.biases), group_size=group_size, bits=bits)
    assert rel_err(np.array(expected), dequantize(m, bits, group_size)) < 1e-7


@pytest.mark.parametrize(
    "shape",
    [
        MoeShape(512, 768, n_experts=8, top_k=4, bits=4, group_size=64),
        MoeShape(1088, 512, n_experts=4, top_k=2, bits=8, group_size=32),
        MoeShape(640, 384, n_experts=3, top_k=1, bits=4, group_size=128),
    ],
    ids=lambda s: s.label(),
)
def test_moe_reference_matches_mlx_gather_qmm(shape: MoeShape) -> None:
    pytest.importorskip("mlx.core")
    from harness.devices.backends.mlx_paths import gather_qmm_step, to_numpy, upload_mlx, upload_mlx_inputs

    layer = make_layer(shape, seed=3)
    x, indices, scores = make_inputs(shape, seed=3)
    out = to_numpy(gather_qmm_step(*upload_mlx_inputs(x, indices, scores, "float32"), upload_mlx(layer, "float32")))
    assert rel_err(out, moe_reference(layer, x, indices, scores)) < 1e-5


def test_rel_err_is_nan_when_an_element_is_nan() -> None:
    ref = np.ones(4)
    assert rel_err(ref * (1 + 1e-3), ref) == pytest.approx(1e-3)
    assert np.isnan(rel_err(np.array([1.0, np.nan, 1.0, 1.0]), ref))
