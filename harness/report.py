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

from harness.analysis import Analysis, Options, analyse_path
from harness.check import join_points
from harness.crossover import Decision
from harness.errors import InputError
from harness.rundir import refuse_stored

BLOCK_START = "<!-- moecal-report\n"
BLOCK_END = "\n-->\n"
REPORT_FORMAT = 1
FEW_ROUNDS = 5  # below this many runs per arm a percentile bootstrap CI is known to be too narrow


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
                "ratio_before": _round(previous.summary["ratio"].iloc[b]),
                "ratio_now": _round(analysis.summary["ratio"].iloc[c]),
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


def _table(points: list[dict], several_families: bool) -> list[str]:
    head = "| Dff | model | fallback tok/s | fused tok/s | fused/fallback (CI) | verdict |"
    rule = "|--:|---|--:|--:|---|---|"
    if several_families:
        head, rule = "| family " + head, "|---" + rule
    lines = [head, rule]
    for p in points:
        fallback, fused = _fmt(p["fallback_tok_s"], 2), _fmt(p["fused_tok_s"], 2)
        ratio = _fmt(p["ratio"], 4)
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


def _findings(data: dict[str, object]) -> list[str]:
    d = data["decision"]
    opts = data["options"]
    valid = [p for p in d["points"] if p["verdict"] != "null"]
    lowest = min((p["dff"] for p in valid), default=0)
    highest = max((p["dff"] for p in valid), default=0)
    conf = f"{opts['confidence']:.0%}"
    ci = d["ci_text"]
    out = []
    if d["outcome"] == "crossing":
        out.append(
            f"- Crossover at Dff ≈ {d['crossover_dff']:.0f}, {conf} CI {ci} ({d['ci_method']}, "
            f"{d['interpolation']} interpolation)."
        )
    elif d["outcome"] == "fused_everywhere":
        out.append(f"- Fused wins at every measured Dff (up to {highest}); crossover above it, {conf} CI {ci}.")
    elif d["outcome"] == "fused_never":
        out.append(f"- Fused never wins, already not at the smallest measured Dff {lowest}; {conf} CI {ci}.")
    else:
        out.append("- No valid point: no crossover can be placed.")
    if len(d["crossings"]) > 1:
        listed = ", ".join(f"{c['dff']:.0f} ({c['direction']})" for c in d["crossings"])
        out.append(f"- The ratio curve is not monotone: it crosses 1.0 at {listed}; the first crossing decides.")
    for family in d.get("families", []):
        out.append(f"- Family {family['family']}: {family['reason']}")
    noise = [p["null_ratio"] for p in d["points"] if p.get("null_ratio") is not None]
    if noise:
        spread = max(abs(r - 1.0) for r in noise)
        out.append(f"- A/A noise floor (null arm / fallback): within ±{spread:.2%} of 1.0 over {len(noise)} points.")
    unstable = [_name(p, "families" in d) for p in d["points"] if p["unstable"]]
    if unstable:
        out.append(f"- Unstable (per-arm spread > 5%): {', '.join(unstable)}.")
    rounds = [min(p["n_fused"], p["n_fallback"]) for p in valid]
    if rounds and min(rounds) < FEW_ROUNDS:
        out.append(
            f"- Only {min(rounds)} runs per arm at some points: bootstrap CIs from so few runs understate "
            "the uncertainty; treat verdicts near 1.0 with care."
        )
    prev = data["previous"]
    if prev:
        then = f"Dff ≈ {prev['crossover_dff']:.0f}" if prev["crossover_dff"] is not None else prev["outcome"]
        out.append(
            f"- Previous sweep ({prev['date']}, {prev['library_pin']}, `{prev['raw_data']}`): crossover {then}, "
            f"recommended cap {prev['recommended_cap']} ({prev['action']})."
        )
        for p in prev["points"]:
            ratios = f"ratio {_fmt(p['ratio_before'], 4)} → {_fmt(p['ratio_now'], 4)}"
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
    nulls = [p for p in points if p["verdict"] == "null"]
    workload = ctx.get("workload", "unknown")
    runs = sorted({min(p["n_fused"], p["n_fallback"]) for p in valid})
    runs_text = f"{runs[0]}–{runs[-1]}" if len(runs) > 1 else (str(runs[0]) if runs else "0")
    lines = [
        f"### {data['date']} addendum: {data['host']} {data['backend']} fused-MoE Dff crossover under "
        f"{data['library_pin']}",
        "",
        f"Context: where does the fused decode-MoE path stop beating the fallback? {len(valid)} Dff points of the "
        f"{workload} workload, {runs_text} runs per arm; ratio = median fused tok/s / median fallback tok/s with a "
        f"{opts['confidence']:.0%} bootstrap CI ({opts['n_resamples']} resamples, seed {opts['seed']}).",
        "",
        f"Hardware and versions: {_hardware(ctx)}.",
        "",
        f"Harness command: `{ctx.get('command', 'not recorded')}`",
        "",
        "How each arm was forced: "
        + ("; ".join(f"{arm}: `{how}`" for arm, how in ctx["arms"].items()) if "arms" in ctx else "not recorded")
        + ".",
        "",
        *_table(points, "families" in d),
        "",
    ]
    if nulls:
        lines += ["Null points (both arms ran the same code, or excluded; not used for the crossover):", ""]
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


