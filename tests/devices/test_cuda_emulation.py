"""The CUDA kernels, run on the CPU by tests/support/cuda_emulation.py (g++), against the float64 reference.

The same check `moecal verify` runs on a GPU (harness.devices.correctness.check_shape: fresh random layer and token,
outputs NaN-poisoned, rel err within kernel_cases.TOLERANCE), on shapes small enough for an emulated GPU, chosen
to hit the edges: rows shorter than a warp's 32 chunks and rows needing a second pass, top_k 1/2/3/4/8, partial
row tiles, every bits x group_size pair, each dtype, and rows-per-warp / warps-per-block variants.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.config.shapes import MoeShape
from harness.devices.backends.cuda import VARIANT_ENV, CudaBackend
from harness.devices.correctness import check_shape
from harness.devices.quant_layer import make_inputs, make_layer
from tests.support.cuda_emulation import EmulatedCudaBackend, compiler

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
    _assert_ok(EmulatedCudaBackend(poison=True, sgy=sgy, rows=rows, block_order="cycle"), shape)


def _assert_ok(backend: EmulatedCudaBackend, shape: MoeShape, paths: tuple[str, ...] = ("fused", "fallback")) -> None:
    checks = check_shape(backend, shape, seed=shape.d_model + shape.dff, paths=paths)
    assert {c.path for c in checks} == set(paths)
    for check in checks:
        assert check.ok, f"{shape.label()} {check.path}: rel_err {check.rel_err} > {check.tolerance} ({check.error})"
    backend.arrays.check_guards()


# The A/B variants (rows per warp x how kernel B reads act x kernel A's split-K; act_load and split_k change only
# the fused path), each in one quantization and dtype, on two shapes that exercise it: dff 4224 needs two passes
# of shared-memory staging (4096 + 128 values; the other act loads take a cheaper dff 256); d_model 2048 at top 2
# gives kernel A fewer blocks than an H200's 132 SMs, so it splits d_model (q8: 128 chunks of 16 values, up to 4
# splits; q4: 64 chunks of 32, 2 splits).
VARIANTS = [
    (1, "dtype", 1, 4, 64, "bfloat16"),
    (1, "shared", 1, 4, 64, "bfloat16"),
    (2, "shared", 1, 8, 32, "float16"),
    (4, "dtype", 1, 8, 128, "bfloat16"),
    (1, "f32", 2, 4, 32, "float32"),
    (2, "dtype", 4, 8, 64, "bfloat16"),
    (4, "shared", 4, 8, 32, "float32"),
    (1, "shared", 2, 4, 128, "float16"),
]


@pytest.mark.parametrize(
    ("rows", "act_load", "split_k", "bits", "group_size", "dtype"),
    VARIANTS,
    ids=[f"rows{r}-{a}-splitk{k}-q{b}g{g}-{d}" for r, a, k, b, g, d in VARIANTS],
)
def test_variants_match_reference(rows: int, act_load: str, split_k: int, bits: int, group_size: int, dtype: str):
    backend = EmulatedCudaBackend(rows=rows, act_load=act_load, split_k=split_k, block_order="cycle", seed=rows)
    quant = {"bits": bits, "group_size": group_size, "dtype": dtype}
    first = MoeShape(128, 4224, 2, 1, **quant) if act_load == "shared" else MoeShape(128, 256, 2, 2, **quant)
    for shape in (first, MoeShape(2048, 128, 3, 2, **quant)):
        _assert_ok(backend, shape, paths=("fused",))
        splits = backend._split_k(shape.dff // (8 * rows) * shape.top_k, shape.d_model, bits)
        assert backend.grids["moe_gate_up_swiglu"][-1][2] == splits
    assert split_k == 1 or max(grid[2] for grid in backend.grids["moe_gate_up_swiglu"]) > 1, "split-K never ran"


def test_split_k_only_when_kernel_a_leaves_sms_idle() -> None:
    backend = EmulatedCudaBackend(split_k=4)
    assert backend._split_k(blocks=128, d_model=2048, bits=8) == 4  # 128 chunks of 16 values: 4 x 32 lanes
    assert backend._split_k(blocks=128, d_model=2048, bits=4) == 2  # 64 chunks of 32 values
    assert backend._split_k(blocks=132, d_model=2048, bits=8) == 1  # every SM has a block already
    assert backend._split_k(blocks=16, d_model=512, bits=4) == 1  # 16 chunks: a split would idle lanes
    assert EmulatedCudaBackend()._split_k(blocks=1, d_model=4096, bits=4) == 1  # split_k=1: never


def test_variants_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for option, value in (("sgy", "4"), ("rows", "2"), ("act_load", "shared"), ("split_k", "4")):
        monkeypatch.setenv(VARIANT_ENV[option], value)
    backend = CudaBackend()
    assert backend.variant_label() == "sgy4-rows2-act_shared-splitk4"
    assert CudaBackend(rows=1).variant_label() == "sgy4-rows1-act_shared-splitk4"  # an argument wins
    for name, bad in (("MOECAL_CUDA_ACT", "bf16"), ("MOECAL_CUDA_SPLIT_K", "3"), ("MOECAL_CUDA_ROWS", "two")):
        monkeypatch.setenv(name, bad)
        with pytest.raises(ValueError, match=name if name != "MOECAL_CUDA_SPLIT_K" else "split_k"):
            CudaBackend()
        monkeypatch.delenv(name)


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
