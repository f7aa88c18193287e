"""`moecal sweep CONFIG`: run interleaved fused/fallback measurements into results/<run-id>/ (resumable)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from harness import resources
from harness import sweep as sweeps
from harness.analysis import write_summary
from harness.backends import BackendUnavailable
from harness.commands.plan import print_plan
from harness.errors import InputError
from harness.report import write_report
from harness.workloads.command import apply_null_policy

console = Console(stderr=True)


def quick_table_view(run_dir: Path) -> Table:
    table = Table(title=f"{run_dir} (medians; `moecal summarize` adds CIs and verdicts)")
    for column in ("model", "d_model", "dff", "fallback", "fused", "ratio", "ok", "fail", "skip"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for row in sweeps.quick_table(run_dir).to_dict("records"):
        table.add_row(
            str(row["model"]) + (" (decode)" if row["workload"] == "decode" else ""),
            str(int(row["d_model"])) if row["d_model"] else "",
            str(int(row["dff"])),
            *(f"{row[arm]:.4g}" if row[arm] == row[arm] else "-" for arm in ("fallback", "fused")),
            f"{row['ratio']:.4f}" if row["ratio"] == row["ratio"] else "-",
            *(str(int(row[status])) for status in ("ok", "fail", "skip")),
        )
    return table


def sweep(
    config: Path | None = typer.Argument(
        None, help="Sweep config (YAML file or preset name: moecal presets). Default: the preset for this machine."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Run directory (default results/<date>-<backend>-<host>-<name>)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Validate config, backend and binaries; print the plan; run nothing."
    ),
    rounds: int | None = typer.Option(None, "--rounds", min=1, help="Override measure.rounds."),
    only: list[str] = typer.Option([], "--only", help="Measure only this model (repeatable)."),
    backend: str | None = typer.Option(None, "--backend", help="Override the config's backend (metal|cuda|cpu|auto)."),
    report: bool = typer.Option(
        True, "--report/--no-report", help="After the sweep: summarize → crossover → addendum + plot."
    ),
    reports_dir: Path = typer.Option(Path("reports"), "--reports-dir", help="Where the addendum and plot go."),
    measure_null: bool = typer.Option(
        False, "--measure-null", help="Also run models whose config says expect_null (they stay null points)."
    ),
    workers: str | None = typer.Option(
        None,
        "--workers",
        help="Spread the points over N Ray workers on this node (N or auto), one device each: one GPU per worker on "
        "cuda; on cpu the workers share the cores, so their timings interfere. Needs the 'fleet' extra.",
    ),
) -> None:
    """Run the sweep: per point, warm-up, then rounds in which every arm runs once in rotating order.

    Every run is appended to samples.csv as soon as it finishes; re-running the same command resumes where a
    killed sweep stopped (completed (point, arm, round) rows are not repeated).
    """
    if config is None:
        try:
            config = sweeps.default_config()
        except BackendUnavailable as exc:
            raise InputError("(no config given)", "backend", str(exc)) from None
        console.print(f"config: {config} (the default for this machine)")
    config = resources.config_argument(config)
    if workers is not None:
        from harness import scale

        scale.parse_workers(workers)
        scale.require_ray("--workers")
    plan = sweeps.prepare(config, out=out, backend=backend, only=only, rounds=rounds)
    if plan.config.workload.kind == "command":
        apply_null_policy(plan.points, plan.config, plan.meta, measure_null)
    if dry_run:
        print_plan(plan)
        console.print(f"dry run: config, backend and commands are usable; would write {plan.run_dir}")
        return
    todo = sweeps.pending(plan)
    console.print(f"run directory: {plan.run_dir}  ({todo} runs to do)")
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("sweep", total=todo)

        def on_run(message: str) -> None:
            progress.update(task, advance=1, description=message[:60])

        sweeps.execute(plan, on_run, workers)
    Console().print(quick_table_view(plan.run_dir))
    console.print(f"samples:  {plan.run_dir / 'samples.csv'}\nmeta:     {plan.run_dir / 'meta.json'}")
    if report:
        summary = write_summary(plan.run_dir)
        md_path, png_path, decision = write_report(plan.run_dir, reports_dir)
        console.print(f"summary:  {summary}\naddendum: {md_path}\nplot:     {png_path}")
        console.print(f"decision: {decision.action} — {decision.reason}\napply:    {decision.apply}")


def register(app: typer.Typer) -> None:
    app.command("sweep")(sweep)
