"""The random layer generator: packed format, sizes, magnitudes and exact dtype representability."""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.shapes import MoeShape
from harness.devices.quant_layer import make_inputs, make_layer, round_to_dtype
from harness.devices.reference import dequantize

SHAPE = MoeShape(d_model=512, dff=384, n_experts=4, top_k=2, bits=4, group_size=64)


@pytest.mark.parametrize("bits,group_size", [(4, 32), (4, 128), (8, 64)])
def test_layer_arrays_have_the_mlx_layout(bits: int, group_size: int) -> None:
    shape = MoeShape(512, 384, 4, 2, bits, group_size)
    layer = make_layer(shape, seed=1)
    for matrix, n_out, n_in in ((layer.gate, 384, 512), (layer.up, 384, 512), (layer.down, 512, 384)):
        assert matrix.w.shape == (4, n_out, n_in * bits // 32) and matrix.w.dtype == np.uint32
        assert matrix.scales.shape == matrix.biases.shape == (4, n_out, n_in // group_size)
        assert matrix.scales.dtype == matrix.biases.dtype == np.float32
    assert layer.nbytes() == sum(
        a.nbytes for m in (layer.gate, layer.up, layer.down) for a in (m.w, m.scales, m.biases)
    )


def test_words_use_every_level_and_scales_take_both_signs() -> None:
    layer = make_layer(SHAPE, seed=2)
    levels = (layer.gate.w[..., None] >> np.arange(0, 32, 4, dtype=np.uint32)) & np.uint32(15)
    counts = np.bincount(levels.ravel(), minlength=16)
    assert counts.min() > 0.9 * counts.mean()  # uniform over the 16 levels, top nibble included
    negative = np.mean(layer.down.scales < 0)
    assert 0.45 < negative < 0.55


def test_seeds_are_reproducible_and_independent() -> None:
    first, again, other = make_layer(SHAPE, 7), make_layer(SHAPE, 7), make_layer(SHAPE, 8)
    assert np.array_equal(first.up.w, again.up.w) and np.array_equal(first.up.scales, again.up.scales)
    assert not np.array_equal(first.up.w, other.up.w)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_scales_biases_and_inputs_are_representable_in_the_dtype(dtype: str) -> None:
    shape = MoeShape(512, 384, 4, 2, 8, 64, dtype)
    layer = make_layer(shape, seed=3)
    x, _, scores = make_inputs(shape, seed=3)
    for values in (layer.gate.scales, layer.gate.biases, layer.down.scales, x, scores):
        assert np.array_equal(round_to_dtype(values, dtype), values)
    assert not np.array_equal(round_to_dtype(layer.gate.scales, "float32") * np.float32(1 + 2**-20), layer.gate.scales)


def test_magnitudes_keep_activations_and_outputs_order_one() -> None:
    """Gate/up pre-activations ~N(0, 1) and down outputs of unit order for x ~ N(0, 1): nothing vanishes or
    approaches the float16 range."""
    layer = make_layer(SHAPE, seed=4)
    x, _, _ = make_inputs(SHAPE, seed=4)
    gate = dequantize(layer.gate, 4, 64, experts=[0])[0] @ x
    up = dequantize(layer.up, 4, 64, experts=[0])[0] @ x
    hidden = gate / (1 + np.exp(-gate)) * up
    down = dequantize(layer.down, 4, 64, experts=[0])[0] @ hidden
    for values in (gate, up):
        assert 0.5 < np.sqrt(np.mean(values**2)) < 2.0
    assert 0.1 < np.sqrt(np.mean(down**2)) < 2.0
    assert np.abs(down).max() < 100


def test_inputs_pick_distinct_experts_with_softmax_scores() -> None:
    shape = MoeShape(256, 256, n_experts=16, top_k=8)
    x, indices, scores = make_inputs(shape, seed=5)
    assert x.shape == (256,) and x.dtype == np.float32 and 0.5 < x.std() < 1.5
    assert indices.dtype == np.int32 and len(set(indices.tolist())) == 8 and indices.min() >= 0 and indices.max() < 16
    assert scores.dtype == np.float32 and (scores > 0).all() and abs(scores.sum() - 1) < 1e-6


def test_round_to_dtype_bfloat16_rounds_half_to_even() -> None:
    ulp = 2.0**-7  # bfloat16 keeps 7 fraction bits
    values = np.array([1 + ulp / 2, 1 + 1.5 * ulp, 1 + 0.75 * ulp, -3.0, 1e-30], dtype=np.float32)
    expected = np.array([1.0, 1 + 2 * ulp, 1 + ulp, -3.0], dtype=np.float32)
    rounded = round_to_dtype(values, "bfloat16")
    assert np.array_equal(rounded[:4], expected)
    assert (rounded.view(np.uint32) & 0xFFFF == 0).all()
    assert abs(rounded[4] - 1e-30) < 1e-32


def test_round_to_dtype_matches_mlx_casts() -> None:
    mx = pytest.importorskip("mlx.core")
    values = (np.random.default_rng(0).standard_normal(10_000) * 10.0 ** np.arange(-4, 4).repeat(1250)).astype(
        np.float32
    )
    for dtype, mx_dtype in (("bfloat16", mx.bfloat16), ("float16", mx.float16)):
        expected = np.array(mx.array(values).astype(mx_dtype).astype(mx.float32))
        assert np.array_equal(round_to_dtype(values, dtype), expected)


def test_round_to_dtype_rejects_unknown_dtypes() -> None:
    with pytest.raises(ValueError, match="int8"):
        round_to_dtype(np.ones(3), "int8")
