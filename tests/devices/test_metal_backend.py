"""Metal backend: what can be checked anywhere (availability, the kernel source's structure and its parallel to
the CUDA source, argument checks) and, marked `metal`, fused and fallback against the float64 reference on an
Apple GPU. The kernels' arithmetic is checked on Linux by tests/devices/test_metal_emulated.py."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from harness.config.shapes import MoeShape
from harness.devices.backends import availability
from harness.devices.backends.metal import METAL_SOURCE, MetalBackend, split_metal_source
from tests.support.helpers import REPO

KERNELS = ("moe_gate_up_swiglu", "moe_down_scale")
CUDA_FUSED = REPO / "kernels" / "cuda" / "moe_fused.cu"
TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}
METAL_OK, METAL_REASON = MetalBackend.availability()
skip_without_metal = pytest.mark.skipif(not METAL_OK, reason=f"no Metal GPU here: {METAL_REASON}")


def _code(body: str) -> str:
    """A kernel body without its comments: what the compiler sees."""
    return re.sub(r"//[^\n]*", "", body)


@pytest.mark.skipif(sys.platform == "darwin", reason="checks the reason given off macOS")
def test_availability_off_macos_is_false_with_the_reason():
    ok, reason = MetalBackend.availability()
    assert not ok
    assert "macOS" in reason and sys.platform in reason
    assert availability("metal") == (ok, reason)


def test_availability_explains_missing_mlx_and_missing_gpu(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setitem(sys.modules, "mlx", None)  # `import mlx.core` now raises ImportError
    monkeypatch.setitem(sys.modules, "mlx.core", None)
    ok, reason = MetalBackend.availability()
    assert not ok and "not installed" in reason and "pip install" in reason
    monkeypatch.undo()
    mx = pytest.importorskip("mlx.core")
    if mx.metal.is_available():
        pytest.skip("this machine has a Metal GPU; the no-GPU reason cannot be observed")
    monkeypatch.setattr(sys, "platform", "darwin")
    ok, reason = MetalBackend.availability()
    assert not ok and "is_available() is False" in reason


def test_importing_the_backend_does_not_import_mlx():
    code = "import sys, harness.devices.backends.metal as m; m.MetalBackend.availability(); print('mlx' in sys.modules)"
    if sys.platform == "darwin":
        code = code.replace("m.MetalBackend.availability(); ", "")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert result.stdout.strip() == "False"


def test_source_splits_into_header_and_the_two_kernels():
    header, kernels = split_metal_source(METAL_SOURCE.read_text())
    assert tuple(kernels) == KERNELS
    assert "// ====" not in header and all("// ====" not in k.body for k in kernels.values())
    for helper in ("struct MoeFormat", "moe_silu", "moe_load_vals", "moe_chunk_qdot", "moe_warp_sum", "moe_rows_dot"):
        assert helper in header
    a, b = kernels["moe_gate_up_swiglu"], kernels["moe_down_scale"]
    assert a.input_names == ("x", "indices", "gate_w", "gate_scales", "gate_biases", "up_w", "up_scales", "up_biases")
    assert a.output_names == ("act",)
    assert b.input_names == ("act", "indices", "scores", "down_w", "down_scales", "down_biases")
    assert b.output_names == ("partial",)
    for kernel in kernels.values():
        code = _code(kernel.body)
        for name in kernel.input_names + kernel.output_names:
            assert re.search(rf"\b{name}\b", code), f"{kernel.name} never uses its parameter {name}"
        for constant in ("T", "BITS", "GROUP_SIZE", "ROWS"):  # every template argument shapes the code
            assert re.search(rf"\b{constant}\b", code), f"{kernel.name} ignores template argument {constant}"
        assert "metal::simd_sum" not in code  # reductions go through the shared helper, as in CUDA
        assert "thread_index_in_simdgroup" in code and "thread_position_in_grid" in code


def test_kernel_parameters_follow_the_cuda_source_in_order():
    """Each Metal kernel's parameters are the CUDA kernel's, in the same order, minus the ones MLX supplies
    differently (sizes via *_shape buffers) or that only the CUDA version needs (the fused sum over slots)."""
    if not CUDA_FUSED.exists():
        pytest.skip(f"{CUDA_FUSED} is not in this checkout")
    cuda = CUDA_FUSED.read_text()
    _, kernels = split_metal_source(METAL_SOURCE.read_text())
    for name, kernel in kernels.items():
        match = re.search(rf"\b{name}\(([^)]*)\)", cuda)
        assert match, f"{name} is missing from {CUDA_FUSED.name}"
        cuda_params = [re.findall(r"(\w+)\s*$", p.strip())[0] for p in match.group(1).split(",")]
        metal_params = list(kernel.input_names + kernel.output_names)
        positions = [cuda_params.index(p) for p in metal_params if p in cuda_params]
        assert len(positions) == len(metal_params), f"{name}: {metal_params} vs CUDA {cuda_params}"
        assert positions == sorted(positions), f"{name}: order differs from CUDA {cuda_params}"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("// ==== kernel k ====\n// inputs: a\n// outputs: b\n", "header"),
        ("// ==== header ====\n", "no"),
        ("// ==== header ====\n// ==== kernel k ====\n// inputs: a\n", "declare"),
        ("// ==== header ====\n" + "// ==== kernel k ====\n// inputs: a\n// outputs: b\n" * 2, "twice"),
        ("// ==== header ====\n// ==== header ====\n", "second"),
    ],
)
def test_malformed_source_is_refused_with_the_reason(text, problem):
    with pytest.raises(ValueError, match=problem):
        split_metal_source(text)


@pytest.mark.parametrize(("kwargs", "problem"), [({"sgy": 0}, "sgy"), ({"sgy": 33}, "sgy"), ({"rows": 3}, "rows")])
def test_launch_shape_arguments_are_checked(kwargs, problem):
    with pytest.raises(ValueError, match=problem):
        MetalBackend(**kwargs)


def test_cache_estimate_covers_the_largest_apple_slc():
    assert MetalBackend().cache_bytes() >= 96 * 2**20


# ---- on an Apple GPU ----------------------------------------------------------------------------------------

RUNTIME_SHAPES = [
    MoeShape(2048, 768, 128, 8, 4, 64),  # qwen3-30b-a3b
    MoeShape(2048, 1408, 60, 4, 4, 64),  # qwen1.5-moe
    MoeShape(4096, 6400, 16, 2, 4, 64),  # phi-3.5-moe
    MoeShape(5120, 8192, 16, 1, 4, 64),  # llama-4-scout
    MoeShape(640, 384, 8, 2, 8, 32),  # d_model not a multiple of 256, 8-bit
    MoeShape(1152, 1536, 8, 4, 4, 128),
    MoeShape(1024, 512, 4, 2, 8, 128),
]


def _check_paths_on_metal(shape: MoeShape, backend: MetalBackend) -> None:
    """Every path of `backend` on fresh random inputs vs the float64 reference, outputs NaN-poisoned."""
    from harness.devices.quant_layer import make_inputs, make_layer
    from harness.devices.reference import moe_reference, rel_err

    layer = make_layer(shape, seed=11)
    x, indices, scores = make_inputs(shape, seed=12)
    reference = moe_reference(layer, x, indices, scores)
    device_layer = backend.upload(layer)
    inputs = backend.upload_inputs(x, indices, scores, shape.dtype)
    for name, path in backend.paths().items():
        out = path(*inputs, device_layer)
        backend.synchronize()
        result = backend.to_numpy(out)
        assert result.shape == (shape.d_model,)
        assert np.isfinite(result).all(), f"{name}: unwritten (NaN-poisoned) elements"
        assert rel_err(result, reference) <= TOLERANCE[shape.dtype], name


@pytest.mark.metal
@skip_without_metal
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", RUNTIME_SHAPES, ids=MoeShape.label)
def test_fused_and_fallback_match_the_reference_on_metal(shape, dtype):
    _check_paths_on_metal(MoeShape(**{**shape.as_dict(), "dtype": dtype}), MetalBackend(poison=True))


@pytest.mark.metal
@skip_without_metal
@pytest.mark.parametrize(("sgy", "rows"), [(1, 1), (4, 2), (2, 4), (32, 1)])
def test_every_launch_shape_matches_the_reference_on_metal(sgy, rows):
    shape = MoeShape(640, 384, 8, 2, 4, 64, "bfloat16")
    _check_paths_on_metal(shape, MetalBackend(poison=True, sgy=sgy, rows=rows))
