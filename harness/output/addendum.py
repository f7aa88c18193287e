"""The design-doc addendum (markdown), its plot, its sidecar record and mlxcel-format files, and the check that a
stored addendum still follows from its data.

A report is built in two steps: `build_report_data` computes every number and provenance string into one JSON-able
dict, and `render_markdown` turns that dict into the addendum a maintainer pastes into mlxcel's design doc as is
(the style of its 2026-07-03 / 2026-07-10 addenda; no machine-readable text in it). The dict is written beside it
as the sidecar `<run-id>.json`, so `moecal check-reports` can (1) re-derive it from the raw data it names and
compare, and (2) re-render the text from it and compare — an edited number in the prose or in the sidecar both
fail. Beside them: the plot, the per-run data in mlxcel's sweep layout (`<run-id>-mlxcel.csv`) and, when the
decision changes an mlxcel default, the patch of `src/models/switch_layers.rs`. Paths in the sidecar are relative
to the project root (the nearest folder above with `.git` or `pyproject.toml`); paths in the text are relative to
the addendum, so its links work where it lies.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import figures
from harness.analysis.backend_defaults import MLXCEL_CONSTANTS
from harness.analysis.decision_record import Decision, ratio_of_medians
from harness.analysis.decision_words import band, family_namer, family_words, point_test_words
from harness.analysis.dispatch_evidence import PARITY_LIMIT, contradictions
from harness.analysis.inputs import load_input
from harness.analysis.pin_drift import compare
from harness.analysis.pipeline import Analysis, Options, analyse, analyse_path, expected_null
from harness.analysis.regression import join_points
from harness.analysis.stats import DECIDED as DECIDED_VERDICTS
from harness.errors import InputError
from harness.json_input import load_json_object
from harness.output.addendum_heading import (
    BUILT_IN,
    context,
    heading,
    library_under_test,
    provenance_paragraph,
    report_date,
    with_overrides,
)
from harness.output.markdown_text import md_code, md_text
from harness.output.mlxcel_source import SWITCH_LAYERS, UNCHECKED_NOTE, MlxcelSource, cap_patch, known_defaults
from harness.output.plot import write_plot
from harness.output.report_links import link_target, project_root, relative_path, shown_text
from harness.runs.formats import SAMPLES_FILE, write_text_atomic
from harness.runs.mlxcel_csv import BUILD_COLUMNS, round_positions, to_mlxcel_csv
from harness.runs.rundir import SUMMARY_FILE, RunDirectory, refuse_stored
from harness.runs.safe_paths import outside_trees, plain_name_problem
from harness.runs.summary_columns import SummaryCol

OLD_BLOCK_START = "<!-- moecal-report\n"  # format 2 kept its record in the text; recognised to say "regenerate"
REPORT_FORMAT = 3  # 3: sidecar record, design-doc style text, mlxcel CSV and patch beside it


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def _report_stem(provenance: dict[str, object], date: str, host: str, backend: str) -> str:
    """<run id>: one run's files can never overwrite another run's. Inputs without a run id (a bare summary.csv)
    fall back to <date>-<host>-<backend>[-<config>]."""
    run_id = re.sub(r"[^A-Za-z0-9._-]+", "-", str(provenance.get("run_id") or "")).strip("-.")
    if run_id:  # verbatim (already file-name-safe when moecal made it), so the names match the run directory
        return run_id
    return "-".join(_slug(p) for p in (date, host, backend, str(provenance.get("config_name") or "")) if p)


def _previous(analysis: Analysis, previous: Analysis, root: Path, previous_path: Path) -> dict[str, object]:
    pairs, dropped = join_points(previous.summary, analysis.summary)
    before = previous.as_json()
    return {
        "raw_data": relative_path(previous_path, root),
        "date": report_date(previous.provenance, previous_path),
        "library_pin": str(previous.provenance.get("library_pin") or "unknown library"),
        **{k: before[k] for k in ("crossover_dff", "ci_low", "ci_high", "outcome", "recommended_cap", "action")},
        "points": [
            {
                "model": str(analysis.summary["model"].iloc[c]),
                "dff": int(analysis.summary["dff"].iloc[c]),
                "ratio_before": _exact(previous.summary[SummaryCol.ESTIMATE].iloc[b]),
                "ratio_now": _exact(analysis.summary[SummaryCol.ESTIMATE].iloc[c]),
                "verdict_before": str(previous.summary[SummaryCol.VERDICT].iloc[b]),
                "verdict_now": str(analysis.summary[SummaryCol.VERDICT].iloc[c]),
            }
            for b, c in pairs
        ],
        "not_compared": len(dropped),
        # the crossover shift with its interval and each point's change (harness/analysis/pin_drift.py), as `moecal
        # compare`
        "comparison": compare(previous, analysis, analysis.options.confidence).as_json(),
    }


def _exact(value: float) -> float | None:
    """Never pre-rounded (harness.analysis.figures formats it); null when not finite."""
    return float(value) if math.isfinite(float(value)) else None


def _files(stem: str, raw: Path, md_dir: Path, link_base: Path, mlxcel_csv: bool, patch: bool) -> dict[str, str | None]:
    """The addendum's links, as seen from `link_base` (report_links): the files written beside it in `md_dir`
    (write_report writes each under its name), and the raw data (None when it lies outside `link_base`'s
    project: then the text names it, `raw_name`, without a link that would break)."""
    raw = RunDirectory(raw).samples if raw.is_dir() else raw

    def beside(name: str) -> str:
        return link_target(md_dir / name, link_base) or name

    return {
        "addendum": beside(f"{stem}-dff-crossover.md"),
        "plot": beside(f"{stem}-dff-crossover.png"),
        "sidecar": beside(f"{stem}.json"),
        "mlxcel_csv": beside(f"{stem}-mlxcel.csv") if mlxcel_csv else None,
        "patch": beside(f"{stem}-switch_layers.diff") if patch else None,
        "raw_data": link_target(raw, link_base),
        "raw_name": f"{raw.parent.name}/{raw.name}" if raw.name in (SAMPLES_FILE, SUMMARY_FILE) else raw.name,
    }


def _whole_model(summary: pd.DataFrame) -> np.ndarray:
    """Rows of whole-model points (decode, command): the points mlxcel's per-model sweep layout can carry."""
    return (summary["workload"].astype(str) != "layer").to_numpy()


