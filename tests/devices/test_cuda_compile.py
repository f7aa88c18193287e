"""The CUDA kernels compile with NVRTC, without spills, on a machine with no GPU.

The source and options are the ones the runtime hands CuPy (KernelVariant.source()/.options()), so a syntax or
template error in kernels/cuda/ fails here, with NVRTC's log, before it can reach a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.shapes import DTYPES
from harness.devices.backends.cuda_compile import (
    SUPPORTED_ARCHS,
    CompileResult,
    compile_all,
    compile_variant,
    nvrtc_status,
)
from harness.devices.backends.cuda_source import (
    DTYPE_CODES,
    KERNEL_NAMES,
    KernelVariant,
    ab_variants,
    all_variants,
    translation_unit,
)

NVRTC_OK, NVRTC_REASON = nvrtc_status()
needs_nvrtc = pytest.mark.skipif(not NVRTC_OK, reason=NVRTC_REASON)

# What the tests compile, cut to what each needs (results are cached on disk by source hash, see cuda_compile;
# `moecal verify --compile-only` compiles the full matrix): every format at the H200's sm_90, the H200 sweep's
# format for every supported architecture, the A/B variants for sm_90 and each of their code paths for Blackwell
# datacenter (sm_100) and consumer (sm_120).
TARGET_ARCH = "sm_90"
BLACKWELL_ARCHS = ("sm_100", "sm_120")


def _failures(results: list[CompileResult]) -> str:
    return "\n\n".join(f"{r.variant} for {r.arch}:\n{r.log}" for r in results if not r.ok)


def _spills(results: list[CompileResult]) -> dict[tuple[str, str, str], int]:
    return {(r.variant, r.arch, k): v.spill_bytes for r in results for k, v in r.kernels.items() if v.spill_bytes}


def _assert_compiled_without_spills(results: list[CompileResult]) -> None:
    """A spill would put local-memory traffic into a loop meant to stream weights."""
    assert all(r.ok for r in results), _failures(results)
    for result in results:
        assert set(result.kernels) == set(KERNEL_NAMES), f"{result.variant} {result.arch}: {sorted(result.kernels)}"
    assert not _spills(results)


@needs_nvrtc
def test_every_format_compiles_for_hopper() -> None:
    results = compile_all((TARGET_ARCH,))
    assert len(results) == len(all_variants()) == 18
    _assert_compiled_without_spills(results)


@needs_nvrtc
def test_the_sweep_format_compiles_for_every_supported_arch() -> None:
    results = compile_all(SUPPORTED_ARCHS, [KernelVariant(4, 64, "bfloat16")])
    assert [r.arch for r in results] == list(SUPPORTED_ARCHS)
    assert all(r.ok for r in results), _failures(results)


@needs_nvrtc
def test_ab_variants_compile_without_spills_for_hopper() -> None:
    variants = ab_variants() + [KernelVariant(8, 32, "float16", sgy=4, rows=2, act_load="shared")]
    results = compile_all((TARGET_ARCH,), variants)
    assert len(results) == 3 * 3 + 1  # rows 1/2/4 x act f32/dtype/shared
    _assert_compiled_without_spills(results)


@needs_nvrtc
def test_every_ab_code_path_compiles_without_spills_for_blackwell() -> None:
    """Each act load and each rows template once per Blackwell arch (the default variant is compiled above for
    every arch); `moecal verify --compile-only` compiles every A/B variant for every arch."""
    variants = [
        KernelVariant(4, 64, "bfloat16", rows=2, act_load="dtype"),
        KernelVariant(4, 64, "bfloat16", rows=4, act_load="shared"),
    ]
    results = compile_all(BLACKWELL_ARCHS, variants)
    assert len(results) == 4
    _assert_compiled_without_spills(results)


@needs_nvrtc
def test_compiles_are_cached_by_source_options_and_arch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    variant = KernelVariant(8, 32, "float32", sgy=2, rows=1)
    first = compile_variant(variant, TARGET_ARCH)
    assert first.ok and len(list((tmp_path / "moecal" / "nvrtc").glob("*.json"))) == 1
    from cupy.cuda import nvrtc

    def no_compiler(*args: object) -> None:
        raise AssertionError("compiled again although the identical compile is cached")

    monkeypatch.setattr(nvrtc, "compileProgram", no_compiler)
    assert compile_variant(variant, TARGET_ARCH) == first
    for other in (KernelVariant(8, 32, "float32", sgy=2, rows=2), variant):  # other options, other arch: misses
        with pytest.raises(AssertionError, match="compiled again"):
            compile_variant(other, "sm_100" if other == variant else TARGET_ARCH)
    monkeypatch.undo()
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(not_a_directory))  # an unusable cache: compiling still works
    again = compile_variant(variant, TARGET_ARCH)
    assert again.ok and again.kernels == first.kernels


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
    for define in (
        "-DMOE_BITS=8",
        "-DMOE_GROUP_SIZE=128",
        "-DMOE_DTYPE=2",
        "-DMOE_SGY=4",
        "-DMOE_ROWS=2",
        "-DMOE_ACT_LOAD=0",
    ):
        assert define in options
    assert set(DTYPE_CODES) == set(DTYPES)  # every activation dtype a shape can name has a kernel code
    assert len(all_variants()) == len({v.label() for v in all_variants()}) == 18
    assert "-DMOE_ACT_LOAD=2" in KernelVariant(4, 64, "float32", act_load="shared").options()
    for bad in ({"bits": 3}, {"group_size": 16}, {"dtype": "int8"}, {"sgy": 33}, {"rows": 3}, {"act_load": "bf16"}):
        with pytest.raises(ValueError):
            KernelVariant(**{"bits": 4, "group_size": 64, "dtype": "float32", **bad})
