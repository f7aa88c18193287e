"""Options and output shared by the analysis commands (summarize, crossover, recommend, report, check).

Declared once so every command spells `--exclude`, `--confidence` … the same way and builds the same Options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from harness.analysis import Options
from harness.crossover import DEFAULT_GRID
from harness.stats import CONFIDENCE, SEED, parse_excludes

InputArg = Annotated[
    Path,
    typer.Argument(help="a run directory, a samples.csv, a summary.csv or an mlxcel sweep CSV", show_default=False),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option("--exclude", help="model to mark null (repeatable); NAME=why records the reason", show_default=False),
]
ConfidenceOpt = Annotated[float, typer.Option(help="confidence level of every interval")]
SeedOpt = Annotated[int, typer.Option(min=0, help="seed of the bootstrap resampling")]
CurrentDefaultOpt = Annotated[
    int | None,
    typer.Option(min=1, help="the cap in force now (default: the run's current_default)", show_default=False),
]
GridOpt = Annotated[int, typer.Option(min=1, help="recommended caps are multiples of this")]
InterpolationOpt = Annotated[str, typer.Option(help="linear | log2: how the ratio is interpolated between Dffs")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print exactly one JSON object instead of tables")]


def build_options(
    exclude: list[str] | None,
    confidence: float = CONFIDENCE,
    seed: int = SEED,
    current_default: int | None = None,
    grid: int = DEFAULT_GRID,
    interpolation: str = "linear",
) -> Options:
    return Options(
        excludes=parse_excludes(exclude or []),
        confidence=confidence,
        seed=seed,
        current_default=current_default,
        grid=grid,
        interpolation=interpolation,
    )


def _cell(value: object, digits: int) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.{digits}f}"


def print_summary(summary: pd.DataFrame, title: str, console: Console) -> None:
    """The per-point table: medians, ratio with CI, p-value, spread, verdict (and why, when not the CI)."""
    table = Table(title=title)
    for column in (
        "Dff",
        "model",
        "fallback tok/s",
        "fused tok/s",
        "ratio [CI]",
        "p",
        "spread",
        "n",
        "verdict",
        "note",
    ):
        table.add_column(column, justify="left" if column in ("model", "verdict", "note") else "right")
    for _, row in summary.iterrows():
        style = {"fused": "green", "fallback": "red", "null": "dim"}.get(row["verdict"], "")
        spread = max(row["fallback_spread"], row["fused_spread"])
        ratio = _cell(row["ratio"], 4)
        if not pd.isna(row["ci_low"]):
            ratio += f" [{row['ci_low']:.4f}, {row['ci_high']:.4f}]"
        table.add_row(
            str(int(row["dff"])),
            str(row["model"]),
            _cell(row["fallback_tok_s"], 2),
            _cell(row["fused_tok_s"], 2),
            ratio,
            _cell(row["p_value"], 3),
            "-" if pd.isna(spread) else f"{spread:.1%}" + (" unstable" if row["unstable"] else ""),
            f"{row['n_fallback']}/{row['n_fused']}",
            f"[{style}]{row['verdict']}[/]" if style else row["verdict"],
            "" if "CI [" in str(row["reason"]) else str(row["reason"]),
        )
    console.print(table)
