"""The one registry of kernel shapes: what `moecal verify` checks and what `moecal bench-kernels` times.

Like llama.cpp's test-backend-ops, every case is declared once here and both modes read it; nobody keeps a
second hand-written list. `parse_shapes` turns a `--shapes` string into shapes with the same defaults.

Shape syntax (`--shapes`): a comma-separated list of shapes; each shape is dash-separated tokens in any order:
  d<d_model>  f<dff>  e<n_experts>  k<top_k>  q<bits>  g<group_size>  q<bits>g<group_size>  <dtype>
d and f are required; the rest default to e8 k2 q4 g64 float32 (e grows to k when k > 8). The dtype is
float32/float16/bfloat16 or f32/f16/bf16. MoeShape.label() is a valid spelling, so a shape printed by verify or
bench can be pasted back:  `d2048-f768-e8-k2-q4g64-float32`, `d4096-f14336-k2-q8`, `d2112-f1024-bf16`.
"""

from __future__ import annotations

import re

from harness.config.shapes import DTYPES, MoeShape
from harness.errors import InputError

# Correctness: every bits × group_size pair, both d_model values of the bench plus d_model/dff that are not
# multiples of 256 (2112 = 33·64, 1088 = 17·64, 2080 = 65·32: an odd number of groups), top_k 1/2/4/8, Dff from
# 768 to 14336, each activation dtype. n_experts stays small: the host reference dequantizes only the selected
# experts, but the layer is built (and uploaded) whole. On 2 CPU cores the set runs in well under a minute.
VERIFY_SHAPES: tuple[MoeShape, ...] = (
    MoeShape(2048, 768, n_experts=8, top_k=8, bits=4, group_size=64),
    MoeShape(2048, 1408, n_experts=4, top_k=4, bits=4, group_size=32),
    MoeShape(2080, 1024, n_experts=4, top_k=2, bits=4, group_size=32),
    MoeShape(4096, 6400, n_experts=4, top_k=2, bits=4, group_size=128),
    MoeShape(4096, 14336, n_experts=2, top_k=1, bits=4, group_size=64),
    MoeShape(2112, 1024, n_experts=4, top_k=2, bits=8, group_size=64),
    MoeShape(1088, 2048, n_experts=3, top_k=2, bits=8, group_size=32),
    MoeShape(2048, 1792, n_experts=4, top_k=4, bits=8, group_size=128),
    MoeShape(2048, 1024, n_experts=4, top_k=2, bits=4, group_size=64, dtype="float16"),
    MoeShape(2048, 1024, n_experts=4, top_k=2, bits=4, group_size=64, dtype="bfloat16"),
    MoeShape(4096, 2048, n_experts=2, top_k=2, bits=8, group_size=64, dtype="bfloat16"),
)

# Relative error allowed against the float64 reference, by activation dtype: f32 accumulation everywhere, so
# float32 is limited by summation order; fp16/bf16 by the one rounding of the output (and, on the unfused paths
# of GPU backends, of the intermediates).
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1e-2}

# Speed: a Dff grid spanning the catalog's models (768 … 14336), at the two d_model values of docs/design.md §9. Every
# value is a multiple of 128, so any group size works. The rest of the bench shape is fixed (Mixtral-like top 2
# of 8, 4-bit g64, float32) so the curve varies in Dff alone; bench-kernels' options change any of it.
BENCH_DFF_GRID: tuple[int, ...] = (768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 14336)
BENCH_D_MODELS: tuple[int, ...] = (2048, 4096)
BENCH_N_EXPERTS = 8
BENCH_TOP_K = 2
BENCH_BITS = 4
BENCH_GROUP_SIZE = 64
BENCH_DTYPE = "float32"


def bench_shapes(
    d_models: tuple[int, ...] = BENCH_D_MODELS,
    dffs: tuple[int, ...] = BENCH_DFF_GRID,
    n_experts: int = BENCH_N_EXPERTS,
    top_k: int = BENCH_TOP_K,
    bits: int = BENCH_BITS,
    group_size: int = BENCH_GROUP_SIZE,
    dtype: str = BENCH_DTYPE,
) -> list[MoeShape]:
    """The bench grid in the order it runs: by d_model, then increasing Dff."""
    return [MoeShape(d, f, n_experts, top_k, bits, group_size, dtype) for d in d_models for f in dffs]


_DTYPE_ALIASES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"} | {name: name for name in DTYPES}
_TOKEN = re.compile(
    r"^(?:d(?P<d_model>\d+)|f(?P<dff>\d+)|e(?P<n_experts>\d+)|k(?P<top_k>\d+)"
    r"|q(?P<bits>\d+)(?:g(?P<group_size>\d+))?|g(?P<group_size_alone>\d+))$"
)
_FIELD_OF_GROUP = {"group_size_alone": "group_size"}  # a regex cannot name two groups alike


def parse_shape(text: str, source: str = "--shapes") -> MoeShape:
    """One shape from its token spelling (see the module docstring); InputError names the bad token."""
    fields: dict[str, object] = {}
    for token in filter(None, text.strip().split("-")):
        if token.lower() in _DTYPE_ALIASES:
            fields["dtype"] = _DTYPE_ALIASES[token.lower()]
            continue
        match = _TOKEN.match(token)
        if not match:
            raise InputError(source, text, f"cannot read token {token!r} (expected d…, f…, e…, k…, q…g…, or a dtype)")
        for name, value in match.groupdict().items():
            if value is not None:
                fields[_FIELD_OF_GROUP.get(name, name)] = int(value)
    missing = [name for name in ("d_model", "dff") if name not in fields]
    if missing:
        raise InputError(source, text, f"missing {' and '.join(missing)} (write e.g. d2048-f768)")
    fields.setdefault("top_k", BENCH_TOP_K)
    fields.setdefault("n_experts", max(BENCH_N_EXPERTS, int(fields["top_k"])))
    try:
        return MoeShape(**fields)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InputError(source, text, str(exc)) from None


def parse_shapes(text: str, source: str = "--shapes") -> list[MoeShape]:
    """A comma-separated list of shapes; an empty string is an error (the caller decides on defaults)."""
    specs = [spec for spec in text.split(",") if spec.strip()]
    if not specs:
        raise InputError(source, text, "no shape given")
    return [parse_shape(spec, source) for spec in specs]
