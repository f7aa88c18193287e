"""The end of a sweep in files: from what it measured (harness.measure.sweep_end.conclude), summary.csv, the addendum
with its plot, sidecar and mlxcel CSV, and a knob sweep's report — returned as what was written and decided, for the
command line to print.

Here, not in measure/: the writers are output's, and `measure` may not import `output` (docs/design.md §2)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.analysis.decision.pipeline import save_summary
from harness.measure.sweep_end import AnalysedSweep, SweepEnd
from harness.output.addendum.knob_report import write_knob_report
from harness.output.report_files import WrittenReport, write_report
from harness.runs.rundir import RunDirectory


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    """What the end of a sweep read, decided and wrote: the files are None where nothing was written (no result,
    nothing new measured, --no-report, or a run without knob settings)."""

    end: SweepEnd
    summary: Path | None = None
    report: WrittenReport | None = None  # the addendum, its plot, the decision and the sidecar's record
    knobs: tuple[Path, Path] | None = None  # the knob report and its plot


def finish(
    end: SweepEnd,
    *,
    report: bool = True,
    report_dir: Path | None = None,
    on_report: Callable[[Path, WrittenReport], None] | None = None,
) -> SweepResult:
    """summary.csv, then the addendum (into `report_dir`, default the run directory) and a knob sweep's report, at the
    options the run records, from the one analysis of `end` — when `report` and the sweep measured something new.

    `on_report` sees summary.csv and the addendum once they are written, before the knob report, so a refused knob
    report still leaves what was written on screen."""
    measured = end.outcome
    if not (report and end.runs_written and isinstance(measured, AnalysedSweep)):
        return SweepResult(end=end)
    summary = save_summary(measured.analysis, RunDirectory(end.run_dir).summary)
    written = write_report(end.run_dir, report_dir or end.run_dir, options=measured.options, analysed=measured.analysis)
    if on_report is not None:
        on_report(summary, written)
    # a knob sweep: the crossover per setting and the joint choice, at the run's policy as `moecal report` reads it
    knobs = write_knob_report(end.run_dir, written.addendum, measured.options)
    return SweepResult(end=end, summary=summary, report=written, knobs=knobs)
