"""`moecal history`: the crossover and its interval over a series of runs (pins, commits, dates), one plot.

Each run is analysed alone (its binding family's crossover, as `moecal crossover` prints it); the plot puts the runs
on the x axis in the order given and draws every interval, with an open end as an arrow from its finite end.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.analysis.decision import format_ci
from harness.analysis.pipeline import Analysis
from harness.output.markdown_text import plot_label


def history_rows(runs: list[tuple[str, Analysis]]) -> list[dict[str, object]]:
    """Per run: a label (date and library pin, else the path), the crossover, its interval, the text form."""
    rows = []
    for path, analysis in runs:
        p = analysis.provenance
        c = analysis.result.crossover
        date = str(p.get("date") or "")[:10]
        pin = str(p.get("library_pin") or "")
        label = " ".join(part for part in (date, pin) if part) or Path(path).name
        rows.append(
            {
                "run": path,
                "label": label,
                "outcome": c.outcome,
                "crossover_dff": c.dff,
                "ci_low": c.ci_low if math.isfinite(c.ci_low) else None,
                "ci_high": c.ci_high if math.isfinite(c.ci_high) else None,
                "min_dff": c.min_dff,
                "max_dff": c.max_dff,
                "text": (f"{c.dff:.0f} " if c.dff is not None else c.outcome.replace("_", " ") + " ")
                + (format_ci(c) if c.outcome != "no_points" else ""),
            }
        )
    return rows


def write_history_plot(rows: list[dict[str, object]], path: Path) -> Path:
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
            ax.annotate(f"{row['crossover_dff']:.0f}", (x, row["crossover_dff"]), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=9)  # fmt: skip
        else:
            ax.annotate(str(row["outcome"]).replace("_", " "), (x, hi_end or 1), xytext=(6, 0),
                        textcoords="offset points", va="center", fontsize=8, color="0.3")  # fmt: skip
    ends = [v for r in rows for v in (r["ci_low"], r["ci_high"], r["min_dff"], r["max_dff"]) if v is not None]
    if ends:  # room for the arrows of open ends (annotations do not widen the axes by themselves)
        ax.set_ylim(min(ends) / 1.6, max(ends) * 1.6)
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(
        [plot_label(r["label"]) for r in rows], rotation=20 if len(rows) > 3 else 0, ha="right", fontsize=9
    )
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_ylabel("crossover Dff (log2 scale)")
    ax.set_title("crossover per run: ● estimate, bar = interval, arrow = open end", fontsize=10)
    ax.grid(True, axis="y", color="0.9")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
