"""The addendum's heading and provenance paragraph: when, where and under what library the runs were measured,
how each side was forced, whether the runs were interleaved, and where the raw data lies.

Kept apart from the addendum's body (harness/output/addendum/addendum_markdown.py: table, findings, decision) because
provenance has its own sources of truth: meta.json for our sweeps (the binary's version and commit,
harness.runs.provenance's keys), the prose header of mlxcel's published CSVs, and the overrides given on the command
line (`--date`, `--host`, `--backend`, `--gpu`, `--library-pin`) for what no file records. Every statement here is
read from the report data (the sidecar), so `moecal check-reports` re-renders it identically; nothing is assumed,
and what is not known says so ("undated", "not recorded") instead of today's date or this machine's name. The words
for what ran and the library under test follow the workload kind's registry entry (harness.config.kind_meaning).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from harness.analysis.decision.decision_json import PointJSON
from harness.analysis.decision.decision_words import family_words
from harness.config.backend_specs import BACKENDS
from harness.config.schema import kind_meaning
from harness.output.addendum.report_data import CONTEXT_KEYS, ContextText, ReportContext, ReportData
from harness.output.markdown_text import md_code, md_text
from harness.output.mlxcel_source import MlxcelTreeJSON
from harness.output.report_links import shown_path, shown_text
from harness.runs import provenance as prov
from harness.runs.formats import FALLBACK, FUSED, NULL
from harness.runs.mlxcel_csv import build_pin
from harness.runs.provenance_keys import LIBRARY_COMMIT, LIBRARY_VERSION, MLX_PIN, Provenance
from harness.runs.summary_columns import SummaryCol

UNDATED = "undated"
# the array libraries each backend's built-in workloads run on (a kind whose meaning names its own runs those)
BACKEND_PACKAGES = {spec.name: spec.libraries for spec in BACKENDS}
# recorded strings that may hold paths of the machine that measured (shown relative to the project, or by name)
PATH_KEYS: tuple[ContextText, ...] = ("command", "bench_command", "notes", "config_path")
HARDWARE_LABELS: tuple[tuple[ContextText, str], ...] = (
    ("hardware", ""),
    ("device", ""),
    ("gpu", "GPU"),
    ("driver", "driver"),
    ("cuda", "CUDA"),
    ("cpu", "CPU"),
)
ORDER_WORDS = {"rotate": " (order rotating)", "fixed": " (fixed order)", "random": " (random order)"}


def with_overrides(provenance: Provenance, overrides: dict[str, str] | None) -> Provenance:
    """The input's provenance with the command line's corrections on top (empty values ignored)."""
    return {**provenance, **{k: v for k, v in (overrides or {}).items() if v not in (None, "")}}


def report_date(provenance: Provenance, source: Path | None = None) -> str:
    """yyyy-mm-dd of the measurement: the record's date, else one in the input's file name, else UNDATED — never
    the day the report happens to be written."""
    found = prov.iso_date(str(provenance.get("date") or ""))
    if not found and source is not None:
        found = prov.iso_date(Path(source).name)
    return found or UNDATED


def library_under_test(provenance: Provenance, tree: MlxcelTreeJSON | None) -> str:
    """The heading's "under …": the binary's own version and commit (and its MLX pin) when the sweep recorded
    them, else the mlxcel tree given with --mlxcel-src for a run of an external program, else the packages the
    workload kind names as its own (with the versions the run recorded), else the recorded pin (the backend's)."""
    version, commit = provenance.get(LIBRARY_VERSION), provenance.get(LIBRARY_COMMIT)
    mlx = provenance.get(MLX_PIN) or (tree.get("mlx_pin") if tree else None)
    if version or commit:
        text = str(version or "the benchmark's build")
        # a binary's own version line often names its commit and MLX already (`… 0.6.0 (mlxcel 77afbb1d, MLX
        # 81ba1c6a)`): each fact is said once
        if commit and str(commit)[:7] not in text:
            text += f" (commit {str(commit)[:12]})"
        return text + (f", MLX pin {mlx}" if mlx and str(mlx)[:7] not in text else "")
    if provenance.get("mlxcel_version") or provenance.get("mlxcel_commit"):  # an mlxcel CSV naming its build
        return build_pin(provenance)
    kind = kind_meaning(provenance.get("workload"))
    external_run = kind.external and not provenance.get("source_format")
    if external_run and tree and tree.get("checked") and tree.get("version"):
        return f"mlxcel {tree['version']}" + (f", MLX pin {mlx}" if mlx else "")
    if kind.libraries:
        recorded = provenance.get("packages")
        packages = recorded if isinstance(recorded, dict) else {}
        return ", ".join(f"{lib} {packages[lib]}" if packages.get(lib) else lib for lib in kind.libraries)
    return str(provenance.get("library_pin") or "unknown library")


def _ran(packages: Mapping[object, object], backend: str, workload: str) -> dict[str, str]:
    """moecal, Python and the array libraries the measurement ran on (installed-but-unused ones are left out)."""
    own = kind_meaning(workload).libraries
    libraries = own if own is not None else BACKEND_PACKAGES.get(backend, ())
    return {
        str(k): str(v)
        for k, v in packages.items()
        if k in ("moecal", "python") or any(str(k).startswith(lib) for lib in libraries)
    }


def context(provenance: Provenance, root: Path) -> ReportContext:
    """The provenance the addendum shows (flat strings, plus the package and arm dicts), with every recorded path
    shown relative to the project `root` or by name (report_links)."""
    out: ReportContext = {}
    for key in CONTEXT_KEYS:
        if provenance.get(key) not in (None, ""):
            out[key] = str(provenance[key])
    for key in PATH_KEYS:
        if key in out:
            out[key] = shown_text(out[key], root)
    if "config_path" in out:
        out["config_path"] = shown_path(out["config_path"], root)
    missing = prov.backend_device_missing(provenance)
    if missing:
        out["device_note"] = missing
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
        out["synthetic"] = {str(k): shown_text(str(v), root) for k, v in synthetic.items()}
    return out


def heading(data: ReportData, action_value: str) -> str:
    """`### <date> addendum: <host> <backend> fused-MoE Dff crossover under <library>: <action> <value>`, with
    "(measured without a cuda device …)" when the run's label names a device its machine did not have."""
    when = "Undated addendum" if data.date == UNDATED else f"{data.date} addendum"
    note = data.context.get("device_note")
    caveat = f" ({md_text(note)})" if note else ""
    return (
        f"### {when}: {md_text(data.host)} {md_text(data.backend)} fused-MoE Dff crossover under "
        f"{md_text(data.library_pin)}{caveat}: {action_value}"
    )


def family_namer(ctx: ReportContext) -> Callable[[str], str]:
    """Family label → the words a report uses for it, given the run's recorded context: `mlxcel models` when the
    benchmark (its command line, or an imported file's format) is mlxcel's. One rule for the addendum and the plot."""
    bench = ctx.get("bench_command") or ctx.get("source_format") or ""
    return lambda label: family_words(label, bench)


def _hardware(ctx: ReportContext) -> str:
    parts = [
        f"{label} {md_text(ctx[key])}"
        for key, label in HARDWARE_LABELS
        if key in ctx and not (key == "cpu" and ctx.get("device", "").startswith(str(ctx[key])))
    ]
    if "os" in ctx:
        parts.append(md_text(ctx["os"]))
    text = ", ".join(p.strip() for p in parts) or "not recorded in the input"
    return text + (f"; {md_text(ctx['device_note'])}" if "device_note" in ctx else "")


def _versions(data: ReportData) -> str:
    """The library under test, then only the packages the measurement ran on (never an installed-but-unused one)."""
    ctx = data.context
    mlxcel = data.mlxcel
    parts = [f"library under test: {md_text(data.library_pin)}"]
    if mlxcel and mlxcel.get("checked"):
        tree = f"mlxcel {md_text(mlxcel['version'])}" if mlxcel.get("version") else "mlxcel"
        pin = f", MLX pin {md_code(mlxcel['mlx_pin'])}" if mlxcel.get("mlx_pin") else ""
        parts.append(f"{tree}{pin} (read from the tree given with --mlxcel-src)")
    packages = ctx.get("packages") or {}
    if packages:
        parts.append("packages that ran: " + ", ".join(f"{md_text(k)} {md_text(v)}" for k, v in packages.items()))
    return "; ".join(parts)


def _harness(ctx: ReportContext, kinds: set[str]) -> str:
    """What ran: the benchmark command (prompt and token counts are in it) or the built-in workload(s) in their
    kinds' own words (`kinds`: those of the points; a layer config's decode block is a second one), and moecal
    (which drove the runs, or for imported data only analysed them)."""
    moecal = "moecal"
    if "harness_commit" in ctx:
        dirty = ", uncommitted changes" if ctx.get("harness_dirty") == "True" else ""
        moecal += f" {ctx['harness_commit'][:12]}{dirty}"
    config = f", config {md_code(ctx['config_path'])}" if "config_path" in ctx else ""
    sweep = f" ({md_code(ctx['command'])}{config})" if "command" in ctx else config
    workload = str(ctx.get("workload", ""))
    if ctx.get("source_format"):
        what = f"imported from an {md_text(ctx['source_format'])}"
        if "bench_description" in ctx:
            what += f" (its header: {md_text(ctx['bench_description'])})"
        return f"{what}; analysed by {moecal}"
    if "bench_command" in ctx:
        what = f"{md_code(ctx['bench_command'])}, one process per run"
    elif description := kind_meaning(workload).description:
        what = description
        for other in sorted(kinds - {workload}):  # a block of another kind in the same config (layer's decode)
            if kind_meaning(other).description:
                what += f"; its {other} block: {kind_meaning(other).description}"
    else:
        what = f"the {md_text(workload or 'unknown')} workload"
    return f"{what}; driven by {moecal}{sweep}"


def _arms(ctx: ReportContext) -> str:
    """`Each side forced with fallback `X=1`, fused `X=20000`` (the design doc's sentence), fallback side first."""
    arms = ctx.get("arms")
    if not arms:
        return "How each side was forced: not recorded."
    order = sorted(arms, key=lambda arm: (FALLBACK, FUSED, NULL).index(arm) if arm in (FALLBACK, FUSED, NULL) else 3)
    names = {"null": "A/A (the fallback again)"}
    return "Each side forced with " + ", ".join(f"{names.get(a, md_text(a))} {md_code(arms[a])}" for a in order) + "."


def pairing(points: Sequence[PointJSON], order: str | None) -> str:
    """How the arms were compared, as the statistics did it: per-round pairs (interleaved rounds) or Welch on two
    unpaired samples (runs that were not interleaved, e.g. mlxcel's CSVs, or a round that lost its partner)."""
    methods = {p["dff"]: str(p.get(SummaryCol.METHOD) or "") for p in points if p.get(SummaryCol.METHOD)}
    welch = sorted(dff for dff, method in methods.items() if method.startswith("welch"))
    if methods and len(welch) == len(methods):
        return "; the runs were not interleaved (unpaired Welch)"
    text = " in interleaved rounds" + ORDER_WORDS.get(str(order or ""), "")
    if welch:
        text += f"; unpaired Welch at Dff {', '.join(str(d) for d in welch)} (a round without its partner)"
    return text


def _link(name: str | None, shown: str) -> str:
    return f"[{shown}]({name})" if name else md_code(shown)


def provenance_paragraph(data: ReportData, points: Sequence[PointJSON], kinds: set[str]) -> str:
    """Hardware, versions, harness, runs per side and how they were paired, how each side was forced, and the
    links to the raw data and the record (relative to --link-base; a file outside its project is named, not
    linked)."""
    ctx, files = data.context, data.files
    valid = [p for p in points if p[SummaryCol.VERDICT] not in ("null", "insufficient")]
    runs = sorted({min(p[SummaryCol.N_FUSED], p[SummaryCol.N_FALLBACK]) for p in valid})
    runs_text = f"{runs[0]}–{runs[-1]}" if len(runs) > 1 else (str(runs[0]) if runs else "0")
    raw = [_link(files.raw_data, files.raw_data or files.raw_name)]
    if files.mlxcel_csv:
        raw.append(_link(files.mlxcel_csv, Path(files.mlxcel_csv).name))
    sidecar = _link(files.sidecar, Path(files.sidecar).name)
    return (
        f"Hardware: {_hardware(ctx)}. Versions: {_versions(data)}. Harness: {_harness(ctx, kinds)}. "
        f"{runs_text} runs per side{pairing(valid, ctx.get('order'))}. {_arms(ctx)} "
        f"Raw per-run data: {', '.join(raw)}; machine-readable record: {sidecar}."
    )
