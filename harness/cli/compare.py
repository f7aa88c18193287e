"""`moecal compare RUN_A RUN_B` (crossover shift and per-point changes between two runs) and `moecal history RUN…`
(crossover and its interval over a series of runs, as a plot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from harness.cli.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    JsonOpt,
    MarginOpt,
    build_options,
)
from harness.cli.run_key_options import AcrossDecodePathsOpt, key_changes
from harness.errors import InputError

RunA = Annotated[Path, typer.Argument(metavar="RUN_A", help="the earlier run (any input form)", show_default=False)]
RunB = Annotated[Path, typer.Argument(metavar="RUN_B", help="the later run (any input form)", show_default=False)]


def compare(
    run_a: RunA,
    run_b: RunB,
    exclude: ExcludeOpt = None,
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    across_decode_paths: AcrossDecodePathsOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Did the crossover move between two runs (pins, commits, machines), and which points changed beyond noise.

    The shift's interval is a parametric bootstrap over both runs' per-point estimates; each point's change is the
    ratio of its two fused/fallback ratios with a Welch t interval.
    """
    from harness.analysis.comparison.two_runs import compare_runs, render_text
    from harness.analysis.decision.pipeline import analyse_path

    options = build_options(exclude, confidence, margin, inputs=[run_a, run_b])
    a, b = analyse_path(run_a, options), analyse_path(run_b, options)
    keyed = key_changes([(str(run_a), a), (str(run_b), b)], across_decode_paths)
    result = compare_runs(a, b, options.policy.confidence)
    if as_json:
        typer.echo(
            json.dumps({"run_a": str(run_a), "run_b": str(run_b), "key_changes": keyed, **result.as_json()}, indent=1)
        )
        return
    for line in [*keyed, *render_text(result, str(run_a), str(run_b))]:
        typer.echo(line)


def history(
    runs: Annotated[list[Path], typer.Argument(metavar="RUN", help="runs in time order", show_default=False)],
    out: Annotated[Path, typer.Option(metavar="PNG", help="the plot to write")] = Path("crossover-history.png"),
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    current_default: CurrentDefaultOpt = None,
    across_decode_paths: AcrossDecodePathsOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Plot the crossover and its interval per run, in the order given (labelled by date and library pin).

    The cap in force (each run's current_default, or --current-default) is drawn as a line."""
    from harness.analysis.decision.pipeline import analyse_path
    from harness.output.plots.history_plot import history_rows, write_history_plot
    from harness.runs.rundir import refuse_stored

    if len(runs) < 2:
        raise InputError("RUN...", " ".join(map(str, runs)), "give at least two runs")
    refuse_stored(out, "choose another --out")  # a link (even a dangling one) or a stored result: refused up front
    options = build_options(None, confidence, margin, current_default, inputs=runs)
    analysed = [(str(r), analyse_path(r, options)) for r in runs]
    keyed = key_changes(analysed, across_decode_paths)
    rows = history_rows(analysed)
    if out.exists():
        raise InputError(str(out), "--out", "exists; moecal never replaces a file, choose another name")
    write_history_plot(rows, out)
    if as_json:
        typer.echo(json.dumps({"plot": str(out), "runs": rows, "key_changes": keyed}, indent=1))
        return
    for line in keyed:
        typer.echo(line)
    for row in rows:
        typer.echo(f"{row['label']}: crossover {row['text']}")
    typer.echo(f"plot → {out}")


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
    app.command("history")(history)
