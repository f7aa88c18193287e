"""Defaults per device class, in a form mlxcel can merge: a markdown table and the Rust match arms (with a patch
of `src/models/switch_layers.rs` that adds or replaces them).

mlxcel compiles one cap per backend (FUSED_MOE_MAX_DFF_METAL / _CUDA) and one default per build for each launch knob
(SGY: 8; 2 on ROCm), though the crossover is a property of the device: Apple GPUs differ by chip generation, NVIDIA
GPUs by compute capability, AMD GPUs by gfx target. So each run is mapped to its class (`device_class`), and per
class the table gives the decided cap with the crossover interval it rests on, for each launch knob of the knob
table (harness.config.knobs) the value the run supports (a knob run's joint recommendation with its interval;
otherwise the default it ran, marked not swept), the mlxcel and MLX commits it was measured under, and when to
measure again: a number measured under one MLX pin and one fused-kernel source says nothing about the next.

The Rust is a set of functions between marker comments, `fused_moe_max_dff_for_class` and one per launch knob
(`fused_moe_sgy_for_class`), one arm per measured class and `_ => None` (the backend default) for the rest; how the
running binary names its class (chip, compute capability, gfx target) is mlxcel's to wire, and the arms' keys say
what each class is. With `report --mlxcel-src DIR` the patch replaces the marked block in that tree's
switch_layers.rs, or appends it when there is none.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.analysis import number_format
from harness.analysis.comparison.backend_defaults import Defaults, RunResult, losing_under
from harness.analysis.comparison.knobs import analyse_knobs
from harness.analysis.decision.curve import format_ci
from harness.config import knobs as launch_knobs
from harness.config.backend_specs import known_backend
from harness.output.markdown_text import md_code, md_text
from harness.output.mlxcel_source import BEGIN, CAP_CLASS_FUNCTION, END, SWITCH_LAYERS, MlxcelSource
from harness.runs.provenance_keys import Provenance


def device_class(backend: str, device: str, provenance: Provenance) -> str | None:
    """`metal-m3` (Apple chip generation), `cuda-sm90` (compute capability), `rocm-gfx1151` (gfx target), read from
    the device, the GPU or the hardware an mlxcel CSV's header names, else `<backend>-<device>`: the key mlxcel's
    default would be chosen by. None when `device` is '' (the run names none) and nothing recorded names the class:
    a key made of the backend alone would read as a device class."""
    spec = known_backend(backend)
    rule = spec.device_class if spec is not None else None
    named = f"{device} {provenance.get('gpu') or ''} {provenance.get('hardware') or ''}"
    found = rule(named, provenance) if rule is not None else None
    return found or (f"{backend}-{device}" if device else None)


def run_class(run: RunResult) -> str | None:
    """A run's device class as the device-class table names it (`cuda-sm121`, `metal-m3`, …); None for a run that
    records no device and nothing its class could be read from: its decision counts for the backend's default only."""
    return device_class(run.backend, run.device if run.device_recorded else "", run.analysis.provenance)


def unclassed_lines(defaults: Defaults) -> list[str]:
    """One line per run left out of the per-class outputs (run_class None): the run, and what to record."""
    return [
        f"{run.path.name} ({run.backend}) records no device: no class row, Rust arm or autotune entry is written "
        "for it, its decision counts for the backend's default only; record its device (meta.json's device; a CSV's "
        "'# device: NAME' line or moecal import-mlxcel --device NAME; on CUDA, compute_capability names the class)"
        for run in defaults.runs
        if run_class(run) is None
    ]


@dataclass(frozen=True)
class KnobDefault:
    """A launch knob's value for a class: the one a knob sweep chose (`swept …`, the only kind a lookup arm or an
    autotune entry is written for) or the one the run ran (`not swept: …`); None where the sweep's recommended
    setting does not name the knob."""

    knob: launch_knobs.LaunchKnob
    value: int | None
    evidence: str

    @property
    def swept(self) -> bool:
        return self.evidence.startswith("swept")


@dataclass(frozen=True)
class ClassDefault:
    device_class: str
    backend: str
    devices: tuple[str, ...]
    cap: int | None
    cap_interval: str  # the crossover interval the cap rests on
    knobs: tuple[KnobDefault, ...]  # one per launch knob of the knob table, in its order
    mlxcel_commit: str
    mlx_commit: str
    remeasure: str


def _knob_defaults(path: Path, provenance: Provenance, backend: str) -> tuple[KnobDefault, ...]:
    """Each launch knob's value for the run at `path`: a knob sweep's joint recommendation with its interval, else
    the value the shell set or the build's default on `backend`."""
    result = analyse_knobs(path) if provenance.get("knobs") else None
    if result is not None:
        chosen = launch_knobs.parse_label(result.recommended)
        best = next(c for c in result.candidates if c.setting == result.recommended)
        interval = (
            ""
            if result.recommended == result.reference
            else f" {number_format.speed_change_interval(best.ci_low, best.ci_high)}"
        )
        evidence = f"swept {provenance['knobs']}: {result.recommended}{interval}"
        return tuple(
            KnobDefault(k, int(chosen[k.env]) if chosen.get(k.env) else None, evidence) for k in launch_knobs.KNOBS
        )
    shell_env = provenance.get("shell_env")  # variable → value (the registry checks it where meta.json is read)
    shell = dict(shell_env) if isinstance(shell_env, Mapping) else {}
    found = []
    for knob in launch_knobs.KNOBS:
        ran = str(shell.get(knob.env, knob.default_for(backend)))
        evidence = "not swept: the build's default" if knob.env not in shell else "not swept: set in the shell"
        found.append(KnobDefault(knob, int(ran) if ran.isdigit() else None, evidence))
    return tuple(found)


