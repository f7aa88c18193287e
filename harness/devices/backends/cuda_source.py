"""The CUDA kernel sources and compile options, shared by the runtime (CuPy) and the offline NVRTC check.

Both `harness.devices.backends.cuda` and `harness.devices.backends.cuda_compile` build what they compile from
`KernelVariant.source()` and `KernelVariant.options()`, so the compile check covers exactly what runs.
No CuPy here: this module only reads files and builds strings.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cache

from harness.config import resources
from harness.config.shapes import BITS, DTYPES, GROUP_SIZES

KERNEL_DIR = resources.kernel_dir() / "cuda"
# One translation unit per variant holds every kernel of both paths (one NVRTC compile, one module).
SOURCE_FILES = ("moe_fused.cu", "qmv_gather.cu", "moe_elementwise.cu")
KERNEL_NAMES = ("moe_gate_up_swiglu", "moe_down_scale", "qmv_gather", "moe_swiglu", "moe_weighted_sum")
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
DEFAULT_SGY = 8
DEFAULT_ROWS = 1  # one warp per output row: the reference design of docs/design.md §3
ROWS_CHOICES = (1, 2, 4)
# How kernel B reads act (MOE_ACT_LOAD): f32 from global memory (the reference design), act stored by kernel A in
# the activation dtype (bf16 on a bf16 model; the same as f32 on a float32 one), or f32 staged in shared memory.
ACT_LOAD_CODES = {"f32": 0, "dtype": 1, "shared": 2}
DEFAULT_ACT_LOAD = "f32"

_INCLUDE = re.compile(r'^#include "([^"]+)"[ \t]*$', re.MULTILINE)


@cache
def translation_unit() -> str:
    """All kernel files as one source string, local `#include "..."` lines replaced by the file's text.

    Inlined rather than left to NVRTC's include path because CuPy's kernel cache is keyed on the source
    string: an edited header must change the key. `#line` directives keep NVRTC messages pointing at the
    real file and line. Each file is pasted once (the header's include guard would drop repeats anyway).
    """
    pasted: set[str] = set()
    return "".join(_paste(name, pasted) for name in SOURCE_FILES)


def _paste(name: str, pasted: set[str]) -> str:
    if name in pasted:
        return ""
    pasted.add(name)
    path = KERNEL_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"CUDA kernel source {path} is missing; is the checkout complete?")
    text = path.read_text()
    out, last = [f'#line 1 "{name}"\n'], 0
    for match in _INCLUDE.finditer(text):
        out.append(text[last : match.start()])
        out.append(_paste(match.group(1), pasted))
        next_line = text.count("\n", 0, match.start()) + 2  # the line after the include, 1-based
        out.append(f'#line {next_line} "{name}"\n')
        last = match.end() + 1  # skip the include line's newline
    out.append(text[last:])
    return "".join(out)


@dataclass(frozen=True)
class KernelVariant:
    """One compile-time configuration of the kernels (see the header of kernels/cuda/moe_common.cuh)."""

    bits: int
    group_size: int
    dtype: str
    sgy: int = DEFAULT_SGY
    rows: int = DEFAULT_ROWS
    act_load: str = DEFAULT_ACT_LOAD

    def __post_init__(self) -> None:
        choices = {
            "bits": BITS,
            "group_size": GROUP_SIZES,
            "dtype": DTYPES,
            "rows": ROWS_CHOICES,
            "act_load": tuple(ACT_LOAD_CODES),
        }
        problems = [f"{k} must be one of {v}" for k, v in choices.items() if getattr(self, k) not in v]
        if not 1 <= self.sgy <= 32:
            problems.append("sgy (warps per block) must be in 1..32")
        if problems:
            raise ValueError(f"invalid CUDA kernel variant {self}: {'; '.join(problems)}")

    def label(self) -> str:
        return f"q{self.bits}g{self.group_size}-{self.dtype}-sgy{self.sgy}-rows{self.rows}-act_{self.act_load}"

    def source(self) -> str:
        return translation_unit()

    def options(self) -> tuple[str, ...]:
        """NVRTC options for this variant, without the target architecture (CuPy adds the device's)."""
        return (
            "--std=c++17",
            f"-DMOE_BITS={self.bits}",
            f"-DMOE_GROUP_SIZE={self.group_size}",
            f"-DMOE_DTYPE={DTYPE_CODES[self.dtype]}",
            f"-DMOE_SGY={self.sgy}",
            f"-DMOE_ROWS={self.rows}",
            f"-DMOE_ACT_LOAD={ACT_LOAD_CODES[self.act_load]}",
        )


def all_variants(
    sgy: int = DEFAULT_SGY, rows: int = DEFAULT_ROWS, act_load: str = DEFAULT_ACT_LOAD
) -> list[KernelVariant]:
    """Every (bits, group_size, dtype) the harness can ask for, at one block configuration."""
    return [KernelVariant(b, g, d, sgy, rows, act_load) for b, g, d in itertools.product(BITS, GROUP_SIZES, DTYPES)]


def ab_variants(bits: int = 4, group_size: int = 64, dtype: str = "bfloat16") -> list[KernelVariant]:
    """The compiled variants of the kernel A/B (rows per warp x how kernel B reads act) at one format, by default
    the H200 sweep's (q4 g64 bfloat16); split-K is a launch choice and needs no module of its own."""
    return [
        KernelVariant(bits, group_size, dtype, DEFAULT_SGY, rows, act_load)
        for rows in ROWS_CHOICES
        for act_load in ACT_LOAD_CODES
    ]