def build_report_data(
    input_path: str | Path,
    root: Path,
    options: Options = Options(),
    previous: str | Path | None = None,
    date: str | None = None,
    md_dir: Path | None = None,
    mlxcel: MlxcelSource | dict[str, object] | None = None,
    overrides: dict[str, str] | None = None,
    link_base: Path | None = None,
) -> dict[str, object]:
    """Every number and string the addendum states, re-derivable from the inputs and options it records.

    `mlxcel` is the tree the decision targets (a read tree, or the stored record when check-reports re-derives):
    its cap for the run's backend is the current default unless --current-default says otherwise. `overrides`
    (addendum_heading.OVERRIDE_KEYS) correct the input's provenance; links are relative to `link_base` (default:
    `md_dir`, the addendum's folder)."""
    loaded = load_input(input_path)
    overrides = {k: str(v) for k, v in (overrides or {}).items() if v not in (None, "")}
    provenance = with_overrides(loaded.provenance, overrides)
    loaded = loaded._replace(provenance=provenance)
    host = str(provenance.get("host") or "unknown-host")
    backend = str(provenance.get("backend") or "unknown-backend")
    tree = mlxcel.as_json() if isinstance(mlxcel, MlxcelSource) else mlxcel or known_defaults().as_json()
    if backend not in MLXCEL_CONSTANTS:
        tree = None
    elif tree["checked"] and options.current_default is None:
        options = dataclasses.replace(options, current_default=int(tree["caps"][backend]))
    analysis = analyse(loaded, options)
    date = date or report_date(provenance, Path(input_path))
    md_dir = md_dir or root
    link_base = link_base or md_dir
    source_root = project_root(Path(input_path).parent)  # recorded paths are shown relative to the run's project
    d = analysis.as_json()
    changes = d["action"] in ("raise", "lower", "set") and d["recommended_cap"] is not None and tree is not None
    stem = _report_stem(provenance, date, host, backend)
    csv = loaded.samples is not None and bool(_whole_model(analysis.summary).any())
    return {
        "moecal_report": REPORT_FORMAT,
        "date": date,
        "host": host,
        "backend": backend,
        "library_pin": shown_text(library_under_test(provenance, tree), source_root),
        "raw_data": relative_path(Path(input_path), root),
        "overrides": overrides,
        "link_base": relative_path(link_base, md_dir),
        "options": {**options.settings(), "current_default": options.current_default},
        "files": _files(stem, Path(input_path), md_dir, link_base, csv, changes),
        "context": context(provenance, source_root),
        "mlxcel": tree,
        "decision": d,
        "previous": (_previous(analysis, analyse_path(previous, options), root, Path(previous)) if previous else None),
        # how an until-decided sweep stopped (harness.measure.allocation), absent for a fixed-protocol run
        **({"until_decided": provenance["until_decided"]} if provenance.get("until_decided") else {}),
        # where the dispatch pass proved the family table wrong, either way: said, never silently overridden
        **({"table_wrong": wrong} if (wrong := contradictions(provenance, expected_null(provenance))) else {}),
    }


# --- markdown -------------------------------------------------------------------------------------------------


def _name(point: dict[str, object], several_families: bool) -> str:
    """`model (Dff 4096)`, with the shape family when there are several (layer sweeps share one model name)."""
    family = f", {family_words(point['family'])}" if several_families else ""
    return f"{point['model']} (Dff {point['dff']}{family})"


def _dff_list(dffs: list[int]) -> str:
    return ", ".join(str(d) for d in dffs)


