"""The addendum's plot: fused/fallback ratio with its interval per point against Dff, the crossover and the caps.

Kept apart from the markdown (harness/output/addendum/addendum_markdown.py) so the two can change independently; it
reads only the report data (harness.output.addendum.report_data.ReportData). One panel per unit of the run's workload
kinds, titled as the kind's registry entry says (harness.config.kind_meaning).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.analysis import number_format
from harness.analysis.decision.decision_facts import SWITCH_LABEL, is_switch_point
from harness.analysis.decision.decision_json import CrossoverJSON, DecisionJSON, PointJSON, ratio_of_medians
from harness.config.schema import kind_meaning, kind_of_family
from harness.output.addendum.addendum_heading import family_namer
from harness.output.addendum.report_data import ReportData
from harness.output.markdown_text import plot_label
from harness.runs.summary_columns import SummaryCol

if TYPE_CHECKING:  # matplotlib is imported only when drawing
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _plot_limits(values: list[float], margin: float) -> tuple[float, float]:
    """y limits (ratio, log scale) fitted to the point estimates and the 1 ± δ band, with some headroom."""
    low = min([*values, 1.0 - margin])
    high = max([*values, 1.0 + margin])
    pad = (np.log(high) - np.log(low)) * 0.25 + 0.005
    return float(np.exp(np.log(low) - pad)), float(np.exp(np.log(high) + pad))


def _ratio_ticks(low: float, high: float) -> list[float]:
    """Readable ratio ticks inside [low, high], at least 1/10 of the (log) range apart, 1.0 always kept."""
    candidates = (0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 1.0, 1.01, 1.02, 1.03, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0, 3.0)
    gap = (np.log(high) - np.log(low)) / 10
    ticks = [1.0]
    for t in sorted((t for t in candidates if low <= t <= high), key=lambda t: abs(np.log(t))):
        if all(abs(np.log(t) - np.log(u)) >= gap for u in ticks):
            ticks.append(t)
    return sorted(ticks)


# Families differ in colour *and* line style, verdicts in marker shape: the plot reads in grayscale print too.
# Okabe–Ito colours (safe for colour-blind readers).
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = {"fused": "^", "fallback": "v", "equivalent": "s", "inconclusive": "o", "insufficient": "x"}
OFFSET = 0.035  # log2 units between neighbouring families at one Dff, so their whiskers never overlap


def panel(family: str) -> str:
    """The panel a family's points go on: its workload kind's, which names the unit."""
    return kind_meaning(kind_of_family(family)).panel


def _panels(families: list[str]) -> list[str]:
    """The panels of these families, whole-model kinds first (as the addendum's tables)."""
    meanings = sorted({kind_meaning(kind_of_family(f)) for f in families}, key=lambda m: (not m.whole_model, m.panel))
    return list(dict.fromkeys(m.panel for m in meanings)) or [panel("")]


def _withheld(d: DecisionJSON) -> str:
    """Why the title says a raise or lower was held back: the A/A drift, or the move the decision records as withheld
    (`withheld`: an unmeasured gap, a family that does not support it); empty when nothing was. Both are structured
    fields: the reason's words are for people, never parsed."""
    if d.get("aa_beyond_margin"):
        return "raise/lower withheld: A/A beyond the margin"
    held = d.get("withheld")
    return f"{held['move']} to {held['cap']} withheld: see the decision" if held else ""


def title_text(data: ReportData) -> str:
    """`host backend under pin — keep 8192 (raise withheld: A/A drift)`: the decision with its value."""
    d = data.decision
    cap = d["recommended_cap"]
    action = d["action"] + (f" → {cap}" if cap is not None and d["action"] != "keep" else f" {cap}" if cap else "")
    withheld = _withheld(d)
    if withheld:
        action += f" ({withheld})"
    where = f"{plot_label(data.host)} {plot_label(data.backend)} under {plot_label(data.library_pin)}"
    note = data.context.get("device_note")
    if note:  # an emulated or mislabelled run must not pass for a GPU measurement in the picture either
        where += f" ({plot_label(note)})"
    return f"{where} — decision: {action}"


def _crossovers(d: DecisionJSON) -> list[tuple[str, CrossoverJSON]]:
    """(family, crossover record) per family (the overall one when the run has a single family)."""
    if d.get("families"):
        return [(f["family"], f) for f in d["families"]]
    families = list(dict.fromkeys(p["family"] for p in d["points"])) or ["all"]
    return [(families[0], d)]


def _draw_interval(
    ax: Axes, c: CrossoverJSON, left: float, right: float, colour: str, y: float, row: int, conf: str
) -> None:
    """The crossover: a diamond where the estimated ratio crosses 1, and its interval as a bar at height `y`, above
    the 1 ± δ band (on the band it would vanish in the grey), with end ticks and its text; an open end is an arrow
    from the finite end outward (never a band over the whole axes: an open interval says only where it starts)."""
    low, high = c["ci_low"], c["ci_high"]
    if c["crossover_dff"] is not None:
        ax.plot(c["crossover_dff"], 1.0, marker="D", color=colour, markersize=8, markeredgecolor="black", zorder=5)
    if low is None and high is None:  # open both ways: the data place the crossover nowhere; say so, draw no bar
        ax.annotate("crossover interval open both ways", (0.99, 0.02 + 0.06 * row), xycoords="axes fraction",
                    ha="right", va="bottom", fontsize=7, color=colour)  # fmt: skip
        return
    finite_low = low if low is not None else (c["crossover_dff"] or high or left)
    finite_high = high if high is not None else (c["crossover_dff"] or low or right)
    ax.plot([finite_low, finite_high], [y, y], color=colour, linewidth=3, solid_capstyle="butt", zorder=4,
            label=f"crossover {conf} interval" if row == 0 else None)  # fmt: skip
    for value, end, target in ((low, finite_low, left), (high, finite_high, right)):
        if value is None:
            ax.annotate("", xy=(target, y), xytext=(end, y),
                        arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 2})  # fmt: skip
        else:
            ax.plot(end, y, marker="|", color=colour, markersize=10, markeredgewidth=2, zorder=4)
    # the interval as the tables write it ([6400, >14336]: an open end is past the last measured Dff, never the
    # estimate the bar is drawn to)
    below, above = "<" if low is None else "", ">" if high is None else ""
    text = c.get("ci_text") or f"{below}{number_format.dff(finite_low)} … {above}{number_format.dff(finite_high)}"
    ax.annotate(text, (finite_low, y), xytext=(2, 3), textcoords="offset points", fontsize=7, color=colour)


