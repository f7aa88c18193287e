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
import datetime as _dt
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis.backend_defaults import MLXCEL_CONSTANTS
from harness.analysis.decision import Decision
from harness.analysis.inputs import load_input
from harness.analysis.pin_drift import compare
from harness.analysis.pipeline import Analysis, Options, analyse, analyse_path
from harness.analysis.regression import join_points
from harness.config.backend_specs import BACKENDS
from harness.errors import InputError
from harness.json_input import load_json_object
from harness.output.markdown_text import md_code, md_text
from harness.output.mlxcel_source import SWITCH_LAYERS, UNCHECKED_NOTE, MlxcelSource, cap_patch, known_defaults
from harness.output.plot import write_plot
from harness.runs.formats import write_text_atomic
from harness.runs.mlxcel_csv import round_positions, to_mlxcel_csv
from harness.runs.rundir import RunDirectory, refuse_stored
from harness.runs.summary_columns import SummaryCol

OLD_BLOCK_START = "<!-- moecal-report\n"  # format 2 kept its record in the text; recognised to say "regenerate"
REPORT_FORMAT = 3  # 3: sidecar record, design-doc style text, mlxcel CSV and patch beside it
# the array libraries each backend's built-in workloads run on (a command workload runs none of them)
BACKEND_PACKAGES = {spec.name: spec.libraries for spec in BACKENDS}


def project_root(start: Path) -> Path:
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists() or (folder / "pyproject.toml").exists():
            return folder
    return start


def _relative(path: Path, root: Path) -> str:
    """`path` relative to `root` (`../` where it lies beside it), absolute only when they share no project."""
    path, root = Path(path).resolve(), Path(root).resolve()
    if path.is_relative_to(root):
        return path.relative_to(root).as_posix()
    if path.is_relative_to(project_root(root)):
        return Path(os.path.relpath(path, root)).as_posix()
    return str(path)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def _report_stem(provenance: dict[str, object], date: str, host: str, backend: str) -> str:
    """<run id>: one run's files can never overwrite another run's. Inputs without a run id (a bare summary.csv)
    fall back to <date>-<host>-<backend>[-<config>]."""
    run_id = re.sub(r"[^A-Za-z0-9._-]+", "-", str(provenance.get("run_id") or "")).strip("-.")
    if run_id:  # verbatim (already file-name-safe when moecal made it), so the names match the run directory
        return run_id
    return "-".join(_slug(p) for p in (date, host, backend, str(provenance.get("config_name") or "")) if p)


def _report_date(provenance: dict[str, object]) -> str:
    text = str(provenance.get("date") or "")
    return text[:10] if re.match(r"\d{4}-\d{2}-\d{2}", text) else _dt.date.today().isoformat()


CONTEXT_KEYS = (
    "run_id",
    "workload",
    "device",
    "os",
    "cpu",
    "gpu",
    "driver",
    "cuda",
    "harness_commit",
    "harness_dirty",
    "config_path",
    "config_sha256",
    "command",
    "bench_command",
    "source_format",
    "notes",
)


def _shown_path(path: str, root: Path) -> str:
    """A recorded path as the reader can use it: relative to the project root, or the tail of it that exists there
    (a run made in another checkout of the project), else the bare file name — never this machine's absolute path."""
    parts = Path(path).parts
    if not Path(path).is_absolute():
        return Path(path).as_posix()
    for start in range(1, len(parts)):
        if (root / Path(*parts[start:])).exists():
            return Path(*parts[start:]).as_posix()
    return parts[-1] if parts else path


def _ran(packages: dict[str, object], backend: str, workload: str) -> dict[str, str]:
    """moecal, Python and the array libraries the measurement ran on (installed-but-unused ones are left out)."""
    libraries = () if workload == "command" else BACKEND_PACKAGES.get(backend, ())
    return {
        str(k): str(v)
        for k, v in packages.items()
        if k in ("moecal", "python") or any(str(k).startswith(lib) for lib in libraries)
    }


