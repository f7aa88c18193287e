"""The per-point summary table `moecal summarize` and `moecal crossover` print: one table per shape family."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd
from rich import box
from rich.console import Console
from rich.table import Table

from harness.analysis import number_format
from harness.analysis.decision.decision_facts import is_switch_point
from harness.analysis.decision.decision_record import PointTest
from harness.analysis.points.stats import DECIDED, family_labels
from harness.config.schema import kind_of_family
from harness.runs.summary_columns import SummaryCol
from harness.thresholds import CONFIDENCE, MARGIN

CONSOLE_ROWS = 200  # per family on the terminal: a table of 100,000 rows takes a minute to draw and nobody reads it


def print_summary(
    summary: pd.DataFrame,
    title: str,
    console: Console,
    confidence: float = CONFIDENCE,
    tests: Mapping[tuple[str, int], PointTest] | None = None,
    margin: float = MARGIN,
) -> None:
    """One table per shape family that fits 80 columns (numbers never wrap; long model names fold; at most
    CONSOLE_ROWS rows, then how many more), then one line per shown point whose verdict needs a word (no interval,
    outliers dropped, unstable). `tests` ((family, Dff) → the one-sided test the decision read there): such points
    carry `*` after their verdict and a line with the test, the words the decision and the addendum use."""
    tests = tests or {}
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
            style = {"fused": "green", "fallback": "red", "null": "dim", "insufficient": "dim"}.get(
                row[SummaryCol.VERDICT], ""
            )
            test = tests.get((str(family), int(row["dff"]))) if row[SummaryCol.VERDICT] in DECIDED else None
            verdict = str(row[SummaryCol.VERDICT])
            if is_switch_point(row[SummaryCol.REASON]):  # measured with the switch: on vs off, not the cap's curve
                verdict = "on vs off"
            table.add_row(
                str(int(row["dff"])),
                str(row["model"]),
                number_format.tok_s(row[SummaryCol.FALLBACK_TOK_S]),
                number_format.tok_s(row[SummaryCol.FUSED_TOK_S]),
                number_format.ratio(row[SummaryCol.ESTIMATE]),
                number_format.interval(row[SummaryCol.CI_LOW], row[SummaryCol.CI_HIGH]),
                f"{row[SummaryCol.N_FALLBACK]}/{row[SummaryCol.N_FUSED]}",
                (f"[{style}]{verdict}[/]" if style else verdict) + ("*" if test else ""),
            )
            name = f"{row['model']} Dff {int(row['dff'])}"
            if test is not None:
                notes.append(f"{name}*: the decision's test: {test.words(margin)}")
            if row[SummaryCol.VERDICT] in ("null", "insufficient"):
                notes.append(f"{name}: {row[SummaryCol.VERDICT]}: {row[SummaryCol.REASON]}")
            if isinstance(row[SummaryCol.OUTLIERS], str) and row[SummaryCol.OUTLIERS]:
                notes.append(f"{name}: outliers dropped: {row[SummaryCol.OUTLIERS]}")
            if row[SummaryCol.UNSTABLE]:
                spread = max(row[SummaryCol.FALLBACK_SPREAD], row[SummaryCol.FUSED_SPREAD])
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


def with_kind(points: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """The summary's points (the decision record's) with their workload kind beside the family: `summarize --json`'s
    `kind` column, so a reader of the JSON finds the kind (and through the registry its unit) without parsing the
    family label."""
    out = []
    for point in points:
        row: dict[str, object] = {}
        for key, value in point.items():
            row[key] = value
            if key == "family":
                row["kind"] = kind_of_family(value)
        out.append(row)
    return out
