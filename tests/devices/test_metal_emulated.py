"""The Metal kernels' arithmetic, checked on Linux: MetalBackend.fused with its two kernels run by the C++
emulator of tests/support/metal_emulation.py, against the float64 reference, outputs NaN-poisoned and guarded by
canaries. Every template combination (3 dtypes x 2 bit widths x 3 group sizes) is compiled and run."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("mlx.core", reason="MLX is needed to assemble the kernel arguments (pip install 'mlx[cpu]')")

from harness.config.shapes import BITS, DTYPES, GROUP_SIZES, MoeShape  # noqa: E402
from harness.devices.quant_layer import make_inputs, make_layer  # noqa: E402
from harness.devices.reference import moe_reference, rel_err  # noqa: E402
from tests.support.metal_emulation import EmulatedMetalBackend, compiler  # noqa: E402

pytestmark = pytest.mark.skipif(compiler() is None, reason="g++ not found: the Metal kernels are emulated as C++")

TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "float32": 1e-5}
# (shape, rows per simdgroup). d_model 640 = 5*128 is a multiple of every group size but not of 256, and gives
# 4-bit rows of 20 uint4 chunks, so lanes 20..31 get no chunk at all; top_k 8 binds indices/scores in `device`.
CASES = [
    (MoeShape(640, 384, 4, 2, bits, group_size, dtype), 1)
    for dtype, bits, group_size in itertools.product(DTYPES, BITS, GROUP_SIZES)
] + [
    (MoeShape(256, 512, 8, 8, 4, 64, "float32"), 1),
    (MoeShape(640, 384, 4, 2, 4, 64, "bfloat16"), 2),
    (MoeShape(640, 384, 4, 2, 8, 32, "float16"), 4),
    (MoeShape(4096, 128, 2, 1, 4, 128, "float32"), 1),  # many chunks per lane
]


def _prepare(shape: MoeShape, backend: EmulatedMetalBackend):
    layer = make_layer(shape, seed=3)
    x, indices, scores = make_inputs(shape, seed=4)
    return (
        moe_reference(layer, x, indices, scores),
        backend.upload(layer),
        backend.upload_inputs(x, indices, scores, shape.dtype),
    )


def _emulated_backend(cases, source: str | None = None) -> tuple[EmulatedMetalBackend, list]:
    """A compiled emulator for `cases` plus each case's (reference, device layer, inputs)."""
    backend = EmulatedMetalBackend(source=source)
    prepared = []
    for shape, rows in cases:
        backend.rows = rows
        reference, layer, inputs = _prepare(shape, backend)
        backend.fused(*inputs, layer)  # planning pass: records the instances to compile
        prepared.append((reference, layer, inputs))
    backend.compile()
    return backend, prepared


def _fused_error(backend: EmulatedMetalBackend, rows: int, prepared) -> float:
    reference, layer, inputs = prepared
    backend.rows = rows
    return rel_err(backend.to_numpy(backend.fused(*inputs, layer)), reference)


@pytest.fixture(scope="module")
def emulated():
    return _emulated_backend(CASES)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{s.label()}-rows{r}" for s, r in CASES])
def test_emulated_fused_kernels_match_the_reference(emulated, case):
    backend, prepared = emulated
    shape, rows = CASES[case]
    assert _fused_error(backend, rows, prepared[case]) <= TOLERANCE[shape.dtype]


@pytest.mark.parametrize(
    ("original", "broken"),
    [
        # drop the bias term of the dequantization identity
        ("metal::fma(s, qx, metal::fma(b, xsum, acc[r]))", "metal::fma(s, qx, acc[r])"),
        # the last row of each kernel B output is never written: the NaN poison must surface
        (
            "if (lane == 0) {\n  for (int r = 0; r < ROWS; ++r) {\n    partial",
            "if (lane == 0 && row0 + ROWS < d_model) {\n  for (int r = 0; r < ROWS; ++r) {\n    partial",
        ),
        # lanes skip their last chunk
        ("for (int c = lane; c < chunks; c += 32)", "for (int c = lane; c + 32 < chunks; c += 32)"),
    ],
    ids=["no-bias", "unwritten-row", "short-loop"],
)
def test_the_emulation_catches_a_broken_kernel(original, broken):
    """Guards the guard: the same check fails when the kernel source carries a typical bug."""
    from harness.devices.backends.metal import METAL_SOURCE

    source = METAL_SOURCE.read_text()
    assert source.count(original) == 1
    case = (MoeShape(4096, 128, 2, 1, 4, 128, "float32"), 1)
    backend, prepared = _emulated_backend([case], source.replace(original, broken))
    error = _fused_error(backend, 1, prepared[0])
    assert not error <= TOLERANCE["float32"]  # a NaN (poison read back) fails too