def class_defaults(defaults: Defaults) -> list[ClassDefault]:
    """One row per device class; several devices of one class take the smallest decided cap (a class default must
    not send any measured device's model down its slower path)."""
    groups: dict[str, list[RunResult]] = {}
    for run in defaults.runs:
        key = run_class(run)
        if key is not None:  # unclassed_lines names the rest
            groups.setdefault(key, []).append(run)
    rows = []
    for key, runs in sorted(groups.items()):
        binding = min(runs, key=lambda r: r.analysis.result.decision.recommended_cap or math.inf)
        cap = binding.analysis.result.decision.recommended_cap
        # an arm no measured point of the class refutes: where one would lose beyond the margin, no arm
        losing = losing_under(runs, binding.backend, cap) if cap is not None else []
        prov = binding.analysis.provenance
        knobs = _knob_defaults(binding.path, prov, binding.backend)
        mlxcel, mlx = str(prov.get("mlxcel_commit") or ""), str(prov.get("mlx_commit") or "")
        remeasure = (
            f"when the MLX pin moves off {mlx or 'the pin measured (not recorded)'}, when the fused-MoE kernels "
            "(mlx_cxx_kernels.cpp) or switch_layers.rs change, or for a device class not in this table"
        )
        rows.append(
            ClassDefault(
                key,
                binding.backend,
                tuple(sorted({r.device for r in runs})),
                None if losing else cap,
                format_ci(binding.analysis.result.crossover)
                + (
                    f"; cap {cap} withheld: {', '.join(f'{p.model} (Dff {p.dff})' for p in losing)} would lose"
                    if losing
                    else ""
                ),
                knobs,
                mlxcel or "not recorded",
                mlx or "not recorded",
                remeasure,
            )
        )
    return rows


def class_markdown(rows: list[ClassDefault], unclassed: Sequence[str] = ()) -> str:
    """The table: a value and an evidence column per launch knob, after the cap's; below it, each run left out of
    it for want of a device (unclassed_lines)."""
    knobs = "".join(f" {k.heading} | {k.heading} evidence |" for k in launch_knobs.KNOBS)
    lines = [
        "#### Defaults per device class",
        "",
        f"| device class | device(s) | cap | crossover 95% CI |{knobs} mlxcel | MLX | re-measure |",
        "|---|---|--:|---|" + "--:|---|" * len(launch_knobs.KNOBS) + "---|---|---|",
    ]
    for r in rows:
        values = "".join(f" {k.value or '-'} | {md_text(k.evidence)} |" for k in r.knobs)
        lines.append(
            f"| {md_code(r.device_class)} | {', '.join(md_text(d) for d in r.devices)} | {r.cap or '-'} "
            f"| {r.cap_interval} |{values} {md_code(r.mlxcel_commit)} | {md_code(r.mlx_commit)} "
            f"| {md_text(r.remeasure)} |"
        )
    lines += ["", *(f"Not in this table: {md_text(line)}." for line in unclassed)] if unclassed else []
    return "\n".join(lines) + "\n"


def _rust_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def rust_block(rows: list[ClassDefault]) -> str:
    """The lookup functions, the cap's and one per launch knob, one arm per measured class (comment: its evidence
    and commits); a knob's arm only where a knob sweep chose its value."""
    out = [
        BEGIN,
        "/// Measured fused-MoE Dff cap per device class (moecal); None: the backend default.",
        f"pub(crate) fn {CAP_CLASS_FUNCTION}(device_class: &str) -> Option<i32> {{",
        "    match device_class {",
    ]
    for r in rows:
        if r.cap is not None:
            note = f"crossover {r.cap_interval}, mlxcel {r.mlxcel_commit}, MLX {r.mlx_commit}"
            out.append(f"        {_rust_string(r.device_class)} => Some({r.cap}), // {note}")
    for i, knob in enumerate(launch_knobs.KNOBS):
        out += [
            "        _ => None,",
            "    }",
            "}",
            "",
            f"/// {knob.env} default per device class (moecal); None: the build's default.",
            f"pub(crate) fn {knob.class_function}(device_class: &str) -> Option<i32> {{",
            "    match device_class {",
        ]
        for r in rows:
            chosen = r.knobs[i]
            if chosen.value is not None and chosen.swept:
                out.append(f"        {_rust_string(r.device_class)} => Some({chosen.value}), // {chosen.evidence}")
    out += ["        _ => None,", "    }", "}", END]
    return "\n".join(out) + "\n"


def class_patch(source: MlxcelSource, block: str) -> str:
    """A unified diff of switch_layers.rs that replaces the marked block, or appends it; '' without a tree read
    (the block is written beside the addendum instead) or when the tree already holds this block."""
    if not source.lines:
        return ""
    text = "".join(source.lines)
    newline = "\r\n" if "\r\n" in text else "\n"  # the file's own line endings, or git apply rejects the patch
    block = block.replace("\n", newline)
    start, end = text.find(BEGIN), text.find(END)  # one pair in order, or none: read_source refused the rest
    if start >= 0:
        after = text[:start] + block + text[end + len(END) :].removeprefix(newline)
    else:
        after = text + ("" if text.endswith("\n") else newline) + newline + block
    if after == text:
        return ""
    new_lines = after.splitlines(keepends=True)
    return "".join(difflib.unified_diff(source.lines, new_lines, f"a/{SWITCH_LAYERS}", f"b/{SWITCH_LAYERS}"))
