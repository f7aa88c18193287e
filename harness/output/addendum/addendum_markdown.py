"""Rendering the addendum: the report data (harness.output.addendum.report_data) as the markdown a maintainer pastes
into mlxcel's design doc as is (the style of its 2026-07-03 / 2026-07-10 addenda; no machine-readable text in it):
heading, provenance paragraph, method, table(s), findings, decision, plot.

`moecal check-reports` re-renders a stored sidecar with `render_markdown` and compares, so everything here reads
the record only, never the raw data or the machine it runs on.
"""

from __future__ import annotations

from harness.analysis.comparison.knobs import KnobsJSON
from harness.analysis.decision.decision_facts import MLXCEL_CONSTANTS, backend_cap, constant_words
from harness.analysis.decision.decision_json import DecisionJSON
from harness.config.schema import kind_of_family
from harness.output.addendum.addendum_findings import findings
from harness.output.addendum.addendum_heading import family_namer, heading, provenance_paragraph
from harness.output.addendum.addendum_table import method, not_used, table_corrections, tables
from harness.output.addendum.report_data import ReportContext, ReportData
from harness.output.markdown_text import md_code, md_text
from harness.output.mlxcel_source import SWITCH_LAYERS, UNCHECKED_NOTE


def action_value(d: DecisionJSON) -> str:
    """`keep 4096`, `raise 4096 → 6400`: the action and the value, as the heading and the decision state them."""
    cap, current = d["recommended_cap"], d["current_default"]
    value = "(no point decides a cap)" if cap is None else str(cap)
    if d["action"] in ("raise", "lower") and current is not None:
        value = f"{current} → {cap}"
    return f"{d['action']} {value}"


def _decision_head(d: DecisionJSON, backend: str, context: ReportContext) -> str:
    """The decision's first line: the action and the value (and the mlxcel constant it concerns), and where the
    cap in force came from when the input did not state it (an imported sweep: the engine's compiled-in default)."""
    constant = constant_words(backend)
    where = f" ({md_code(constant)})" if constant else ""
    source, missing = context.get("current_default_source"), context.get("current_default_missing")
    assumed = f"; the cap in force, {d['current_default']}, is {md_text(source)}" if source else ""
    assumed += f"; {md_text(missing)}" if missing else ""
    return f"**Decision: {action_value(d)}**{where}{assumed}"


def _decision(data: ReportData) -> list[str]:
    d = data.decision
    lines = [_decision_head(d, data.backend, data.context), "", md_text(d["reason"]), ""]
    changes = d["action"] in ("raise", "lower", "set") and d["recommended_cap"] is not None
    per_run = f" (per run: `{d['apply']}`)" if d["apply"] else ""
    if changes and data.backend in MLXCEL_CONSTANTS:
        constant = MLXCEL_CONSTANTS[data.backend]
        patch = data.files.patch
        lines.append(
            f"Set this constant: `{constant}: i32 = {d['recommended_cap']};` in `{SWITCH_LAYERS}` "
            f"(patch: [{patch}]({patch})"
            + ("" if data.mlxcel and data.mlxcel.get("checked") else f"; {UNCHECKED_NOTE}")
            + f"){';' if per_run else ''}{per_run.removeprefix(' (').removesuffix(')')}."
        )  # fmt: skip
        lines.append("")
    elif changes and (shared := backend_cap(data.backend)) is not None:
        lines += [
            f"{md_text(data.backend)} builds read `{shared.constant}`, shared with {md_text(shared.shared_with)}: a "
            f"move for {md_text(data.backend)} alone is a device-class arm (`moecal report` of several runs writes "
            f"it){per_run}, never a rewrite of the shared constant.",
            "",
        ]
    elif changes:
        lines += [f"{md_text(data.backend)} is not an mlxcel backend: no constant to change{per_run}.", ""]
    return lines


def _knobs(knobs: KnobsJSON | None) -> list[str]:
    """A knob sweep's joint (setting, cap) recommendation, each setting's own decision and where to set it
    (harness.analysis.comparison.knobs): the result reaches the addendum that gets pasted, not only the -knobs.md beside
    it."""
    if not knobs:
        return []
    rows = "; ".join(f"{md_code(row['setting'])}: {md_text(row['words'])}" for row in knobs["rows"])
    return [
        f"**Launch knob: {md_text(knobs['reason'])}**",
        "",
        f"Each setting's own decision: {rows}.",
        "",
        f"Where to set it: {knobs['where']}.",
        "",
    ]


def _synthetic(ctx: ReportContext) -> list[str]:
    """Which points are synthetic checkpoints (`moecal synth`: random weights, possibly fewer layers), so a reader
    does not take their tok/s for a real model's."""
    synthetic = ctx.get("synthetic")
    if not synthetic:
        return []
    notes = "; ".join(f"{md_code(name)}: {md_text(how)}" for name, how in synthetic.items())
    return ["", f"Synthetic checkpoints (`moecal synth`; only the fused/fallback ratio carries over): {notes}."]


def render_markdown(data: ReportData) -> str:
    """The addendum in the design doc's style: heading, provenance paragraph, table(s), findings, decision."""
    d = data.decision
    points = d["points"]
    lines = [
        heading(data, action_value(d)),
        "",
        provenance_paragraph(data, points, {kind_of_family(p["family"]) for p in points}),
        "",
        method(data.options, any(p.get("decides") for p in points)),
        *_synthetic(data.context),
        "",
    ]
    lines += tables(points, family_namer(data.context), data.options)
    lines += not_used(points, "families" in d)
    lines += table_corrections(data.table_wrong or {})
    lines += ["Findings:", "", *findings(data), ""]
    lines += _decision(data)
    lines += _knobs(data.knobs)
    lines += [f"![fused/fallback ratio vs Dff]({data.files.plot})", ""]
    return "\n".join(lines)