VERDICT_WORDS = {
    "fused": "fused wins beyond {fused} at Dff",
    "fallback": "fallback wins beyond {fallback} at Dff",
    "equivalent": "the paths are equivalent (within 1 ± {margin}) at Dff",
    "inconclusive": "inconclusive at Dff",
    "insufficient": "too few runs for an interval at Dff",
    "null": "null (not used) at Dff",
}


def _verdicts(points: list[dict], margin: float) -> str:
    """What one family's verdict column says, verdict by verdict (never more than it says)."""
    by_verdict: dict[str, list[int]] = {}
    for p in sorted(points, key=lambda p: p["dff"]):
        by_verdict.setdefault(p[SummaryCol.VERDICT], []).append(p["dff"])
    bands = {"margin": figures.percent(margin), "fused": band(margin, "fused"), "fallback": band(margin, "fallback")}
    parts = [f"{VERDICT_WORDS[v].format(**bands)} {_dff_list(by_verdict[v])}" for v in VERDICT_WORDS if v in by_verdict]
    return "; ".join(parts) or "no points"


def _crossings(family: dict[str, object], points: list[dict], conf: str) -> str | None:
    """Every crossing of 1.0 with its own interval, and which one the crossover is — only when there are several
    (one crossing is the crossover, stated in the decision)."""
    listed = family["crossings"]
    if len(listed) < 2:
        return None
    valid = sorted(p["dff"] for p in points if p[SummaryCol.VERDICT] in DECIDED_VERDICTS)
    smallest, largest = (valid[0], valid[-1]) if valid else (None, None)

    def one(c: dict[str, object]) -> str:
        low = -math.inf if c["ci_low"] is None else c["ci_low"]
        high = math.inf if c["ci_high"] is None else c["ci_high"]
        ci = figures.dff_interval(low, high, smallest, largest)
        return f"{figures.dff(c['dff'])} ({c['direction']}, {conf} CI {ci})"

    text = f"  - The estimated ratio is not monotone: it crosses 1.0 at {', '.join(one(c) for c in listed)}"
    chosen = family["crossover_dff"]
    if chosen is None:
        return f"{text}; none is a downward crossing after fused first leads, so none is the crossover."
    return f"{text}; the crossover is {figures.dff(chosen)}, the first downward crossing after fused first leads."


def _opposite(points: list[dict], several: bool) -> list[str]:
    """One line where the medians and the ratio point opposite ways (the table shows both; this says why)."""
    out = []
    for p in points:
        medians, estimate = ratio_of_medians(p), p[SummaryCol.ESTIMATE]
        if medians is None or estimate is None or (medians - 1) * (estimate - 1) >= 0:
            continue
        faster = "fused" if medians > 1 else "fallback"
        fused, fallback = figures.tok_s(p[SummaryCol.FUSED_TOK_S]), figures.tok_s(p[SummaryCol.FALLBACK_TOK_S])
        out.append(
            f"- At {md_text(_name(p, several))} the medians favour {faster} ({fused} vs {fallback}) while "
            f"fused/fallback is {figures.ratio(estimate)}: "
            f"the medians compare each side's middle run, the ratio {_how(p)}, so a few outlying runs move the "
            "ratio and not the medians."
        )
    return out


def _how(point: dict[str, object]) -> str:
    """How this point's ratio was formed, as its `method` says (paired by round, or Welch on unpaired runs)."""
    if str(point.get(SummaryCol.METHOD, "")).startswith("paired"):
        return "averages every round's fused/fallback pair"
    return "compares the geometric means of each side's runs (not paired)"


def _families(d: dict[str, object]) -> list[dict[str, object]]:
    """The families the decision was made for (one, unnamed in the JSON, when the run has one)."""
    return d.get("families") or [{"family": d["points"][0]["family"] if d["points"] else "all", "decides": True, **d}]


def _findings(data: dict[str, object]) -> list[str]:
    d = data["decision"]
    opts = data["options"]
    conf = figures.percent(opts["confidence"])
    families = _families(d)
    several = len(families) > 1
    out = []
    binding = d.get("binding_family")
    for family in families:
        mine = [p for p in d["points"] if p["family"] == family["family"]]
        name = md_text(_namer(data)(family["family"]))
        out.append(f"- {name}: {_verdicts(mine, opts['margin'])}.")
        crossings = _crossings(family, mine, conf)
        if crossings:
            out.append(crossings)
        if several and family["family"] != binding and family["reason"] not in d["reason"]:
            role = (
                "its own decision (it does not decide the cap)"
                if not family.get("decides", True)
                else "its own decision"
            )
            out.append(f"  - {role}: {family['action']}: {md_text(family['reason'])}")
    aa = _aa_sentence(d, opts["margin"])
    if aa:
        out.append(aa)
    for p in d["points"]:
        if p[SummaryCol.OUTLIERS]:
            where = md_text(_name(p, several))
            out.append(f"- Outliers dropped (> 6 robust σ from the arm's median) at {where}: {p[SummaryCol.OUTLIERS]}.")
    out += _opposite(d["points"], several)
    out += _dispatch_findings(d["points"], several)
    unstable = [md_text(_name(p, several)) for p in d["points"] if p[SummaryCol.UNSTABLE]]
    if unstable:
        out.append(f"- Unstable (an arm's robust spread > 5%): {', '.join(unstable)}.")
    if data["previous"]:
        out += _previous_findings(data["previous"])
    return out


