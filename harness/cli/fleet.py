"""`moecal fleet FLEET.yaml`: run each entry's sweep on machines of its hardware class in a Ray cluster."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

if TYPE_CHECKING:
    from harness.measure.fleet_run import EntryResult

console = Console(stderr=True)


def fleet(
    fleet_file: Path = typer.Argument(..., help="Fleet file: `entries:` of {config, where[, workers, name]}."),
    address: str | None = typer.Option(
        None, "--address", help="Ray cluster to join (default: RAY_ADDRESS, else the cluster `ray start` runs here)."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Fleet directory: one run directory per entry (default results/fleet-<file name>)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate the fleet file and its configs; run nothing."),
    report: bool = typer.Option(True, "--report/--no-report", help="Summaries, addenda and the fleet report."),
) -> None:
    """Run one calibration over several hardware classes (Ray): one run directory per entry, one fleet report.

    Each entry's rows stream back into its own run directory here, with the provenance of the machine that measured
    them; then one fleet report over all entries.

    Start the cluster first: `ray start --head` on this machine, `ray start --address=HEAD:6379
    --resources='{"hw_gb10": 1}'` on each worker machine, all with RAY_AUTH_MODE=token and the token of
    `ray get-auth-token --generate` in ~/.ray/auth_token (README 'Several machines'). Re-running the same command
    resumes every entry.
    """
    from harness.errors import InputError
    from harness.measure import fleet_run as fleets
    from harness.measure.ray_workers import check_reachable, require_ray

    entries = fleets.load_fleet(fleet_file)
    require_ray("fleet")
    if address and not dry_run:
        check_reachable(address)  # before anything is printed: an address nothing answers at is one error line
    out = out or Path("results") / f"fleet-{fleet_file.stem}"
    for entry in entries:
        console.print(f"{entry.name}: {entry.config_path} on {entry.label} × {entry.workers} → {out / entry.name}")
    if dry_run:
        console.print("dry run: the fleet file and its configs are valid")
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:

        def track(name: str, total: int) -> Callable[[str], None]:
            task = progress.add_task(name, total=total)
            return lambda message: progress.update(task, advance=1, description=f"{name}: {message}"[:60])

        on_done = _report if report else None
        results = fleets.run_fleet(entries, out, address, progress.console.print, track, on_done)
    for result in results:
        where = result.addendum or result.run_dir
        console.print(f"{result.entry.name}: {result.error or (result.action or 'no ok rows')}  ({where})")
    if report:
        from harness.output.tables.fleet_report import fleet_report

        console.print(f"fleet report: {fleet_report(results, fleet_file, out)}")
    failed = [r for r in results if r.error]
    if failed:
        raise InputError(str(fleet_file), failed[0].entry.name, failed[0].error)


def _report(result: EntryResult) -> None:
    """summary.csv and the addendum + plot of one entry, inside its run directory (names never collide there)."""
    from harness.analysis.decision.pipeline import analyse_path, save_summary
    from harness.output.report_files import write_report
    from harness.runs.rundir import RunDirectory

    analysis = analyse_path(result.run_dir)  # once: the summary and the report are of this one analysis
    save_summary(analysis, RunDirectory(result.run_dir).summary)
    md_path, _, decision, _ = write_report(result.run_dir, result.run_dir, analysed=analysis)
    result.addendum, result.action, result.recommended_cap = md_path, decision.action, decision.recommended_cap


def register(app: typer.Typer) -> None:
    app.command("fleet")(fleet)
