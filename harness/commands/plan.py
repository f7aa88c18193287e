"""`moecal plan CONFIG`: what a sweep would run, how much memory each point needs and how long it should take."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from harness import resources
from harness import sweep as sweeps


def _bytes(n: int | None) -> str:
    if not n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def print_plan(plan: sweeps.Sweep) -> None:
    table = Table(title=f"plan: {plan.config.name} ({plan.meta['backend']}, {plan.config.workload.kind})")
    for column in ("point", "dff", "arms", "runs", "memory", "est. time", "note"):
        table.add_column(column, justify="left" if column in ("point", "arms", "note") else "right")
    total_runs, total_s, unknown = 0, 0.0, False
    per_point_runs = plan.plan.rounds + plan.plan.warmup_runs
    for point in plan.points:
        runs = len(point.arms) * (1 if point.skip_reason else plan.plan.rounds)
        total_runs += runs
        estimate = point.run_seconds_estimate
        if point.skip_reason:
            seconds = 0.0
        elif estimate is None:
            seconds, unknown = 0.0, True
        else:
            seconds = estimate * len(point.arms) * per_point_runs
        total_s += seconds
        table.add_row(
            point.label,
            str(point.key.get("dff", "")),
            ",".join(f"{a}({point.caps[a]})" if point.caps[a] != "" else a for a in point.arms),
            str(runs),
            _bytes(point.memory_bytes),
            "-" if estimate is None or point.skip_reason else f"{seconds:.0f} s",
            f"skip: {point.skip_reason}" if point.skip_reason else "",
        )
    console = Console()
    console.print(table)
    estimate_text = f"~{total_s / 60:.1f} min" + (" + runs of unknown length" if unknown else "")
    console.print(
        f"{len(plan.points)} points, {total_runs} timed runs ({plan.plan.rounds} rounds, "
        f"{plan.plan.warmup_runs} warm-up per arm, order {plan.plan.order}); estimated {estimate_text}; "
        f"results → {plan.run_dir}"
    )
    measure = plan.config.measure
    if measure.refine_budget_runs and plan.config.workload.kind == "layer":
        console.print(
            f"adaptive Dff refinement: up to {measure.refine_budget_runs} more timed runs, bisecting the crossover's "
            f"bracket on multiples of {measure.refine_grid} until its interval is narrower than "
            f"{measure.target_crossover_width:.0%} of the crossover Dff",
            highlight=False,
        )
    if measure.adaptive:
        console.print(
            f"adaptive rounds: up to {measure.max_rounds} per point; each of the "
            f"{measure.max_rounds - plan.plan.rounds + 1} looks spends α/{measure.max_rounds - plan.plan.rounds + 1}",
            highlight=False,
        )


def plan(
    config: Path = typer.Argument(..., help="Sweep config (YAML file, or a preset name: moecal presets)."),
    backend: str | None = typer.Option(None, "--backend", help="Override the config's backend."),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Override measure.rounds."),
) -> None:
    """Print the run plan (points × arms × rounds), memory per point and a time estimate; runs nothing."""
    print_plan(sweeps.prepare(resources.config_argument(config), backend=backend, rounds=rounds))


def register(app: typer.Typer) -> None:
    app.command("plan")(plan)