UNITS = {"layer": "layer steps/s", "whole": "tok/s"}
# the per-point fields of the dispatch verification pass (command workloads; `crossover --json` names them): a
# column appears when any point of the table carries the field, so built-in runs and older data render as before
OPTIONAL_COLUMNS = (("dispatch", "dispatch"), ("parity_class", "parity"), ("tokens_fused", "tokens fallback/fused"))


def _kind(point: dict[str, object]) -> str:
    """`layer` (one MoE layer step per call, layer steps/s) or `whole` (a whole-model decode, tok/s)."""
    return "layer" if str(point["family"]).startswith("layer") else "whole"


def _optional(point: dict[str, object], key: str) -> str:
    """A cell of an optional column: tokens as `fallback/fused` (bold and flagged when the arms generated different
    counts: they did different work), parity with its fused-vs-reference NRMS (worst, median) when known."""
    if key == "tokens_fused":
        counts = "/".join(f"{point[k]:.0f}" if point.get(k) is not None else "-" for k in ("tokens_fallback", key))
        return f"**{counts} differ**" if point.get("tokens_differ") else counts
    value = point.get(key)
    if key == "parity_class" and value:
        return parity_cell(point)
    return "-" if value in (None, "") else md_text(value)


def _dispatch_findings(points: list[dict], several: bool) -> list[str]:
    """What the verification pass could not establish, in words: a path predicted rather than observed, a point
    whose arms did different work."""
    out = []
    marked = [p for p in points if p.get("dispatch")]
    if marked and all(p["dispatch"] == "unverified" for p in marked):
        out.append("- The dispatch was not verified at any point (the input has no verification pass).")
        marked = []
    for state, words in (
        (
            "predicted",
            "the dispatch was not observed (the binary printed no probe line); the path is init's prediction",
        ),
        ("unverified", "the dispatch was not verified"),
    ):
        names = [md_text(_name(p, several)) for p in marked if p["dispatch"] == state]
        if names:
            out.append(f"- At {', '.join(names)} {words}.")
    differ = [md_text(_name(p, several)) for p in points if p.get("tokens_differ")]
    if differ:
        out.append(f"- The arms generated different token counts at {', '.join(differ)}: they did different work.")
    return out


