"""`moecal export --format FMT RUN [--out FILE]`: one run's decision for CI dashboards and mlxcel's CSV tools."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    InputArg,
    MarginOpt,
    build_options,
)

FORMAT_HELP = (
    "github-action-benchmark (customBiggerIsBetter JSON), bencher (Bencher Metric Format JSON), or "
    "compare-bench-csv (mlxcel's compare_bench_csv.py layout: one CSV per arm)"
)


def export(
    input_path: InputArg,
    fmt: Annotated[str, typer.Option("--format", metavar="FORMAT", help=FORMAT_HELP, show_default=False)],
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="the JSON file to write (default: standard output); for compare-bench-csv the folder of the two "
            "CSVs (default: the working folder)",
            show_default=False,
        ),
    ] = None,
    exclude: ExcludeOpt = None,
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    current_default: CurrentDefaultOpt = None,
) -> None:
    """The decision's crossover with its interval and each point's ratio with its bounds, for CI dashboards.

    Null points and points without an estimate are left out (they carry no ratio); an open end of the crossover's
    interval has no bound. compare-bench-csv writes `<backend>_<host>_moecal-fallback_<date>.csv` and `…-fused…`:
    `compare_bench_csv.py --before FALLBACK --after FUSED` then prints each point's fused/fallback ratio of medians.
    """
    from harness.analysis.comparison.backend_defaults import load_run
    from harness.errors import InputError
    from harness.output.bench_export import FORMATS, export_files, run_label, write_export

    if fmt not in FORMATS:
        raise InputError("--format", fmt, f"one of {', '.join(FORMATS)}")
    options = build_options(exclude, confidence, margin, current_default, inputs=[input_path])
    run = load_run(input_path, options)
    label = run_label(run.analysis.provenance, run.backend, run.device)
    files = export_files(fmt, run.analysis.as_json(), label)  # type: ignore[arg-type]
    json_format = fmt != "compare-bench-csv"
    if json_format and out is None:
        typer.echo(files[0][1])
        return
    for path in write_export(files, out, single_name=json_format):
        typer.echo(f"export → {path}")


def register(app: typer.Typer) -> None:
    app.command("export")(export)
