"""Launch knobs: environment variables of the binary under test that change *how* the fused kernel runs, not *whether*
(a config's `knobs: {MLXCEL_FUSED_MOE_SGY: [2, 4, 8, 16]}`). The shell variables a sweep must not inherit are
harness.measure.arm_env's.

mlxcel reads `MLXCEL_FUSED_MOE_SGY`, the rows (simdgroups on Metal, warps on CUDA and ROCm) per threadgroup of the
fused decode-MoE kernels, in `src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp`: `atoi` of the variable, used when it lies
in 1–32, else the build's default — 8, or 2 on a ROCm build (`#ifdef MLXCEL_BRIDGE_ROCM_BACKEND`, mlxcel PR #2098:
on gfx1151 SGY 8 made the fused path slower than `gather_qmm` at every Dff). Its documented range and default are
in mlxcel's `docs/environment-variables.md` ("tune per hardware"). A value outside 1–32 would silently run the
default, so the config refuses it: the rows would claim a setting the kernel never ran.

A knob sweep measures every combination of the knob values (the cartesian product), each as its own pair of arms,
interleaved within each round like the arms (harness.measure.protocol). A row records its setting as text,
`MLXCEL_FUSED_MOE_SGY=4` (several knobs: joined by spaces, names sorted), in samples.csv's `knobs` column.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.config.backend_specs import mlxcel_caps

SGY = "MLXCEL_FUSED_MOE_SGY"


@dataclass(frozen=True)
class KnobSpec:
    """What the binary accepts for a knob and what it runs when the variable is unset, per backend."""

    low: int
    high: int
    default: int
    backend_defaults: Mapping[str, int]
    source: str

    def default_for(self, backend: str) -> int:
        return self.backend_defaults.get(backend, self.default)


KNOWN: dict[str, KnobSpec] = {
    # the per-backend defaults are the backend registry's (MlxcelCap.sgy): one place says ROCm runs 2
    SGY: KnobSpec(
        1,
        32,
        8,
        {name: cap.sgy for name, cap in mlxcel_caps().items()},
        "src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp (1–32; default 8, ROCm 2)",
    ),
}


def check_values(name: str, values: list[int]) -> None:
    """ValueError when a known knob's value lies outside what the binary accepts (it would run its default)."""
    spec = KNOWN.get(name)
    if spec is None:
        return
    outside = [v for v in values if not spec.low <= v <= spec.high]
    if outside:
        raise ValueError(
            f"{name}={outside[0]} is outside {spec.low}–{spec.high}; the binary would silently run its default "
            f"({spec.source})"
        )


def settings(knobs: Mapping[str, Iterable[int]]) -> list[dict[str, str]]:
    """Every combination of the knob values, as environment settings; [{}] without knobs (one plain setting)."""
    names = sorted(knobs)
    return [dict(zip(names, map(str, values), strict=True)) for values in itertools.product(*(knobs[n] for n in names))]


def label(setting: Mapping[str, str]) -> str:
    """`MLXCEL_FUSED_MOE_SGY=4` — the `knobs` cell of a row ("" for the plain setting)."""
    return " ".join(f"{name}={setting[name]}" for name in sorted(setting))


def parse_label(text: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in text.split())


def reference(knobs: Mapping[str, Iterable[int]], backend: str) -> dict[str, str]:
    """The setting the binary runs by default on `backend` (each known knob's default when the config lists it,
    else the knob's first value): the one the run's plain decision (keep / raise / lower the cap) is made at, and the
    one a joint recommendation must beat to move the knob."""
    out = {}
    for name, values in knobs.items():
        values = list(values)
        spec = KNOWN.get(name)
        default = spec.default_for(backend) if spec else None
        out[name] = str(default if default in values else values[0])
    return out
