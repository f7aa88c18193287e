"""The addendum's plot: fused/fallback ratio with its interval per point against Dff, the crossover and the caps.

Kept apart from the markdown (harness/report.py) so the two can change independently; it reads only the report
data dict that `report.build_report_data` builds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


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


def write_plot(data: dict[str, object], path: Path) -> Path:
    """Ratio (log scale, fitted to the estimates; whiskers beyond it clipped and marked) vs log2 Dff with the grid's
    ticks; one colour per family joined by a line, marker by verdict; the 1 ± δ band; crossover interval and current
    / recommended caps as vertical lines; the decision in the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    d = data["decision"]
    margin = float(data["options"].get("margin", 0.01))
    fig, ax = plt.subplots(figsize=(11, 5), dpi=110)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    estimates = [p["estimate"] for p in d["points"] if p["estimate"] is not None and p["verdict"] != "null"]
    y_low, y_high = _plot_limits(estimates or [1.0], margin)
    ax.axhspan(1.0 - margin, 1.0 + margin, color="0.85", label=f"1 ± δ ({margin:.0%}): equivalent")
    ax.axhline(1.0, color="black", linewidth=0.8)
    markers = {"fused": "^", "fallback": "v", "equivalent": "s", "inconclusive": "o", "insufficient": "x"}
    families = list(dict.fromkeys(p["family"] for p in d["points"]))
    colors = plt.get_cmap("tab10")
    clipped = False
    for index, family in enumerate(families):
        color = colors(index % 10)
        pts = sorted(
            (p for p in d["points"] if p["family"] == family and p["verdict"] != "null" and p["estimate"] is not None),
            key=lambda p: p["dff"],
        )
        if not pts:
            continue
        ax.plot([p["dff"] for p in pts], [p["estimate"] for p in pts], color=color, linewidth=1.2, label=family)
        for p in pts:
            ax.scatter(p["dff"], p["estimate"], marker=markers.get(p["verdict"], "o"), color=color, zorder=3, s=36)
            if p["ci_low"] is None:
                continue
            low, high = max(p["ci_low"], y_low), min(p["ci_high"], y_high)
            ax.vlines(p["dff"], low, high, color=color, linewidth=1.0, alpha=0.8)
            for end, edge, mark in ((p["ci_low"], y_low, r"$\downarrow$"), (p["ci_high"], y_high, r"$\uparrow$")):
                if (end < edge) if edge == y_low else (end > edge):
                    ax.plot(p["dff"], edge, marker=mark, color=color, markersize=12, clip_on=False)
                    clipped = True
    # a null point has no estimate (it never entered the statistics): it is placed at its ratio of medians
    nulls = [(p["dff"], p["estimate"] or p["ratio"]) for p in d["points"] if p["verdict"] == "null"]
    nulls = [(dff, min(max(y, y_low), y_high)) for dff, y in nulls if y is not None]
    if nulls:
        ax.scatter(*zip(*nulls, strict=True), marker="x", color="grey", label="null point (not used)")
    dffs = sorted({p["dff"] for p in d["points"]}) or [1, 2]
    left, right = min(dffs) / 1.25, max(dffs) * 1.25
    if d["outcome"] != "no_points":
        low = d["ci_low"] if d["ci_low"] is not None else left
        high = d["ci_high"] if d["ci_high"] is not None else right
        ax.axvspan(low, high, color="tab:orange", alpha=0.1, label=f"crossover {data['options']['confidence']:.0%} CI")
    if d["crossover_dff"] is not None:
        ax.axvline(d["crossover_dff"], color="tab:orange", label=f"crossover ≈ {d['crossover_dff']:.0f}")
    if d["current_default"] is not None:
        ax.axvline(d["current_default"], color="black", linestyle="--", label=f"current cap {d['current_default']}")
    if d["recommended_cap"] not in (None, d["current_default"]):
        ax.axvline(d["recommended_cap"], color="tab:purple", linestyle=":", label=f"recommended {d['recommended_cap']}")
    ax.set_xlim(left, right)
    ax.set_ylim(y_low, y_high)
    ax.xaxis.set_major_locator(FixedLocator(dffs))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(x) for x in dffs], rotation=45 if len(dffs) > 8 else 0)
    ticks = _ratio_ticks(y_low, y_high)
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}" for t in ticks])
    ax.grid(True, which="major", color="0.9", linewidth=0.6)
    ax.set_xlabel("expert intermediate size Dff (log2 scale)")
    note = "; ↑ ↓ at the plot's edge: the whisker runs beyond it (clipped)" if clipped else ""
    ax.set_ylabel("fused / fallback (log scale)")
    cap = d["recommended_cap"]
    ax.set_title(
        f"{data['host']} {data['backend']} under {data['library_pin']} — decision: {d['action']}"
        + (f" → {cap}" if cap is not None and d["action"] != "keep" else f" {cap}" if cap is not None else ""),
        fontsize=11,
    )
    fig.text(
        0.01, 0.01, f"markers: ▲ fused, ▼ fallback, ■ equivalent, ● inconclusive (verdicts beyond 1 ± δ){note}",
        fontsize=7, color="0.3",
    )  # fmt: skip
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, format="png")
    plt.close(fig)
    return path
