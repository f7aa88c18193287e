"""Options shared by the analysis commands (summarize, crossover, recommend, report, check).

Declared once so every command spells `--exclude`, `--confidence` … the same way and builds the same Options.
Every command module imports this at load, so it imports nothing heavy: the analysis (pandas, scipy) is loaded
when a command runs, not when its `--help` is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from harness.thresholds import CONFIDENCE, DEFAULT_GRID, MARGIN, MAX_CAP

if TYPE_CHECKING:
    from harness.analysis.decision.pipeline import Options

InputArg = Annotated[
    Path,
    typer.Argument(
        metavar="INPUT", help="a run directory, a samples.csv, a summary.csv or an mlxcel sweep CSV", show_default=False
    ),
]
RunsArg = Annotated[
    list[Path],
    typer.Argument(
        metavar="RUN",
        help="one input (as above), or several runs (backends, devices) for one per-backend defaults table",
        show_default=False,
    ),
]
ExcludeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--exclude",
        metavar="NAME[=WHY]",
        help="model to mark null (repeatable); NAME=why records the reason",
        show_default=False,
    ),
]
RECORDED = "default: the run's recorded policy (its config's measure:), else {}"
ConfidenceOpt = Annotated[
    float | None,
    typer.Option(metavar="LEVEL", help=f"confidence level of every interval ({RECORDED.format(CONFIDENCE)})"),
]
MarginOpt = Annotated[
    float | None,
    typer.Option(
        min=0.0,
        max=0.49,
        metavar="DELTA",
        help=f"practical margin δ: a path wins only beyond 1 ± δ (0.01 = 1%; {RECORDED.format(MARGIN)})",
    ),
]
CurrentDefaultOpt = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=MAX_CAP,
        metavar="DFF",
        help="the cap in force now (default: the run's current_default)",
        show_default=False,
    ),
]
GridOpt = Annotated[int, typer.Option(min=1, help="recommended caps are multiples of this")]
InterpolationOpt = Annotated[
    str, typer.Option(metavar="linear|log2", help="linear | log2: how the ratio is interpolated between Dffs")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="print exactly one JSON object instead of tables")]


def build_options(
    exclude: list[str] | None,
    confidence: float | None = None,
    margin: float | None = None,
    current_default: int | None = None,
    grid: int = DEFAULT_GRID,
    interpolation: str = "linear",
    inputs: Sequence[Path] = (),
) -> Options:
    """The analysis options of a command. A confidence or margin not given is the policy the `inputs` recorded
    (harness.analysis.rounds.run_options: the sweep's targets, at its until-decided look level where it has one) when
    they all recorded the same, else the module default: a later analysis aims where the sweep did. A margin the sweeps
    asked to derive from their null arm (`measure.margin: from-null`) is derived here
    (harness.analysis.points.null_margin)."""
    from harness.analysis.decision.pipeline import Options, parse_excludes
    from harness.analysis.points import null_margin
    from harness.analysis.rounds.run_options import input_policy
    from harness.policy import Interpolation, Policy

    if confidence is None or margin is None:
        recorded = {input_policy(path) for path in inputs}
        only = recorded.pop() if len(recorded) == 1 else None
        default = Policy() if only is None else only.at_look_level()
        confidence = default.confidence if confidence is None else confidence
        derived = null_margin.recorded(inputs) if margin is None else None
        margin = derived.margin if derived is not None else default.margin if margin is None else margin
    return Options(
        policy=Policy(  # checked here: a value out of range is one line naming the option
            confidence=confidence, margin=margin, grid=grid, interpolation=cast(Interpolation, interpolation)
        ),
        excludes=parse_excludes(exclude or []),
        current_default=current_default,
    )
