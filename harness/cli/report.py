"""`moecal report INPUT`: the design-doc addendum (markdown) and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.cli.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    GridOpt,
    InterpolationOpt,
    MarginOpt,
    RunsArg,
    build_options,
)
from harness.errors import InputError
from harness.thresholds import CONFIDENCE, DEFAULT_GRID, MARGIN


def report(
    input_paths: RunsArg,
    out: Annotated[Path, typer.Option(metavar="DIR", help="folder for the addendum and the plot")] = Path("reports"),
    previous: Annotated[
        Path | None,
        typer.Option(metavar="RUN", help="an earlier run (any input form) to compare with", show_default=False),
    ] = None,
    exclude: ExcludeOpt = None,
    current_default: CurrentDefaultOpt = None,
    grid: GridOpt = DEFAULT_GRID,
    interpolation: InterpolationOpt = "linear",
    confidence: ConfidenceOpt = CONFIDENCE,
    margin: MarginOpt = MARGIN,
    mlxcel_src: Annotated[
        Path | None,
        typer.Option(
            "--mlxcel-src",
            help="an mlxcel checkout: its FUSED_MOE_MAX_DFF_* caps are the current defaults, its MLX pin is stated, "
            "and the switch_layers.rs patch targets it (without it: the published defaults, unchecked)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write one run's addendum and plot, or one per-backend defaults addendum over several runs.

    One run: `<run-id>-dff-crossover.md` and `.png` into --out (never over another run's addendum). Several runs
    (backends, devices): `<date>-<backends>-dff-defaults.md` instead (no plot). Beside the addendum: its record
    `<run-id>.json`, the runs in mlxcel's sweep layout `<run-id>-mlxcel.csv` and, when a Metal or CUDA default
    changes, a patch of mlxcel's src/models/switch_layers.rs.
    """
    from harness.analysis.backend_defaults import run_checks
    from harness.output.addendum import read_sidecar, write_report
    from harness.output.defaults_addendum import print_defaults, write_defaults
    from harness.output.knob_report import write_knob_report
    from harness.output.mlxcel_source import read_source

    options = build_options(exclude, confidence, margin, current_default, grid, interpolation)
    source = read_source(mlxcel_src) if mlxcel_src is not None else None
    if len(input_paths) > 1:
        if previous is not None:
            raise InputError("--previous", str(previous), "compares one run with another; give a single RUN")
        md_path, defaults = write_defaults(input_paths, out, options, source)
        print_defaults(defaults, typer.echo)
        typer.echo(f"addendum → {md_path}")
        return
    md_path, png_path, decision = write_report(input_paths[0], out, previous, options, mlxcel=source)
    for line in run_checks(input_paths[0]):
        typer.echo(line)
    typer.echo(f"addendum → {md_path}\nplot     → {png_path}\ndecision: {decision.action} — {decision.reason}")
    knobs = write_knob_report(input_paths[0], md_path, options)  # a knob sweep: the crossover per setting
    if knobs:
        typer.echo(f"knobs    → {knobs[0]}\nknobs plot → {knobs[1]}")
    patch = (read_sidecar(md_path) or {}).get("files", {}).get("patch")
    if patch:
        typer.echo(f"patch    → {md_path.parent / patch}")
    if decision.apply:
        typer.echo(f"apply: {decision.apply}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