def _table(points: list[dict], name: Callable[[str], str], opts: dict[str, object], unit: str) -> list[str]:
    """mlxcel's addendum table (`| Dff | model | fallback … | fused … | fused/fallback |`, the winner in bold) with
    the interval and the verdict; fused/fallback is the estimate the interval belongs to. `decision test`: the
    one-sided test the decision read at that point (empty where it read none), so the table shows what decided."""
    several_families = len({p["family"] for p in points}) > 1
    extra = [(key, head) for key, head in OPTIONAL_COLUMNS if any(p.get(key) not in (None, "") for p in points)]
    if all(p.get("dispatch") in (None, "", "unverified") for p in points):  # one finding says so, not every row
        extra = [(key, head) for key, head in extra if key != "dispatch"]
    tested = any(p.get("decides") for p in points)
    heads = ["Dff", "model", f"fallback {unit}", f"fused {unit}", "fused/fallback", "95% CI", "verdict"]
    heads[5] = f"{figures.percent(opts['confidence'])} CI"
    rule = ["--:", "---", "--:", "--:", "--:", "---", "---"]
    if tested:
        heads, rule = [*heads, "decision test"], [*rule, "---"]
    if several_families:
        heads, rule = ["family", *heads], ["---", *rule]
    heads += [head for _, head in extra]
    rule += ["---"] * len(extra)
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(rule) + "|"]
    for p in points:
        fallback, fused, ratio = (
            figures.tok_s(p[SummaryCol.FALLBACK_TOK_S]),
            figures.tok_s(p[SummaryCol.FUSED_TOK_S]),
            figures.ratio(p[SummaryCol.ESTIMATE]),
        )
        if p[SummaryCol.VERDICT] == "fused":
            fused, ratio = f"**{fused}**", f"**{ratio}**"
        elif p[SummaryCol.VERDICT] == "fallback":
            fallback, ratio = f"**{fallback}**", f"**{ratio}**"
        ci = figures.interval(p[SummaryCol.CI_LOW], p[SummaryCol.CI_HIGH])
        verdict = p[SummaryCol.VERDICT] + (" (unstable)" if p[SummaryCol.UNSTABLE] else "")
        cells = [str(p["dff"]), md_text(p["model"]), fallback, fused, ratio, ci, verdict]
        if tested:
            cells.append(_test_cell(p.get("decision_test"), opts["margin"]))
        if several_families:
            cells.insert(0, md_text(name(p["family"])))
        cells += [_optional(p, key) for key, _ in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def parity_cell(point: dict[str, object]) -> str:
    """The parity column in a word: `ok (≤ 0.05)` when no fused call's NRMS exceeded mlxcel's threshold, `CHECK`
    (bold) when some did; the figures behind it (calls, worst and median NRMS) are in the sidecar."""
    calls, over = point.get("parity_calls"), point.get("parity_calls_over")
    if not calls:
        return "-"
    return f"**CHECK** ({over} of {calls} calls)" if over else f"ok (≤ {PARITY_LIMIT:g})"


def _test_cell(test: dict[str, object] | None, margin: float) -> str:
    """The decision's one-sided test at this point, bold when it passed (the words the reason uses)."""
    if not test:
        return ""
    words = point_test_words(str(test["question"]), bool(test["passed"]), test["bound"], float(test["level"]), margin)
    return f"**{words}**" if test["passed"] else words


def _aa_sentence(d: dict[str, object], margin: float) -> str | None:
    """One sentence on the A/A arm: its spread against the noise model, and whether any A/A interval lies beyond
    the margin (then raise/lower are withheld) — both facts in one place so they can never read as a contradiction."""
    phi, aa = d.get("noise_scale"), d.get("aa_points", 0)
    if not aa or phi is None:
        return None
    if phi > 1.0:
        spread = f"spreads more than the noise model expects (φ = {phi:.2f}: every standard error is widened by φ)"
    else:
        spread = "spreads as the noise model expects (φ = 1)"
    beyond = d.get("aa_beyond_margin") or []
    if beyond:
        where = ", ".join(md_text(b) for b in beyond)
        tail = f"; at {where} it lies beyond 1 ± {margin:.1%}: drift larger than noise, so raise/lower are withheld"
    else:
        tail = f" and lies within 1 ± {margin:.1%} at every point"
    return f"- A/A check (the fallback measured twice, {aa} points): it {spread}{tail}."


def _action_value(d: dict[str, object]) -> str:
    """`keep 4096`, `raise 4096 → 6400`: the action and the value, as the heading and the decision state them."""
    cap, current = d["recommended_cap"], d["current_default"]
    value = "(no point decides a cap)" if cap is None else str(cap)
    if d["action"] in ("raise", "lower") and current is not None:
        value = f"{current} → {cap}"
    return f"{d['action']} {value}"


def _decision_head(d: dict[str, object], backend: str, context: dict[str, object]) -> str:
    """The decision's first line: the action and the value (and the mlxcel constant it concerns), and where the
    cap in force came from when the input did not state it (an imported sweep: the engine's compiled-in default)."""
    where = f" ({md_code(MLXCEL_CONSTANTS[backend])})" if backend in MLXCEL_CONSTANTS else ""
    source = context.get("current_default_source")
    assumed = f"; the cap in force, {d['current_default']}, is {md_text(source)}" if source else ""
    return f"**Decision: {_action_value(d)}**{where}{assumed}"


def _decision(data: dict[str, object]) -> list[str]:
    d = data["decision"]
    lines = [_decision_head(d, data["backend"], data.get("context") or {}), "", md_text(d["reason"]), ""]
    files = data["files"]
    changes = d["action"] in ("raise", "lower", "set") and d["recommended_cap"] is not None
    per_run = f" (per run: `{d['apply']}`)" if d["apply"] else ""
    if changes and data["backend"] in MLXCEL_CONSTANTS:
        constant = MLXCEL_CONSTANTS[data["backend"]]
        lines.append(
            f"Set this constant: `{constant}: i32 = {d['recommended_cap']};` in `{SWITCH_LAYERS}` "
            f"(patch: [{files['patch']}]({files['patch']})"
            + ("" if (data.get("mlxcel") or {}).get("checked") else f"; {UNCHECKED_NOTE}")
            + f"){';' if per_run else ''}{per_run.removeprefix(' (').removesuffix(')')}."
        )  # fmt: skip
        lines.append("")
    elif changes:
        lines += [f"{md_text(data['backend'])} is not an mlxcel backend: no constant to change{per_run}.", ""]
    return lines


def _previous_findings(prev: dict[str, object]) -> list[str]:
    then = f"Dff ≈ {prev['crossover_dff']:.0f}" if prev["crossover_dff"] is not None else prev["outcome"]
    out = [
        f"- Previous sweep ({prev['date']}, {md_text(prev['library_pin'])}, {md_code(prev['raw_data'])}): "
        f"crossover {then}, recommended cap {prev['recommended_cap']} ({prev['action']})."
    ]
    comparison = prev.get("comparison") or {"crossover": [], "points": []}
    out.extend(f"  - {md_text(s['family'])}: {s['text']}" for s in comparison["crossover"])
    changes = {(c["model"], c["dff"]): c for c in comparison["points"]}
    for p in prev["points"]:
        ratios = f"estimate {figures.ratio(p['ratio_before'])} → {figures.ratio(p['ratio_now'])}"
        c = changes.get((p["model"], p["dff"]))
        change = f", change ×{c['change']:.3f} [{c['ci_low']:.3f}, {c['ci_high']:.3f}]: {c['verdict']}" if c else ""
        out.append(
            f"  - {md_text(p['model'])} ({p['dff']}): {ratios}, verdict {p['verdict_before']} → {p['verdict_now']}"
            f"{change}"
        )
    if prev["not_compared"]:
        out.append(f"  - {prev['not_compared']} points had no comparable counterpart and were not compared.")
    return out


def _synthetic(ctx: dict[str, object]) -> list[str]:
    """Which points are synthetic checkpoints (`moecal synth`: random weights, possibly fewer layers), so a reader
    does not take their tok/s for a real model's."""
    synthetic = ctx.get("synthetic")
    if not synthetic:
        return []
    notes = "; ".join(f"{md_code(name)}: {md_text(how)}" for name, how in synthetic.items())
    return ["", f"Synthetic checkpoints (`moecal synth`; only the fused/fallback ratio carries over): {notes}."]


def _method(opts: dict[str, object], tested: bool) -> str:
    """What the table's columns are, and which test the decision read (only when the table shows one)."""
    conf, band = figures.percent(opts["confidence"]), figures.percent(opts["margin"])
    text = (
        f"fused/fallback is the geometric mean of the per-run ratios (exp of the mean ln difference, paired by round "
        f"where the arms were interleaved, Welch otherwise) with its {conf} t interval; the verdict reads that "
        f"two-sided interval: a path wins (bold) only when it lies beyond 1 ± {band}, `equivalent` inside it, else "
        "`inconclusive`. The throughput columns are the median of each side."
    )
    if tested:
        text += (
            " The decision asks one-sided questions (does fused win beyond 1 + δ at each Dff a raise would switch? "
            "does fallback win beyond 1 − δ at the largest Dff at or below the cap?); the `decision test` column shows "
            "each test it read, with its one-sided bound, so a point can be `inconclusive` two-sided and still pass "
            "the one-sided test the decision used."
        )
    return text


def _not_used(points: list[dict], several: bool) -> list[str]:
    """The points left out of the crossover, with the words for only the kinds of reason that occur."""
    left = [p for p in points if p[SummaryCol.VERDICT] in ("null", "insufficient")]
    if not left:
        return []
    kinds = {p[SummaryCol.VERDICT] for p in left}
    why = {"null": "null: both arms ran the same code, or excluded", "insufficient": "insufficient: too few runs"}
    head = f"Not used for the crossover ({'; '.join(why[k] for k in ('null', 'insufficient') if k in kinds)}):"
    return [
        head,
        "",
        *(f"- {md_text(_name(p, several))}: {md_text(p[SummaryCol.REASON])}{_measured(p)}" for p in left),
        "",
    ]


def _table_corrections(wrong: dict[str, str]) -> list[str]:
    """Where the dispatch pass proved moecal's family table (docs/mlxcel.md) wrong, in either direction: the
    observation decided (a model predicted null that ran the kernel is measured; one predicted to run it that the
    kernel declined is null), and the addendum says so, since a wrong table is what to update first."""
    if not wrong:
        return []
    head = "moecal's family table was wrong here (the dispatch pass's observation decided):"
    return [head, "", *(f"- {md_text(model)}: {md_text(why)}" for model, why in sorted(wrong.items())), ""]


def _measured(point: dict) -> str:
    """What a left-out point measured when both arms ran (a family that ignores the cap compared by its switch, an
    A/A point timed with --measure-null): its ratio of medians, so the comparison is reported though it decides
    nothing."""
    ratio = ratio_of_medians(point)
    if ratio is None or not (point.get(SummaryCol.N_FUSED) and point.get(SummaryCol.N_FALLBACK)):
        return ""
    return f"; measured fused/fallback {figures.ratio(ratio)} (ratio of medians, not used for the cap)"


def _namer(data: dict[str, object]) -> Callable[[str], str]:
    """Family label → the words the addendum uses for it (`mlxcel models` when the benchmark is mlxcel's)."""
    return family_namer(data["context"])


def render_markdown(data: dict[str, object]) -> str:
    """The addendum in the design doc's style: heading, provenance paragraph, table(s), findings, decision."""
    d = data["decision"]
    ctx = data["context"]
    opts = data["options"]
    files = data["files"]
    points = d["points"]
    lines = [
        heading(data, _action_value(d)),
        "",
        provenance_paragraph(data, points, {_kind(p) for p in points}),
        "",
        _method(opts, any(p.get("decides") for p in points)),
        *_synthetic(ctx),
        "",
    ]
    name = _namer(data)
    for kind in ("whole", "layer"):
        # by family, then Dff: a reader scans the table along Dff as along the plot's axis
        mine = sorted((p for p in points if _kind(p) == kind), key=lambda p: (str(p["family"]), p["dff"]))
        if mine:
            lines += [*_table(mine, name, opts, UNITS[kind]), ""]
    lines += _not_used(points, "families" in d)
    lines += _table_corrections(data.get("table_wrong") or {})
    lines += ["Findings:", "", *_findings(data), ""]
    lines += _decision(data)
    lines += [f"![fused/fallback ratio vs Dff]({files['plot']})", ""]
    return "\n".join(lines)


# --- entry points -------------------------------------------------------------------------------------------------


def write_report(
    input_path: str | Path,
    out_dir: str | Path = "reports",
    previous: str | Path | None = None,
    options: Options = Options(),
    date: str | None = None,
    mlxcel: MlxcelSource | None = None,
    overrides: dict[str, str] | None = None,
    link_base: Path | None = None,
) -> tuple[Path, Path, Decision]:
    """Addendum, sidecar, plot, mlxcel CSV and (when a default changes) the switch_layers.rs patch into `out_dir`;
    returns the addendum's and the plot's paths and the overall decision (what a sweep prints). `overrides` and
    `link_base`: build_report_data.

    Refuses (InputError) to overwrite a stored addendum or one written for another run's data."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    root = project_root(out_dir)
    data = build_report_data(input_path, root, options, previous, date, out_dir, mlxcel, overrides, link_base)
    # every file is written beside the addendum under its own name; `files` holds the links to them
    files = {name: link for name, link in data["files"].items() if link and not name.startswith("raw_")}
    paths = {name: out_dir / Path(link).name for name, link in files.items()}
    md_path = paths["addendum"]
    _refuse_overwrite(md_path, data["raw_data"])
    for name in ("plot", "sidecar", "mlxcel_csv", "patch"):
        if name in paths:
            refuse_stored(paths[name], "write the report somewhere else (--out / --report-dir)")
    refuse_stored(md_path, "write the report somewhere else (--out / --report-dir)")  # also: never through a link
    png_path = write_plot(data, paths["plot"])
    if "mlxcel_csv" in paths:
        write_text_atomic(paths["mlxcel_csv"], _mlxcel_csv(input_path, data))
    d = data["decision"]
    if "patch" in paths:
        patch = cap_patch(_source(data, mlxcel), {data["backend"]: d["recommended_cap"]})
        write_text_atomic(paths["patch"], patch)
    write_text_atomic(paths["sidecar"], json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    write_text_atomic(md_path, render_markdown(data))
    return md_path, png_path, Decision(d["action"], d["recommended_cap"], d["reason"], d["apply"])


def _source(data: dict[str, object], mlxcel: MlxcelSource | None) -> MlxcelSource:
    """The tree the patch targets: the one read, else the published defaults recorded in the data."""
    return mlxcel if mlxcel is not None else MlxcelSource(dict(data["mlxcel"]["caps"]), checked=False)


def _mlxcel_csv(input_path: str | Path, data: dict[str, object]) -> str:
    """The whole-model points' runs in mlxcel's sweep layout, with a `#` header in the style of mlxcel's published
    sweeps and the `# key: value` lines `moecal crossover` needs to read it back to the same decision (the current
    default, the models that were null for a reason the layout has no column for, and each run's position in its
    round, so the read-back pairs the arms by round as the sweep's own analysis does)."""
    loaded = load_input(input_path)
    analysis = analyse(loaded, Options(**data["options"]))
    summary = analysis.summary[_whole_model(analysis.summary)]
    ctx = data["context"]
    prose = [
        "# Fused decode-MoE vs fallback Dff crossover sweep (moecal).",
        f"# Hardware: {_one_line(ctx.get('device', 'not recorded'))}. Library: {_one_line(data['library_pin'])}.",
        f"# Harness: {_one_line(_csv_harness(ctx, set(summary['workload'].astype(str))))}; interleaved rounds.",
        *(f"# {arm} side forced with {_one_line(how)}." for arm, how in ctx.get("arms", {}).items() if arm != "null"),
        "# decode tok/s; run k of both sides is round k. NA = the run did not happen.",
    ]
    nulls = {
        str(row["model"]): str(row[SummaryCol.REASON])
        for _, row in summary.iterrows()
        if row[SummaryCol.VERDICT] == "null" and str(row["quant_mode"] or "affine") == "affine"
    }
    keys = {
        "run_id": analysis.provenance.get("run_id", ""),
        "backend": data["backend"],
        "device": ctx.get("device", ""),
        "host": data["host"],
        "library_pin": data["library_pin"],
        "current_default": analysis.current_default if analysis.current_default is not None else "",
        "cap_env": analysis.cap_env,
        **{column: analysis.provenance[column] for column in BUILD_COLUMNS if analysis.provenance.get(column)},
        **({"expect_null": nulls} if nulls else {}),
        "round_positions": round_positions(loaded.samples, summary),
    }
    return "\n".join(prose) + "\n" + to_mlxcel_csv(loaded.samples, summary, keys)


def _csv_harness(ctx: dict[str, object], workloads: set[str]) -> str:
    """What produced the exported points: the benchmark command, or moecal's synthetic decoder."""
    if "bench_command" in ctx:
        return str(ctx["bench_command"])
    return BUILT_IN["decode"] if workloads == {"decode"} else "not recorded"


def _one_line(text: object) -> str:
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text))