def _context(provenance: dict[str, object], root: Path) -> dict[str, object]:
    """The provenance the addendum shows (flat strings, plus the package and arm dicts)."""
    out = {key: str(provenance[key]) for key in CONTEXT_KEYS if provenance.get(key) not in (None, "")}
    if "config_path" in out:
        out["config_path"] = _shown_path(out["config_path"], root)
    arms = provenance.get("arms")
    if isinstance(arms, dict) and arms:
        out["arms"] = {str(k): str(v) for k, v in arms.items()}
    packages = provenance.get("packages")
    if isinstance(packages, dict):
        ran = _ran(packages, str(provenance.get("backend") or ""), str(provenance.get("workload") or ""))
        if ran:
            out["packages"] = ran
    synthetic = provenance.get("synthetic")
    if isinstance(synthetic, dict) and synthetic:
        out["synthetic"] = {str(k): str(v) for k, v in synthetic.items()}
    return out


def _previous(analysis: Analysis, previous: Analysis, root: Path, previous_path: Path) -> dict[str, object]:
    pairs, dropped = join_points(previous.summary, analysis.summary)
    before = previous.as_json()
    return {
        "raw_data": _relative(previous_path, root),
        "date": _report_date(previous.provenance),
        "library_pin": str(previous.provenance.get("library_pin") or "unknown library"),
        **{k: before[k] for k in ("crossover_dff", "ci_low", "ci_high", "outcome", "recommended_cap", "action")},
        "points": [
            {
                "model": str(analysis.summary["model"].iloc[c]),
                "dff": int(analysis.summary["dff"].iloc[c]),
                "ratio_before": _round(previous.summary[SummaryCol.ESTIMATE].iloc[b]),
                "ratio_now": _round(analysis.summary[SummaryCol.ESTIMATE].iloc[c]),
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


def _round(value: float) -> float | None:
    return round(float(value), 5) if math.isfinite(float(value)) else None


def _files(stem: str, raw: Path, md_dir: Path, root: Path, mlxcel_csv: bool, patch: bool) -> dict[str, str | None]:
    """The file names the addendum links to (beside it), and the raw data relative to it (to the project root
    when the addendum is written outside the project)."""
    raw = RunDirectory(raw).samples if raw.is_dir() else raw
    return {
        "addendum": f"{stem}-dff-crossover.md",
        "plot": f"{stem}-dff-crossover.png",
        "sidecar": f"{stem}.json",
        "mlxcel_csv": f"{stem}-mlxcel.csv" if mlxcel_csv else None,
        "patch": f"{stem}-switch_layers.diff" if patch else None,
        "raw_data": _relative(raw, md_dir) if md_dir.resolve().is_relative_to(root) else _relative(raw, root),
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
) -> dict[str, object]:
    """Every number and string the addendum states, re-derivable from the inputs and options it records.

    `mlxcel` is the tree the decision targets (a read tree, or the stored record when check-reports re-derives):
    its cap for the run's backend is the current default unless --current-default says otherwise."""
    loaded = load_input(input_path)
    provenance = loaded.provenance
    host = str(provenance.get("host") or "unknown-host")
    backend = str(provenance.get("backend") or "unknown-backend")
    tree = mlxcel.as_json() if isinstance(mlxcel, MlxcelSource) else mlxcel or known_defaults().as_json()
    if backend not in MLXCEL_CONSTANTS:
        tree = None
    elif tree["checked"] and options.current_default is None:
        options = dataclasses.replace(options, current_default=int(tree["caps"][backend]))
    analysis = analyse(loaded, options)
    date = date or _report_date(provenance)
    d = analysis.as_json()
    changes = d["action"] in ("raise", "lower", "set") and d["recommended_cap"] is not None and tree is not None
    stem = _report_stem(provenance, date, host, backend)
    csv = loaded.samples is not None and bool(_whole_model(analysis.summary).any())
    return {
        "moecal_report": REPORT_FORMAT,
        "date": date,
        "host": host,
        "backend": backend,
        "library_pin": str(provenance.get("library_pin") or "unknown library"),
        "raw_data": _relative(Path(input_path), root),
        "options": {**options.settings(), "current_default": options.current_default},
        "files": _files(stem, Path(input_path), md_dir or root, root, csv, changes),
        "context": _context(provenance, root),
        "mlxcel": tree,
        "decision": d,
        "previous": (_previous(analysis, analyse_path(previous, options), root, Path(previous)) if previous else None),
    }


# --- markdown -------------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _name(point: dict[str, object], several_families: bool) -> str:
    """`model (Dff 4096)`, with the shape family when there are several (layer sweeps share one model name)."""
    family = f", {point['family']}" if several_families else ""
    return f"{point['model']} (Dff {point['dff']}{family})"


def _dff_list(dffs: list[int]) -> str:
    return ", ".join(str(d) for d in dffs)


def _family_finding(name: str, points: list[dict], crossover: dict[str, object], conf: str) -> str:
    """What one family's verdicts say, verdict by verdict (never more than they say), then its crossover."""
    by_verdict: dict[str, list[int]] = {}
    for p in sorted(points, key=lambda p: p["dff"]):
        by_verdict.setdefault(p[SummaryCol.VERDICT], []).append(p["dff"])
    words = {
        "fused": "fused wins beyond the margin at Dff",
        "fallback": "fallback wins beyond the margin at Dff",
        "equivalent": "the paths are equivalent (within the margin) at Dff",
        "inconclusive": "inconclusive at Dff",
        "insufficient": "too few runs for an interval at Dff",
        "null": "null (not used) at Dff",
    }
    parts = [f"{words[v]} {_dff_list(by_verdict[v])}" for v in words if v in by_verdict]
    ci = crossover["ci_text"]
    if crossover["outcome"] == "crossing":
        where = f"the estimated ratio crosses 1.0 at Dff ≈ {crossover['crossover_dff']:.0f}, {conf} CI {ci}"
    elif crossover["outcome"] == "fused_everywhere":
        where = f"the estimated ratio stays above 1.0 at every measured Dff; crossover {conf} CI {ci}"
    elif crossover["outcome"] == "fused_never":
        where = f"the estimated ratio is not above 1.0 even at the smallest measured Dff; crossover {conf} CI {ci}"
    else:
        where = "no point with an interval, so no crossover"
    return f"- Family {name}: {'; '.join(parts) or 'no points'}. Curve: {where}."


def _findings(data: dict[str, object]) -> list[str]:
    d = data["decision"]
    opts = data["options"]
    conf = f"{opts['confidence']:.0%}"
    families = d.get("families") or [{"family": d["points"][0]["family"] if d["points"] else "all", **d}]
    out = []
    for family in families:
        mine = [p for p in d["points"] if p["family"] == family["family"]]
        out.append(_family_finding(md_text(family["family"]), mine, family, conf))
        if len(family["crossings"]) > 1:
            listed = ", ".join(f"{c['dff']:.0f} ({c['direction']})" for c in family["crossings"])
            out.append(f"  - The estimated ratio is not monotone: it crosses 1.0 at {listed}; the first decides.")
    if len(families) > 1:
        out += [f"- Decision for {md_text(f['family'])}: {f['action']}: {md_text(f['reason'])}" for f in families]
    aa = _aa_sentence(d, opts["margin"])
    if aa:
        out.append(aa)
    several = "families" in d
    for p in d["points"]:
        if p[SummaryCol.OUTLIERS]:
            where = md_text(_name(p, several))
            out.append(f"- Outliers dropped (> 6 robust σ from the arm's median) at {where}: {p[SummaryCol.OUTLIERS]}.")
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
        counts = "/".join(_fmt(point.get(k), 0) if point.get(k) is not None else "-" for k in ("tokens_fallback", key))
        return f"**{counts} differ**" if point.get("tokens_differ") else counts
    value = point.get(key)
    if key == "parity_class" and value and point.get("fused_vs_ref_worst") is not None:
        # the class names the worst fused-vs-truth NRMS; the fused-vs-reference figures complete the picture
        median = point.get("fused_vs_ref_median")
        value = f"{value}; fused-vs-ref NRMS worst {point['fused_vs_ref_worst']:.2g}" + (
            f", median {median:.2g}" if median is not None else ""
        )
    return "-" if value in (None, "") else md_text(value)


def _dispatch_findings(points: list[dict], several: bool) -> list[str]:
    """What the verification pass could not establish, in words: a path predicted rather than observed, a point
    whose arms did different work."""
    out = []
    for state, words in (
        (
            "predicted",
            "the dispatch was not observed (the binary printed no probe line); the path is init's prediction",
        ),
        ("unverified", "the dispatch was not verified"),
    ):
        names = [md_text(_name(p, several)) for p in points if p.get("dispatch") == state]
        if names:
            out.append(f"- At {', '.join(names)} {words}.")
    differ = [md_text(_name(p, several)) for p in points if p.get("tokens_differ")]
    if differ:
        out.append(f"- The arms generated different token counts at {', '.join(differ)}: they did different work.")
    return out


def _table(points: list[dict], several_families: bool, confidence: float, unit: str) -> list[str]:
    """mlxcel's addendum table (`| Dff | model | fallback … | fused … | fused/fallback |`, the winner in bold) with
    the interval and the verdict; fused/fallback is the estimate the interval belongs to."""
    extra = [(key, head) for key, head in OPTIONAL_COLUMNS if any(p.get(key) not in (None, "") for p in points)]
    heads = ["Dff", "model", f"fallback {unit}", f"fused {unit}", "fused/fallback", f"{confidence:.0%} CI", "verdict"]
    rule = ["--:", "---", "--:", "--:", "--:", "---", "---"]
    if several_families:
        heads, rule = ["family", *heads], ["---", *rule]
    heads += [head for _, head in extra]
    rule += ["---"] * len(extra)
    lines = ["| " + " | ".join(heads) + " |", "|" + "|".join(rule) + "|"]
    for p in points:
        fallback, fused, ratio = (
            _fmt(p[SummaryCol.FALLBACK_TOK_S], 2),
            _fmt(p[SummaryCol.FUSED_TOK_S], 2),
            _fmt(p[SummaryCol.ESTIMATE], 4),
        )
        if p[SummaryCol.VERDICT] == "fused":
            fused, ratio = f"**{fused}**", f"**{ratio}**"
        elif p[SummaryCol.VERDICT] == "fallback":
            fallback, ratio = f"**{fallback}**", f"**{ratio}**"
        ci = "-" if p[SummaryCol.CI_LOW] is None else f"[{p[SummaryCol.CI_LOW]:.4f}, {p[SummaryCol.CI_HIGH]:.4f}]"
        verdict = p[SummaryCol.VERDICT] + (" (unstable)" if p[SummaryCol.UNSTABLE] else "")
        cells = [str(p["dff"]), md_text(p["model"]), fallback, fused, ratio, ci, verdict]
        if several_families:
            cells.insert(0, md_text(p["family"]))
        cells += [_optional(p, key) for key, _ in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _hardware(context: dict[str, object]) -> str:
    parts = [
        f"{label} {md_text(context[key])}"
        for key, label in (("device", ""), ("gpu", "GPU"), ("driver", "driver"), ("cuda", "CUDA"), ("cpu", "CPU"))
        if key in context and not (key == "cpu" and context.get("device", "").startswith(str(context[key])))
    ]
    if "os" in context:
        parts.append(md_text(context["os"]))
    return ", ".join(p.strip() for p in parts) or "not recorded in the input"


def _versions(data: dict[str, object]) -> str:
    """The library under test, then only the packages the measurement ran on (never an installed-but-unused one)."""
    ctx = data["context"]
    mlxcel = data.get("mlxcel") or {}
    parts = [f"library under test: {md_text(data['library_pin'])}"]
    if mlxcel.get("checked"):
        tree = f"mlxcel {md_text(mlxcel['version'])}" if mlxcel.get("version") else "mlxcel"
        pin = f", MLX pin {md_code(mlxcel['mlx_pin'])}" if mlxcel.get("mlx_pin") else ""
        parts.append(f"{tree}{pin} (read from the tree given with --mlxcel-src)")
    packages = ctx.get("packages") or {}
    if packages:
        parts.append("packages that ran: " + ", ".join(f"{md_text(k)} {md_text(v)}" for k, v in packages.items()))
    return "; ".join(parts)


BUILT_IN = {
    "layer": "one MoE layer decode step per call on the backend (layer steps/s), cycling over cache-busting copies",
    "decode": "moecal's synthetic decoder with random weights at the catalog shapes (decode tok/s)",
}


def _harness(ctx: dict[str, object], kinds: set[str]) -> str:
    """What ran: the benchmark command (prompt and token counts are in it) or the built-in workload(s), and moecal."""
    moecal = "moecal"
    if "harness_commit" in ctx:
        dirty = ", uncommitted changes" if ctx.get("harness_dirty") == "True" else ""
        moecal += f" {ctx['harness_commit'][:12]}{dirty}"
    config = f", config {md_code(ctx['config_path'])}" if "config_path" in ctx else ""
    sweep = f" ({md_code(ctx['command'])}{config})" if "command" in ctx else config
    workload = str(ctx.get("workload", ""))
    if "bench_command" in ctx:
        what = f"{md_code(ctx['bench_command'])}, one process per run"
    elif workload in BUILT_IN:
        what = BUILT_IN[workload]
        if workload == "layer" and "whole" in kinds:  # a layer config's decode block
            what += f"; its decode block: {BUILT_IN['decode']}"
    elif ctx.get("source_format"):
        what = f"imported from an {md_text(ctx['source_format'])}"
    else:
        what = f"the {md_text(workload or 'unknown')} workload"
    return f"{what}; driven by {moecal}{sweep}"


def _arms(ctx: dict[str, object]) -> str:
    """`Each side forced with fallback `X=1`, fused `X=20000`` (the design doc's sentence), fallback side first."""
    arms = ctx.get("arms")
    if not arms:
        return "How each side was forced: not recorded."
    order = sorted(
        arms, key=lambda arm: ("fallback", "fused", "null").index(arm) if arm in ("fallback", "fused", "null") else 3
    )
    names = {"null": "A/A (the fallback again)"}
    return "Each side forced with " + ", ".join(f"{names.get(a, md_text(a))} {md_code(arms[a])}" for a in order) + "."


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


def _decision_head(d: dict[str, object], backend: str) -> str:
    """The decision's first line: the action and the value (and the mlxcel constant it concerns)."""
    where = f" ({md_code(MLXCEL_CONSTANTS[backend])})" if backend in MLXCEL_CONSTANTS else ""
    return f"**Decision: {_action_value(d)}**{where}"


def _decision(data: dict[str, object]) -> list[str]:
    d = data["decision"]
    lines = [_decision_head(d, data["backend"]), "", md_text(d["reason"]), ""]
    files = data["files"]
    changes = d["action"] in ("raise", "lower", "set") and d["recommended_cap"] is not None
    if changes and data["backend"] in MLXCEL_CONSTANTS:
        constant = MLXCEL_CONSTANTS[data["backend"]]
        lines.append(
            f"Set this constant: `{constant}: i32 = {d['recommended_cap']};` in `{SWITCH_LAYERS}` "
            f"(patch: [{files['patch']}]({files['patch']})"
            + ("" if (data.get("mlxcel") or {}).get("checked") else f"; {UNCHECKED_NOTE}")
            + f"); per run: `{d['apply']}`."
        )  # fmt: skip
        lines.append("")
    elif changes:
        lines += [f"{data['backend']} is not an mlxcel backend: no constant to change (per run: `{d['apply']}`).", ""]
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
        ratios = f"estimate {_fmt(p['ratio_before'], 4)} → {_fmt(p['ratio_now'], 4)}"
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


def render_markdown(data: dict[str, object]) -> str:
    """The addendum in the design doc's style: heading, provenance paragraph, table(s), findings, decision."""
    d = data["decision"]
    ctx = data["context"]
    opts = data["options"]
    files = data["files"]
    points = d["points"]
    valid = [p for p in points if p[SummaryCol.VERDICT] != "null"]
    runs = sorted({min(p[SummaryCol.N_FUSED], p[SummaryCol.N_FALLBACK]) for p in valid})
    runs_text = f"{runs[0]}–{runs[-1]}" if len(runs) > 1 else (str(runs[0]) if runs else "0")
    raw = [f"[{name}]({name})" for name in (files["raw_data"], files["mlxcel_csv"]) if name]
    kinds = {_kind(p) for p in points}
    lines = [
        f"### {data['date']} addendum: {md_text(data['host'])} {md_text(data['backend'])} fused-MoE Dff crossover "
        f"under {md_text(data['library_pin'])}: {_action_value(d)}",
        "",
        f"Hardware: {_hardware(ctx)}. Versions: {_versions(data)}. Harness: {_harness(ctx, kinds)}. "
        f"{runs_text} runs per side in interleaved rounds (order rotating). {_arms(ctx)} "
        f"Raw per-run data: {', '.join(raw)}; machine-readable record: [{files['sidecar']}]({files['sidecar']}).",
        "",
        f"fused/fallback is the geometric mean of the per-run ratios (exp of the mean ln difference, paired by round "
        f"where the arms were interleaved, Welch otherwise) with its {opts['confidence']:.0%} t interval; a path wins "
        f"(bold) only when the interval lies beyond 1 ± {opts['margin']:.1%}, `equivalent` inside it, else "
        f"`inconclusive`. The throughput columns are the median of each side.",
        *_synthetic(ctx),
        "",
    ]
    several = "families" in d
    for kind in ("whole", "layer"):
        # by family, then Dff: a reader scans the table along Dff as along the plot's axis
        mine = sorted((p for p in points if _kind(p) == kind), key=lambda p: (str(p["family"]), p["dff"]))
        if mine:
            families = len({p["family"] for p in mine}) > 1
            lines += [*_table(mine, families, opts["confidence"], UNITS[kind]), ""]
    nulls = [p for p in points if p[SummaryCol.VERDICT] in ("null", "insufficient")]
    if nulls:
        lines += ["Not used for the crossover (null: both arms ran the same code, or excluded; insufficient: too "
                  "few runs):", ""]  # fmt: skip
        lines += [f"- {md_text(_name(p, several))}: {md_text(p[SummaryCol.REASON])}" for p in nulls] + [""]
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
) -> tuple[Path, Path, Decision]:
    """Addendum, sidecar, plot, mlxcel CSV and (when a default changes) the switch_layers.rs patch into `out_dir`;
    returns the addendum's and the plot's paths and the overall decision (what a sweep prints).

    Refuses (InputError) to overwrite a stored addendum or one written for another run's data."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    root = project_root(out_dir)
    data = build_report_data(input_path, root, options, previous, date, out_dir, mlxcel)
    files = data["files"]
    md_path = out_dir / files["addendum"]
    _refuse_overwrite(md_path, data["raw_data"])
    for name in ("plot", "sidecar", "mlxcel_csv", "patch"):
        if files[name]:
            refuse_stored(out_dir / files[name], "write the report somewhere else (--out / --report-dir)")
    refuse_stored(md_path, "write the report somewhere else (--out / --report-dir)")  # also: never through a link
    png_path = write_plot(data, out_dir / files["plot"])
    if files["mlxcel_csv"]:
        write_text_atomic(out_dir / files["mlxcel_csv"], _mlxcel_csv(input_path, data))
    d = data["decision"]
    if files["patch"]:
        patch = cap_patch(_source(data, mlxcel), {data["backend"]: d["recommended_cap"]})
        write_text_atomic(out_dir / files["patch"], patch)
    write_text_atomic(out_dir / files["sidecar"], json.dumps(data, indent=1, ensure_ascii=False) + "\n")
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


def verify_report(md_path: Path) -> list[str] | None:
    """Problems with one stored addendum (empty: it checks out); None when it is not a moecal addendum."""
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
        options = Options(**stored["options"])
        fresh = build_report_data(raw, root, options, previous, stored["date"], md_path.parent, stored["mlxcel"])
        rendered = render_markdown(stored)
        csv_name = stored["files"]["mlxcel_csv"]
        csv_text = _mlxcel_csv(raw, stored) if csv_name else None
    except InputError as exc:
        return [f"cannot re-derive from the raw data: {exc}"]
    except (KeyError, TypeError) as exc:
        return [f"malformed sidecar {sidecar_path(md_path).name}: missing or wrong {exc}"]
    problems = _differences(stored, fresh, "")
    csv_path = md_path.parent / csv_name if csv_name else None
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
