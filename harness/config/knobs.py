"""Launch knobs: environment variables of the binary under test that change *how* the fused kernel runs, not *whether*
(a config's `knobs: {MLXCEL_FUSED_MOE_SGY: [2, 4, 8, 16]}`). The shell variables a sweep must not inherit are
harness.measure.arm_env's.

mlxcel reads `MLXCEL_FUSED_MOE_SGY`, the rows (simdgroups on Metal, warps on CUDA and ROCm) per threadgroup of the
fused decode-MoE kernels, in `src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp`: `atoi` of the variable, used when it lies
in 1–32, else the build's default — 8, or 2 on a ROCm build (`#ifdef MLXCEL_BRIDGE_ROCM_BACKEND`, mlxcel PR #2098:
on gfx1151 SGY 8 made the fused path slower than `gather_qmm` at every Dff). Its documented range and default are
in mlxcel's `docs/environment-variables.md` ("tune per hardware"). A value outside 1–32 would silently run the
default, so the config refuses it: the rows would claim a setting the kernel never ran.

Only launch knobs are accepted, and the table below is the whole list: the variables of `mlx_cxx_kernels.cpp` that
change how the fused kernel launches. The file's other variables decide *whether* the fused path runs or what else
runs beside it, which would poison the cap decision rather than tune it, so naming them is refused with the reason
(REFUSED): the kill switch `MLXCEL_FUSED_MOE` (=0 puts both arms on the fallback, read by `switch_layers.rs`), the cap
`MLXCEL_FUSED_MOE_MAX_DFF` (the very thing calibrated), the probe `MLXCEL_FUSED_MOE_PARITY_CHECK` / `_THRESHOLD`
(several extra evaluations per MoE call: a ≈ 2.5× slower fused arm). Any other name — a typo such as
`MLXCEL_FUSED_MOE_SGV` — is refused with the nearest known one: the binary never reads it, so every extra setting
would be device time spent measuring the same thing.

A knob sweep measures every combination of the knob values (the cartesian product), each as its own pair of arms,
interleaved within each round like the arms (harness.measure.protocol). A row records its setting as text,
`MLXCEL_FUSED_MOE_SGY=4` (several knobs: joined by spaces, names sorted), in samples.csv's `knobs` column.

Adding a launch knob mlxcel gains is one `LaunchKnob` row in KNOBS, its facts read from mlxcel's source (the
variable, its accepted range, the declaration of its default and the builds that declare another): the config
accepts it, a knob sweep analyses it, `init --mlxcel-src` reads its default from a tree, and the per-device-class
outputs gain its column, its Rust lookup and its autotune op (tests/config/test_knobs.py adds a synthetic row and
follows it through every one). "Knob" is mlxcel's word here; moecal's own CUDA kernel's launch choices
(`MOECAL_CUDA_SGY` / `_ROWS` / …) are kernel variants (harness.devices.backends.cuda), never knobs.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.config.backend_specs import backend_spec


@dataclass(frozen=True)
class LaunchKnob:
    """One launch knob of the fused decode-MoE kernel, and every fact moecal needs of it: the table below (KNOBS) is
    the one place a knob is named, and config validation, the shell refusal (harness.measure.arm_env), the knob
    analysis's "where to set it", the mlxcel tree reader and the per-device-class outputs (the table, the Rust
    lookup, the autotune entry) all read it, so a new knob of mlxcel is one row here. Its values are integers the
    binary parses with `atoi` (the config's `knobs:` type); a knob of another kind would need the schema's value type
    widened first."""

    env: str  # the variable the binary reads; a config's `knobs:` lists the knob under this name
    name: str  # lower case: Rust lookup `fused_moe_<name>_for_class`, autotune op `fused_moe_<name>`, tactic `<name>=N`
    heading: str  # the per-device-class table's column (and its evidence column)
    low: int  # the values the binary accepts; outside them it silently runs its default
    high: int
    default: int  # the build's default where backend_defaults names none
    backend_defaults: Mapping[str, int]  # backend registry name → the build's own default where it differs
    source_file: str  # the mlxcel file that reads the variable and compiles the default in
    declaration: str  # the line of source_file holding the default, `{value}` for the number (read from a tree)

    def default_for(self, backend: str) -> int:
        return self.backend_defaults.get(backend, self.default)

    @property
    def source(self) -> str:
        """`src/….cpp (1–32; default 8, ROCm 2)`: where the binary reads the knob, with its range and defaults."""
        builds = "".join(f", {backend_spec(b).title} {v}" for b, v in self.backend_defaults.items())
        return f"{self.source_file} ({self.low}–{self.high}; default {self.default}{builds})"

    def default_line(self, backend: str) -> str:
        """The declaration as `backend`'s build branch of the source holds it (`int sgy = 8;`; ROCm `int sgy = 2;`
        under its `#ifdef`): the line to edit for that build's default."""
        return self.declaration.format(value=self.default_for(backend))

    def declared_defaults(self, text: str) -> list[int]:
        """Every default `text` (the source file of a tree) declares: one per build branch (`#ifdef`), sorted."""
        pattern = re.escape(self.declaration).replace(re.escape("{value}"), r"(\d+)")
        return sorted({int(v) for v in re.findall(pattern, text)})

    @property
    def op(self) -> str:
        """Its op in the autotune entries moecal writes (harness.output.defaults.autotune_entry)."""
        return f"fused_moe_{self.name}"

    @property
    def class_function(self) -> str:
        """Its per-device-class Rust lookup (harness.output.defaults.device_defaults)."""
        return f"{self.op}_for_class"


