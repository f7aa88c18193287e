"""The CUDA backend on a real NVIDIA GPU: both paths against the float64 reference, and the device plumbing.

Marked `cuda` and skipped, with CudaBackend.availability()'s reason, on a machine without a usable GPU. The
correctness check is `moecal verify`'s (harness.devices.correctness.check_shape: fresh random layer and token,
outputs NaN-poisoned before every launch, rel err within kernel_cases.TOLERANCE) over the shared shape registry
plus every dtype at the large shapes and the non-default block shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.devices.backends.cuda import CudaBackend

USABLE, REASON = CudaBackend.availability()
if not USABLE:
    pytest.skip(f"CUDA backend unavailable: {REASON}", allow_module_level=True)

from harness.config.shapes import MoeShape  # noqa: E402
from harness.devices.correctness import check_shape  # noqa: E402
from harness.devices.kernel_cases import VERIFY_SHAPES  # noqa: E402
from harness.devices.quant_layer import make_inputs, make_layer  # noqa: E402

pytestmark = pytest.mark.cuda

EXTRA_SHAPES = [
    MoeShape(2048, 768, n_experts=128, top_k=8, bits=4, group_size=64, dtype="bfloat16"),  # qwen3-30b-a3b
    MoeShape(4096, 14336, n_experts=4, top_k=2, bits=4, group_size=64, dtype="bfloat16"),  # mixtral
    MoeShape(4096, 14336, n_experts=4, top_k=2, bits=8, group_size=32, dtype="float16"),
    MoeShape(5120, 8192, n_experts=2, top_k=1, bits=4, group_size=128, dtype="float16"),  # llama-4-scout
    MoeShape(4096, 6400, n_experts=4, top_k=2, bits=8, group_size=128, dtype="bfloat16"),  # phi-3.5-moe
    MoeShape(2112, 1024, n_experts=4, top_k=2, bits=4, group_size=32, dtype="float16"),
]
SHAPES = list(VERIFY_SHAPES) + EXTRA_SHAPES


def _assert_ok(backend: CudaBackend, shape: MoeShape) -> None:
    checks = check_shape(backend, shape, seed=shape.d_model + shape.dff + shape.top_k)
    assert {c.path for c in checks} == {"fused", "fallback"}
    for check in checks:
        assert check.ok, f"{shape.label()} {check.path}: rel_err {check.rel_err} > {check.tolerance} {check.error}"


@pytest.mark.parametrize("shape", SHAPES, ids=[s.label() for s in SHAPES])
def test_paths_match_reference(shape: MoeShape) -> None:
    _assert_ok(CudaBackend(poison=True), shape)


@pytest.mark.parametrize(
    ("sgy", "rows", "act_load", "split_k"),
    [(4, 2, "f32", 1), (8, 4, "dtype", 1), (16, 1, "shared", 1), (3, 2, "shared", 4), (8, 1, "dtype", 2)],
)
def test_variants_match_reference(sgy: int, rows: int, act_load: str, split_k: int) -> None:
    backend = CudaBackend(poison=True, sgy=sgy, rows=rows, act_load=act_load, split_k=split_k)
    for shape in (
        VERIFY_SHAPES[0],
        MoeShape(2080, 1024, n_experts=4, top_k=3, bits=8, group_size=32, dtype="bfloat16"),
        MoeShape(2048, 512, n_experts=8, top_k=2, bits=4, group_size=64, dtype="bfloat16"),  # split-K on an H200
        MoeShape(2048, 14336, n_experts=2, top_k=2, bits=4, group_size=64, dtype="bfloat16"),  # 4 staging passes
    ):
        _assert_ok(backend, shape)


def _setup(backend: CudaBackend, shape: MoeShape) -> tuple:
    layer = backend.upload(make_layer(shape, 11))
    return (*backend.upload_inputs(*make_inputs(shape, 11), shape.dtype), layer)


def test_graph_replay_matches_direct_launches_and_is_deterministic() -> None:
    shape = MoeShape(2048, 1408, n_experts=8, top_k=4, bits=4, group_size=64, dtype="bfloat16")
    backend = CudaBackend(poison=True)
    args = _setup(backend, shape)
    for name, step in backend.paths().items():
        direct = backend.to_numpy(step(*args))
        replay = backend.graph(name, *args)
        for _ in range(3):
            replayed = backend.to_numpy(replay())
            assert np.array_equal(replayed, direct), name  # same kernels, same order: bit-identical


def test_device_facts() -> None:
    backend = CudaBackend()
    info = backend.device_info()
    assert info["gpu"] and info["compute_capability"].count(".") == 1
    free, total = backend.memory_info()
    assert 0 < free <= total
    assert backend.cache_bytes() > 1 << 20
    assert backend.copy_bandwidth(1 << 28) > 1e11  # any current datacenter GPU copies > 100 GB/s
    assert info["gpu"] in backend.device_name()
    assert info["kernel_variant"] == backend.variant_label() and info["cuda_rows"] == str(backend.rows)


def test_an_expert_index_out_of_range_raises_at_synchronize() -> None:
    shape = MoeShape(2048, 1024, n_experts=4, top_k=2, bits=4, group_size=64, dtype="bfloat16")
    backend = CudaBackend(poison=True)
    x, _, scores, layer = _setup(backend, shape)
    import cupy

    for step in backend.paths().values():
        step(x, cupy.asarray(np.array([0, 4], dtype=np.int32)), scores, layer)
        with pytest.raises(ValueError, match="expert index 4 out of range 0..3"):
            backend.synchronize()