def sidecar_path(md_path: Path) -> Path:
    """`<run-id>.json` beside `<run-id>-dff-crossover.md`."""
    return md_path.with_name(md_path.name.removesuffix("-dff-crossover.md") + ".json")


def read_sidecar(md_path: Path) -> dict[str, object] | None:
    """The addendum's record; None when it has none (not a moecal addendum of this format)."""
    path = sidecar_path(md_path)
    if not md_path.name.endswith("-dff-crossover.md") or not path.is_file():
        return None
    data = load_json_object(path)  # nested too deep, not JSON, not UTF-8: an InputError naming the file
    return data if "moecal_report" in data else None


def _refuse_overwrite(md_path: Path, raw_data: str) -> None:
    """A stored addendum, or one of another run, is never replaced; re-reporting the same run may refresh its own."""
    if not md_path.exists():
        return
    refuse_stored(md_path, "write the report somewhere else (--out / --report-dir)")
    try:
        other = (read_sidecar(md_path) or {}).get("raw_data")
    except InputError:
        other = None
    if other != raw_data:
        raise InputError(str(md_path), "", f"holds the addendum of {other or 'something else'}, not {raw_data}")


def verify_report(md_path: Path, trees: Sequence[Path] = ()) -> list[str] | None:
    """Problems with one stored addendum (empty: it checks out); None when it is not a moecal addendum.

    The sidecar names the raw data, and a sidecar is just a file someone committed: raw data is read only inside
    the addendum's project, the `trees` the user named, or the project moecal runs from (harness.runs.safe_paths), so a
    sidecar naming /etc/shadow is a problem line that names the path, never a read of it."""
    md_path = Path(md_path)
    text = md_path.read_text(encoding="utf-8")
    try:
        stored = read_sidecar(md_path)
    except InputError as exc:
        return [f"unreadable sidecar {sidecar_path(md_path).name}: {exc.field}: {exc.problem}"]
    if stored is None:
        if text.startswith(OLD_BLOCK_START):
            return ["an addendum of the old format (its record inside the text): regenerate it with `moecal report`"]
        return None
    root = project_root(md_path.parent)
    try:
        raw = root / stored["raw_data"]
        previous = root / stored["previous"]["raw_data"] if stored.get("previous") else None
        here = project_root(Path.cwd())  # the project moecal runs from, when it is one (not any folder, e.g. ~)
        projects = [here] if any((here / marker).exists() for marker in (".git", "pyproject.toml")) else []
        outside = outside_trees([raw, previous], [root, *trees, *projects])
        bad_name = stored["files"]["mlxcel_csv"] and plain_name_problem(stored["files"]["mlxcel_csv"])
        if outside or bad_name:
            return [outside or f"files.mlxcel_csv: {bad_name}"]
        options = Options(**stored["options"])
        link_base = md_path.parent / stored.get("link_base", ".")
        fresh = build_report_data(
            raw, root, options, previous, stored["date"], md_path.parent, stored["mlxcel"], stored.get("overrides"),
            link_base,
        )  # fmt: skip
        rendered = render_markdown(stored)
        csv_name = stored["files"]["mlxcel_csv"]
        csv_text = _mlxcel_csv(raw, stored) if csv_name else None
    except InputError as exc:
        return [f"cannot re-derive from the raw data: {exc}"]
    except (KeyError, TypeError) as exc:
        return [f"malformed sidecar {sidecar_path(md_path).name}: missing or wrong {exc}"]
    problems = _differences(stored, fresh, "")
    csv_path = md_path.parent / Path(csv_name).name if csv_name else None
    if csv_path is not None and (not csv_path.is_file() or csv_path.read_text(encoding="utf-8") != csv_text):
        problems.append(
            f"{csv_name} is missing or differs from the runs it exports: regenerate it with `moecal report`"
        )
    if text != rendered:
        problems.append(
            "the text differs from what its sidecar renders to (edited by hand, or written by another version): "
            "regenerate it with `moecal report`"
        )
    return problems


def _differences(stored: object, fresh: object, where: str) -> list[str]:
    """Recursive comparison; numbers agree within 1e-4 relative (floating-point noise across platforms)."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = [f"{where}.{k}: missing in one of them" for k in sorted(set(stored) ^ set(fresh))]
        for key in sorted(set(stored) & set(fresh)):
            out += _differences(stored[key], fresh[key], f"{where}.{key}")
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{where}: {len(stored)} entries stored, {len(fresh)} re-derived"]
        return [
            d for i, (a, b) in enumerate(zip(stored, fresh, strict=True)) for d in _differences(a, b, f"{where}[{i}]")
        ]
    numbers = (int, float)
    if isinstance(stored, numbers) and isinstance(fresh, numbers) and not isinstance(stored, bool):
        if math.isclose(stored, fresh, rel_tol=1e-4, abs_tol=1e-9):
            return []
    elif stored == fresh:
        return []
    return [f"{where.lstrip('.')}: stored {stored!r}, re-derived {fresh!r}"]
