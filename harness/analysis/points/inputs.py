"""Reading what the analysis commands are given: a run directory, a samples.csv, a summary.csv or an mlxcel sweep
CSV — sniffed from the columns, so every command takes any of them. Also writes summary.csv.

Anything unusable becomes an InputError naming the file, the field and the problem (the CLI exits 2), never a
traceback: the check command's exit codes depend on telling "bad input" from "regression".
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pandas as pd

from harness.analysis.evidence import dispatch_evidence
from harness.analysis.evidence.dispatch_evidence import VerificationRecord
from harness.analysis.points.point_summary import pass_columns
from harness.analysis.points.stats import VERDICTS
from harness.errors import InputError
from harness.runs import mlxcel_csv as mlxcel
from harness.runs.formats import (
    LATER_COLUMNS,
    SAMPLE_COLUMNS,
    SAMPLES_FILE,
    first_bad,
    format_provenance,
    frame_csv,
    header_lines,
    numeric_column,
    point_keys,
    positive_column,
    read_csv_text,
    read_frame,
    read_provenance,
    read_samples,
    text_column,
    write_text_atomic,
)
from harness.runs.provenance_keys import Provenance
from harness.runs.rundir import META_FILE, SUMMARY_FILE, RunDirectory
from harness.runs.summary_columns import PASS_COLUMNS, SUMMARY_COLUMNS, SummaryCol


class LoadedInput(NamedTuple):
    """What an analysis reads: the runs and/or the per-point summary, the provenance (meta.json over the CSV's `#`
    header: flat facts about the run, what reports and CSV headers restate), and the run's dispatch verification
    record (harness.analysis.evidence.dispatch_evidence: model → its verification runs), None when the input has none.
    The record is a field of its own rather than a provenance key: it is evidence the analysis uses, not a fact to
    print."""

    samples: pd.DataFrame | None
    summary: pd.DataFrame | None
    provenance: Provenance
    verification: VerificationRecord | None = None


def load_input(path: str | Path, all_settings: bool = False) -> LoadedInput:
    """Samples and/or summary plus provenance (meta.json over the CSV's `#` header) from any supported input; a knob
    sweep's rows at its reference setting only, unless `all_settings` (harness.analysis.comparison.knobs)."""
    path = Path(path)
    if path.is_dir():
        return _load_run_dir(path, all_settings)
    if not path.is_file():
        if path.exists():  # a FIFO, a device, a socket: reading it could block or never end
            raise InputError(str(path), "", "not a regular file (expected a run directory or a CSV)")
        raise InputError(str(path), "", "no such file or directory (expected a run directory or a CSV)")
    columns = _columns(path)
    if mlxcel.is_mlxcel(columns):
        imported = mlxcel.read_mlxcel(path)
        return LoadedInput(imported.samples, None, imported.provenance)
    # a run directory's meta.json beside its CSV is the fuller provenance; its dispatch verification record too
    run_dir = run_dir_of(path)
    meta = RunDirectory(run_dir).read_meta() if run_dir is not None else {}
    record = (dispatch_evidence.read_record(run_dir) or None) if run_dir is not None else None
    if set(SAMPLE_COLUMNS) - set(LATER_COLUMNS) <= set(columns):
        return samples_input(path, read_samples(path), meta, record, all_settings)
    if set(SUMMARY_COLUMNS) <= set(columns):
        return LoadedInput(None, _read_summary(path), {**_provenance(path), **meta}, record)
    if {"round_ratio", "p_value", "verdict"} <= set(columns):  # summary.csv of the earlier bootstrap engine
        raise InputError(
            str(path),
            "columns",
            "a summary.csv of the earlier bootstrap engine, whose intervals this version does not reuse: "
            f"analyse the run's samples instead ({path.parent if path.name == SUMMARY_FILE else 'its samples.csv'})",
        )
    raise InputError(
        str(path), "columns", "not a samples.csv, summary.csv or mlxcel sweep CSV (header: " + ",".join(columns) + ")"
    )


def samples_input(
    path: Path,
    samples: pd.DataFrame,
    meta: Provenance,
    verification: VerificationRecord | None,
    all_settings: bool = False,
) -> LoadedInput:
    """load_input of the samples.csv at `path` from its rows, its run's meta.json provenance and verification record
    as read already (by load_input, or by the sweep's end, which reads each file once)."""
    _check_meta_matches(path, meta, samples)
    provenance = {**_provenance(path), **meta}
    samples = samples if all_settings else at_reference_setting(samples, provenance)
    return LoadedInput(samples, None, provenance, verification)


def run_dir_of(path: Path) -> Path | None:
    """The run directory an input belongs to: itself, or the folder of a samples.csv or summary.csv (whose meta.json
    and verification record describe it); None for any other file."""
    if path.is_dir():
        return path
    return path.parent if path.name in (SAMPLES_FILE, SUMMARY_FILE) else None


def at_reference_setting(samples: pd.DataFrame, provenance: Provenance) -> pd.DataFrame:
    """A knob sweep's rows at its reference setting (meta.json `knob_reference`, the binary's default): the run's
    plain decision is the cap at the setting mlxcel ships; every setting is analysed by
    harness.analysis.comparison.knobs. Rows of one setting only (no knobs, or one value) are returned as they are."""
    settings = samples["knobs"].unique()
    if len(settings) <= 1:
        return samples
    reference = str(provenance.get("knob_reference") or sorted(settings)[0])
    return samples[samples["knobs"] == reference].reset_index(drop=True)


def _check_meta_matches(path: Path, meta: Provenance, samples: pd.DataFrame) -> None:
    """meta.json beside a samples.csv describes the run of those rows: another backend or device there means the
    two files come from different runs, and the report would credit one machine with the other's numbers."""
    if not len(samples):
        return
    for column in ("backend", "device"):
        if column in meta and str(meta[column]) != str(samples[column].iloc[0]):
            raise InputError(
                str(path.parent / META_FILE),
                column,
                f"{meta[column]!r}, but {path} was measured on {samples[column].iloc[0]!r}: they are not one run",
            )


def _load_run_dir(path: Path, all_settings: bool = False) -> LoadedInput:
    run = RunDirectory(path)
    if not run.samples.exists() and not run.summary.exists():
        raise InputError(str(path), "", "a run directory needs samples.csv or summary.csv; neither is there")
    # the same sniffing as for a CSV given directly, so a foreign samples.csv is an InputError, not a KeyError
    return load_input(run.samples if run.samples.exists() else run.summary, all_settings)


def _columns(path: Path) -> list[str]:
    """The column names: the first non-empty line below the `#` header."""
    lines = read_csv_text(path).splitlines()[len(header_lines(path)) :]
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        raise InputError(str(path), "", "empty file: no header row")
    return [c.strip() for c in first.split(",")]


def _provenance(path: Path) -> Provenance:
    """The `# key: value` header, with `packages.x` lines folded back into a `packages` dict like meta.json's."""
    out: dict[str, object] = {}
    for key, value in read_provenance(path).items():
        group, dot, sub = key.partition(".")
        if dot:
            folded = out.setdefault(group, {})
            if isinstance(folded, dict):
                folded[sub] = value
        else:
            out[key] = value
    return out


def _read_summary(path: Path) -> pd.DataFrame:
    """summary.csv, validated like samples: numbers where needed, finite positive throughputs and ratios for every
    non-null point, known verdicts, each point once, one backend and device."""
    frame = read_frame(path)
    for column in (
        "backend",
        "device",
        "workload",
        "model",
        "quant_mode",
        "dtype",
        SummaryCol.VERDICT,
        SummaryCol.REASON,
    ):
        frame[column] = text_column(frame[column])
    first_bad(path, frame, ~frame[SummaryCol.VERDICT].isin(VERDICTS), SummaryCol.VERDICT, "unknown verdict {value!r}")
    valid = frame[SummaryCol.VERDICT] != "null"
    numeric_column(frame, path, "dff", pd.Series(True, frame.index))
    for column in (SummaryCol.RATIO, SummaryCol.FALLBACK_TOK_S, SummaryCol.FUSED_TOK_S):
        numeric_column(frame, path, column, valid)
        positive_column(frame, path, column, valid)
    for column in ("d_model", "n_experts", "top_k", "bits", "group_size", SummaryCol.CI_LOW, SummaryCol.CI_HIGH):
        numeric_column(frame, path, column, None)
    for column in ("backend", "device"):
        if len(frame):
            problem = "{value!r}: a run holds one " + f"{column}, the first row has {frame[column].iloc[0]!r}"
            first_bad(path, frame, frame[column] != frame[column].iloc[0], column, problem)
    keys = point_keys(frame)
    first_bad(path, frame, keys.duplicated(), "dff", "this point ({value}) already has a row")
    frame[SummaryCol.UNSTABLE] = frame[SummaryCol.UNSTABLE].astype(str).str.lower().isin(("true", "1"))
    return pass_columns(frame)


def write_summary_csv(summary: pd.DataFrame, path: Path, provenance: Provenance) -> Path:
    """summary.csv with the provenance header (the settings that produced it included)."""
    kept = summary.drop(columns=[c for c in PASS_COLUMNS if c in summary])  # in memory only (PassCol)
    return write_text_atomic(Path(path), format_provenance(provenance) + frame_csv(kept))
