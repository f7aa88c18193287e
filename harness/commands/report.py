"""`moecal report INPUT`: the design-doc addendum (markdown) and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harness.commands.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    GridOpt,
    InputArg,
    InterpolationOpt,
    SeedOpt,
    build_options,
)
from harness.report import write_report


def report(
    input_path: InputArg,
    out: Annotated[Path, typer.Option(help="folder for the addendum and the plot")] = Path("reports"),
    previous: Annotated[
        Path | None, typer.Option(help="an earlier run (any input form) to compare with", show_default=False)
    ] = None,
    exclude: ExcludeOpt = None,
    current_default: CurrentDefaultOpt = None,
    grid: GridOpt = 256,
    interpolation: InterpolationOpt = "linear",
    confidence: ConfidenceOpt = 0.95,
    seed: SeedOpt = 0,
) -> None:
    """Write `<run-id>-dff-crossover.md` and `.png` into --out (never over another run's addendum)."""
    options = build_options(exclude, confidence, seed, current_default, grid, interpolation)
    md_path, png_path, decision = write_report(input_path, out, previous, options)
    typer.echo(f"addendum → {md_path}\nplot     → {png_path}\ndecision: {decision.action} — {decision.reason}")
    if decision.apply:
        typer.echo(f"apply: {decision.apply}")


def register(app: typer.Typer) -> None:
    app.command("report")(report)
