"""The per-backend defaults addendum (markdown), its console lines and JSON: the talking side of
harness.analysis.comparison.backend_defaults."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypedDict

from harness.analysis.comparison.backend_defaults import Defaults, build_defaults
from harness.analysis.decision.decision_facts import MLXCEL_CONSTANTS, backend_cap, constant_words
from harness.analysis.decision.pipeline import Options
from harness.output.addendum.addendum_heading import library_under_test
from harness.output.defaults.device_defaults import (
    class_defaults,
    class_markdown,
    class_patch,
    rust_block,
    unclassed_lines,
)
from harness.output.defaults.replication_section import patch_caps, replication_markdown
from harness.output.markdown_text import md_code, md_text
from harness.output.mlxcel_source import SWITCH_LAYERS, UNCHECKED_NOTE, MlxcelSource, cap_patch, known_defaults
from harness.output.report_links import project_root, relative_path
from harness.runs.formats import write_text_atomic
from harness.runs.rundir import refuse_stored


def changed_caps(defaults: Defaults) -> dict[str, int]:
    """{backend: new cap} for the backends whose own mlxcel constant the decision moves (a raise or lower; never a
    `set` from a cap nobody stated, never a constant another backend shares: ROCm's move is a device-class arm)."""
    return {
        b.backend: b.recommended
        for b in defaults.backends
        if b.backend in MLXCEL_CONSTANTS and b.action in ("raise", "lower") and b.recommended is not None
    }


def apply_lines(defaults: Defaults) -> list[str]:
    """The mlxcel source constants to set and the environment override, for each default that moves; for a
    backend that shares another's constant, the override and where its move goes instead."""
    lines = []
    for b in defaults.backends:
        cap = backend_cap(b.backend)
        if cap is None or b.action not in ("raise", "lower") or b.recommended is None:
            continue
        if b.backend in MLXCEL_CONSTANTS:
            lines.append(f"{cap.constant} = {b.recommended}  // src/models/switch_layers.rs ({b.action})")
        else:
            lines.append(
                f"{b.backend} reads {cap.constant}, shared with {cap.shared_with}: not rewritten; its {b.action} to "
                f"{b.recommended} is the device-class arm below"
            )
        lines.append(f"env override on {b.backend}: MLXCEL_FUSED_MOE_MAX_DFF={b.recommended}")
    return lines


def _backend_cell(backend: str) -> str:
    """`rocm (FUSED_MOE_MAX_DFF_CUDA (shared with cuda))`: the backend and the constant its build reads."""
    constant = constant_words(backend)
    return f"{md_text(backend)} ({md_code(constant)})" if constant else md_text(backend)


def _cell(value: float, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def defaults_table_markdown(defaults: Defaults, date: str, source: MlxcelSource | None = None, patch: str = "") -> str:
    """The defaults addendum; `source` is the mlxcel tree read with --mlxcel-src (its pin is stated), `patch` the
    name of the switch_layers.rs patch written beside it ('' when no default changes)."""
    m = defaults.margin
    lines = [
        f"### {date} addendum: per-backend fused-MoE Dff defaults from {len(defaults.runs)} runs",
        "",
        "Runs (each analysed on its own; devices are never pooled):",
        "",
    ]
    for run in defaults.runs:
        pin = library_under_test(run.analysis.provenance, None)  # as the run's own addendum names it
        lines.append(f"- {md_code(run.path)}: {md_text(run.backend)}, {md_text(run.device)}, {md_text(pin)}")
    if source is not None and source.checked:
        version = f"mlxcel {md_text(source.version)}, " if source.version else ""
        pin = f"MLX pin {md_code(source.mlx_pin)}, " if source.mlx_pin else ""
        caps = ", ".join(f"{MLXCEL_CONSTANTS[b]} = {c}" for b, c in source.caps.items())
        lines.append(f"- mlxcel tree (--mlxcel-src): {version}{pin}{caps}")
    lines += [
        "",
        "| backend | device(s) | current default | recommended | action | evidence |",
        "|---|---|--:|--:|---|---|",
    ]
    for b in defaults.backends:
        lines.append(
            f"| {_backend_cell(b.backend)} | {', '.join(md_text(d) for d in b.devices)} | {b.current or '-'} "
            f"| {b.recommended or '-'} | **{b.action}** | {md_text(b.evidence)} |"
        )
    lines += ["", "Per device:", "", "| backend | device | runs | current | recommended | action | evidence |"]
    lines.append("|---|---|---|--:|--:|---|---|")
    for d in defaults.devices:
        lines.append(
            f"| {md_text(d.backend)} | {md_text(d.device)} | {', '.join(md_text(r) for r in d.runs)} "
            f"| {d.current or '-'} | {d.recommended or '-'} | {d.action} | {md_text(d.evidence)} |"
        )
    if apply_lines(defaults):
        unchecked = "" if source is not None and source.checked else f"; {UNCHECKED_NOTE}"
        where = f" (patch: [{patch}]({patch}){unchecked})" if patch else ""
        what = "Set these constants in mlxcel" if changed_caps(defaults) else "No constant is rewritten"
        lines += ["", f"{what}{where} (and the per-run override):", "", "```"]
        lines += [*apply_lines(defaults), "```", ""]
    else:
        lines += ["", "No mlxcel default changes: every backend keeps its cap (no constant to set).", ""]
    lines += [
        f"#### Points under the proposed caps (margin {m:.0%})",
        "",
        "| backend | device | model | Dff | fallback tok/s | fused tok/s | ratio [CI] | verdict | faster | "
        "path at cap | loss | parity | note |",
        "|---|---|---|--:|--:|--:|---|---|---|---|--:|---|---|",
    ]
    for p in defaults.points:
        ci = "" if math.isnan(p.ci_low) else f" [{p.ci_low:.4f}, {p.ci_high:.4f}]"
        lines.append(
            f"| {md_text(p.backend)} | {md_text(p.device)} | {md_text(p.model)} | {p.dff} "
            f"| {_cell(p.fallback_tok_s, 2)} | {_cell(p.fused_tok_s, 2)} | {_cell(p.ratio, 4)}{ci} | {p.verdict} "
            f"| {p.faster or '-'} | {p.selected or '-'} | {f'{p.loss:.1%}' if p.selected else '-'} "
            f"| {md_text(p.parity)} | {md_text(p.note)} |"
        )
    lines += ["", "#### Regression check of the proposed caps", ""]
    if defaults.regressions:
        for p in defaults.regressions:
            lines.append(
                f"- REGRESSION {md_text(p.backend)} {md_text(p.device)}: {md_text(p.model)} (Dff {p.dff}) would take "
                f"the {p.selected} path, "
                f"{p.loss:.1%} slower than {p.faster} (interval beyond the {m:.0%} margin)"
            )
    else:
        lines.append(
            f"- No measured model takes a path the other beats beyond the {m:.0%} margin under the proposed caps."
        )
    lines += ["", "#### Single cap vs per-shape rule", ""]
    for b in defaults.backends:
        rule = defaults.rules.get(b.backend)
        single = f"single cap {b.recommended}" if b.recommended else "no single cap"
        if rule is None:
            lines.append(f"- {b.backend}: {single}; no shape rule fits every decided point (see the points table).")
            continue
        lofo = f"leave-one-family-out: {len(rule.lofo_misses)} of {rule.lofo_families} families misplaced"
        if rule.lofo_misses:
            lofo += f" ({', '.join(md_text(f) for f in rule.lofo_misses)})"
        verdict = "**recommend the rule**" if defaults.recommend_rule(b.backend) else "keep the single cap"
        lines.append(f"- {b.backend}: {single} | simplest fitting rule: {rule.describe()}; {lofo} → {verdict}.")
    mispredicted = [(r, m, why) for r in defaults.runs for m, why in r.mispredicted.items()]
    if mispredicted:
        lines += ["", "#### Eligibility predictions the dispatch probe contradicted", ""]
        lines += [
            f"- {md_text(r.backend)} {md_text(r.device)}: {md_text(m)}: {md_text(why)}" for r, m, why in mispredicted
        ]
    return "\n".join(lines) + "\n"


DEFAULTS_SUFFIX = "-dff-defaults.md"
DEFAULTS_FORMAT = 1  # the sidecar's `moecal_defaults` version


def write_defaults(
    paths: Sequence[Path],
    out_dir: Path,
    options: Options = Options(),
    source: MlxcelSource | None = None,
    unreplicated: bool = False,
) -> tuple[Path, Defaults]:
    """The defaults addendum and, when a default changes, the switch_layers.rs patch beside it (against `source`,
    the tree read with --mlxcel-src, else the published defaults); and its sidecar (`<stem>.json`: the runs
    relative to the addendum's project, the options, the date, the tree's record and which files were written),
    from which check-reports re-derives the addendum (defaults_text)."""
    defaults = build_defaults(paths, options)
    date = _dt.date.today().isoformat()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    backends = "-".join(b.backend for b in defaults.backends) or "none"
    stem = f"{date}-{backends}"
    path = out_dir / f"{stem}{DEFAULTS_SUFFIX}"
    refuse_stored(path, "write the report somewhere else (--out)")
    patch = cap_patch(source or known_defaults(), patch_caps(defaults, changed_caps(defaults), unreplicated))
    patch_path = out_dir / f"{stem}-switch_layers.diff"
    if patch:
        refuse_stored(patch_path, "write the report somewhere else (--out)")
        write_text_atomic(patch_path, patch)
    class_patch_name = _write_class_defaults(defaults, out_dir, stem, source)
    text = defaults_text(defaults, date, stem, source, patch_path.name if patch else "", class_patch_name, unreplicated)
    root = project_root(out_dir)
    record = {
        "moecal_defaults": DEFAULTS_FORMAT,
        "date": date,
        "runs": [relative_path(Path(p), root) for p in paths],
        "options": {**options.settings(), "current_default": options.current_default, "cap_source": options.cap_source},
        "unreplicated": unreplicated,
        "mlxcel": source.as_json() if source is not None else None,
        "patch": patch_path.name if patch else "",
        "class_patch": class_patch_name,
    }
    sidecar = path.with_name(path.name.removesuffix(".md") + ".json")
    refuse_stored(sidecar, "write the report somewhere else (--out)")
    write_text_atomic(path, text)
    write_text_atomic(sidecar, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path, defaults


def defaults_text(
    defaults: Defaults,
    date: str,
    stem: str,
    source: MlxcelSource | None,
    patch: str,
    class_patch_name: str,
    unreplicated: bool = False,
) -> str:
    """The whole defaults addendum: the table and checks (defaults_table_markdown), the replication section (what the
    patch carries), then the per-device-class section naming the files written beside it (the Rust block; the
    tree's patch when one was written)."""
    files = f"Rust match arms: [{stem}-device-defaults.rs]({stem}-device-defaults.rs)"
    if class_patch_name:
        files += f"; patch of the --mlxcel-src tree's {SWITCH_LAYERS}: [{class_patch_name}]({class_patch_name})"
    classes = class_markdown(class_defaults(defaults), unclassed_lines(defaults)) + "\n" + files + ".\n"
    replicated = replication_markdown(defaults, unreplicated)
    return defaults_table_markdown(defaults, date, source, patch) + "\n" + replicated + "\n" + classes


def _write_class_defaults(defaults: Defaults, out_dir: Path, stem: str, source: MlxcelSource | None) -> str:
    """The per-device-class Rust block (harness.output.defaults.device_defaults) written beside the addendum and, with
    --mlxcel-src, a patch of that tree's switch_layers.rs adding or replacing the block; the patch's name ('' when
    none was written)."""
    block = rust_block(class_defaults(defaults))
    rust_path = out_dir / f"{stem}-device-defaults.rs"
    refuse_stored(rust_path, "write the report somewhere else (--out)")
    write_text_atomic(rust_path, block)
    patch = class_patch(source, block) if source is not None else ""
    if not patch:
        return ""
    patch_path = out_dir / f"{stem}-device-defaults.diff"
    refuse_stored(patch_path, "write the report somewhere else (--out)")
    write_text_atomic(patch_path, patch)
    return patch_path.name


def print_defaults(defaults: Defaults, echo: Callable[[str], None]) -> None:
    """The per-backend decisions, the lines that apply them, regressions and rule recommendations (console)."""
    for b in defaults.backends:
        move = f"{b.action} {b.current or '-'} → {b.recommended or '-'}"
        constant = f" [{constant_words(b.backend)}]" if constant_words(b.backend) else ""
        echo(f"{b.backend}{constant} ({', '.join(b.devices)}): {move} — {b.evidence}")
    for line in apply_lines(defaults):
        echo(f"apply: {line}")
    for line in unclassed_lines(defaults):
        echo(f"no device class: {line}")
    for p in defaults.regressions:
        echo(
            f"regression: {p.backend} {p.device} {p.model} (Dff {p.dff}): {p.selected} loses {p.loss:.1%} to {p.faster}"
        )
    for b in defaults.backends:
        rule = defaults.rules.get(b.backend)
        if defaults.recommend_rule(b.backend) and rule is not None:
            echo(f"rule: {b.backend}: {rule.describe()} (the single cap would cost a measured model > margin)")
    for p in defaults.points:
        if p.parity != "no parity data" or p.note:
            echo(
                f"{p.backend} {p.device} {p.model} (Dff {p.dff}): parity {p.parity}" + (f"; {p.note}" if p.note else "")
            )


class BackendDefaultJSON(TypedDict):
    backend: str
    devices: list[str]
    current: int | None
    recommended: int | None
    action: str
    evidence: str


class RegressionJSON(TypedDict):
    """A measured model the single cap sends down its slower path, and by how much (a share, rounded)."""

    backend: str
    device: str
    model: str
    dff: int
    loss: float | None


class RuleJSON(TypedDict):
    rule: str
    recommended: bool
    lofo_misses: list[str]


class DefaultsPointJSON(TypedDict):
    backend: str
    device: str
    model: str
    dff: int
    ratio: float | None
    verdict: str
    faster: str | None
    selected: str | None
    parity: str
    note: str


class DefaultsJSON(TypedDict):
    """`crossover --json` of several runs (defaults_json): each backend's default, the lines that apply them, the
    regressions, the fitted rule per backend (None: none fits) and every point checked."""

    margin: float
    backends: list[BackendDefaultJSON]
    apply: list[str]
    regressions: list[RegressionJSON]
    rules: dict[str, RuleJSON | None]
    points: list[DefaultsPointJSON]


def defaults_json(defaults: Defaults) -> DefaultsJSON:
    def number(value: float) -> float | None:
        return round(value, 6) if value is not None and math.isfinite(value) else None

    return {
        "margin": defaults.margin,
        "backends": [
            {
                "backend": b.backend,
                "devices": list(b.devices),
                "current": b.current,
                "recommended": b.recommended,
                "action": b.action,
                "evidence": b.evidence,
            }
            for b in defaults.backends
        ],
        "apply": apply_lines(defaults),
        "regressions": [
            {"backend": p.backend, "device": p.device, "model": p.model, "dff": p.dff, "loss": number(p.loss)}
            for p in defaults.regressions
        ],
        "rules": {
            backend: None
            if rule is None
            else {
                "rule": rule.describe(),
                "recommended": defaults.recommend_rule(backend),
                "lofo_misses": list(rule.lofo_misses),
            }
            for backend, rule in defaults.rules.items()
        },
        "points": [
            {
                "backend": p.backend,
                "device": p.device,
                "model": p.model,
                "dff": p.dff,
                "ratio": number(p.ratio),
                "verdict": p.verdict,
                "faster": p.faster,
                "selected": p.selected or None,
                "parity": p.parity,
                "note": p.note,
            }
            for p in defaults.points
        ],
    }
