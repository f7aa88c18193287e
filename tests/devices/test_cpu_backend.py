"""CPU backend: every path vs the float64 reference (NaN-poisoned buffers), input checks, device facts."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest

from harness.config.shapes import MoeShape
from harness.devices.backends import get_backend
from harness.devices.backends.cpu import CpuBackend
from harness.devices.backends.cpu_host import last_level_cache_bytes
from harness.devices.kernel_cases import TOLERANCE
from harness.devices.quant_layer import make_inputs, make_layer, round_to_dtype
from harness.devices.reference import moe_reference, rel_err

SHAPES = [
    MoeShape(2048, 768, n_experts=8, top_k=8, bits=4, group_size=64),
    MoeShape(2080, 512, n_experts=4, top_k=2, bits=4, group_size=32),  # 65 groups: odd count, not a multiple of 256
    MoeShape(1024, 1024, n_experts=4, top_k=1, bits=4, group_size=128),
    MoeShape(1088, 512, n_experts=3, top_k=2, bits=8, group_size=32),
    MoeShape(1024, 768, n_experts=4, top_k=3, bits=8, group_size=64),
    MoeShape(1536, 512, n_experts=4, top_k=4, bits=8, group_size=128),
    MoeShape(1024, 512, n_experts=4, top_k=2, bits=4, group_size=64, dtype="float16"),
    MoeShape(1024, 512, n_experts=4, top_k=2, bits=8, group_size=64, dtype="bfloat16"),
]


@pytest.fixture(scope="module")
def backend() -> CpuBackend:
    return CpuBackend(poison=True)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.label())
def test_every_path_matches_the_reference(backend: CpuBackend, shape: MoeShape) -> None:
    layer = make_layer(shape, seed=11)
    x, indices, scores = make_inputs(shape, seed=12)
    reference = moe_reference(layer, x, indices, scores)
    device_layer = backend.upload(layer)
    inputs = backend.upload_inputs(x, indices, scores, shape.dtype)
    paths = backend.paths()
    assert {"fused", "fallback"} <= set(paths)
    for name, step in paths.items():
        out = backend.to_numpy(step(*inputs, device_layer))
        assert out.shape == (shape.d_model,)
        assert np.isfinite(out).all(), f"{name}: unwritten (NaN-poisoned) elements"
        assert rel_err(out, reference) <= TOLERANCE[shape.dtype], name
        assert np.array_equal(round_to_dtype(out, shape.dtype), out), f"{name}: output not rounded to {shape.dtype}"


def test_poisoning_fills_reused_buffers_with_nan_before_each_run(backend: CpuBackend) -> None:
    shape = SHAPES[1]
    device_layer = backend.upload(make_layer(shape, seed=1))
    inputs = backend.upload_inputs(*make_inputs(shape, seed=1), shape.dtype)
    backend.fused(*inputs, device_layer)
    act = backend._buffers[("fused", "act", (shape.top_k, shape.dff))]
    assert np.isfinite(act).all()
    assert backend._buffer("fused", "act", act.shape) is act and np.isnan(act).all()


def test_paths_reject_inputs_that_would_read_out_of_bounds(backend: CpuBackend) -> None:
    shape = SHAPES[1]
    device_layer = backend.upload(make_layer(shape, seed=1))
    x, indices, scores = backend.upload_inputs(*make_inputs(shape, seed=1), shape.dtype)
    with pytest.raises(ValueError, match="out of range"):
        backend.fused(x, np.array([0, shape.n_experts], dtype=np.int32), scores, device_layer)
    with pytest.raises(ValueError, match="float32"):
        backend.fallback(x[:-1], indices, scores, device_layer)
    with pytest.raises(ValueError, match="one entry per slot"):
        backend.upload_inputs(x, indices, scores[:1], shape.dtype)


_HAS_AVX2 = platform.machine() == "x86_64" and "avx2" in Path("/proc/cpuinfo").read_text(errors="ignore")
_ASM_PROBE = """
import json, re, sys
import numpy as np
from harness.devices.backends import cpu

counts = {}
for bits, group_size in [(4, 32), (4, 64), (4, 128), (8, 32), (8, 64), (8, 128)]:
    words = 8 * group_size * bits // 32
    w, s, x = np.zeros(words, np.uint32), np.zeros(8, np.float32), np.zeros(8 * group_size, np.float32)
    cpu._row_pair_const(w, s, s, w, s, s, x, s, bits, group_size)  # compiles this literal variant
    literals = {(sig[-2].literal_value, sig[-1].literal_value): sig for sig in cpu._row_pair_const.signatures}
    sig = literals[(bits, group_size)]
    asm = cpu._row_pair_const.inspect_asm(sig)
    counts[f"q{bits}g{group_size}"] = [len(re.findall(p, asm)) for p in (r"vcvtdq2ps\\s+%[yz]mm", r"vpsrlq|vpmovzxdq")]
print(json.dumps(counts))
"""


@pytest.mark.skipif(not _HAS_AVX2, reason="the instruction check is written for x86-64 AVX2 code")
def test_every_variant_converts_eight_fields_per_instruction(tmp_path: Path) -> None:
    """Speed guard: a change that lets numba widen the field arithmetic to 64 bits (or scalarise it) still passes
    the numerical tests but runs 3-5x slower (a scalar remainder loop after the vector one is fine). Compiled
    fresh (numba can't disassemble cached code), with the SLP vectoriser off (numba's default): the design does
    not depend on it. A conversion from a ymm (8 lanes) or, on AVX-512 machines, a zmm register (16 lanes) counts:
    LLVM picks zmm for some variants there."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_SLP_VECTORIZE": "0"}
    done = subprocess.run([sys.executable, "-c", _ASM_PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    for variant, (vector_converts, widened_to_64_bits) in json.loads(done.stdout).items():
        assert vector_converts >= 8 and widened_to_64_bits == 0, variant


def test_device_facts() -> None:
    backend = get_backend("cpu")
    assert isinstance(backend, CpuBackend) and backend.availability()[0]
    assert f"{numba.get_num_threads()} threads" in backend.device_name()
    info = backend.device_info()
    assert info["numba"] == numba.__version__ and int(info["llc_bytes"]) == backend.cache_bytes()
    assert backend.cache_bytes() == last_level_cache_bytes() >= 256 << 10
    free, total = backend.memory_info()
    assert 0 < free <= total
    assert backend.copy_bandwidth(16 << 20) > 1e8  # 16 MiB both ways: any machine copies faster than 100 MB/s


def test_host_facts_without_numba_name_the_device_as_the_backend_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """`moecal plan` lays a CPU sweep out on CpuHost (no numba); its calibration finds the earlier runs by the device
    name, so that name and the provenance must be the backend's own, with or without NUMBA_NUM_THREADS."""
    from harness.devices.backends import device_facts
    from harness.devices.backends.cpu_host import CpuHost

    host = device_facts("cpu")
    assert type(host) is CpuHost
    backend = get_backend("cpu")
    assert host.device_name() == backend.device_name() and host.device_info() == backend.device_info()
    assert host.memory_info()[1] == backend.memory_info()[1]
    monkeypatch.setenv("NUMBA_NUM_THREADS", "1")
    assert host.threads() == 1 and host.device_name().endswith("(1 threads)")
    assert host.copy_bandwidth(16 << 20) > 1e8