def write_plot(data: dict[str, object], path: Path) -> Path:
    """Ratio vs Dff with CI bars, the 1.0 line, the crossover band, current and recommended caps; null points grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = data["decision"]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    colors = {"fused": "tab:green", "fallback": "tab:red", "tie": "tab:blue"}
    families = list(dict.fromkeys(p["family"] for p in d["points"]))
    markers = dict(zip(families, "osD^v<>ph*", strict=False))  # one marker per shape family (10 are plenty)
    for family in families:
        for verdict, color in colors.items():
            pts = [
                p for p in d["points"] if (p["family"], p["verdict"]) == (family, verdict) and p["ratio"] is not None
            ]
            if not pts:
                continue
            err = [
                [p["ratio"] - (p["ci_low"] or p["ratio"]) for p in pts],
                [(p["ci_high"] or p["ratio"]) - p["ratio"] for p in pts],
            ]
            label = verdict + (f" · {family}" if len(families) > 1 else "")
            ax.errorbar(
                [p["dff"] for p in pts],
                [p["ratio"] for p in pts],
                yerr=err,
                fmt=markers.get(family, "o"),
                color=color,
                capsize=3,
                label=label,
            )
    nulls = [p for p in d["points"] if p["verdict"] == "null"]
    if nulls:
        ax.scatter(
            [p["dff"] for p in nulls],
            [p["ratio"] if p["ratio"] is not None else 1.0 for p in nulls],
            marker="x",
            color="grey",
            label="null point (not used)",
        )
    ax.axhline(1.0, color="black", linewidth=0.8)
    dffs = [p["dff"] for p in d["points"]] or [0, 1]
    left, right = min(dffs), max(dffs)
    if d["outcome"] != "no_points":
        low = d["ci_low"] if d["ci_low"] is not None else left
        high = d["ci_high"] if d["ci_high"] is not None else right
        ax.axvspan(low, high, color="tab:orange", alpha=0.2, label=f"crossover {data['options']['confidence']:.0%} CI")
    if d["crossover_dff"] is not None:
        ax.axvline(d["crossover_dff"], color="tab:orange", label=f"crossover ≈ {d['crossover_dff']:.0f}")
    if d["current_default"] is not None:
        ax.axvline(d["current_default"], color="black", linestyle="--", label=f"current cap {d['current_default']}")
    if d["recommended_cap"] is not None and d["recommended_cap"] != d["current_default"]:
        ax.axvline(d["recommended_cap"], color="tab:purple", linestyle=":", label=f"recommended {d['recommended_cap']}")
    ax.set_xlabel("expert intermediate size Dff")
    ax.set_ylabel("fused / fallback throughput")
    ax.set_title(f"{data['host']} {data['backend']} under {data['library_pin']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
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
