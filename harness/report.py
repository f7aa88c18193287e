"""The design-doc addendum (markdown) and its plot, and the check that a stored addendum still follows from its data.

A report is built in two steps: `build_report_data` computes every number and provenance string into one JSON-able
dict, and `render_markdown` turns that dict into text. The dict is stored at the top of the addendum as an HTML
comment, so `moecal check-reports` can (1) re-derive it from the raw data the block names and compare, and (2)
re-render the text from the stored block and compare — an edited number in the prose or in the block both fail.
Paths in the block are relative to the project root (the nearest folder above with `.git` or `pyproject.toml`).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from pathlib import Path

import numpy as np

from harness.analysis import Analysis, Options, analyse_path
from harness.check import join_points
from harness.crossover import Decision
from harness.errors import InputError
from harness.rundir import refuse_stored

BLOCK_START = "<!-- moecal-report\n"
BLOCK_END = "\n-->\n"
REPORT_FORMAT = 2  # 2: t intervals on ln tok/s, margin, A/A noise scale, test-inversion crossover


def project_root(start: Path) -> Path:
    start = Path(start).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists() or (folder / "pyproject.toml").exists():
            return folder
    return start


def _relative(path: Path, root: Path) -> str:
    path = Path(path).resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def _report_stem(provenance: dict[str, object], date: str, host: str, backend: str) -> str:
    """<run id>-dff-crossover: one run's addendum can never overwrite another run's. Inputs without a run id (a
    bare summary.csv) fall back to <date>-<host>-<backend>[-<config>]-dff-crossover."""
    run_id = re.sub(r"[^A-Za-z0-9._-]+", "-", str(provenance.get("run_id") or "")).strip("-.")
    if run_id:  # verbatim (already file-name-safe when moecal made it), so the names match the run directory
        return f"{run_id}-dff-crossover"
    return "-".join(
        _slug(p) for p in (date, host, backend, str(provenance.get("config_name") or ""), "dff-crossover") if p
    )


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
    "source_format",
    "notes",
)


def _context(provenance: dict[str, object]) -> dict[str, object]:
    """The provenance the addendum shows (flat strings, plus the package and arm dicts)."""
    out = {key: str(provenance[key]) for key in CONTEXT_KEYS if provenance.get(key) not in (None, "")}
    for key in ("packages", "arms"):
        value = provenance.get(key)
        if isinstance(value, dict) and value:
            out[key] = {str(k): str(v) for k, v in value.items()}
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
                "ratio_before": _round(previous.summary["estimate"].iloc[b]),
                "ratio_now": _round(analysis.summary["estimate"].iloc[c]),
                "verdict_before": str(previous.summary["verdict"].iloc[b]),
                "verdict_now": str(analysis.summary["verdict"].iloc[c]),
            }
            for b, c in pairs
        ],
        "not_compared": len(dropped),
    }


def _round(value: float) -> float | None:
    return round(float(value), 5) if math.isfinite(float(value)) else None


def build_report_data(
    input_path: str | Path,
    root: Path,
    options: Options = Options(),
    previous: str | Path | None = None,
    date: str | None = None,
    plot: str | None = None,
) -> dict[str, object]:
    """Every number and string the addendum states, re-derivable from the inputs and options it records.

    `plot` (the plot's file name) is the writer's choice, not derived: check-reports passes the stored one."""
    analysis = analyse_path(input_path, options)
    provenance = analysis.provenance
    host = str(provenance.get("host") or "unknown-host")
    backend = str(provenance.get("backend") or "unknown-backend")
    date = date or _report_date(provenance)
    return {
        "moecal_report": REPORT_FORMAT,
        "date": date,
        "host": host,
        "backend": backend,
        "library_pin": str(provenance.get("library_pin") or "unknown library"),
        "raw_data": _relative(Path(input_path), root),
        "options": {**options.settings(), "current_default": options.current_default},
        "plot": plot or _report_stem(provenance, date, host, backend) + ".png",
        "context": _context(provenance),
        "decision": analysis.as_json(),
        "previous": (_previous(analysis, analyse_path(previous, options), root, Path(previous)) if previous else None),
    }


# --- markdown -------------------------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _name(point: dict[str, object], several_families: bool) -> str:
    """`model (Dff 4096)`, with the shape family when there are several (layer sweeps share one model name)."""
    family = f", {point['family']}" if several_families else ""
    return f"{point['model']} (Dff {point['dff']}{family})"


def _table(points: list[dict], several_families: bool, confidence: float) -> list[str]:
    head = f"| Dff | model | fallback tok/s | fused tok/s | fused/fallback ({confidence:.0%} CI) | verdict |"
    rule = "|--:|---|--:|--:|---|---|"
    if several_families:
        head, rule = "| family " + head, "|---" + rule
    lines = [head, rule]
    for p in points:
        fallback, fused = _fmt(p["fallback_tok_s"], 2), _fmt(p["fused_tok_s"], 2)
        ratio = _fmt(p["estimate"], 4)
        if p["verdict"] == "fused":
            fused, ratio = f"**{fused}**", f"**{ratio}**"
        elif p["verdict"] == "fallback":
            fallback, ratio = f"**{fallback}**", f"**{ratio}**"
        if p["ci_low"] is not None:
            ratio += f" [{p['ci_low']:.4f}, {p['ci_high']:.4f}]"
        verdict = p["verdict"] + (" (unstable)" if p["unstable"] else "")
        cells = [str(p["dff"]), p["model"], fallback, fused, ratio, verdict]
        if several_families:
            cells.insert(0, p["family"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _hardware(context: dict[str, object]) -> str:
    parts = [
        f"{label} {context[key]}"
        for key, label in (
            ("device", "device"),
            ("gpu", "GPU"),
            ("driver", "driver"),
            ("cuda", "CUDA"),
            ("cpu", "CPU"),
            ("os", "OS"),
        )
        if key in context
    ]
    if "packages" in context:
        parts.append("packages " + ", ".join(f"{k} {v}" for k, v in sorted(context["packages"].items())))
    if "harness_commit" in context:
        dirty = " (uncommitted changes)" if context.get("harness_dirty") == "True" else ""
        parts.append(f"harness {context['harness_commit'][:12]}{dirty}")
    if "config_path" in context:
        parts.append(
            f"config {context['config_path']}"
            + (f" (sha256 {context['config_sha256'][:12]})" if "config_sha256" in context else "")
        )
    if "notes" in context:
        parts.append(f"source notes: {context['notes']}")
    return " · ".join(parts) if parts else "not recorded in the input"


def _dff_list(dffs: list[int]) -> str:
    return ", ".join(str(d) for d in dffs)


def _family_finding(name: str, points: list[dict], crossover: dict[str, object], conf: str) -> str:
    """What one family's verdicts say, verdict by verdict (never more than they say), then its crossover."""
    by_verdict: dict[str, list[int]] = {}
    for p in sorted(points, key=lambda p: p["dff"]):
        by_verdict.setdefault(p["verdict"], []).append(p["dff"])
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
        out.append(_family_finding(family["family"], mine, family, conf))
        if len(family["crossings"]) > 1:
            listed = ", ".join(f"{c['dff']:.0f} ({c['direction']})" for c in family["crossings"])
            out.append(f"  - The estimated ratio is not monotone: it crosses 1.0 at {listed}; the first decides.")
    if len(families) > 1:
        out += [f"- Decision for {f['family']}: {f['action']} — {f['reason']}" for f in families]
    phi, aa = d.get("noise_scale"), d.get("aa_points", 0)
    if aa and phi is not None and phi > 1.0:
        out.append(
            f"- A/A noise floor: the null arm (the fallback measured again) deviates from the fallback by more than "
            f"the noise model expects over {aa} points (φ = {phi:.2f}); every standard error above is widened by φ."
        )
    elif aa:
        out.append(f"- A/A noise floor: the null arm agrees with the noise model over {aa} points (φ = 1).")
    if d.get("aa_beyond_margin"):
        out.append(
            f"- The A/A comparison lies beyond 1 ± {opts['margin']:.1%} at {', '.join(d['aa_beyond_margin'])}: drift "
            "larger than the noise model; raise/lower are withheld. Re-run on a quieter machine."
        )
    several = "families" in d
    for p in d["points"]:
        if p["outliers"]:
            where = _name(p, several)
            out.append(f"- Outliers dropped (> 6 robust σ from the arm's median) at {where}: {p['outliers']}.")
    unstable = [_name(p, several) for p in d["points"] if p["unstable"]]
    if unstable:
        out.append(f"- Unstable (an arm's robust spread > 5%): {', '.join(unstable)}.")
    prev = data["previous"]
    if prev:
        then = f"Dff ≈ {prev['crossover_dff']:.0f}" if prev["crossover_dff"] is not None else prev["outcome"]
        out.append(
            f"- Previous sweep ({prev['date']}, {prev['library_pin']}, `{prev['raw_data']}`): crossover {then}, "
            f"recommended cap {prev['recommended_cap']} ({prev['action']})."
        )
        for p in prev["points"]:
            ratios = f"estimate {_fmt(p['ratio_before'], 4)} → {_fmt(p['ratio_now'], 4)}"
            verdicts = f"verdict {p['verdict_before']} → {p['verdict_now']}"
            out.append(f"  - {p['model']} ({p['dff']}): {ratios}, {verdicts}")
        if prev["not_compared"]:
            out.append(f"  - {prev['not_compared']} points had no comparable counterpart and were not compared.")
    return out


def render_markdown(data: dict[str, object]) -> str:
    d = data["decision"]
    ctx = data["context"]
    opts = data["options"]
    points = d["points"]
    valid = [p for p in points if p["verdict"] != "null"]
    nulls = [p for p in points if p["verdict"] in ("null", "insufficient")]
    workload = ctx.get("workload", "unknown")
    runs = sorted({min(p["n_fused"], p["n_fallback"]) for p in valid})
    runs_text = f"{runs[0]}–{runs[-1]}" if len(runs) > 1 else (str(runs[0]) if runs else "0")
    lines = [
        f"### {data['date']} addendum: {data['host']} {data['backend']} fused-MoE Dff crossover under "
        f"{data['library_pin']}",
        "",
        f"Context: where does the fused decode-MoE path stop beating the fallback? {len(valid)} Dff points of the "
        f"{workload} workload, {runs_text} runs per arm. Estimate = exp(mean ln fused tok/s − ln fallback tok/s) "
        f"with a {opts['confidence']:.0%} t interval (paired by round where the arms were interleaved, variance pooled "
        f"over a shape family when Bartlett's test allows, Welch otherwise); a path wins only when the interval lies "
        f"beyond 1 ± {opts['margin']:.1%}, `equivalent` inside it, else `inconclusive`. The crossover interval "
        f"inverts the same test (Fieller between the bracketing points, {opts['interpolation']} in Dff).",
        "",
        f"Hardware and versions: {_hardware(ctx)}.",
        "",
        f"Harness command: `{ctx.get('command', 'not recorded')}`",
        "",
        "How each arm was forced: "
        + ("; ".join(f"{arm}: `{how}`" for arm, how in ctx["arms"].items()) if "arms" in ctx else "not recorded")
        + ".",
        "",
        *_table(points, "families" in d, opts["confidence"]),
        "",
    ]
    if nulls:
        lines += [
            "Points without an interval (null: both arms ran the same code, or excluded; insufficient: too few "
            "runs) — not used for the crossover:",
            "",
        ]
        lines += [f"- {_name(p, 'families' in d)}: {p['reason']}" for p in nulls] + [""]
    lines += ["Findings:", "", *_findings(data), ""]
    lines += [f"Decision: **{d['action']}** — {d['reason']}", ""]
    if d["apply"]:
        lines += [f"Line to change: `{d['apply']}`", ""]
    lines += [f"Raw data: `{data['raw_data']}`", "", f"![fused/fallback ratio vs Dff]({data['plot']})", ""]
    return "\n".join(lines)


def _block(data: dict[str, object]) -> str:
    """The hidden JSON block; `--` cannot appear inside an HTML comment, so it is escaped (JSON reads it back)."""
    return BLOCK_START + json.dumps(data, indent=1, ensure_ascii=False).replace("--", "-\\u002d") + BLOCK_END


def read_block(text: str) -> dict[str, object] | None:
    if not text.startswith(BLOCK_START):
        return None
    end = text.find(BLOCK_END)
    if end < 0:
        raise ValueError("the moecal-report block is not closed")
    return json.loads(text[len(BLOCK_START) : end])


# --- plot --------------------------------------------------------------------------------------------------------


def _plot_limits(values: list[float], margin: float) -> tuple[float, float]:
    """y limits (ratio, log scale) fitted to the point estimates and the 1 ± δ band, with some headroom."""
    low = min([*values, 1.0 - margin])
    high = max([*values, 1.0 + margin])
    pad = (np.log(high) - np.log(low)) * 0.25 + 0.005
    return float(np.exp(np.log(low) - pad)), float(np.exp(np.log(high) + pad))


def _ratio_ticks(low: float, high: float) -> list[float]:
    """Readable ratio ticks inside [low, high], at least 1/10 of the (log) range apart, 1.0 always kept."""
    candidates = (0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0)
    gap = (np.log(high) - np.log(low)) / 10
    ticks = [1.0]
    for t in sorted((t for t in candidates if low <= t <= high), key=lambda t: abs(np.log(t))):
        if all(abs(np.log(t) - np.log(u)) >= gap for u in ticks):
            ticks.append(t)
    return sorted(ticks)


def write_plot(data: dict[str, object], path: Path) -> Path:
    """Ratio (log scale, fitted to the estimates; whiskers beyond it clipped and marked) vs log2 Dff with the grid's
    ticks; one colour per family joined by a line, marker by verdict; the 1 ± δ band; crossover interval and current
    / recommended caps as vertical lines; the decision in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    d = data["decision"]
    margin = float(data["options"].get("margin", 0.01))
    fig, ax = plt.subplots(figsize=(11, 5), dpi=110)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    estimates = [p["estimate"] for p in d["points"] if p["estimate"] is not None and p["verdict"] != "null"]
    y_low, y_high = _plot_limits(estimates or [1.0], margin)
    ax.axhspan(1.0 - margin, 1.0 + margin, color="0.85", label=f"1 ± δ ({margin:.0%}): equivalent")
    ax.axhline(1.0, color="black", linewidth=0.8)
    markers = {"fused": "^", "fallback": "v", "equivalent": "s", "inconclusive": "o", "insufficient": "x"}
    families = list(dict.fromkeys(p["family"] for p in d["points"]))
    colors = plt.get_cmap("tab10")
    clipped = False
    for index, family in enumerate(families):
        color = colors(index % 10)
        pts = sorted(
            (p for p in d["points"] if p["family"] == family and p["verdict"] != "null" and p["estimate"] is not None),
            key=lambda p: p["dff"],
        )
        if not pts:
            continue
        ax.plot([p["dff"] for p in pts], [p["estimate"] for p in pts], color=color, linewidth=1.2, label=family)
        for p in pts:
            ax.scatter(p["dff"], p["estimate"], marker=markers.get(p["verdict"], "o"), color=color, zorder=3, s=36)
            if p["ci_low"] is None:
                continue
            low, high = max(p["ci_low"], y_low), min(p["ci_high"], y_high)
            ax.vlines(p["dff"], low, high, color=color, linewidth=1.0, alpha=0.8)
            for end, edge, mark in ((p["ci_low"], y_low, r"$\downarrow$"), (p["ci_high"], y_high, r"$\uparrow$")):
                if (end < edge) if edge == y_low else (end > edge):
                    ax.plot(p["dff"], edge, marker=mark, color=color, markersize=12, clip_on=False)
                    clipped = True
    # a null point has no estimate (it never entered the statistics): it is placed at its ratio of medians
    nulls = [(p["dff"], p["estimate"] or p["ratio"]) for p in d["points"] if p["verdict"] == "null"]
    nulls = [(dff, min(max(y, y_low), y_high)) for dff, y in nulls if y is not None]
    if nulls:
        ax.scatter(*zip(*nulls, strict=True), marker="x", color="grey", label="null point (not used)")
    dffs = sorted({p["dff"] for p in d["points"]}) or [1, 2]
    left, right = min(dffs) / 1.25, max(dffs) * 1.25
    if d["outcome"] != "no_points":
        low = d["ci_low"] if d["ci_low"] is not None else left
        high = d["ci_high"] if d["ci_high"] is not None else right
        ax.axvspan(low, high, color="tab:orange", alpha=0.1, label=f"crossover {data['options']['confidence']:.0%} CI")
    if d["crossover_dff"] is not None:
        ax.axvline(d["crossover_dff"], color="tab:orange", label=f"crossover ≈ {d['crossover_dff']:.0f}")
    if d["current_default"] is not None:
        ax.axvline(d["current_default"], color="black", linestyle="--", label=f"current cap {d['current_default']}")
    if d["recommended_cap"] not in (None, d["current_default"]):
        ax.axvline(d["recommended_cap"], color="tab:purple", linestyle=":", label=f"recommended {d['recommended_cap']}")
    ax.set_xlim(left, right)
    ax.set_ylim(y_low, y_high)
    ax.xaxis.set_major_locator(FixedLocator(dffs))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(x) for x in dffs], rotation=45 if len(dffs) > 8 else 0)
    ticks = _ratio_ticks(y_low, y_high)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.grid(True, which="major", color="0.9", linewidth=0.6)
    ax.set_xlabel("expert intermediate size Dff (log2 scale)")
    note = "; ↑ ↓ at the plot's edge: the whisker runs beyond it (clipped)" if clipped else ""
    ax.set_ylabel("fused / fallback (log scale)")
    cap = d["recommended_cap"]
    ax.set_title(
        f"{data['host']} {data['backend']} under {data['library_pin']} — decision: {d['action']}"
        + (f" → {cap}" if cap is not None and d["action"] != "keep" else f" {cap}" if cap is not None else ""),
        fontsize=11,
    )
    fig.text(
        0.01, 0.01, f"markers: ▲ fused, ▼ fallback, ■ equivalent, ● inconclusive (verdicts beyond 1 ± δ){note}",
        fontsize=7, color="0.3",
    )  # fmt: skip
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


# --- entry points -------------------------------------------------------------------------------------------------


def write_report(
    input_path: str | Path,
    out_dir: str | Path = "reports",
    previous: str | Path | None = None,
    options: Options = Options(),
    date: str | None = None,
) -> tuple[Path, Path, Decision]:
    """Addendum + plot into `out_dir`; returns their paths and the overall decision (what a sweep prints).

    Refuses (InputError) to overwrite a stored addendum or one written for another run's data."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    root = project_root(out_dir)
    data = build_report_data(input_path, root, options, previous, date)
    md_path = out_dir / data["plot"].replace(".png", ".md")
    _refuse_overwrite(md_path, data["raw_data"])
    refuse_stored(out_dir / data["plot"], "write the report somewhere else (--out / --report-dir)")
    refuse_stored(md_path, "write the report somewhere else (--out / --report-dir)")  # also: never through a link
    png_path = write_plot(data, out_dir / data["plot"])
    md_path.write_text(_block(data) + render_markdown(data), encoding="utf-8")
    d = data["decision"]
    return md_path, png_path, Decision(d["action"], d["recommended_cap"], d["reason"], d["apply"])


def _refuse_overwrite(md_path: Path, raw_data: str) -> None:
    """A stored addendum, or one of another run, is never replaced; re-reporting the same run may refresh its own."""
    if not md_path.exists():
        return
    refuse_stored(md_path, "write the report somewhere else (--out / --report-dir)")
    try:
        other = (read_block(md_path.read_text(encoding="utf-8")) or {}).get("raw_data")
    except (OSError, UnicodeDecodeError, ValueError):
        other = None
    if other != raw_data:
        raise InputError(str(md_path), "", f"holds the addendum of {other or 'something else'}, not {raw_data}")


def verify_report(md_path: Path) -> list[str] | None:
    """Problems with one stored addendum (empty: it checks out); None when the file holds no moecal block."""
    text = Path(md_path).read_text(encoding="utf-8")
    try:
        stored = read_block(text)
    except (ValueError, json.JSONDecodeError) as exc:
        return [f"unreadable moecal-report block: {exc}"]
    if stored is None:
        return None
    root = project_root(Path(md_path).parent)
    try:
        raw = root / stored["raw_data"]
        previous = root / stored["previous"]["raw_data"] if stored.get("previous") else None
        fresh = build_report_data(
            raw, root, Options(**stored["options"]), previous, stored["date"], plot=stored.get("plot")
        )
        problems = (
            []
            if text == _block(stored) + render_markdown(stored)
            else [
                "the text differs from what its own block renders to (edited by hand, or written by another version): "
                "regenerate it with `moecal report`"
            ]
        )
    except InputError as exc:
        return [f"cannot re-derive from the raw data: {exc}"]
    except (KeyError, TypeError) as exc:
        return [f"malformed moecal-report block: missing or wrong {exc}"]
    return _differences(stored, fresh, "") + problems


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