def _draw_nulls(ax: Axes, points: list[PointJSON], y_low: float, y_high: float) -> None:
    """Points not used for the crossover (null: both arms ran the same code; insufficient: too few runs) as grey ×,
    each labelled, at their ratio of medians (they have no estimate: they never entered the statistics), or on
    the lower edge when not even that exists (a model that did not run)."""
    unused = [
        p
        for p in points
        if p[SummaryCol.VERDICT] == "null"
        or (p[SummaryCol.VERDICT] == "insufficient" and p[SummaryCol.ESTIMATE] is None)
    ]
    switch = [p for p in unused if is_switch_point(p[SummaryCol.REASON]) and p[SummaryCol.ESTIMATE] is not None]
    _draw_switch_points(ax, switch, y_low, y_high)
    unused = [p for p in unused if p not in switch]
    for n, p in enumerate(unused):
        value = ratio_of_medians(p)
        y = min(max(value, y_low), y_high) if value is not None else y_low * (y_high / y_low) ** 0.1
        label = "not used: null (same code) or too few runs" if n == 0 else None
        ax.scatter(p["dff"], y, marker="x", color="0.45", s=45, linewidth=1.5, zorder=3, label=label)
        ran = p.get(SummaryCol.N_FUSED) and p.get(SummaryCol.N_FALLBACK)
        null = p[SummaryCol.VERDICT] == "null"
        word = ("null, not run" if null else "not run") if not ran else "null" if null else "too few runs"
        ax.annotate(word, (p["dff"], y), xytext=(0, 6), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7, color="0.35")  # fmt: skip


