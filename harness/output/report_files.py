"""Writing one run's report: the addendum, its sidecar record, the plot, the whole-model runs in mlxcel's sweep
layout (`<run-id>-mlxcel.csv`) and, when the decision changes an mlxcel default, the patch of
`src/models/switch_layers.rs` — each beside the addendum under the name its record links to, and never over a
stored file or another run's addendum (the refusals).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

from harness.analysis.decision.decision_json import decision_from_json
from harness.analysis.decision.decision_record import Decision
from harness.analysis.decision.pipeline import Analysis, Options
from harness.config.schema import kind_meaning
from harness.errors import InputError
from harness.output.addendum.addendum_markdown import render_markdown
from harness.output.addendum.report_build import build_report_data, read_report_input, whole_model_rows
from harness.output.addendum.report_data import ReportContext, ReportData, read_sidecar
from harness.output.mlxcel_source import MlxcelSource, cap_patch
from harness.output.plots.addendum_plot import write_plot
from harness.output.report_links import project_root
from harness.runs.formats import write_text_atomic
from harness.runs.mlxcel_csv import BUILD_COLUMNS, round_passes, round_positions, to_mlxcel_csv
from harness.runs.rundir import refuse_stored
from harness.runs.summary_columns import SummaryCol

ELSEWHERE = "write the report somewhere else (--out / --report-dir)"


class WrittenReport(NamedTuple):
    """What write_report wrote, so a command prints from it rather than reading the files back: the addendum's and
    the plot's paths, the overall decision, and the record the sidecar holds (its `files`: the links it wrote)."""

    addendum: Path
    plot: Path
    decision: Decision
    record: ReportData

    @property
    def markdown(self) -> str:
        """The addendum's text, the markdown of its record: write_report writes this, and a command that inserts the
        addendum elsewhere (`moecal report --append-to`) takes it from here rather than reading the file back."""
        return render_markdown(self.record)


