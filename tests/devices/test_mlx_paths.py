"""The mlx-lm gather_qmm step and the MLX upload helpers, on MLX's CPU device in float32 (MLX's CPU bf16/fp16
quantized matmul is not accurate enough to judge), against the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="MLX is not installed (pip install 'mlx[cpu]')")

from harness.config.shapes import MoeShape  # noqa: E402
from harness.devices.backends.mlx_paths import (  # noqa: E402
    enqueue,
    gather_qmm_step,
    mx_dtype,
    to_mx,
    to_numpy,
    upload_mlx,
    upload_mlx_inputs,
)
from harness.devices.quant_layer import make_inputs, make_layer, round_to_dtype  # noqa: E402
from harness.devices.reference import moe_reference, rel_err  # noqa: E402

SHAPES = [
    MoeShape(640, 384, 8, 2, 4, 64),  # d_model not a multiple of 256
    MoeShape(256, 512, 4, 1, 8, 32),
    MoeShape(384, 256, 16, 8, 4, 128),
    MoeShape(1024, 768, 8, 4, 8, 128),
    MoeShape(2048, 768, 16, 8, 4, 64),  # qwen3-30b-a3b's d_model / dff
]


@pytest.mark.parametrize("shape", SHAPES, ids=MoeShape.label)
def test_gather_qmm_step_matches_the_reference_in_float32(shape):
    layer = make_layer(shape, seed=21)
    x, indices, scores = make_inputs(shape, seed=22)
    out = gather_qmm_step(*upload_mlx_inputs(x, indices, scores, "float32"), upload_mlx(layer))
    assert out.shape == (shape.d_model,) and out.dtype == mx.float32
    assert rel_err(to_numpy(out), moe_reference(layer, x, indices, scores)) <= 1e-5


def test_upload_keeps_the_switch_linear_layout_and_can_override_the_dtype():
    shape = MoeShape(640, 384, 8, 2, 4, 64, "bfloat16")
    layer = make_layer(shape, seed=5)
    native, widened = upload_mlx(layer), upload_mlx(layer, dtype="float32")
    assert native.dtype == "bfloat16" and widened.dtype == "float32"
    assert (native.bits, native.group_size) == (4, 64)
    for part in ("gate", "up", "down"):
        host, device = getattr(layer, part), getattr(native, part)
        assert device.w.dtype == mx.uint32 and device.w.shape == host.w.shape
        assert device.scales.dtype == mx.bfloat16 and device.biases.dtype == mx.bfloat16
        assert device.scales.shape == host.scales.shape
        # host scales are bf16-representable, so the upload is exact
        np.testing.assert_array_equal(to_numpy(device.scales), host.scales)
        np.testing.assert_array_equal(np.array(device.w), host.w)
    # the CPU `library` path: a bf16 layer computed in float32 is still exact to f32 rounding
    x, indices, scores = make_inputs(shape, seed=6)
    out = gather_qmm_step(*upload_mlx_inputs(x, indices, scores, "float32"), widened)
    assert rel_err(to_numpy(out), moe_reference(layer, x, indices, scores)) <= 1e-5


def test_inputs_get_the_dtypes_mlx_lm_uses():
    shape = MoeShape(256, 256, 8, 4, 4, 64, "float16")
    x, indices, scores = make_inputs(shape, seed=1)
    mx_x, mx_indices, mx_scores = upload_mlx_inputs(x, indices, scores, "float16")
    assert (mx_x.dtype, mx_indices.dtype, mx_scores.dtype) == (mx.float16, mx.uint32, mx.float32)
    np.testing.assert_array_equal(to_numpy(mx_x), x)
    np.testing.assert_array_equal(np.array(mx_indices), indices)


def test_to_numpy_is_exact_for_every_dtype():
    values = np.random.default_rng(0).standard_normal(300)
    for dtype in ("float32", "float16", "bfloat16"):
        representable = round_to_dtype(values, dtype)
        back = to_numpy(to_mx(representable, dtype))
        assert back.dtype == np.float64
        np.testing.assert_array_equal(back, representable)


def test_enqueue_returns_the_array_it_started():
    a = mx.arange(10, dtype=mx.float32) * 2
    assert enqueue(a) is a
    np.testing.assert_array_equal(to_numpy(a), np.arange(10) * 2.0)


def test_unknown_dtype_is_refused_before_any_copy():
    with pytest.raises(ValueError, match="float8"):
        mx_dtype("float8")
    with pytest.raises(ValueError, match="float8"):
        upload_mlx(make_layer(MoeShape(256, 256, 2, 1), seed=0), dtype="float8")
