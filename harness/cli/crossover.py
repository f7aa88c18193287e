"""`moecal crossover INPUT` (table + decision, or `--json`) and `moecal recommend INPUT` (the decision only)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer
from rich.console import Console

from harness.cli.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    GridOpt,
    InterpolationOpt,
    JsonOpt,
    MarginOpt,
    RunsArg,
    build_options,
)
from harness.cli.heap import reuse_freed_memory
from harness.json_output import write_json
from harness.thresholds import DEFAULT_GRID

if TYPE_CHECKING:  # the analysis loads pandas and scipy: imported when a command runs, not for its --help
    from harness.analysis.decision.decision_record import CapOption
    from harness.analysis.decision.pipeline import Analysis


def cap_table(caps: Sequence[CapOption], current: int | None) -> list[str]:
    """The candidate caps as plain lines: per cap, the measured points that change path (each one's tok/s change)
    and the aggregate change over every measured point (geometric mean, 95% CI)."""
    from harness.analysis import number_format

    if not caps or current is None:
        return []
    lines = [f"candidate caps (against the current {current}; tok/s change of the measured points that switch path):"]
    for option in caps:
        moved = ", ".join(f"{s.model} {s.dff} → {s.to} {s.effect - 1:+.1%}" for s in option.switched) or "no change"
        spread = number_format.speed_change_interval(option.ci_low, option.ci_high)
        total = (
            f"all points {number_format.speed_change(option.effect)} {spread}" if option.switched else "all points ±0"
        )
        lines.append(f"  cap {option.cap:>6}: {moved}; {total}")
    return lines


def print_decision(analysis: Analysis, console: Console) -> None:
    """The crossover line(s), every crossing, and the decision with the line that applies it."""
    from harness.analysis import number_format
    from harness.analysis.decision.curve import format_ci

    result = analysis.result
    conf = number_format.percent(analysis.options.policy.confidence)
    for family in result.families:
        c = family.crossover
        if c.outcome == "no_points":
            console.print("crossover: no valid (non-null) point")
            continue
        where = f"Dff ≈ {number_format.dff(c.dff)}" if c.dff is not None else c.outcome.replace("_", " ")
        crossings = (
            ", ".join(
                f"{number_format.dff(x.dff)} ({x.direction}, between {x.between[0]} and {x.between[1]})"
                for x in c.crossings
            )
            or "none"
        )
        label = f"[{family.family}] " if len(result.families) > 1 else ""
        console.print(f"{label}crossover: {where}, {conf} CI {format_ci(c)} ({c.ci_method}); crossings: {crossings}")
    d = result.decision
    for line in cap_table(d.caps, analysis.current_default):
        console.print(line, highlight=False)
    console.print(f"decision: [bold]{d.action}[/bold] — {d.reason}", highlight=False)
    if d.apply:
        console.print(f"apply: {d.apply}", highlight=False)


def crossover(
    ctx: typer.Context,
    input_paths: RunsArg,
    exclude: ExcludeOpt = None,
    current_default: CurrentDefaultOpt = None,
    grid: GridOpt = DEFAULT_GRID,
    interpolation: InterpolationOpt = "linear",
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Where fused stops beating the fallback (with a test-inversion interval), and the keep/raise/lower decision.

    Run as `recommend`, it prints only the decision part (no per-point table). Given several runs, it prints one
    decision per backend (see `moecal report RUN RUN…` for the addendum).
    """
    from harness.analysis.comparison.backend_defaults import build_defaults
    from harness.analysis.decision.decision_json import used_tests
    from harness.analysis.decision.pipeline import analyse_path
    from harness.output.defaults.defaults_addendum import defaults_json, print_defaults
    from harness.output.tables.summary_table import print_summary

    reuse_freed_memory()  # a million-row input's analysis: its freed columns reused, not faulted in again
    options = build_options(exclude, confidence, margin, current_default, grid, interpolation, input_paths)
    if len(input_paths) > 1:
        defaults = build_defaults(input_paths, options)
        if as_json:
            typer.echo(json.dumps(defaults_json(defaults), indent=1))
        else:
            print_defaults(defaults, typer.echo)
        return
    input_path = input_paths[0]
    analysis = analyse_path(input_path, options)
    if as_json:
        write_json(analysis.as_json(), sys.stdout)
        return
    console = Console()
    if ctx.info_name != "recommend":
        tests = used_tests(analysis.result)
        title = f"{input_path}: fused/fallback per point"
        print_summary(analysis.summary, title, console, options.policy.confidence, tests, options.policy.margin)
    print_decision(analysis, console)


def register(app: typer.Typer) -> None:
    app.command("crossover")(crossover)
    app.command("recommend", help="The decision only: crossover line, keep/raise/lower with its reason, the line.")(
        crossover
    )
