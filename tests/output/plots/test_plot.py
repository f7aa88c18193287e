"""The addendum's plot (harness/output/plots/addendum_plot.py): panels per workload kind, 800 px wide, the decision in
the title.

Inputs: the stored CPU run in results/ (real, read only) and the GB10 design example fixture (published data)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import matplotlib.image

from harness.analysis.decision.pipeline import Options
from harness.config.schema import kind_meaning
from harness.output.addendum.report_build import build_report_data, read_report_input
from harness.output.addendum.report_data import ReportData
from harness.output.plots.addendum_plot import panel, title_text, write_plot
from harness.output.report_links import project_root

REPO = Path(__file__).resolve().parents[3]
STORED_RUN = REPO / "results" / "20261130-cpu-vm-cpu-smoke"
DESIGN_CSV = REPO / "tests" / "fixtures" / "gb10-design-example.csv"


def _plot(source: Path, tmp_path: Path, **options: object) -> tuple[ReportData, tuple[int, ...]]:
    data = build_report_data(read_report_input(source, Options(**options)), project_root(REPO))
    path = write_plot(data, tmp_path / "plot.png")
    return data, matplotlib.image.imread(path).shape


def test_builtin_run_has_a_panel_per_workload_kind_and_says_withheld(tmp_path: Path) -> None:
    data, shape = _plot(STORED_RUN, tmp_path)
    kinds = {panel(p["family"]) for p in data.decision["points"]}
    assert kinds == {kind_meaning("decode").panel, kind_meaning("layer").panel}
    assert shape[1] == 800 and shape[0] > 700  # two stacked panels, 800 px wide
    # the title says "withheld" exactly when an A/A interval lies beyond the margin (the stored run's no longer does
    # under the drift-aware intervals, so the flagged case is made from it)
    assert ("withheld" in title_text(data)) == bool(data.decision["aa_beyond_margin"])
    flagged = dataclasses.replace(data, decision={**data.decision, "aa_beyond_margin": ["qwen3-30b-a3b (Dff 8192)"]})
    assert "withheld" in title_text(flagged)


def test_the_title_reads_a_withheld_raise_from_the_record_not_the_reason() -> None:
    """The 2026-07-10 GB10 example without llama-4-scout keeps 8192 and withholds a raise to 8448 across the
    unmeasured gap 6400-14336: the title says so from the decision's `withheld` field, whatever the reason's words."""
    excludes = {"llama-4-scout-17b-4bit": "llama4 not wired"}
    options = Options(current_default=8192, excludes=excludes)
    data = build_report_data(read_report_input(DESIGN_CSV, options), project_root(REPO))
    assert data.decision["withheld"] == {"move": "raise", "cap": 8448, "why": "unmeasured_gap"}
    assert "(raise to 8448 withheld: see the decision)" in title_text(data)
    reworded = dataclasses.replace(data, decision={**data.decision, "reason": "Keep 8192."})
    assert title_text(reworded) == title_text(data)
    nothing = dataclasses.replace(data, decision={**data.decision, "withheld": None})
    assert "withheld" not in title_text(nothing)


def test_command_sweep_is_one_panel_with_the_decision(tmp_path: Path) -> None:
    data, shape = _plot(DESIGN_CSV, tmp_path, current_default=8192)
    assert shape[1] == 800 and shape[0] < 500
    assert "decision: keep 8192" in title_text(data)


GB10_0703 = REPO / "tests" / "fixtures" / "gb10-sweep-2026-07-03.csv"


def test_null_points_and_the_crossover_interval_are_drawn_where_they_can_be_seen() -> None:
    """mlxcel's 07-03 sweep: Dff 512 did not run, 2880 is null (mxfp4), 768 (qwen3_moe ignored the cap before
    2026-09-14) and 8192 (llama4 never runs the kernel) are A/A points by their names: all grey ×, labelled; the
    crossover interval [1792, 14336] is a bar above the 1 ± δ band, not on it."""
    import matplotlib.pyplot as plt
    from matplotlib.collections import PathCollection

    from harness.output.plots.addendum_plot import draw_plot

    data = build_report_data(read_report_input(GB10_0703, Options(current_default=8192)), project_root(REPO))
    fig = draw_plot(data)
    try:
        (ax,) = fig.axes
        grey = {
            float(x)
            for c in ax.collections
            if isinstance(c, PathCollection) and tuple(c.get_facecolor()[0][:3]) == (0.45, 0.45, 0.45)
            for x, _ in c.get_offsets()
        }
        assert grey == {512.0, 768.0, 2880.0, 8192.0}
        texts = {t.get_text() for t in ax.texts}
        assert {"null", "null, not run", "[1792, 14336]"} <= texts  # as the tables write it
        (bar,) = [line for line in ax.lines if line.get_label() == "crossover 95% interval"]
        assert list(bar.get_xdata()) == [1792, 14336] and min(bar.get_ydata()) > 1 + data.options.policy.margin
        legend = {t.get_text() for t in ax.get_legend().get_texts()}
        assert {"crossover 95% interval", "not used: null (same code) or too few runs"} <= legend
    finally:
        plt.close(fig)


def test_history_labels_runs_by_date_and_pin_with_an_axis_title_and_the_cap() -> None:
    import matplotlib.pyplot as plt

    from harness.analysis.decision.pipeline import analyse_path
    from harness.output.plots.history_plot import draw_history, history_rows

    runs = [GB10_0703, DESIGN_CSV]
    rows = history_rows([(str(r), analyse_path(r, Options(current_default=8192))) for r in runs])
    fig = draw_history(rows)
    try:
        (ax,) = fig.axes
        assert [t.get_text() for t in ax.get_xticklabels()] == ["2026-07-03\nMLX pin e9463bb", "MLX 0.32.1"]
        assert ax.get_xlabel() and ax.get_ylabel()
        assert any(list(line.get_ydata()) == [8192, 8192] for line in ax.lines)
        assert "current cap 8192" in {t.get_text() for t in ax.texts}
    finally:
        plt.close(fig)
