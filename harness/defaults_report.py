"""The per-backend defaults addendum (markdown), its console lines and JSON: the talking side of harness.defaults."""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.analysis import Options
from harness.defaults import MLXCEL_CONSTANTS, Defaults, build_defaults
from harness.results import write_text_atomic
from harness.rundir import refuse_stored


def apply_lines(defaults: Defaults) -> list[str]:
    """The mlxcel source constants and the environment override, per backend."""
    lines = []
    for b in defaults.backends:
        constant = MLXCEL_CONSTANTS.get(b.backend)
        if b.recommended is None:
            continue
        if constant:
            lines.append(f"{constant} = {b.recommended}  // src/models/switch_layers.rs ({b.action})")
        lines.append(f"env override on {b.backend}: MLXCEL_FUSED_MOE_MAX_DFF={b.recommended}")
    return lines


def _cell(value: float, digits: int) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def render_markdown(defaults: Defaults, date: str) -> str:
    m = defaults.margin
    lines = [
        f"### {date} addendum: per-backend fused-MoE Dff defaults from {len(defaults.runs)} runs",
        "",
        "Runs (each analysed on its own; devices are never pooled):",
        "",
    ]
    for run in defaults.runs:
        pin = run.analysis.provenance.get("library_pin") or "library not recorded"
        lines.append(f"- `{run.path}` — {run.backend}, {run.device}, {pin}")
    lines += [
        "",
        "| backend | device(s) | current default | recommended | action | evidence |",
        "|---|---|--:|--:|---|---|",
    ]
    for b in defaults.backends:
        lines.append(
            f"| {b.backend} | {', '.join(b.devices)} | {b.current or '-'} | {b.recommended or '-'} | **{b.action}** "
            f"| {b.evidence} |"
        )
    lines += ["", "Per device:", "", "| backend | device | runs | current | recommended | action | evidence |"]
    lines.append("|---|---|---|--:|--:|---|---|")
    for d in defaults.devices:
        lines.append(
            f"| {d.backend} | {d.device} | {', '.join(d.runs)} | {d.current or '-'} | {d.recommended or '-'} "
            f"| {d.action} | {d.evidence} |"
        )
    lines += ["", "Set in mlxcel (and the per-run override):", "", "```", *apply_lines(defaults), "```", ""]
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
            f"| {p.backend} | {p.device} | {p.model} | {p.dff} | {_cell(p.fallback_tok_s, 2)} "
            f"| {_cell(p.fused_tok_s, 2)} | {_cell(p.ratio, 4)}{ci} | {p.verdict} | {p.faster or '-'} "
            f"| {p.selected or '-'} | {f'{p.loss:.1%}' if p.selected else '-'} | {p.parity} | {p.note} |"
        )
    lines += ["", "#### Regression check of the proposed caps", ""]
    if defaults.regressions:
        for p in defaults.regressions:
            lines.append(
                f"- REGRESSION {p.backend} {p.device}: {p.model} (Dff {p.dff}) would take the {p.selected} path, "
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
            lofo += f" ({', '.join(rule.lofo_misses)})"
        verdict = "**recommend the rule**" if defaults.recommend_rule(b.backend) else "keep the single cap"
        lines.append(f"- {b.backend}: {single} | simplest fitting rule: {rule.describe()}; {lofo} → {verdict}.")
    mispredicted = [(r, m, why) for r in defaults.runs for m, why in r.mispredicted.items()]
    if mispredicted:
        lines += ["", "#### Eligibility predictions the dispatch probe contradicted", ""]
        lines += [f"- {r.backend} {r.device}: {m}: {why}" for r, m, why in mispredicted]
    return "\n".join(lines) + "\n"


def write_defaults(paths: Sequence[Path], out_dir: Path, options: Options = Options()) -> tuple[Path, Defaults]:
    defaults = build_defaults(paths, options)
    date = _dt.date.today().isoformat()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    backends = "-".join(b.backend for b in defaults.backends) or "none"
    path = out_dir / f"{date}-{backends}-dff-defaults.md"
    refuse_stored(path, "write the report somewhere else (--out)")
    write_text_atomic(path, render_markdown(defaults, date))
    return path, defaults


def print_defaults(defaults: Defaults, echo: Callable[[str], None]) -> None:
    """The per-backend decisions, the lines that apply them, regressions and rule recommendations (console)."""
    for b in defaults.backends:
        move = f"{b.action} {b.current or '-'} → {b.recommended or '-'}"
        echo(f"{b.backend} ({', '.join(b.devices)}): {move} — {b.evidence}")
    for line in apply_lines(defaults):
        echo(f"apply: {line}")
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


def defaults_json(defaults: Defaults) -> dict[str, object]:
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
