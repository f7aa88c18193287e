"""Every CUDA kernel variant compiles with NVRTC, for every supported architecture, on a machine with no GPU.

The source and options are the ones the runtime hands CuPy (KernelVariant.source()/.options()), so a syntax or
template error in kernels/cuda/ fails here, with NVRTC's log, before it can reach a GPU.
"""

from __future__ import annotations

import pytest

from harness.backends.cuda_compile import SUPPORTED_ARCHS, CompileResult, compile_all, compile_variant, nvrtc_status
from harness.backends.cuda_source import DTYPE_CODES, KERNEL_NAMES, KernelVariant, all_variants, translation_unit
from harness.shapes import DTYPES

NVRTC_OK, NVRTC_REASON = nvrtc_status()
needs_nvrtc = pytest.mark.skipif(not NVRTC_OK, reason=NVRTC_REASON)


def _failures(results: list[CompileResult]) -> str:
    return "\n\n".join(f"{r.variant} for {r.arch}:\n{r.log}" for r in results if not r.ok)


@pytest.fixture(scope="module")
def all_results() -> list[CompileResult]:
    """Every variant for every supported architecture (126 NVRTC compiles, about a minute on 2 cores)."""
    return compile_all(SUPPORTED_ARCHS)


@needs_nvrtc
def test_every_variant_compiles_for_every_supported_arch(all_results: list[CompileResult]) -> None:
    assert len(all_results) == len(all_variants()) * len(SUPPORTED_ARCHS) == 18 * len(SUPPORTED_ARCHS)
    assert all(r.ok for r in all_results), _failures(all_results)
    for result in all_results:
        assert set(result.kernels) == set(KERNEL_NAMES), f"{result.variant} {result.arch}: {sorted(result.kernels)}"


def _spills(results: list[CompileResult]) -> dict[tuple[str, str, str], int]:
    return {(r.variant, r.arch, k): v.spill_bytes for r in results for k, v in r.kernels.items() if v.spill_bytes}


@needs_nvrtc
def test_no_kernel_spills_registers_on_hopper(all_results: list[CompileResult]) -> None:
    """sm_90 is the H200 target: a spill would put local-memory traffic into a loop meant to stream weights."""
    assert not _spills([r for r in all_results if r.arch == "sm_90"])


@needs_nvrtc
def test_block_shape_variants_compile_without_spills_on_hopper() -> None:
    variants = [
        KernelVariant(4, 64, "bfloat16", sgy=4, rows=2),
        KernelVariant(8, 32, "float16", sgy=8, rows=4),
        KernelVariant(4, 128, "float32", sgy=16, rows=4),
        KernelVariant(8, 128, "bfloat16", sgy=2, rows=2),
    ]
    results = compile_all(("sm_90",), variants)
    assert all(r.ok for r in results), _failures(results)
    assert not _spills(results)


class _BrokenVariant(KernelVariant):
    def source(self) -> str:
        return translation_unit() + "\nthis line is not C++;\n"


@needs_nvrtc
def test_a_compile_error_comes_back_with_nvrtc_log() -> None:
    result = compile_variant(_BrokenVariant(4, 64, "bfloat16"), "sm_90")
    assert not result.ok
    assert "NVRTC_ERROR_COMPILATION" in result.log and "this" in result.log


@needs_nvrtc
def test_an_architecture_nvrtc_cannot_target_is_a_failure_not_a_crash() -> None:
    result = compile_variant(KernelVariant(4, 64, "float32"), "sm_52")
    assert not result.ok and "cannot target sm_52" in result.log


def test_translation_unit_inlines_the_header_once_with_line_markers() -> None:
    source = translation_unit()
    assert '#include "' not in source  # CuPy's cache key must see the header's text
    assert source.count("#define MOE_COMMON_CUH") == 1
    assert '#line 1 "moe_common.cuh"' in source and '#line 1 "qmv_gather.cu"' in source
    for name in KERNEL_NAMES:
        assert f'extern "C" __global__ void {name}(' in source


def test_variant_options_and_validation() -> None:
    options = KernelVariant(8, 128, "bfloat16", sgy=4, rows=2).options()
    for define in ("-DMOE_BITS=8", "-DMOE_GROUP_SIZE=128", "-DMOE_DTYPE=2", "-DMOE_SGY=4", "-DMOE_ROWS=2"):
        assert define in options
    assert set(DTYPE_CODES) == set(DTYPES)  # every activation dtype a shape can name has a kernel code
    assert len(all_variants()) == len({v.label() for v in all_variants()}) == 18
    for bad in ({"bits": 3}, {"group_size": 16}, {"dtype": "int8"}, {"sgy": 33}, {"rows": 3}):
        with pytest.raises(ValueError):
            KernelVariant(**{"bits": 4, "group_size": 64, "dtype": "float32", **bad})