# Read in mlxcel's src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp: `int sgy = 8;`, then `atoi` of the variable, used
# when it lies in 1–32; a ROCm build declares 2 under `#ifdef MLXCEL_BRIDGE_ROCM_BACKEND` (PR #2098).
SGY = "MLXCEL_FUSED_MOE_SGY"
KNOBS: tuple[LaunchKnob, ...] = (
    LaunchKnob(
        env=SGY,
        name="sgy",
        heading="SGY",
        low=1,
        high=32,
        default=8,
        backend_defaults={"rocm": 2},
        source_file="src/lib/mlxcel-core/cpp/mlx_cxx_kernels.cpp",
        declaration="int sgy = {value};",
    ),
)


def known() -> dict[str, LaunchKnob]:
    """The launch knobs by variable name (read from KNOBS at each call)."""
    return {knob.env: knob for knob in KNOBS}


# names a config may not sweep, and why (mlxcel's docs/environment-variables.md, switch_layers.rs, mlx_cxx_kernels.cpp)
REFUSED: dict[str, str] = {
    "MLXCEL_FUSED_MOE": "the kill switch (=0 runs both arms on the fallback, so nothing fused is measured)",
    "MLXCEL_FUSED_MOE_MAX_DFF": "the cap itself, which the sweep calibrates (the arms set it)",
    "MLXCEL_FUSED_MOE_PARITY_CHECK": "the parity probe (extra evaluations per MoE call: a slower fused arm)",
    "MLXCEL_FUSED_MOE_PARITY_THRESHOLD": "the parity probe's threshold (a diagnostic, not a launch setting)",
}
MAX_SETTINGS = 64  # combinations of knob values a sweep may measure: each is a pair of arms at every point and round


def check_name(name: str) -> None:
    """ValueError unless `name` is a launch knob of the binary (KNOBS): a refused variable says why, another name
    names the nearest known one."""
    knobs = known()
    if name in knobs:
        return
    if name in REFUSED or name.startswith("MLXCEL_FUSED_MOE_PARITY_CHECK"):
        why = REFUSED.get(name, REFUSED["MLXCEL_FUSED_MOE_PARITY_CHECK"])
        raise ValueError(f"{name} is not a launch knob: it is {why}; knobs: {', '.join(sorted(knobs))}")
    near = difflib.get_close_matches(name, [*knobs, *REFUSED], n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    files = ", ".join(sorted({Path(knob.source_file).name for knob in knobs.values()}))
    raise ValueError(
        f"{name} is not a launch knob the binary reads ({hint}known: {', '.join(sorted(knobs))}, from mlxcel's {files})"
    )


def check_count(knobs: Mapping[str, list[int]]) -> None:
    """ValueError when the combinations of the values exceed MAX_SETTINGS, counted before any is built."""
    count = math.prod(len(values) for values in knobs.values())
    if count > MAX_SETTINGS:
        sizes = " × ".join(str(len(values)) for values in knobs.values())
        raise ValueError(f"{sizes} = {count} combinations of knob values; at most {MAX_SETTINGS} per sweep")


def check_values(name: str, values: list[int]) -> None:
    """ValueError when `name` is no launch knob (check_name) or a value lies outside what the binary accepts (it
    would run its default)."""
    check_name(name)
    spec = known()[name]
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
        spec = known().get(name)
        default = spec.default_for(backend) if spec else None
        out[name] = str(default if default in values else values[0])
    return out