def _draw_switch_points(ax: Axes, points: list[PointJSON], y_low: float, y_high: float) -> None:
    """Points measured by switch (MLXCEL_FUSED_MOE=0: the family ignores the cap) as hollow purple diamonds at
    their fused-on-vs-off estimate, with their interval: measured, but not points of the cap's curve."""
    for n, p in enumerate(points):
        estimate, ci_low, ci_high = p[SummaryCol.ESTIMATE], p[SummaryCol.CI_LOW], p[SummaryCol.CI_HIGH]
        if estimate is None:  # _draw_nulls hands in only switch points with an estimate
            continue
        y = min(max(estimate, y_low), y_high)
        ax.scatter(p["dff"], y, marker="d", facecolor="none", edgecolor="purple", s=60, linewidth=1.5, zorder=3,
                   label=plot_label(SWITCH_LABEL) if n == 0 else None)  # fmt: skip
        if ci_low is not None and ci_high is not None:  # an interval has both ends or neither
            ax.vlines(p["dff"], max(ci_low, y_low), min(ci_high, y_high), color="purple", linewidth=1.0, linestyle=":")


def _cap_line(ax: Axes, dff: int, label: str, style: str) -> None:
    ax.axvline(dff, color="black", linestyle=style, linewidth=1.1)
    ax.annotate(f"{label} {dff}", (dff, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
                textcoords="offset points", va="top", fontsize=8, rotation=90,
                bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1}, zorder=6)  # fmt: skip


def _panel(ax: Axes, data: ReportData, kind: str, families: list[str], y_limits: tuple[float, float]) -> bool:
    """One panel's (workload kind's) points, crossover(s) and caps; returns whether a whisker was clipped."""
    from matplotlib.ticker import FixedLocator, NullLocator

    d = data.decision
    margin = data.options.policy.margin
    y_low, y_high = y_limits
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.axhspan(1.0 - margin, 1.0 + margin, color="0.88", label=f"1 ± δ ({margin:.0%}): equivalent")
    ax.axhline(1.0, color="black", linewidth=0.8)
    points = [p for p in d["points"] if panel(p["family"]) == kind]
    dffs = sorted({p["dff"] for p in points}) or [1, 2]
    left, right = min(dffs) / 1.3, max(dffs) * 1.3
    clipped = False
    for index, family in enumerate(families):
        colour, style = COLOURS[index % len(COLOURS)], LINE_STYLES[index % len(LINE_STYLES)]
        shift = 2 ** ((index - (len(families) - 1) / 2) * OFFSET)
        pts = sorted(
            (
                (p, estimate)
                for p in points
                if p["family"] == family
                and p[SummaryCol.VERDICT] != "null"
                and (estimate := p[SummaryCol.ESTIMATE]) is not None
            ),
            key=lambda pe: pe[0]["dff"],
        )
        if not pts:
            continue
        xs = [p["dff"] * shift for p, _ in pts]
        ax.plot(
            xs,
            [estimate for _, estimate in pts],
            color=colour,
            linestyle=style,
            linewidth=1.3,
            label=plot_label(family_namer(data.context)(family)),
        )
        for x, (p, estimate) in zip(xs, pts, strict=True):
            ax.scatter(x, estimate, marker=MARKERS.get(p[SummaryCol.VERDICT], "o"), color=colour,
                       edgecolor="black", linewidth=0.5, zorder=3, s=40)  # fmt: skip
            ci_low, ci_high = p[SummaryCol.CI_LOW], p[SummaryCol.CI_HIGH]
            if ci_low is None or ci_high is None:  # an interval has both ends or neither
                continue
            ax.vlines(x, max(ci_low, y_low), min(ci_high, y_high), color=colour, linewidth=1.2)
            for end, edge, mark in ((ci_low, y_low, 7), (ci_high, y_high, 6)):  # 7/6: caret down/up
                if (end < edge) if mark == 7 else (end > edge):
                    ax.plot(x, edge, marker=mark, color=colour, markersize=9, clip_on=False)
                    clipped = True
    _draw_nulls(ax, points, y_low, y_high)
    drawn = [(f, c) for f, c in _crossovers(d) if f in families and c.get("outcome") not in (None, "no_points")]
    conf = f"{data.options.policy.confidence:.0%}"
    for family, c in drawn:
        index = families.index(family)
        # above the 1 ± δ band, one row per family so several families' bars never lie on top of each other
        y = float((1.0 + margin) * np.exp((0.06 + 0.06 * index) * np.log(y_high / y_low)))
        _draw_interval(ax, c, left, right, COLOURS[index % len(COLOURS)], y, index, conf)
    caps = [(d["current_default"], "current cap", "--")]
    if d["recommended_cap"] != d["current_default"]:
        caps.append((d["recommended_cap"], "recommended", ":"))
    for cap, label, style in caps:
        if cap is not None and left <= cap <= right:  # a cap outside this panel's Dff range has no place on it
            _cap_line(ax, cap, label, style)
    ax.set_xlim(left, right)
    ax.set_ylim(y_low, y_high)
    ax.xaxis.set_major_locator(FixedLocator(dffs))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(x) for x in dffs], rotation=45 if len(dffs) > 6 else 0, fontsize=8)
    ticks = _ratio_ticks(y_low, y_high)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}" for t in ticks], fontsize=8)
    ax.grid(True, which="major", color="0.92", linewidth=0.6)
    ax.set_ylabel(f"fused / fallback\n{kind}", fontsize=9)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    return clipped


