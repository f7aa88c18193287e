"""The launch-knob section of a report: the crossover per knob setting (the surface crossover vs SGY), each setting's
decided cap, and the joint recommendation of knob and cap (harness.analysis.comparison.knobs), as markdown to paste
below the addendum and a plot. Written beside the addendum as `<run-id>-knobs.md` / `.png`; a run without knob settings
writes nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.analysis import number_format
from harness.analysis.comparison.knobs import KnobResult, analyse_knobs, where_to_set
from harness.analysis.decision.curve import format_ci
from harness.analysis.decision.pipeline import Options
from harness.config import knobs as launch_knobs
from harness.output.addendum.report_data import ADDENDUM_SUFFIX
from harness.output.markdown_text import md_text, plot_label
from harness.runs.formats import write_text_atomic
from harness.runs.rundir import refuse_stored


def _dff(value: float | None) -> str:
    return "—" if value is None or not math.isfinite(value) else number_format.dff(value)


def knob_markdown(result: KnobResult, backend: str) -> str:
    """The section: one row per setting (its own decision), then the joint recommendation in bold with its reason
    and where to set it."""
    names = ", ".join(f"`{n}`" for n in launch_knobs.parse_label(result.reference))
    lines = [
        f"#### Launch knobs ({names}): the crossover per setting",
        "",
        f"Every setting ran both arms in every round, interleaved. Each row is the run's analysis at that setting "
        f"alone; the last columns compare decode speed over the measured models ({', '.join(result.models)}) at the "
        f"setting's cap against `{result.reference}` (the binary's default) at its cap, as a "
        f"{number_format.percent(result.confidence)} interval paired by round.",
        "",
        f"| setting | crossover Dff | {number_format.percent(result.confidence)} CI | decision | cap | speed vs "
        "default "
        "| interval |",
        "|---|--:|---|---|--:|--:|---|",
    ]
    by_setting = {c.setting: c for c in result.candidates}
    for setting, analysis in result.analyses.items():
        crossover, row = analysis.result.crossover, result.rows[setting]
        c = by_setting[setting]
        name = f"**{md_text(setting)}**" if setting == result.recommended else md_text(setting)
        interval = "—" if setting == result.reference else number_format.speed_change_interval(c.ci_low, c.ci_high)
        gain = "reference" if setting == result.reference else number_format.speed_change(c.gain)
        lines.append(
            f"| {name} | {_dff(crossover.dff)} | {format_ci(crossover)} | {md_text(row.words)} | {_dff(c.cap)} | "
            f"{gain} | {interval} |"
        )
    lines += ["", f"**Joint recommendation: {md_text(result.reason)}**", ""]
    lines += [f"Where to set it: {where_to_set(result.recommended, backend)}.", ""]
    return "\n".join(lines)


def knob_plot(result: KnobResult, path: Path) -> Path:
    """Crossover Dff (with its interval; an open end as an arrow) against the setting, the decided caps beside."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = list(result.analyses)
    x = np.arange(len(settings))
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    level = number_format.percent(result.confidence)
    for i, setting in enumerate(settings):
        crossover = result.analyses[setting].result.crossover
        low = crossover.ci_low if math.isfinite(crossover.ci_low) else (crossover.min_dff or 0)
        high = crossover.ci_high if math.isfinite(crossover.ci_high) else (crossover.max_dff or 0)
        ax.plot([i, i], [low, high], color="#0072B2", lw=2)
        for end, finite, sign in (
            (low, math.isfinite(crossover.ci_low), -1),
            (high, math.isfinite(crossover.ci_high), 1),
        ):
            if not finite and end:
                ax.annotate(
                    "", (i, end * (1 + 0.08 * sign)), (i, end), arrowprops={"arrowstyle": "->", "color": "#0072B2"}
                )
        if crossover.dff is not None:
            ax.plot(i, crossover.dff, "o", color="#0072B2", label=f"crossover ({level} CI)" if i == 0 else None)
        cap = next(c.cap for c in result.candidates if c.setting == setting)
        if cap is not None:
            ax.plot(i + 0.15, cap, "_", ms=14, mew=2, color="#D55E00", label="decided cap" if i == 0 else None)
    ax.set_xticks(x, [plot_label(s.replace(" ", "\n")) for s in settings])
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:.0f}"))
    ax.set_xlim(-0.6, len(settings) - 0.4)
    ax.set_ylabel("Dff")
    ax.set_title(plot_label(f"crossover per setting — {result.reason.split(':')[0]}"), fontsize=10)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_knob_report(input_path: str | Path, addendum: Path, options: Options = Options()) -> tuple[Path, Path] | None:
    """`<run-id>-knobs.md` and `.png` beside `addendum` (`<run-id>-dff-crossover.md`), or None for a run without knob
    settings."""
    result = analyse_knobs(input_path, options)
    if result is None:
        return None
    stem = addendum.name.removesuffix(ADDENDUM_SUFFIX)
    md_path, png_path = addendum.with_name(f"{stem}-knobs.md"), addendum.with_name(f"{stem}-knobs.png")
    for path in (md_path, png_path):
        refuse_stored(path, "write the report somewhere else (--out / --report-dir)")
    backend = str(result.analyses[result.reference].provenance.get("backend") or "")
    write_text_atomic(md_path, knob_markdown(result, backend))
    return md_path, knob_plot(result, png_path)
