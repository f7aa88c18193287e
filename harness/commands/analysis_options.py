"""Options and output shared by the analysis commands (summarize, crossover, recommend, report, check).

Declared once so every command spells `--exclude`, `--confidence` … the same way and builds the same Options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich import box
from rich.console import Console
from rich.table import Table

from harness.analysis import Options, parse_excludes
from harness.analysis_defaults import CONFIDENCE, DEFAULT_GRID, MARGIN
from harness.config import MAX_CAP
from harness.stats import family_labels

InputArg = Annotated[
    Path,
    typer.Argument(
        metavar="INPUT", help="a run directory, a samples.csv, a summary.csv or an mlxcel sweep CSV", show_default=False
    ),
]
RunsArg = Annotated[
    list[Path],
    typer.Argument(
        metavar="RUN",
        help="one input (as above), or several runs (backends, devices) for one per-backend defaults table",
        show_default=False,
    ),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        metavar="NAME[=WHY]",
        help="model to mark null (repeatable); NAME=why records the reason",
        show_default=False,
    ),
]
ConfidenceOpt = Annotated[float, typer.Option(metavar="LEVEL", help="confidence level of every interval")]
MarginOpt = Annotated[
    float,
    typer.Option(
        min=0.0, max=0.49, metavar="DELTA", help="practical margin δ: a path wins only beyond 1 ± δ (0.01 = 1%)"
    ),
]
CurrentDefaultOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_CAP,
        metavar="DFF",
        help="the cap in force now (default: the run's current_default)",
        show_default=False,
    ),
]
GridOpt = Annotated[int, typer.Option(min=1, help="recommended caps are multiples of this")]
InterpolationOpt = Annotated[
    str, typer.Option(metavar="linear|log2", help="linear | log2: how the ratio is interpolated between Dffs")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print exactly one JSON object instead of tables")]


def build_options(
    exclude: list[str] | None,
    confidence: float = CONFIDENCE,
    margin: float = MARGIN,
    current_default: int | None = None,
    grid: int = DEFAULT_GRID,
    interpolation: str = "linear",
) -> Options:
    return Options(
        excludes=parse_excludes(exclude or []),
        confidence=confidence,
        margin=margin,
        current_default=current_default,
        grid=grid,
        interpolation=interpolation,
    )


def _cell(value: object, digits: int) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.{digits}f}"


CONSOLE_ROWS = 200  # per family on the terminal: a table of 100,000 rows takes a minute to draw and nobody reads it


def print_summary(summary: pd.DataFrame, title: str, console: Console, confidence: float = CONFIDENCE) -> None:
    """One table per shape family that fits 80 columns (numbers never wrap; long model names fold; at most
    CONSOLE_ROWS rows, then how many more), then one line per shown point whose verdict needs a word (no interval,
    outliers dropped, unstable)."""
    labels = family_labels(summary)
    console.print(title, highlight=False)
    notes = []
    for family in dict.fromkeys(labels):
        table = Table(title=family, box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), title_justify="left")
        table.add_column("Dff", justify="right", no_wrap=True)
        table.add_column("model", overflow="fold", min_width=12, max_width=22)
        for column in ("fallback", "fused", "ratio", f"{confidence:.0%} CI", "n"):
            table.add_column(column, justify="right", no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        mine = summary[labels == family]
        for _, row in mine.head(CONSOLE_ROWS).iterrows():
            style = {"fused": "green", "fallback": "red", "null": "dim", "insufficient": "dim"}.get(row["verdict"], "")
            ci = "-" if pd.isna(row["ci_low"]) else f"{row['ci_low']:.3f}–{row['ci_high']:.3f}"
            table.add_row(
                str(int(row["dff"])),
                str(row["model"]),
                _cell(row["fallback_tok_s"], 1),
                _cell(row["fused_tok_s"], 1),
                _cell(row["estimate"], 3),
                ci,
                f"{row['n_fallback']}/{row['n_fused']}",
                f"[{style}]{row['verdict']}[/]" if style else row["verdict"],
            )
            name = f"{row['model']} Dff {int(row['dff'])}"
            if row["verdict"] in ("null", "insufficient"):
                notes.append(f"{name}: {row['verdict']}: {row['reason']}")
            if isinstance(row["outliers"], str) and row["outliers"]:
                notes.append(f"{name}: outliers dropped: {row['outliers']}")
            if row["unstable"]:
                spread = max(row["fallback_spread"], row["fused_spread"])
                notes.append(f"{name}: unstable (an arm's spread is {spread:.1%}, above 5%)")
        console.print(table)
        if len(mine) > CONSOLE_ROWS:
            console.print(
                f"… and {len(mine) - CONSOLE_ROWS} more points of {family} (`moecal summarize INPUT --out CSV` or "
                "`--json` lists every one)",
                highlight=False,
            )
    console.print("fallback, fused: median tok/s; ratio: geometric-mean fused/fallback; n: ok runs per arm")
    for note in notes:
        console.print(note, highlight=False)
