"""`moecal plan CONFIG`: what a sweep would run, how much memory each point needs and how long it should take."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import typer
from rich.console import Console
from rich.table import Table

from harness.cli.analysis_options import JsonOpt
from harness.config import resources

if TYPE_CHECKING:  # imported when the command runs, not for its --help (tests/test_help.py)
    from harness.measure.sweep_setup import PreparedSweep


class PlanPointJSON(TypedDict):
    """One point of the plan: its label and Dff, the arms with their caps, timed runs, memory, modelled time."""

    point: str
    dff: object  # the point key's Dff as the workload gives it ('' where it has none)
    arms: list[str]
    runs: int
    memory_bytes: int | None
    model_seconds: float | None
    skip: str | None


class ExpectedJSON(TypedDict):
    """What `--until-decided` is expected to take (_expected_to_decision)."""

    expected_runs: float
    expected_seconds: float | None
    expected_rounds_per_point: dict[int, float]
    max_rounds: int
    looks: int
    assumed: str


class PlanJSON(TypedDict):
    """The plan as data (plan_record): what `plan --json` prints, in this key order."""

    until_decided: ExpectedJSON | None
    config: str
    backend: object  # the sweep's meta["backend"]
    workload: str
    points: list[PlanPointJSON]
    timed_runs: int
    rounds: int
    warmup_runs: int
    order: str
    estimated_seconds: float
    estimate_source: str
    run_dir: str


def _bytes(n: int | None) -> str:
    if not n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def plan_record(sweep: PreparedSweep) -> PlanJSON:
    """The plan as data (what `--json` prints and the table shows): points, runs, memory and the time estimate,
    calibrated by the last run of this config on this machine when there is one (harness/measure/plan_estimate.py)."""
    from harness.measure.plan_estimate import last_run

    per_point_runs = sweep.plan.rounds + sweep.plan.warmup_runs
    points: list[PlanPointJSON] = []
    model_s, unknown, timed = 0.0, False, 0
    for point in sweep.points:
        estimate = point.run_seconds_estimate
        seconds = None
        if not point.skip_reason:
            timed += len(point.slots()) * sweep.plan.rounds  # slots: every knob setting × arm
            if estimate is None:
                unknown = True
            else:
                seconds = estimate * len(point.slots()) * per_point_runs
                model_s += seconds
        points.append(
            {
                "point": point.label,
                "dff": point.key.get("dff", ""),
                "arms": [f"{a}({point.caps[a]})" if point.caps[a] != "" else a for a in point.arms],
                "runs": len(point.slots()) * (1 if point.skip_reason else sweep.plan.rounds),
                "memory_bytes": point.memory_bytes,
                "model_seconds": seconds,
                "skip": point.skip_reason or None,
            }
        )
    calibration = last_run(sweep.run_dir.parent, sweep.meta, exclude=sweep.run_dir)
    if calibration is not None:
        total = calibration.estimate(timed)
        source = (
            f"scaled from {calibration.run_dir.name}: {calibration.rows} timed runs in "
            f"{calibration.wall_seconds / 60:.1f} min on this machine"
        )
    else:
        total = model_s
        source = "from the workload's per-run model; no earlier run of this config and kernel code here to calibrate it"
        source += "; plus runs of unknown length" if unknown else ""
    per_run = calibration.wall_seconds / calibration.rows if calibration is not None else None
    return {
        "until_decided": _expected_to_decision(sweep, per_run) if sweep.config.measure.until_decided else None,
        "config": sweep.config.name,
        "backend": sweep.meta["backend"],
        "workload": sweep.config.workload.kind,
        "points": points,
        "timed_runs": timed,
        "rounds": sweep.plan.rounds,
        "warmup_runs": sweep.plan.warmup_runs,
        "order": sweep.plan.order,
        "estimated_seconds": round(total, 1),
        "estimate_source": source,
        "run_dir": str(sweep.run_dir),
    }


def _expected_to_decision(sweep: PreparedSweep, per_run: float | None) -> ExpectedJSON | None:
    """The device time `--until-decided` should take: the stopping rule simulated
    (harness.analysis.rounds.decision_cost) at an assumed curve crossing at the current default (the hardest place: the
    decision turns on the points next to it) with the simulations' mid-range slope and 1% noise per run, priced by the
    per-run time model (the last run of this config here when there is one). The sweep says it again after its first
    pass, from what it measured."""
    import numpy as np

    from harness.analysis import number_format
    from harness.analysis.rounds.decision_cost import DEFAULT_NOISE, DEFAULT_SLOPE, curve_truth, expected_rounds
    from harness.measure.allocation import check_max_rounds, rule_for

    check_max_rounds(sweep.config.measure.max_rounds, len(sweep.points))
    points = [p for p in sweep.points if not p.skip_reason]
    grid = np.array(sorted({int(float(str(p.key.get("dff")))) for p in points}))
    if len(grid) < 2:
        return None
    crossover = float(sweep.config.current_default or np.median(grid))
    rule = rule_for(sweep.config.measure, sweep.plan.rounds)
    rounds = expected_rounds(
        curve_truth(grid, crossover)[None], grid, DEFAULT_NOISE, rule, sweep.config.current_default
    )
    mean_rounds = rounds.mean(axis=0)[0]
    seconds: float | None = 0.0
    runs = 0.0
    for p in points:
        run = per_run if per_run is not None else p.run_seconds_estimate
        at = int(np.flatnonzero(grid == int(float(str(p.key.get("dff")))))[0])
        runs += float(mean_rounds[at]) * len(p.arms)
        seconds = None if seconds is None or run is None else seconds + float(mean_rounds[at]) * len(p.arms) * run
    return {
        "expected_runs": round(runs, 1),
        "expected_seconds": None if seconds is None else round(seconds, 1),
        "expected_rounds_per_point": {int(d): round(float(r), 1) for d, r in zip(grid, mean_rounds, strict=True)},
        "max_rounds": rule.max_rounds,
        "looks": rule.looks,
        "assumed": (
            f"a curve crossing at Dff {number_format.dff(crossover)} (slope {DEFAULT_SLOPE}), {DEFAULT_NOISE:.0%} run "
            "noise"
        ),
    }


def print_plan(sweep: PreparedSweep) -> None:
    record = plan_record(sweep)
    table = Table(title=f"plan: {sweep.config.name} ({sweep.meta['backend']}, {sweep.config.workload.kind})")
    for column in ("point", "dff", "arms", "runs", "memory", "est. time", "note"):
        justify = "left" if column in ("point", "arms", "note") else "right"
        table.add_column(column, justify=justify, overflow="fold")  # fold: a name is never cut to "…"
    for point in record["points"]:
        table.add_row(
            point["point"],
            str(point["dff"]),
            ",".join(point["arms"]),
            str(point["runs"]),
            _bytes(point["memory_bytes"]),
            "-" if point["model_seconds"] is None else f"{point['model_seconds']:.0f} s",
            f"skip: {point['skip']}" if point["skip"] else "",
        )
    console = Console()
    console.print(table)
    console.print(
        f"{len(sweep.points)} points, {record['timed_runs']} timed runs ({sweep.plan.rounds} rounds, "
        f"{sweep.plan.warmup_runs} warm-up per arm, order {sweep.plan.order}); estimated "
        f"~{record['estimated_seconds'] / 60:.1f} min ({record['estimate_source']}); results → {sweep.run_dir}",
        highlight=False,
    )
    measure = sweep.config.measure
    if measure.refine_budget_runs and sweep.workload.refinable:
        console.print(
            f"adaptive Dff refinement: up to {measure.refine_budget_runs} more timed runs, splitting the crossover's "
            f"bracket on multiples of {measure.refine_grid} until its interval is narrower than "
            f"{measure.target_crossover_width:.0%} of the crossover Dff",
            highlight=False,
        )
    expected = record["until_decided"]
    if measure.until_decided:
        budget = f", budget {measure.budget}" if measure.budget else ""
        console.print(
            f"until decided: first pass {sweep.plan.rounds} rounds, then up to {measure.max_rounds} per point where "
            f"the decision can still change, at most {measure.looks} looks (each at 1 − α/{measure.looks}){budget}",
            highlight=False,
        )
        if expected:
            seconds = expected["expected_seconds"]
            time = "run time unknown until a first run" if seconds is None else f"~{seconds / 60:.1f} min"
            console.print(
                f"expected to a decision: {expected['expected_runs']:.0f} timed runs, {time} (the stopping rule "
                f"simulated at {expected['assumed']}; rounds per point {expected['expected_rounds_per_point']}); "
                "the sweep says it again after its first pass",
                highlight=False,
            )


def plan(
    config: Path = typer.Argument(..., help="Sweep config (YAML file, or a preset name: moecal presets)."),
    backend: str | None = typer.Option(None, "--backend", help="Override the config's backend."),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Override measure.rounds."),
    as_json: JsonOpt = False,
) -> None:
    """Print the run plan (points × arms × rounds), memory per point and a time estimate; runs nothing."""
    from harness.measure import sweep_setup

    prepared = sweep_setup.prepare(resources.config_argument(config), backend=backend, rounds=rounds, plan_only=True)
    if as_json:
        typer.echo(json.dumps(plan_record(prepared), indent=1))
        return
    print_plan(prepared)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
