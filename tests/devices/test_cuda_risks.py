"""Risks a real GPU would hit that a one-block-at-a-time emulation hid, each reproduced on the CPU emulation.

- A CUDA graph keeps raw pointers: a buffer the backend reallocates after capture leaves the graph on freed memory.
- An aborted launch (cut short on the device, reported only at the next synchronisation) leaves kernel B's arrival
  counters mid-count: the next steps must still fold every slot.
- An expert index outside the layer must be an error, as on the CPU path, never a read past the weights.
- The fold over slots must not depend on which block runs last: blocks run forward, reversed and in random order,
  and a fold that trusts the last slot's block (a plausible bug) passes forward but fails the others.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from harness.config.shapes import MoeShape
from harness.devices.backends.cuda_source import KernelVariant, translation_unit
from harness.devices.correctness import check_shape
from harness.devices.kernel_cases import TOLERANCE
from harness.devices.quant_layer import make_inputs, make_layer
from harness.devices.reference import moe_reference, rel_err
from tests.support.cuda_emulation import BLOCK_ORDERS, EmulatedCudaBackend, compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ (>= 12) is needed to emulate the CUDA kernels")

SHAPE = MoeShape(256, 256, n_experts=4, top_k=2, bits=4, group_size=64)  # 32 row tiles of 8 rows, 2 slots


def _upload(backend: EmulatedCudaBackend, shape: MoeShape, seed: int) -> tuple:
    """(device args of one step, float64 reference of that step) for a fresh random layer and token."""
    layer = make_layer(shape, seed)
    x, indices, scores = make_inputs(shape, seed)
    device = (*backend.upload_inputs(x, indices, scores, shape.dtype), backend.upload(layer))
    return device, moe_reference(layer, x, indices, scores)


def test_graph_replay_survives_a_larger_shape_after_capture() -> None:
    """One warp per block makes a tile one row: 1088 rows need more arrival counters than the first 1024."""
    backend = EmulatedCudaBackend(sgy=1)
    args, reference = _upload(backend, SHAPE, 1)
    replay = backend.graph("fused", *args)
    direct = backend.to_numpy(backend.fused(*args))
    large_args, _ = _upload(backend, MoeShape(1088, 64, n_experts=2, top_k=1, bits=4, group_size=32), 2)
    backend.fused(*large_args)
    gc.collect()  # whatever the backend dropped is gone now
    replayed = backend.to_numpy(replay())
    backend.synchronize()
    assert np.array_equal(replayed, direct) and rel_err(replayed, reference) <= TOLERANCE[SHAPE.dtype]


@pytest.mark.parametrize("order", BLOCK_ORDERS)
def test_an_aborted_fold_launch_does_not_spoil_later_steps(order: str) -> None:
    """Kernel B cut short after 5 blocks: those tiles counted some slots, never all. No poisoning, so a fold
    that is skipped or done too early leaves plausible stale numbers, which only the reference can tell."""
    backend = EmulatedCudaBackend(poison=False, block_order=order, seed=3)
    args, _ = _upload(backend, SHAPE, 4)
    backend.abort_next("moe_down_scale", 5)
    backend.fused(*args)
    with pytest.raises(RuntimeError, match="aborted after 5 of 64 blocks"):
        backend.synchronize()
    for seed in (5, 6):  # new tokens each step, so a stale partial sum cannot pass for a fresh one
        args, reference = _upload(backend, SHAPE, seed)
        out = backend.to_numpy(backend.fused(*args))
        backend.synchronize()
        assert rel_err(out, reference) <= TOLERANCE[SHAPE.dtype], f"step of seed {seed}"


@pytest.mark.parametrize("bad", [4, -1, 1 << 20])
def test_an_expert_index_outside_the_layer_is_an_error_like_on_the_cpu(bad: int) -> None:
    """Indices that never passed a host check (a router on the device makes them): each path reports the index
    at the next synchronize, writes NaN rather than garbage, and reads nothing outside the weights."""
    backend = EmulatedCudaBackend()
    (x, _, scores, layer), _ = _upload(backend, SHAPE, 7)
    indices = backend.arrays.asarray(np.array([1, bad], dtype=np.int32))
    for path, step in backend.paths().items():
        out = backend.to_numpy(step(x, indices, scores, layer))
        with pytest.raises(ValueError, match=rf"expert index {bad} out of range 0\.\.3"):
            backend.synchronize()
        assert np.isnan(out).any(), path
        backend.synchronize()  # reported once: the next synchronize is clean
    backend.arrays.check_guards()
    good = backend.arrays.asarray(np.array([1, 3], dtype=np.int32))
    for step in backend.paths().values():
        step(x, good, scores, layer)
        backend.synchronize()


def test_every_block_order_gives_the_same_bits() -> None:
    outputs = []
    for order in BLOCK_ORDERS:
        backend = EmulatedCudaBackend(block_order=order, seed=11)
        args, reference = _upload(backend, SHAPE, 8)
        outputs.append(backend.to_numpy(backend.fused(*args)))
        backend.synchronize()
        assert rel_err(outputs[-1], reference) <= TOLERANCE[SHAPE.dtype], order
    assert all(np.array_equal(outputs[0], out) for out in outputs[1:])


_LAST_ARRIVAL = "atomicAdd(counter, 1u) == expected - 1u"


class _FoldByLastSlotVariant(KernelVariant):
    """Kernel B with a plausible ordering bug: the block of the last slot folds, whether or not it came last."""

    def source(self) -> str:
        source = translation_unit()
        assert _LAST_ARRIVAL in source, "the arrival test moved: update this test's patch"
        return source.replace(_LAST_ARRIVAL, f"({_LAST_ARRIVAL}, blockIdx.y + 1 == gridDim.y)")


class _FoldByLastSlotBackend(EmulatedCudaBackend):
    def _variant(self, shape: MoeShape) -> KernelVariant:
        return _FoldByLastSlotVariant(shape.bits, shape.group_size, shape.dtype, self.sgy, self.rows)


def test_block_orders_expose_a_fold_that_trusts_the_last_slot() -> None:
    verdicts = {}
    for order in BLOCK_ORDERS:
        checks = check_shape(_FoldByLastSlotBackend(block_order=order, seed=2), SHAPE, seed=9)
        verdicts[order] = {check.path: check.ok for check in checks}
    assert verdicts["forward"] == {"fused": True, "fallback": True}  # the one order the old emulation ran
    assert verdicts["reversed"]["fused"] is False and verdicts["random"]["fused"] is False
    assert verdicts["reversed"]["fallback"] is True
