"""Building the report data (harness.output.addendum.report_data.ReportData) from a run: every number and string the
addendum states, re-derivable from the inputs and options it records.

A report reads and analyses its run once (`read_report_input`); a command that analysed the run already (`moecal
sweep`, for its table and summary.csv) hands that analysis down instead of having it re-derived. Paths in the record
are relative to the project root (the nearest folder above with `.git` or `pyproject.toml`); the links in `files`
are relative to the link base, so the addendum's links work where it lies.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import number_format
from harness.analysis.comparison.knobs import KnobsJSON, analyse_knobs
from harness.analysis.comparison.regression import join_points
from harness.analysis.comparison.two_runs import compare_runs
from harness.analysis.decision.decision_facts import (
    MLXCEL_CONSTANTS,
    cap_words,
    constant_words,
    expected_null,
    tree_cap,
)
from harness.analysis.decision.pipeline import Analysis, Options, analyse, analyse_path
from harness.analysis.evidence.dispatch_evidence import contradictions
from harness.analysis.points.inputs import load_input
from harness.config.schema import kind_meaning
from harness.output.addendum.addendum_heading import context, library_under_test, report_date, with_overrides
from harness.output.addendum.report_data import ADDENDUM_SUFFIX, PreviousJSON, ReportData, ReportFiles
from harness.output.addendum.run_findings import run_findings
from harness.output.mlxcel_source import MlxcelSource, MlxcelTreeJSON, known_defaults
from harness.output.report_links import link_target, project_root, relative_path, shown_text
from harness.runs.formats import SAMPLES_FILE
from harness.runs.provenance_keys import UNTIL_DECIDED, Provenance
from harness.runs.rundir import SUMMARY_FILE, RunDirectory
from harness.runs.summary_columns import SummaryCol


@dataclass(frozen=True)
class ReportInput:
    """The run a report is about, read and analysed once: its path, the analysis (of the input's provenance with the
    command line's `overrides` on top, at the options the report records), and the mlxcel tree the decision targets
    (None for a backend mlxcel does not have)."""

    path: Path
    analysis: Analysis
    overrides: dict[str, str]
    tree: MlxcelTreeJSON | None


def read_report_input(
    input_path: str | Path,
    options: Options = Options(),
    mlxcel: MlxcelSource | MlxcelTreeJSON | None = None,
    overrides: dict[str, str] | None = None,
    analysed: Analysis | None = None,
) -> ReportInput:
    """Read and analyse `input_path` for a report, or take `analysed`, the caller's analysis of it (no overrides,
    the same options: a sweep's end, which analysed the run for its table and summary).

    `mlxcel` is the tree the decision targets (a read tree, or the stored record when check-reports re-derives):
    its cap for the run's backend is the current default unless --current-default says otherwise. `overrides`
    (harness.cli.provenance_options: --date, --host, --backend, --gpu, --library-pin) correct the input's provenance."""
    overrides = {k: str(v) for k, v in (overrides or {}).items() if v not in (None, "")}
    if analysed is not None and overrides:
        raise ValueError("an analysis handed down cannot take provenance overrides: they change what it read")
    if analysed is None:
        loaded = load_input(input_path)
        provenance = with_overrides(loaded.provenance, overrides)
        options, targeted = _targeted(str(provenance.get("backend") or "unknown-backend"), options, mlxcel)
        analysed = analyse(loaded._replace(provenance=provenance), options)
    else:
        options, targeted = _targeted(str(analysed.provenance.get("backend") or "unknown-backend"), options, mlxcel)
        if analysed.options != options:
            raise ValueError(f"the analysis handed down used {analysed.options}, the report needs {options}")
    return ReportInput(Path(input_path), analysed, overrides, targeted)


def _targeted(
    backend: str, options: Options, mlxcel: MlxcelSource | MlxcelTreeJSON | None
) -> tuple[Options, MlxcelTreeJSON | None]:
    """The options with the cap in force taken from a read --mlxcel-src tree (when the command line gave none), and
    the tree the decision targets (the read one, else the published defaults; None for a backend with no constant
    of its own to patch: ROCm shares CUDA's)."""
    tree = mlxcel.as_json() if isinstance(mlxcel, MlxcelSource) else mlxcel or known_defaults().as_json()
    if tree["checked"] and options.current_default is None and tree_cap(tree["caps"], backend) is not None:
        source = f"the --mlxcel-src tree's {constant_words(backend)}"
        options = dataclasses.replace(options, current_default=tree_cap(tree["caps"], backend), cap_source=source)
    return options, tree if backend in MLXCEL_CONSTANTS else None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower() or "unknown"


def _report_stem(provenance: Provenance, date: str, host: str, backend: str) -> str:
    """<run id>: one run's files can never overwrite another run's. Inputs without a run id (a bare summary.csv)
    fall back to <date>-<host>-<backend>[-<config>]."""
    run_id = re.sub(r"[^A-Za-z0-9._-]+", "-", str(provenance.get("run_id") or "")).strip("-.")
    if run_id:  # verbatim (already file-name-safe when moecal made it), so the names match the run directory
        return run_id
    return "-".join(_slug(p) for p in (date, host, backend, str(provenance.get("config_name") or "")) if p)


def _previous(analysis: Analysis, previous: Analysis, root: Path, previous_path: Path) -> PreviousJSON:
    pairs, dropped = join_points(previous.summary, analysis.summary)
    before = previous.as_json()
    return {
        "raw_data": relative_path(previous_path, root),
        "date": report_date(previous.provenance, previous_path),
        "library_pin": str(previous.provenance.get("library_pin") or "unknown library"),
        "crossover_dff": before["crossover_dff"],
        "ci_low": before["ci_low"],
        "ci_high": before["ci_high"],
        "outcome": before["outcome"],
        "recommended_cap": before["recommended_cap"],
        "action": before["action"],
        "points": [
            {
                "model": str(analysis.summary["model"].iloc[c]),
                "dff": int(analysis.summary["dff"].iloc[c]),
                "ratio_before": number_format.json_exact(previous.summary[SummaryCol.ESTIMATE].iloc[b]),
                "ratio_now": number_format.json_exact(analysis.summary[SummaryCol.ESTIMATE].iloc[c]),
                "verdict_before": str(previous.summary[SummaryCol.VERDICT].iloc[b]),
                "verdict_now": str(analysis.summary[SummaryCol.VERDICT].iloc[c]),
            }
            for b, c in pairs
        ],
        "not_compared": len(dropped),
        # the crossover shift with its interval and each point's change (harness/analysis/comparison/two_runs.py), as
        # `moecal compare`
        "comparison": compare_runs(previous, analysis, analysis.options.policy.confidence).as_json(),
    }


def _files(stem: str, raw: Path, md_dir: Path, link_base: Path, mlxcel_csv: bool, patch: bool) -> ReportFiles:
    """The addendum's links, as seen from `link_base` (report_links): the files written beside it in `md_dir`
    (write_report writes each under its name), and the raw data (None when it lies outside `link_base`'s
    project: then the text names it, `raw_name`, without a link that would break)."""
    raw = RunDirectory(raw).samples if raw.is_dir() else raw

    def beside(name: str) -> str:
        return link_target(md_dir / name, link_base) or name

    return ReportFiles(
        addendum=beside(f"{stem}{ADDENDUM_SUFFIX}"),
        plot=beside(f"{stem}-dff-crossover.png"),
        sidecar=beside(f"{stem}.json"),
        mlxcel_csv=beside(f"{stem}-mlxcel.csv") if mlxcel_csv else None,
        patch=beside(f"{stem}-switch_layers.diff") if patch else None,
        raw_data=link_target(raw, link_base),
        raw_name=f"{raw.parent.name}/{raw.name}" if raw.name in (SAMPLES_FILE, SUMMARY_FILE) else raw.name,
    )


def whole_model_rows(summary: pd.DataFrame) -> np.ndarray:
    """Rows of whole-model points (their kind says so: decode, command): what mlxcel's per-model sweep layout
    carries."""
    return np.array([kind_meaning(w).whole_model for w in summary["workload"].astype(str)], dtype=bool)


def build_report_data(
    report_input: ReportInput,
    root: Path,
    previous: str | Path | None = None,
    date: str | None = None,
    md_dir: Path | None = None,
    link_base: Path | None = None,
) -> ReportData:
    """The record of one run's addendum (links relative to `link_base`, default `md_dir`, the addendum's folder)."""
    analysis, input_path = report_input.analysis, report_input.path
    provenance = analysis.provenance
    host = str(provenance.get("host") or "unknown-host")
    backend = str(provenance.get("backend") or "unknown-backend")
    date = date or report_date(provenance, input_path)
    md_dir = md_dir or root
    link_base = link_base or md_dir
    source_root = project_root(input_path.parent)  # recorded paths are shown relative to the run's project
    d = analysis.as_json()
    tree = report_input.tree
    changes = d["action"] in ("raise", "lower", "set") and d["recommended_cap"] is not None and tree is not None
    csv = analysis.samples is not None and bool(whole_model_rows(analysis.summary).any())
    wrong = contradictions(analysis.verification, expected_null(provenance))
    stopped = provenance.get(UNTIL_DECIDED)  # an object where present (the registry checks it where meta.json is read)
    return ReportData(
        date=date,
        host=host,
        backend=backend,
        library_pin=shown_text(library_under_test(provenance, tree), source_root),
        raw_data=relative_path(input_path, root),
        run_notes=run_findings(input_path, d),
        overrides=report_input.overrides,
        link_base=relative_path(link_base, md_dir),
        options=analysis.options,
        files=_files(_report_stem(provenance, date, host, backend), input_path, md_dir, link_base, csv, changes),
        context={**context(provenance, source_root), **cap_words(analysis.cap)},
        mlxcel=tree,
        decision=d,
        previous=(
            _previous(analysis, analyse_path(previous, analysis.options), root, Path(previous)) if previous else None
        ),
        # how an until-decided sweep stopped (harness.measure.allocation), absent for a fixed-protocol run
        until_decided=dict(stopped) if isinstance(stopped, Mapping) and stopped else None,
        # where the dispatch pass proved the family table wrong, either way: said, never silently overridden
        table_wrong=wrong or None,
        # a knob sweep (meta.json `knob_reference`): the joint (setting, cap) recommendation reaches the addendum
        knobs=_knobs(input_path, analysis, backend) if provenance.get("knob_reference") else None,
    )


def _knobs(input_path: Path, analysis: Analysis, backend: str) -> KnobsJSON | None:
    result = analyse_knobs(input_path, analysis.options)
    return None if result is None else result.record(backend)
