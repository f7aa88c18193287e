"""`moecal summarize INPUT`: per-point statistics, written to summary.csv (and optionally an mlxcel CSV).

A stored run (harness.runs.rundir) is read, never written: its summary.csv stays as committed unless --out names
another file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from harness.cli.analysis_options import (
    ConfidenceOpt,
    ExcludeOpt,
    InputArg,
    JsonOpt,
    MarginOpt,
    build_options,
)
from harness.cli.heap import reuse_freed_memory
from harness.errors import InputError
from harness.json_output import write_json


def summarize(
    input_path: InputArg,
    exclude: ExcludeOpt = None,
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    out: Annotated[
        Path | None,
        typer.Option(metavar="CSV", help="summary.csv to write (default: INPUT/summary.csv for a run directory)"),
    ] = None,
    mlxcel: Annotated[
        Path | None, typer.Option(metavar="CSV", help="also write the summary as an mlxcel sweep CSV here")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Medians, the fused/fallback estimate with its t interval, and a verdict against the margin, per point."""
    from harness.analysis.decision.pipeline import analyse, save_summary
    from harness.analysis.points.inputs import load_input
    from harness.output.tables.summary_table import print_summary, with_kind
    from harness.runs.formats import write_text_atomic
    from harness.runs.mlxcel_csv import to_mlxcel_csv
    from harness.runs.rundir import RunDirectory, refuse_stored, stored_reason

    reuse_freed_memory()  # a million-row input's analysis: its freed columns reused, not faulted in again
    options = build_options(exclude, confidence, margin, inputs=[input_path])
    loaded = load_input(input_path)
    analysis = analyse(loaded, options)
    console = Console(stderr=as_json)  # with --json, stdout holds the one JSON object and nothing else
    if as_json:
        write_json({"points": with_kind(analysis.as_json()["points"]), **options.settings()}, sys.stdout)
    else:
        print_summary(analysis.summary, f"{input_path}: fused/fallback per point", console, options.policy.confidence)
    if out is None and input_path.is_dir():
        if stored_reason(input_path) is None:
            out = RunDirectory(input_path).summary
        else:  # a stored baseline keeps the summary it was committed with
            console.print(f"{input_path} is a stored run: its summary.csv is left as it is (--out to write one)")
    for path, option in ((out, "--out"), (mlxcel, "--mlxcel")):  # every output checked before any is written
        if path is not None:
            refuse_stored(path, f"choose another {option}")
            if path.is_dir():
                raise InputError(str(path), option, "is a directory; name the CSV file to write")
    if mlxcel is not None and loaded.samples is None:
        raise InputError(str(input_path), "--mlxcel", "the mlxcel format needs per-run samples, not a summary")
    if out is not None:
        console.print(f"summary → {save_summary(analysis, out)}")
    if mlxcel is not None and loaded.samples is not None:  # (refused above without samples)
        write_text_atomic(mlxcel, to_mlxcel_csv(loaded.samples, analysis.summary, analysis.provenance))
        console.print(f"mlxcel CSV → {mlxcel}")


def register(app: typer.Typer) -> None:
    app.command("summarize")(summarize)
