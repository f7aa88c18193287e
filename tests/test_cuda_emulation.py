"""The CUDA kernels, run on the CPU by tests/cuda_emulation.py (g++), against the float64 reference.

The same check `moecal verify` runs on a GPU (harness.verify.check_shape: fresh random layer and token,
outputs NaN-poisoned, rel err within kernel_cases.TOLERANCE), on shapes small enough for an emulated GPU, chosen
to hit the edges: rows shorter than a warp's 32 chunks and rows needing a second pass, top_k 1/2/3/4/8, partial
row tiles, every bits x group_size pair, each dtype, and rows-per-warp / warps-per-block variants.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.layer import make_inputs, make_layer
from harness.shapes import MoeShape
from harness.verify import check_shape
from tests.cuda_emulation import EmulatedCudaBackend, compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ (>= 12) is needed to emulate the CUDA kernels")

# (shape, warps per block, rows per warp)
CASES = [
    (MoeShape(256, 512, n_experts=4, top_k=2, bits=4, group_size=32), 8, 1),
    (MoeShape(320, 256, n_experts=3, top_k=3, bits=4, group_size=64, dtype="bfloat16"), 8, 1),
    (MoeShape(384, 384, n_experts=8, top_k=8, bits=4, group_size=128, dtype="float16"), 8, 1),
    (MoeShape(256, 768, n_experts=2, top_k=1, bits=8, group_size=32, dtype="bfloat16"), 8, 1),
    (MoeShape(512, 192, n_experts=4, top_k=2, bits=8, group_size=64, dtype="float16"), 8, 1),
    (MoeShape(1088, 128, n_experts=2, top_k=2, bits=4, group_size=64), 8, 1),
    (MoeShape(256, 384, n_experts=4, top_k=2, bits=8, group_size=128), 8, 1),
    (MoeShape(320, 320, n_experts=4, top_k=2, bits=4, group_size=64, dtype="bfloat16"), 3, 2),
    (MoeShape(256, 256, n_experts=4, top_k=4, bits=8, group_size=32, dtype="float16"), 2, 4),
]


@pytest.mark.parametrize(("shape", "sgy", "rows"), CASES, ids=[f"{s.label()}-sgy{g}-rows{r}" for s, g, r in CASES])
def test_paths_match_reference(shape: MoeShape, sgy: int, rows: int) -> None:
    backend = EmulatedCudaBackend(poison=True, sgy=sgy, rows=rows)
    checks = check_shape(backend, shape, seed=shape.d_model + shape.dff)
    assert {c.path for c in checks} == {"fused", "fallback"}
    for check in checks:
        assert check.ok, f"{check.path}: rel_err {check.rel_err} > {check.tolerance} ({check.error})"
    backend.arrays.check_guards()


def _emulated_step(backend: EmulatedCudaBackend, shape: MoeShape, path: str) -> np.ndarray:
    layer = backend.upload(make_layer(shape, 7))
    inputs = backend.upload_inputs(*make_inputs(shape, 7), shape.dtype)
    return backend.to_numpy(backend.paths()[path](*inputs, layer))


def test_fused_is_deterministic_across_launches() -> None:
    """The fold over slots adds in slot order whichever block arrives last: repeated steps agree bit for bit."""
    shape = MoeShape(256, 256, n_experts=4, top_k=4, bits=4, group_size=64, dtype="bfloat16")
    backend = EmulatedCudaBackend()
    first = _emulated_step(backend, shape, "fused")
    again = _emulated_step(backend, shape, "fused")
    assert np.array_equal(first, again)


def test_poisoned_buffers_start_as_nan() -> None:
    shape = MoeShape(256, 256, n_experts=2, top_k=2, dtype="bfloat16")
    for poison, expect_nan in ((True, True), (False, False)):
        backend = EmulatedCudaBackend(poison=poison)
        buffer = backend._buffer("fused", "out", shape, (shape.d_model,), np.dtype(np.uint16))
        buffer[...] = 0  # what a previous step could have left there
        again = backend._buffer("fused", "out", shape, (shape.d_model,), np.dtype(np.uint16))
        assert np.isnan(backend.to_numpy(again)).all() == expect_nan


def test_inputs_of_the_wrong_dtype_are_refused() -> None:
    shape = MoeShape(256, 256, n_experts=2, top_k=2, dtype="bfloat16")
    backend = EmulatedCudaBackend()
    layer = backend.upload(make_layer(shape, 1))
    x, indices, scores = backend.upload_inputs(*make_inputs(shape, 1), "float32")  # x as f32, layer is bf16
    with pytest.raises(ValueError, match="x must be"):
        backend.fused(x, indices, scores, layer)