def write_report(
    input_path: str | Path,
    out_dir: str | Path = "reports",
    previous: str | Path | None = None,
    options: Options = Options(),
    date: str | None = None,
    mlxcel: MlxcelSource | None = None,
    overrides: dict[str, str] | None = None,
    link_base: Path | None = None,
    analysed: Analysis | None = None,
) -> WrittenReport:
    """Addendum, sidecar, plot, mlxcel CSV and (when a default changes) the switch_layers.rs patch into `out_dir`;
    returns what it wrote (WrittenReport: what a sweep and `moecal report` print). `overrides` and
    `analysed` (the caller's analysis of the input, handed down): report_build.read_report_input; `link_base`:
    report_build.build_report_data.

    Refuses (InputError) to overwrite a stored addendum or one written for another run's data."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report_input = read_report_input(input_path, options, mlxcel, overrides, analysed)
    data = build_report_data(report_input, project_root(out_dir), previous, date, out_dir, link_base)
    # every file is written beside the addendum under its own name; `files` holds the links to them
    paths = {name: out_dir / Path(link).name for name, link in data.files.written().items()}
    md_path = paths["addendum"]
    _refuse_overwrite(md_path, data.raw_data)
    for name in ("plot", "sidecar", "mlxcel_csv", "patch"):
        if name in paths:
            refuse_stored(paths[name], ELSEWHERE)
    refuse_stored(md_path, ELSEWHERE)  # also: never through a link
    png_path = write_plot(data, paths["plot"])
    if "mlxcel_csv" in paths:
        write_text_atomic(paths["mlxcel_csv"], mlxcel_csv(report_input.analysis, data))
    d = data.decision
    if "patch" in paths:
        cap = d["recommended_cap"]
        assert cap is not None  # a patch is written only for a move to a cap (report_build: `changes`)
        patch = cap_patch(_source(data, mlxcel), {data.backend: cap})
        write_text_atomic(paths["patch"], patch)
    write_text_atomic(paths["sidecar"], json.dumps(data.to_json(), indent=1, ensure_ascii=False) + "\n")
    written = WrittenReport(md_path, png_path, decision_from_json(d), data)
    write_text_atomic(md_path, written.markdown)
    return written


def _source(data: ReportData, mlxcel: MlxcelSource | None) -> MlxcelSource:
    """The tree the patch targets: the one read, else the published defaults recorded in the data."""
    if mlxcel is not None:
        return mlxcel
    assert data.mlxcel is not None  # a patch is written only where a tree is targeted (report_build: `changes`)
    return MlxcelSource(dict(data.mlxcel["caps"]), checked=False)


def mlxcel_csv(analysis: Analysis, data: ReportData) -> str:
    """The whole-model points' runs in mlxcel's sweep layout, with a `#` header in the style of mlxcel's published
    sweeps and the `# key: value` lines `moecal crossover` needs to read it back to the same decision (the current
    default, the models that were null for a reason the layout has no column for, and each run's position in its
    round, so the read-back pairs the arms by round as the sweep's own analysis does). `analysis`: the report's."""
    summary = analysis.summary[whole_model_rows(analysis.summary)]
    samples = analysis.samples
    assert samples is not None  # the CSV is written only for a run with its runs at hand (report_build: `csv`)
    ctx = data.context
    prose = [
        "# Fused decode-MoE vs fallback Dff crossover sweep (moecal).",
        f"# Hardware: {_one_line(ctx.get('device', 'not recorded'))}. Library: {_one_line(data.library_pin)}.",
        f"# Harness: {_one_line(_csv_harness(ctx, set(summary['workload'].astype(str))))}; interleaved rounds.",
        *(f"# {arm} side forced with {_one_line(how)}." for arm, how in ctx.get("arms", {}).items() if arm != "null"),
        "# decode tok/s; run k of both sides is round k. NA = the run did not happen.",
    ]
    nulls = {
        str(row["model"]): str(row[SummaryCol.REASON])
        for _, row in summary.iterrows()
        if row[SummaryCol.VERDICT] == "null" and str(row["quant_mode"] or "affine") == "affine"
    }
    # a point measured by switch keeps its class on the way back (the family ignores the cap), the rest are null
    ignored = {m: analysis.point_facts.reasons[m] for m in nulls if analysis.point_facts.of(m) == "switch"}
    nulls = {m: why for m, why in nulls.items() if m not in ignored}
    keys = {
        "run_id": analysis.provenance.get("run_id", ""),
        "backend": data.backend,
        "device": ctx.get("device", ""),
        "host": data.host,
        "library_pin": data.library_pin,
        "current_default": analysis.current_default if analysis.current_default is not None else "",
        "cap_env": analysis.cap_env,
        **{column: analysis.provenance[column] for column in BUILD_COLUMNS if analysis.provenance.get(column)},
        **({"expect_null": nulls} if nulls else {}),
        **({"cap_ignored": ignored} if ignored else {}),
        "round_positions": round_positions(samples, summary),
        "round_passes": round_passes(samples, summary),
    }
    return "\n".join(prose) + "\n" + to_mlxcel_csv(samples, summary, keys)


def _csv_harness(ctx: ReportContext, workloads: set[str]) -> str:
    """What produced the exported points: the benchmark command, or the built-in kind's own words (moecal's
    synthetic decoder)."""
    if "bench_command" in ctx:
        return str(ctx["bench_command"])
    described = {kind_meaning(w).description for w in workloads}
    return described.pop() or "not recorded" if len(workloads) == 1 else "not recorded"


def _one_line(text: object) -> str:
    return re.sub(r"[\x00-\x1f\x7f]+", " ", str(text))


def _refuse_overwrite(md_path: Path, raw_data: str) -> None:
    """A stored addendum, or one of another run, is never replaced; re-reporting the same run may refresh its own."""
    if not md_path.exists():
        return
    refuse_stored(md_path, ELSEWHERE)
    try:
        other = (read_sidecar(md_path) or {}).get("raw_data")
    except InputError:
        other = None
    if other != raw_data:
        raise InputError(str(md_path), "", f"holds the addendum of {other or 'something else'}, not {raw_data}")
