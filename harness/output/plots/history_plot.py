"""`moecal history`: the crossover and its interval over a series of runs (pins, commits, dates), one plot.

Each run is analysed alone (its binding family's crossover, as `moecal crossover` prints it); the plot puts the runs
on the x axis in the order given and draws every interval, with an open end as an arrow from its finite end.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from harness.analysis import number_format
from harness.analysis.decision.curve import format_ci
from harness.analysis.decision.pipeline import Analysis
from harness.output.addendum.addendum_heading import UNDATED, report_date
from harness.output.markdown_text import plot_label

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn, not with the module
    from matplotlib.figure import Figure


class HistoryRow(TypedDict):
    """One run of the history (`history --json` prints these): where it is, how it is labelled, its crossover."""

    run: str
    label: str
    date: str | None
    library_pin: str | None
    current_default: int | None
    outcome: str
    crossover_dff: float | None
    ci_low: float | None  # None: open at that end
    ci_high: float | None
    min_dff: int | None  # the measured range (None: no points)
    max_dff: int | None
    text: str


def history_rows(runs: list[tuple[str, Analysis]]) -> list[HistoryRow]:
    """Per run: a label (date over library pin, else the file's stem: never a whole path, which would run into
    its neighbours), the cap in force, the crossover, its interval, the text form."""
    rows: list[HistoryRow] = []
    for path, analysis in runs:
        p = analysis.provenance
        c = analysis.result.crossover
        date = report_date(p, Path(path))
        pin = str(p.get("library_pin") or "")
        parts = [part for part in (date if date != UNDATED else "", pin) if part]
        rows.append(
            {
                "run": path,
                "label": " ".join(parts) or Path(path).stem,
                "date": parts[0] if date != UNDATED else None,
                "library_pin": pin or None,
                "current_default": analysis.current_default,
                "outcome": c.outcome,
                "crossover_dff": c.dff,
                "ci_low": c.ci_low if math.isfinite(c.ci_low) else None,
                "ci_high": c.ci_high if math.isfinite(c.ci_high) else None,
                "min_dff": c.min_dff,
                "max_dff": c.max_dff,
                "text": (f"{number_format.dff(c.dff)} " if c.dff is not None else c.outcome.replace("_", " ") + " ")
                + (format_ci(c) if c.outcome != "no_points" else ""),
            }
        )
    return rows


def write_history_plot(rows: list[HistoryRow], path: Path) -> Path:
    """The figure (draw_history) as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = draw_history(rows)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def draw_history(rows: list[HistoryRow]) -> Figure:
    """Runs along x (labelled date over pin), crossover Dff on a log2 y axis: each estimate with its interval (an
    open end as an arrow), and the cap in force as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    ax.set_yscale("log", base=2)
    for x, row in enumerate(rows):
        lo_end = row["ci_low"] if row["ci_low"] is not None else row["min_dff"]
        hi_end = row["ci_high"] if row["ci_high"] is not None else row["max_dff"]
        if lo_end is not None and hi_end is not None:
            ax.vlines(x, lo_end, hi_end, color="black", linewidth=1.6)
            for value, end, direction in ((row["ci_low"], lo_end, -1), (row["ci_high"], hi_end, 1)):
                if value is None:  # open: an arrow from the finite end outward
                    ax.annotate(
                        "", xy=(x, end * 1.35**direction), xytext=(x, end),
                        arrowprops={"arrowstyle": "->", "color": "black", "lw": 1.6},
                    )  # fmt: skip
        if row["crossover_dff"] is not None:
            ax.plot(x, row["crossover_dff"], marker="o", color="black", markersize=7)
            ax.annotate(number_format.dff(row["crossover_dff"]), (x, row["crossover_dff"]), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=9, zorder=5,
                        bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none", "pad": 1})  # fmt: skip
        else:
            ax.annotate(str(row["outcome"]).replace("_", " "), (x, hi_end or 1), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=8, color="0.3")  # fmt: skip
    ends = [v for r in rows for v in (r["ci_low"], r["ci_high"], r["min_dff"], r["max_dff"]) if v is not None]
    if ends:  # room for the arrows of open ends (annotations do not widen the axes by themselves)
        ax.set_ylim(min(ends) / 1.6, max(ends) * 1.6)
    for cap in sorted({c for r in rows if (c := r["current_default"]) is not None}):
        ax.axhline(cap, color="0.3", linestyle="--", linewidth=1.0, zorder=1)
        ax.annotate(f"current cap {cap}", (1.0, cap), xycoords=("axes fraction", "data"), xytext=(-3, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8)  # fmt: skip
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_xticks(range(len(rows)))
    labels = [  # the date on one line, the pin below it
        "\n".join([r["date"] or "", textwrap.fill(plot_label(r["library_pin"]), 18)]).strip()
        if r["library_pin"]
        else plot_label(r["label"])
        for r in rows
    ]
    ax.set_xticklabels(labels, rotation=20 if len(rows) > 4 else 0, ha="right" if len(rows) > 4 else "center",
                       fontsize=8)  # fmt: skip
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_xlabel("run (date measured, library under test), in the order given")
    ax.set_ylabel("crossover Dff (log2 scale)")
    ax.set_title("crossover per run: ● estimate, bar = interval, arrow = open end", fontsize=10)
    ax.grid(True, axis="y", color="0.9")
    fig.tight_layout()
    return fig
