"""The addendum's plot (harness/output/plot.py): panels per workload kind, 800 px wide, the decision in the title.

Inputs: the stored CPU run in results/ (real, read only) and the GB10 design example fixture (published data)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image

from harness.analysis.pipeline import Options
from harness.output.addendum import build_report_data, project_root
from harness.output.plot import LAYER, WHOLE_MODEL, _kind, title_text, write_plot

REPO = Path(__file__).resolve().parents[1]
STORED_RUN = REPO / "results" / "20261130-cpu-vm-cpu-smoke"
DESIGN_CSV = REPO / "tests" / "fixtures" / "gb10-design-example.csv"


def _plot(source: Path, tmp_path: Path, **options: object) -> tuple[dict, tuple[int, ...]]:
    data = build_report_data(source, project_root(REPO), Options(**options))
    path = write_plot(data, tmp_path / "plot.png")
    return data, matplotlib.image.imread(path).shape


def test_builtin_run_has_a_panel_per_workload_kind_and_says_withheld(tmp_path: Path) -> None:
    data, shape = _plot(STORED_RUN, tmp_path)
    kinds = {_kind(p["family"]) for p in data["decision"]["points"]}
    assert kinds == {WHOLE_MODEL, LAYER}
    assert shape[1] == 800 and shape[0] > 700  # two stacked panels, 800 px wide
    # the title says "withheld" exactly when an A/A interval lies beyond the margin (the stored run's no longer does
    # under the drift-aware intervals, so the flagged case is made from it)
    assert ("withheld" in title_text(data)) == bool(data["decision"]["aa_beyond_margin"])
    flagged = {**data, "decision": {**data["decision"], "aa_beyond_margin": ["qwen3-30b-a3b (Dff 8192)"]}}
    assert "withheld" in title_text(flagged)


def test_command_sweep_is_one_panel_with_the_decision(tmp_path: Path) -> None:
    data, shape = _plot(DESIGN_CSV, tmp_path, current_default=8192)
    assert shape[1] == 800 and shape[0] < 500
    assert "decision: keep 8192" in title_text(data)