def write_plot(data: ReportData, path: Path) -> Path:
    """The figure (draw_plot) as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = draw_plot(data)
    fig.savefig(path, format="png")
    plt.close(fig)
    return path


def draw_plot(data: ReportData) -> Figure:
    """One panel per workload kind (whole-model tok/s, one-layer steps/s): ratio (log scale, fitted to the
    estimates; whiskers beyond it clipped and marked) vs log2 Dff; families offset along Dff so whiskers never
    overlap; null and not-run points as labelled grey ×; the crossover on the ratio = 1 line and its interval as a
    bar above the 1 ± δ band (open end: an arrow); cap lines labelled with their values; the decision, including a
    withheld raise, in the title. 800 px wide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = data.decision
    margin = data.options.policy.margin
    families = list(dict.fromkeys(p["family"] for p in d["points"]))
    kinds = _panels(families)
    fig, axes = plt.subplots(
        len(kinds), 1, figsize=(8, 1.0 + 3.4 * len(kinds)), dpi=100, squeeze=False, layout="constrained"
    )
    clipped = False
    for ax, kind in zip(axes[:, 0], kinds, strict=True):
        estimates = [
            estimate
            for p in d["points"]
            if (estimate := p[SummaryCol.ESTIMATE]) is not None
            and (p[SummaryCol.VERDICT] != "null" or is_switch_point(p[SummaryCol.REASON]))
            and panel(p["family"]) == kind
        ]
        y_limits = _plot_limits(estimates or [1.0], margin)
        clipped |= _panel(ax, data, kind, [f for f in families if panel(f) == kind], y_limits)
    axes[-1, 0].set_xlabel("expert intermediate size Dff (log2 scale)", fontsize=9)
    fig.suptitle(textwrap.fill(title_text(data), 90), fontsize=10)  # a long library line stays inside 800 px
    note = "; ▲▼ at an edge: whisker clipped" if clipped else ""
    fig.supxlabel(
        f"▲ fused wins, ▼ fallback wins, ■ equivalent, ● inconclusive; ◆ crossover, bar: its "
        f"{data.options.policy.confidence:.0%} interval (arrow: open){note}",
        fontsize=7, color="0.25",
    )  # fmt: skip
    return fig
