"""`moecal check --baseline A --current B` (regression gate) and `moecal check-reports [DIR...]`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from harness.cli.analysis_options import (
    ConfidenceOpt,
    CurrentDefaultOpt,
    ExcludeOpt,
    JsonOpt,
    MarginOpt,
    build_options,
)
from harness.cli.run_key_options import AcrossDecodePathsOpt, key_changes
from harness.json_output import finite
from harness.thresholds import MAX_REGRESSION

if TYPE_CHECKING:  # the analysis loads pandas and scipy: imported when a command runs, not for its --help
    from harness.analysis.comparison.regression import ArmChange, CheckResult


def _change(arm: ArmChange) -> str:
    text = f"{arm['change']:+.1%}"
    if arm["significant"]:
        text += " *"
    return f"[red]{text}[/red]" if arm["regressed"] else text


def print_check(result: CheckResult, console: Console) -> None:
    table = Table(
        title="baseline → current (* = interval of the change excludes 0)",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 0),
        title_justify="left",
    )
    for column in ("Dff", "model", "fallback", "fused", "ratio", "verdict"):
        left = column in ("model", "verdict")
        table.add_column(column, justify="left" if left else "right", no_wrap=column != "model", overflow="fold")
    for p in result.points:
        verdict = p["verdict_before"] + (
            "" if p["verdict_before"] == p["verdict_after"] else f" → {p['verdict_after']}"
        )
        ratio = f"{p['ratio_before']:.3f}→{p['ratio_after']:.3f}"
        table.add_row(str(p["dff"]), p["model"], _change(p["fallback"]), _change(p["fused"]), ratio, verdict)
    console.print(table)
    for row in result.dropped:
        console.print(f"dropped ({row['side']}) {row['model']} dff {row['dff']}: {row['reason']}", highlight=False)
    for side, d in result.decisions.items():
        at = f" (with cap {d['current_default']} in force)" if "current_default" in d else ""
        console.print(f"{side.replace('_', ' ')} decision{at}: {d['action']} → {d['recommended_cap']}", highlight=False)
    for notice in result.notices:
        console.print(f"notice: {notice}", highlight=False)
    for problem in result.problems:
        console.print(f"[red]{problem}[/red]", highlight=False)
    console.print(f"check: {result.status} (exit {result.exit_code})")


def check(
    baseline: Annotated[Path, typer.Option(help="the stored sweep to compare against (any input form)")],
    current: Annotated[Path, typer.Option(help="the new sweep (any input form)")],
    max_regression: Annotated[
        float, typer.Option(min=0.0, max=0.99, help="tolerated drop of an arm's tok/s (fraction)")
    ] = MAX_REGRESSION,
    exclude: ExcludeOpt = None,
    confidence: ConfidenceOpt = None,
    margin: MarginOpt = None,
    allow_missing: Annotated[
        bool, typer.Option("--allow-missing", help="do not fail when baseline points are missing from the current run")
    ] = False,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="also fail on a notice: a raise now supported, a lowered decision that moved, a flipped verdict",
        ),
    ] = False,
    as_json: JsonOpt = False,
    current_default: CurrentDefaultOpt = None,
    across_decode_paths: AcrossDecodePathsOpt = False,
) -> None:
    """Regression gate: exit 0 ok, 1 regression, contradicted decision or missing points, 2 unusable input.

    Exit 1 on a significant regression beyond the threshold, on current data that contradict the baseline's decision
    (decided with the baseline's cap in force they lower it: fallback wins beyond the margin at or below that cap,
    one-sided at the decision's level), or on baseline points missing from the current run (unless --allow-missing).
    A raise the current data now support, a lowered decision that moved or a flipped verdict is a notice: exit 0,
    exit 1 with --strict.
    """
    from harness.analysis.comparison.regression import check_runs
    from harness.analysis.decision.pipeline import analyse_path

    options = build_options(exclude, confidence, margin, current_default, inputs=[baseline, current])
    before, after = analyse_path(baseline, options), analyse_path(current, options)
    keyed = key_changes([(str(baseline), before), (str(current), after)], across_decode_paths)
    result = check_runs(before, after, max_regression, allow_missing, strict)
    if as_json:
        record = finite({**result.as_json(), "key_changes": keyed})  # null, never NaN
        typer.echo(json.dumps(record, indent=1, allow_nan=False))
    else:
        for line in keyed:
            typer.echo(line)
        print_check(result, Console())
    raise typer.Exit(result.exit_code)


def check_reports(
    folders: Annotated[list[Path] | None, typer.Argument(help="folders of addenda (default: reports/)")] = None,
) -> None:
    """Re-derive every stored addendum's numbers from its raw data; exit 1 when any disagree."""
    from harness.errors import InputError
    from harness.output.report_check import verify_report

    for folder in folders or []:  # a folder that is not there is a typo, not "nothing to check" (exit 0)
        if not folder.is_dir():
            raise InputError(str(folder), "FOLDERS", "no such folder" if not folder.exists() else "not a folder")
    files = sorted(p for folder in folders or [Path("reports")] if folder.is_dir() for p in folder.rglob("*.md"))
    checked = failed = 0
    for path in files:
        problems = verify_report(path, folders or [])
        if problems is None:
            continue
        checked += 1
        if problems:
            failed += 1
            typer.echo(f"FAIL {path}:")
            for problem in problems:
                typer.echo(f"  {problem}")
        else:
            typer.echo(f"ok   {path}")
    if not checked:
        typer.echo("check-reports: no moecal addendum found; nothing to check")
        return
    typer.echo(f"check-reports: {checked - failed}/{checked} addenda re-derive from their raw data")
    if failed:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("check")(check)
    app.command("check-reports")(check_reports)
